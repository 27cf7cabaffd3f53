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
    """The raw ICRC register of a frame, one octet per cycle, in two stages.

    Members: ``valid``, ``data``, ``last`` (In: an octet of a frame is taken this cycle into the input
    stage; ``last`` ends the frame), ``covered`` (Out, combinational: the octet taken is covered),
    ``step`` (In: the octet in the input stage, if any, steps the register this cycle and leaves the
    stage), ``register`` (Out: the register after the octets that have stepped it; after a frame's last
    octet has, it holds the frame's final register until the next frame's first octet steps).

    An octet may be taken only while the input stage is empty or steps in the same cycle. A user that
    streams octets through without waiting (the appender) holds ``step`` at 1: the register then follows
    the octets taken one cycle later. One that moves its own octet stages together (the checker) steps
    with them, so the register stays that of the octet in its next stage while that stage waits.

    Everything the coverage rule asks of an octet's position (is it the frame's first, octet 20, octet
    55, the coverage start, a masked field) is a flag register set when the octet before it is taken,
    and the octet with its variant fields forced to ones, the load and the step decision are registers
    of the input stage: the CRC network meets flip-flops only (Colorlight 5A-75B, 2026-12-07: 10.05 ns,
    8.1 of it routing, from an offset flag through the masked octet and the network into the register,
    docs/boards.md). In the MAC's domains ``valid`` comes from the MAC's ready, late in the cycle.
    """

    def __init__(self):
        super().__init__(
            {
                "valid": In(1),
                "data": In(8),
                "last": In(1),
                "covered": Out(1),
                "step": In(1),
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

        # The input stage: the octet fed to the CRC network (variant fields forced to ones) and what the
        # octet does to the register. The register holds the prefix's value (init and eight 0xFF octets)
        # from each frame's first octet until the coverage starts, and again when it restarts, so no
        # multiplexer sits in front of the CRC network.
        crc_octet = Signal(8)
        staged_octet = Signal(8)
        staged_load = Signal()  # the register goes to the prefix's value
        staged_step = Signal()  # the register steps with `staged_octet`
        for bit in range(8):
            force = [at[o] for o, or_mask in masks.items() if or_mask >> bit & 1]
            m.d.comb += crc_octet[bit].eq(self.data[bit] | Cat(*force).any())
        # An octet whose Next Header restarts the coverage is not covered: the register goes back to the
        # prefix's value, which is also the CRC residue, so a frame ending there must not pass.
        m.d.comb += self.covered.eq(covered & ~restart)
        with m.If(self.step):
            m.d.sync += [staged_load.eq(0), staged_step.eq(0)]
        with m.If(self.valid):
            m.d.sync += [
                staged_octet.eq(crc_octet),
                staged_load.eq(first | restart),
                staged_step.eq(covered),
            ]

        # One load condition and one enable: the register maps onto the flip-flops' set/reset and enable.
        with m.If(self.step & staged_load):
            m.d.sync += self.register.eq(ICRC_PREFIX_REGISTER)
        with m.Elif(self.step & staged_step):
            m.d.sync += self.register.eq(crc32_update(self.register, staged_octet, 1))

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
    ``i`` waits. A taken octet waits a cycle in a held stage, while the engine's register catches up
    with it, and then goes through a register slice (:class:`~mrcnic.hdl.skid_buffer.SkidBuffer`), so
    the MAC's ready meets a register and not the engine: an octet leaves two cycles after it was taken."""

    def __init__(self):
        super().__init__({"i": In(stream.Signature(ByteLayout())), "o": Out(stream.Signature(ByteLayout()))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.icrc = icrc = OctetIcrc()
        m.submodules.out = out = SkidBuffer(ByteLayout())
        wiring.connect(m, out.o, wiring.flipped(self.o))
        left = Signal(range(ICRC_BYTES + 1))  # ICRC octets still to send
        held = Signal()
        held_octet = Signal(ByteLayout())
        take = Signal()
        # The engine steps with each octet the cycle after it was taken, so its register has the frame's
        # final value once the last octet has left the held stage; it keeps it while the ICRC octets go
        # out: the next frame's first octet is taken with the fourth at the earliest.
        icrc_le = ~icrc.register  # the ICRC, least significant octet first on the wire
        m.d.comb += [
            icrc.step.eq(1),
            take.eq(self.i.valid & self.i.ready),
            icrc.valid.eq(take),
            icrc.data.eq(self.i.payload.data),
            icrc.last.eq(self.i.payload.last),
        ]

        with m.If(left == 0):
            m.d.comb += [
                out.i.valid.eq(held),
                out.i.payload.data.eq(held_octet.data),
                self.i.ready.eq(~held | (out.i.ready & ~held_octet.last)),
            ]
            with m.If(held & out.i.ready):
                m.d.sync += held.eq(0)
                with m.If(held_octet.last):
                    m.d.sync += left.eq(ICRC_BYTES)
        with m.Else():
            m.d.comb += [
                out.i.valid.eq(1),
                out.i.payload.data.eq(icrc_le.word_select((ICRC_BYTES - left).as_unsigned()[:2], 8)),
                out.i.payload.last.eq(left == 1),
                self.i.ready.eq((left == 1) & out.i.ready),
            ]
            with m.If(out.i.ready):
                m.d.sync += left.eq(left - 1)
        with m.If(take):
            m.d.sync += [held.eq(1), held_octet.eq(self.i.payload)]
        return m


class IcrcChecker(wiring.Component):
    """Members: ``i`` (In, stream of :class:`~mrcnic.hdl.eth.frame.ByteLayout`: frames with their ICRC),
    ``o`` (Out, ``ByteLayout(user_width=1)``: the same octets; on a frame's last one, ``user`` = the
    ICRC is good). Three register stages: an octet is on ``o`` three cycles after ``i`` took it, and
    ``i`` takes one every cycle while ``o`` is ready."""

    def __init__(self):
        super().__init__(
            {"i": In(stream.Signature(ByteLayout())), "o": Out(stream.Signature(ByteLayout(user_width=1)))}
        )

    def elaborate(self, platform):
        m = Module()
        m.submodules.icrc = icrc = OctetIcrc()
        # Stage 1 holds the octet taken last beside the engine's input stage; when it moves to stage 2
        # the octet steps the engine's register, which then stays the CRC after that octet while stage 2
        # waits. The output gets the octet with its verdict, the register compared with the residue: the
        # verdict is a register, so the compare's three LUT levels do not reach the octet FIFO behind
        # (the Versa's receive clock's critical path at 9ce037f, mostly routing). All stages move
        # together, so the register always belongs to stage 2's octet.
        # Each stage: a valid flag and the octet, its `user` bit holding whether the octet is covered.
        held = [Signal(name=f"held_{k}") for k in (1, 2)]
        held_octet = [Signal(ByteLayout(user_width=1), name=f"held_octet_{k}") for k in (1, 2)]
        advance = Signal()  # all stages move on
        take = Signal()
        m.d.comb += [
            advance.eq(~self.o.valid | self.o.ready),
            self.i.ready.eq(~held[0] | advance),
            take.eq(self.i.valid & self.i.ready),
            icrc.valid.eq(take),
            icrc.data.eq(self.i.payload.data),
            icrc.last.eq(self.i.payload.last),
            icrc.step.eq(advance),
        ]
        with m.If(advance):
            m.d.sync += [
                self.o.valid.eq(held[1]),
                self.o.payload.data.eq(held_octet[1].data),
                self.o.payload.last.eq(held_octet[1].last),
                # Only the last octet's value matters; it is the frame's verdict.
                self.o.payload.user.eq(held_octet[1].user & (icrc.register == ICRC_RESIDUE_REGISTER)),
                held[1].eq(held[0]),
                held_octet[1].eq(held_octet[0]),
                held[0].eq(0),
            ]
        with m.If(take):
            m.d.sync += [
                held[0].eq(1),
                held_octet[0].data.eq(self.i.payload.data),
                held_octet[0].last.eq(self.i.payload.last),
                held_octet[0].user.eq(icrc.covered),
            ]
        return m
