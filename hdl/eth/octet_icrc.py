"""The RoCEv2 ICRC in the Ethernet port, one octet per cycle: appended on transmit, checked on receive.

Ref: IBTA Vol. 1 Annex A17 (RoCEv2) §A17.4.4 (ICRC); docs/protocol.md §8 (coverage and masked fields);
``mrcnic.wire.icrc`` is the bit-exact definition; docs/ethernet.md, "ICRC in the port".

In the MAC's 125 MHz domains a port moves one octet per cycle, so a CRC step there is one octet wide:
an XOR network of about 16 inputs per register bit, where the core's :class:`~mrcnic.hdl.icrc.IcrcEngine`
at 4 or 8 bytes a beat needs 40-96 inputs per bit, a rewind of the last beat's padding and a delay line.
A board NIC built with ``port_icrc`` (:class:`~mrcnic.hdl.nic.MrcNic`) leaves the ICRC to its ports:

* :class:`IcrcAppender` (transmit, between the TX ring and the MAC): the core's frames come without
  their ICRC; each leaves with its four ICRC octets (least significant first) after its last octet, and
  the FCS after them. No cycle is lost: the ICRC octets follow the frame back to back, as the MAC needs.
* :class:`IcrcChecker` (receive, between the RX ring and the width converter): each frame goes on
  unchanged (its ICRC included, as the core expects), and its last octet carries ``user`` = 1 when the
  ICRC over the covered octets, its own included, leaves the CRC-32 residue.

Both use :class:`OctetIcrc`, which finds the coverage from the frame itself, the rule the core's RX
frame buffer uses (:func:`~mrcnic.hdl.icrc.skip_for`): the covered IPv6 header starts at
octet 14, or at 54 when the first IPv6 header's Next Header (octet 20) is IPv6 (SRv6 encapsulation), or
at 62 + 8 * ``hdr_ext_len`` (octet 55) when it is a Routing header. Octets 14-19 arrive before the Next
Header does, so coverage starts at 14 and *starts again* (register back to 0) at 54 or past the SRH when
the Next Header says so; a transmitter and a receiver that follow the same rule agree on every frame.
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from mrcnic.wire.icrc import ICRC_MASKED_OFFSETS

from ..crc import crc32_update
from ..icrc import (
    ICRC_PREFIX_REGISTER,
    ICRC_RESIDUE_REGISTER,
    IPPROTO_IPV6,
    IPPROTO_ROUTING,
    NEXT_HEADER_AT,
    SKIP_SINGLE,
    SKIP_SRH_BASE,
    SKIP_SRV6,
    SRH_EXT_LEN_AT,
)
from ..skid_buffer import SkidBuffer
from .frame import ByteLayout

__all__ = ["ICRC_BYTES", "IcrcAppender", "IcrcChecker", "OctetIcrc"]

ICRC_BYTES = 4
INDEX_BITS = 12  # octets to the coverage start: up to 62 + 8 * 255 - 56 = 2046


class OctetIcrc(wiring.Component):
    """The raw ICRC register of a frame, one octet per cycle.

    Members: ``valid``, ``data``, ``last`` (In: an octet of a frame is taken this cycle; ``last`` ends the
    frame), ``covered`` (Out, combinational: this octet is covered), ``stepped`` (Out, combinational: the
    raw CRC register after this octet, when it is covered), ``register`` (Out: the register after the
    octets taken so far; after a frame's last octet it holds the frame's final register until the next
    frame's first octet is taken).

    Everything the coverage rule asks of an octet's position (is it the frame's first, octet 20, octet
    55, the coverage start, a masked field) is a flag register set when the octet before it is taken,
    so a taken octet meets only one or two LUTs and then the CRC network: in the MAC's domains ``valid``
    comes from the MAC's ready, late in the cycle (Colorlight 5A-75B, 2026-12-07: 15.3 ns from the ready
    through the coverage comparators into the registers' enables, docs/boards.md).
    """

    def __init__(self):
        super().__init__(
            {
                "valid": In(1),
                "data": In(8),
                "last": In(1),
                "covered": Out(1),
                "stepped": Out(32),
                "register": Out(32),
            }
        )

    def elaborate(self, platform):
        m = Module()
        masks = dict(ICRC_MASKED_OFFSETS)
        plain_from = max(masks) + 1  # covered offsets from here on are plain data
        position_end = SRH_EXT_LEN_AT + 1  # no flag depends on a later index

        # The octet's index in the frame, saturating past the last octet a flag needs.
        index = Signal(range(position_end + 1))
        # Flags about the octet on ``data``, set when the one before it was taken.
        first = Signal(init=1)  # index 0
        at_next_header = Signal()  # index NEXT_HEADER_AT
        at_ext_len = Signal()  # index SRH_EXT_LEN_AT
        # Coverage start - this octet's index, while the octet is not covered (then the coverage has not
        # started, or starts again later: once it has started, only a restart or a frame's end stop it).
        to_start = Signal(INDEX_BITS, init=SKIP_SINGLE)
        srh = Signal()  # a Routing header follows the first IPv6 header: `to_start` comes with octet 55
        covered = Signal()  # this octet is in the coverage (unless its Next Header restarts it)
        offset = Signal(range(plain_from + 1))  # this octet's covered offset (saturating; 0 until covered)
        at = {o: Signal(name=f"at_offset_{o}", init=o == 0) for o in masks}  # offset == o

        # The Next Header (octet 20) says the covered IPv6 header comes later: stop and start again there.
        restart = Signal()
        next_header_is = {value: self.data == value for value in (IPPROTO_IPV6, IPPROTO_ROUTING)}
        m.d.comb += restart.eq(
            at_next_header & (next_header_is[IPPROTO_IPV6] | next_header_is[IPPROTO_ROUTING])
        )

        # The register holds the prefix's value (init and eight 0xFF octets) from each frame's first octet
        # until the coverage starts, and again when it restarts, so no multiplexer sits in front of the
        # CRC network. The octet fed to it has the variant fields forced to ones.
        crc_octet = Signal(8)
        for bit in range(8):
            force = [at[o] for o, or_mask in masks.items() if or_mask >> bit & 1]
            m.d.comb += crc_octet[bit].eq(self.data[bit] | Cat(*force).any())
        m.d.comb += [
            # An octet whose Next Header restarts the coverage is not covered: the register goes back to
            # the prefix's value, which is also the CRC residue, so a frame ending there must not pass.
            self.covered.eq(covered & ~restart),
            self.stepped.eq(crc32_update(self.register, crc_octet, 1)),
        ]

        # One load condition and one enable: the register maps onto the flip-flops' set/reset and enable.
        with m.If(self.valid & (first | restart)):
            m.d.sync += self.register.eq(ICRC_PREFIX_REGISTER)
        with m.Elif(self.valid & covered):
            m.d.sync += self.register.eq(self.stepped)

        # The next octet's flags. Each is what its comparison would give on the next octet's position:
        # the index and offset advance by one, `to_start` counts down to the coverage start.
        def advance_offset(new_offset_is):
            for o, flag in at.items():
                m.d.sync += flag.eq(new_offset_is(o))

        with m.If(self.valid):
            m.d.sync += [
                index.eq(Mux(index == position_end, index, index + 1)),
                first.eq(0),
                at_next_header.eq(index == NEXT_HEADER_AT - 1),
                at_ext_len.eq(index == SRH_EXT_LEN_AT - 1),
                to_start.eq(to_start - 1),
            ]
            with m.If(covered):
                m.d.sync += offset.eq(Mux(offset == plain_from, offset, offset + 1))
                advance_offset(lambda o: (offset == o - 1) if o > 0 else 0)
            with m.Else():
                m.d.sync += covered.eq(to_start == 1)
            # Later assignments win: a restart stops the coverage begun at 14 ...
            with m.If(restart):
                m.d.sync += [covered.eq(0), offset.eq(0)]
                advance_offset(lambda o: o == 0)
                with m.If(next_header_is[IPPROTO_IPV6]):
                    m.d.sync += to_start.eq(SKIP_SRV6 - (NEXT_HEADER_AT + 1))
                with m.Else():
                    # Counting down from 0 wraps to 4095: octet 55 replaces it long before it reaches 1.
                    m.d.sync += [srh.eq(1), to_start.eq(0)]
            with m.If(srh & at_ext_len):
                m.d.sync += to_start.eq(SKIP_SRH_BASE - (SRH_EXT_LEN_AT + 1) + (self.data << 3))
            # ... and the end of a frame, last, sets up the next one whatever its final octet said.
            with m.If(self.last):
                m.d.sync += [
                    index.eq(0),
                    first.eq(1),
                    at_next_header.eq(0),
                    at_ext_len.eq(0),
                    to_start.eq(SKIP_SINGLE),
                    srh.eq(0),
                    covered.eq(0),
                    offset.eq(0),
                ]
                advance_offset(lambda o: o == 0)
        return m


class IcrcAppender(wiring.Component):
    """Members: ``i`` (In, stream of :class:`~mrcnic.hdl.eth.frame.ByteLayout`: frames without ICRC),
    ``o`` (Out, the same frames with their ICRC). ``o`` runs one octet per cycle while ``i`` does and
    ``o`` is ready: a frame's ICRC octets follow its last octet in the next four cycles, during which
    ``i`` waits. ``o`` comes from a register slice (:class:`~mrcnic.hdl.skid_buffer.SkidBuffer`), so the
    MAC's ready meets a register and not the engine: an octet leaves the cycle after it was taken."""

    def __init__(self):
        super().__init__({"i": In(stream.Signature(ByteLayout())), "o": Out(stream.Signature(ByteLayout()))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.icrc = icrc = OctetIcrc()
        m.submodules.out = out = SkidBuffer(ByteLayout())
        wiring.connect(m, out.o, wiring.flipped(self.o))
        left = Signal(range(ICRC_BYTES + 1))  # ICRC octets still to send
        # The frame's final register stays in the engine while its ICRC octets go out.
        icrc_le = ~icrc.register  # the ICRC, least significant octet first on the wire

        with m.If(left == 0):
            take = self.i.valid & out.i.ready
            m.d.comb += [
                out.i.valid.eq(self.i.valid),
                out.i.payload.data.eq(self.i.payload.data),
                self.i.ready.eq(out.i.ready),
                icrc.valid.eq(take),
                icrc.data.eq(self.i.payload.data),
                icrc.last.eq(self.i.payload.last),
            ]
            with m.If(take & self.i.payload.last):
                m.d.sync += left.eq(ICRC_BYTES)
        with m.Else():
            m.d.comb += [
                out.i.valid.eq(1),
                out.i.payload.data.eq(icrc_le.word_select((ICRC_BYTES - left).as_unsigned()[:2], 8)),
                out.i.payload.last.eq(left == 1),
            ]
            with m.If(out.i.ready):
                m.d.sync += left.eq(left - 1)
        return m


class IcrcChecker(wiring.Component):
    """Members: ``i`` (In, stream of :class:`~mrcnic.hdl.eth.frame.ByteLayout`: frames with their ICRC),
    ``o`` (Out, ``ByteLayout(user_width=1)``: the same octets; on a frame's last one, ``user`` = the
    ICRC is good). Two register stages: an octet is on ``o`` two cycles after ``i`` took it, and ``i``
    takes one every cycle while ``o`` is ready."""

    def __init__(self):
        super().__init__(
            {"i": In(stream.Signature(ByteLayout())), "o": Out(stream.Signature(ByteLayout(user_width=1)))}
        )

    def elaborate(self, platform):
        m = Module()
        m.submodules.icrc = icrc = OctetIcrc()
        # Stage 1 holds the octet taken last while the engine's register holds the CRC after it; stage 2
        # (the output) gets the octet with its verdict, the register compared with the residue. The
        # verdict is then a register too: the compare's three LUT levels do not reach the octet FIFO
        # behind (the Versa's receive clock's critical path at 9ce037f, mostly routing). Comparing the
        # register, not the CRC network's output, also keeps the network from being duplicated.
        held = Signal()
        held_data = Signal(8)
        held_last = Signal()
        held_covered = Signal()
        advance = Signal()  # both stages move on
        take = Signal()
        m.d.comb += [
            advance.eq(~self.o.valid | self.o.ready),
            self.i.ready.eq(~held | advance),
            take.eq(self.i.valid & self.i.ready),
            icrc.valid.eq(take),
            icrc.data.eq(self.i.payload.data),
            icrc.last.eq(self.i.payload.last),
        ]
        with m.If(advance):
            m.d.sync += [
                self.o.valid.eq(held),
                self.o.payload.data.eq(held_data),
                self.o.payload.last.eq(held_last),
                # Only the last octet's value matters; it is the frame's verdict.
                self.o.payload.user.eq(held_covered & (icrc.register == ICRC_RESIDUE_REGISTER)),
                held.eq(0),
            ]
        with m.If(take):
            m.d.sync += [
                held.eq(1),
                held_data.eq(self.i.payload.data),
                held_last.eq(self.i.payload.last),
                held_covered.eq(icrc.covered),
            ]
        return m
