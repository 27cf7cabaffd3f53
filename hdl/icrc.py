"""ICRC engine: the RoCEv2 invariant CRC of a packet stream, one beat per cycle.

Ref: IBTA Vol. 1 Annex A17 (RoCEv2) §A17.4.4 (ICRC); docs/protocol.md §8; ``mrcnic.wire.icrc`` is the
bit-exact Python definition (coverage, masked fields, residue) that this block implements.

The engine sees whole packets (Ethernet header first) and, per packet, the number of leading bytes
that the ICRC does not cover (``skip``: 14 in single-IPv6 mode, 54 in SRv6 mode where the outer IPv6
header is skipped). It produces one result per packet, in packet order:

* ``crc``: the ICRC of every covered byte (the ``zlib.crc32`` value; the wire carries it
  least-significant byte first). A transmitter feeds the packet without ICRC and appends ``crc``.
* ``residue_ok``: the CRC over the covered bytes *including* the packet's own trailing ICRC equals the
  CRC-32 residue. A receiver feeds the packet with its ICRC and checks this bit. Nothing special
  happens to the last four bytes, so one engine serves both directions.

How it works (all constants come from the Python definition, so there is one source of truth):

* **Leading skip without a realigning shifter.** The raw CRC register is linear, and a step from
  register 0 over zero bytes stays at 0. A step over four bytes ``d`` from register ``S`` equals a step
  from register 0 over ``d XOR le_bytes(S)``. So every packet starts at register 0, bytes before the
  coverage are fed as 0x00 (no effect), and the first four covered bytes are XORed with
  ``le_bytes(C0)``, where C0 is the register after the init value and the 8-byte 0xFF prefix. The
  coverage can then start on any lane of any beat, for any skip (0 included), with only per-lane
  comparisons of the byte's covered position against constants. (Feeding ``le_bytes(C0)`` as the
  four bytes *before* the coverage instead would land on C0 advanced by four zero bytes, not on C0.)
* **Masking.** The same per-lane comparisons force the variant fields to ones
  (``ICRC_MASKED_OFFSETS``): each covered byte is ``(byte | or_mask) ^ xor_value`` from
  :func:`covered_byte_rules`.
* **Partial last beat without per-count CRC functions.** Invalid lanes of the last beat are fed as
  zeros, so the loop always runs the one full-width step. Trailing zero bytes multiply the register
  by an invertible matrix; the result path undoes them with "rewind" matrices, one pipeline stage per
  bit of the pad count (the pad is ``data_width - valid bytes``, below ``data_width``). This keeps
  the per-cycle feedback loop to one 32x32 XOR matrix plus the data contribution computed a stage
  earlier. An empty beat (``keep`` = 0: a trailing ``last`` beat after full ones) leaves the register as
  it is instead of stepping it, so no stage has to rewind a whole beat (one stage fewer: about 180 logic
  cells per engine on the ECP5 at 8 bytes a beat).

Pipeline (all stages advance together; they stall only when the result FIFO is full):
input -> ``beat`` (distance to the coverage) -> ``masked`` (per-lane bytes) -> ``parts`` (data part of
the step per group of 8 lanes) -> [``summed``: groups combined, beats wider than 8 bytes only] -> CRC
register loop -> rewind stages (one per pad bit) -> result FIFO -> ``o``.
"""

from __future__ import annotations

import functools
import operator

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from mrcnic.wire.constants import IPPROTO_IPV6, IPPROTO_ROUTING
from mrcnic.wire.icrc import ICRC_MASKED_OFFSETS, ICRC_PREFIX, ICRC_RESIDUE

from .crc import crc32_rewind, crc32_step, crc32_update

__all__ = [
    "ICRC_PREFIX_REGISTER",
    "IPPROTO_IPV6",
    "IPPROTO_ROUTING",
    "NEXT_HEADER_AT",
    "SKIP_SINGLE",
    "SKIP_SRH_BASE",
    "SKIP_SRV6",
    "SRH_EXT_LEN_AT",
    "skip_for",
    "ICRC_RESIDUE_REGISTER",
    "IcrcEngine",
    "IcrcInputLayout",
    "IcrcResultLayout",
    "covered_byte_rules",
]

# Raw CRC register after the initial value 0xFFFFFFFF and the 8-byte 0xFF prefix.
ICRC_PREFIX_REGISTER = crc32_step(0xFFFFFFFF, ICRC_PREFIX)
# Raw register (no final XOR) that a covered region followed by its own ICRC leaves behind.
ICRC_RESIDUE_REGISTER = ICRC_RESIDUE ^ 0xFFFFFFFF

SKIP_WIDTH = 16

# Where a received frame's coverage starts, from the frame itself (docs/protocol.md §2.3, §8): the
# frame offsets it depends on, and the uncovered octets in front of the covered IPv6 header.
NEXT_HEADER_AT = 14 + 6  # first IPv6 header's Next Header
SRH_EXT_LEN_AT = 14 + 40 + 1  # SRH hdr_ext_len, when the SRH follows the outer IPv6 header
SKIP_SINGLE = 14  # Ethernet
SKIP_SRV6 = 14 + 40  # Ethernet + outer IPv6
SKIP_SRH_BASE = 14 + 40 + 8  # ... + SRH fixed part; + 8 * hdr_ext_len segment bytes


def skip_for(frame: bytes) -> int:
    """The uncovered leading octets of ``frame`` (the Python model of the receive side's rule)."""
    next_header = frame[NEXT_HEADER_AT] if len(frame) > NEXT_HEADER_AT else None
    if next_header == IPPROTO_IPV6:
        return SKIP_SRV6
    if next_header == IPPROTO_ROUTING:
        ext_len = frame[SRH_EXT_LEN_AT] if len(frame) > SRH_EXT_LEN_AT else 0
        return SKIP_SRH_BASE + 8 * ext_len
    return SKIP_SINGLE


def covered_byte_rules() -> dict[int, tuple[int, int]]:
    """{covered offset: (or_mask, xor_value)}: byte fed to the CRC = (wire byte | or_mask) ^ xor_value.

    The OR masks are the ICRC's variant fields; the XOR values inject the prefix register C0 into the
    first four covered bytes (the skip trick described in the module docstring).
    """
    rules = {offset: (mask, 0) for offset, mask in ICRC_MASKED_OFFSETS}
    for offset, value in enumerate(ICRC_PREFIX_REGISTER.to_bytes(4, "little")):
        or_mask, _ = rules.get(offset, (0, 0))
        rules[offset] = (or_mask, value)
    return dict(sorted(rules.items()))


class IcrcInputLayout(data.StructLayout):
    """A packet beat plus ``skip``: uncovered leading bytes of the packet (sampled on its first beat)."""

    def __init__(self, data_width: int):
        self.data_width = data_width
        super().__init__({"data": 8 * data_width, "keep": data_width, "last": 1, "skip": SKIP_WIDTH})


IcrcResultLayout = data.StructLayout({"crc": 32, "residue_ok": 1})


class IcrcEngine(wiring.Component):
    """ICRC of each packet of ``i`` (``data_width`` bytes per beat) as one ``o`` result per packet.

    ``i`` accepts a beat every cycle, packets back to back, as long as the result FIFO
    (``result_depth`` entries) has room; results leave in packet order. Coverage must be at least four
    bytes (any real packet: the IPv6 header alone is 40). ``skip`` may be any value, 0 included.

    Latency from the clock edge that accepts a packet's last beat to the edge that can accept its
    result: ``5 + (data_width - 1).bit_length()`` cycles, one more when ``data_width > 8`` (8 for 8
    bytes, 11 for 32 bytes).
    """

    def __init__(self, data_width: int, *, result_depth: int = 4):
        if not 1 <= data_width <= 64 or data_width & (data_width - 1):
            raise ValueError(f"data_width must be a power of two from 1 to 64 bytes, not {data_width}")
        self.data_width = data_width
        self.result_depth = result_depth
        super().__init__(
            {
                "i": In(stream.Signature(IcrcInputLayout(data_width))),
                "o": Out(stream.Signature(IcrcResultLayout)),
            }
        )

    def elaborate(self, platform):
        m = Module()
        width = self.data_width
        rules = covered_byte_rules()
        # Covered offsets at or past this one are plain data: the beat position saturates there.
        plain_from = max(rules) + 1
        pad_bits = (width - 1).bit_length()  # pad = width - valid bytes, 0..width-1 (an empty beat: 0)
        # The data part of the step is XORed over groups of at most 8 lanes (~32 inputs per output bit)
        # in one stage, and the groups are combined in the next: wide beats stay as fast as 8-byte ones.
        group_lanes = min(width, 8)
        groups = width // group_lanes

        m.submodules.results = results = fifo.SyncFIFOBuffered(
            width=IcrcResultLayout.size, depth=self.result_depth
        )

        # Pipeline registers. `advance` moves every stage at once; a stage whose `valid` is 0 is a bubble.
        def stage(name, **fields):
            return Signal(data.StructLayout({"valid": 1, "first": 1, "last": 1, **fields}), name=name)

        # `ahead`: uncovered bytes before lane 0 of the beat (negative once the coverage has started),
        # clamped: from `width` on every lane is uncovered, from -plain_from on every lane is plain data.
        beat = stage("beat", keep=width, data=8 * width, ahead=range(-plain_from, width + 1))
        masked = stage("masked", empty=1, pad=range(width), data=8 * width)
        parts = stage("parts", empty=1, pad=range(width), parts=data.ArrayLayout(32, groups))
        summed = stage("summed", empty=1, pad=range(width), data_part=32) if groups > 1 else None
        rewind_layout = data.StructLayout({"valid": 1, "pad": range(width), "register": 32})
        rewind = [Signal(rewind_layout, name=f"rewind{n}") for n in range(pad_bits + 1)]

        advance = Signal()
        # Only a finished result that cannot enter the FIFO holds the pipeline (and thus `i`).
        m.d.comb += advance.eq(~(rewind[-1].valid & ~results.w_rdy))

        def follow(dst, src):
            return [dst.valid.eq(src.valid), dst.first.eq(src.first), dst.last.eq(src.last)]

        # -- input: how far the beat is from the coverage ------------------------------------------------
        at_packet_start = Signal(init=1)
        ahead = Signal(range(-plain_from - width, 2**SKIP_WIDTH))  # for the next beat of the packet
        skip = self.i.payload.skip
        m.d.comb += self.i.ready.eq(advance)
        with m.If(self.i.valid & advance):
            m.d.sync += at_packet_start.eq(self.i.payload.last)
            # The first beat starts from `skip`, later ones from the counter: both paths are computed in
            # parallel (comparators fed straight from a register or the input) and selected last.
            with m.If(at_packet_start):
                m.d.sync += ahead.eq(skip - width)
            with m.Elif(ahead > -plain_from):  # past the last rule offset: stop, so it never wraps
                m.d.sync += ahead.eq(ahead - width)

        with m.If(advance):
            m.d.sync += [
                beat.valid.eq(self.i.valid),
                beat.first.eq(at_packet_start),
                beat.last.eq(self.i.payload.last),
                beat.keep.eq(self.i.payload.keep),
                beat.data.eq(self.i.payload.data),
                beat.ahead.eq(
                    Mux(
                        at_packet_start,
                        Mux(skip > width, width, skip),
                        Mux(ahead > width, width, Mux(ahead < -plain_from, -plain_from, ahead)),
                    )
                ),
            ]

        # -- per-lane bytes: zero before the coverage and past `keep`, masked/XORed at rule offsets -----
        # Both decisions are table look-ups on the small clamped `ahead` (covered position of a lane is
        # lane - ahead), so no per-lane adders or magnitude comparators are needed.
        lanes_before = Signal(width)
        with m.Switch(beat.ahead):
            for count in range(1, width + 1):
                with m.Case(count):
                    m.d.comb += lanes_before.eq((1 << count) - 1)
        # pad = width - valid bytes. keep is contiguous, so the last valid lane is where it falls from 1 to 0;
        # OR-ing those one-hot edges per pad bit avoids a priority chain or a popcount.
        last_lane = [beat.keep[lane] & ~beat.keep[lane + 1] for lane in range(width - 1)] + [beat.keep[-1]]
        pad = Signal(range(width))  # 0 for an empty beat (it does not step the register)
        for bit in range(len(pad)):
            ends = [edge for lane, edge in enumerate(last_lane) if (width - 1 - lane) >> bit & 1]
            m.d.comb += pad[bit].eq(Cat(*ends).any())
        # One-hot decode of `ahead`, shared by all lanes: lane l is at covered offset o iff ahead == l - o.
        ahead_is = {
            value: Signal(name=f"ahead_is_{value}".replace("-", "m"))
            for value in range(-plain_from, width + 1)
        }
        for value, hit in ahead_is.items():
            m.d.comb += hit.eq(beat.ahead == value)
        for lane in range(width):
            wire_byte = beat.data[8 * lane : 8 * lane + 8]
            crc_byte = Signal(8, name=f"crc_byte{lane}")
            for bit in range(8):
                force = [
                    ahead_is[lane - offset] for offset, (or_mask, _) in rules.items() if or_mask >> bit & 1
                ]
                flip = [
                    ahead_is[lane - offset]
                    for offset, (_, xor_value) in rules.items()
                    if xor_value >> bit & 1
                ]
                m.d.comb += crc_byte[bit].eq((wire_byte[bit] | Cat(*force).any()) ^ Cat(*flip).any())
            with m.If(advance):
                m.d.sync += masked.data[8 * lane : 8 * lane + 8].eq(
                    Mux(beat.keep[lane] & ~lanes_before[lane], crc_byte, 0)
                )
        with m.If(advance):
            m.d.sync += [*follow(masked, beat), masked.pad.eq(pad), masked.empty.eq(~beat.keep.any())]

        # -- data part of the full-width step (independent of the register, so outside the loop) -------
        with m.If(advance):
            m.d.sync += [*follow(parts, masked), parts.pad.eq(masked.pad), parts.empty.eq(masked.empty)]
            for group in range(groups):
                lanes = range(group * group_lanes, (group + 1) * group_lanes)
                m.d.sync += parts.parts[group].eq(crc32_update(None, masked.data, width, data_bytes=lanes))
        if summed is not None:
            group_parts = [parts.parts[group] for group in range(groups)]
            with m.If(advance):
                m.d.sync += [
                    *follow(summed, parts),
                    summed.pad.eq(parts.pad),
                    summed.empty.eq(parts.empty),
                    summed.data_part.eq(functools.reduce(operator.xor, group_parts)),
                ]
            step = summed
            data_part = summed.data_part
        else:
            step = parts
            data_part = parts.parts[0]

        # -- the loop: one beat per cycle; a packet's first beat starts from register 0, an empty beat
        # leaves the register as it is (its data part is 0) ---------------------------------------------
        register = Signal(32)
        register_next = Signal(32)
        stepped = Mux(step.empty, register, crc32_update(register, None, width))
        m.d.comb += register_next.eq(Mux(step.first, 0, stepped) ^ data_part)
        with m.If(advance):
            with m.If(step.valid):
                m.d.sync += register.eq(register_next)
            m.d.sync += [
                rewind[0].valid.eq(step.valid & step.last),
                rewind[0].pad.eq(step.pad),
                rewind[0].register.eq(register_next),
            ]

        # -- undo the zero padding of the last beat: stage j rewinds 2**j zero bytes if pad bit j is set --
        for j in range(pad_bits):
            before, after = rewind[j], rewind[j + 1]
            with m.If(advance):
                m.d.sync += [
                    after.valid.eq(before.valid),
                    after.pad.eq(before.pad),
                    after.register.eq(
                        Mux(before.pad[j], crc32_rewind(before.register, 1 << j), before.register)
                    ),
                ]

        # -- results ------------------------------------------------------------------------------------
        result = Signal(IcrcResultLayout)
        m.d.comb += [
            result.crc.eq(~rewind[-1].register),
            result.residue_ok.eq(rewind[-1].register == ICRC_RESIDUE_REGISTER),
            results.w_data.eq(result),
            results.w_en.eq(rewind[-1].valid),
            self.o.valid.eq(results.r_rdy),
            self.o.payload.eq(results.r_data),
            results.r_en.eq(self.o.ready),
        ]
        return m
