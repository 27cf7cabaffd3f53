"""SACK tracker: per-QP receive window, PSN classification and the SACK fields of every arrival.

Ref: docs/protocol.md §7.1 (window ``(cack, cack + window]``, classes new / duplicate / beyond window,
serial arithmetic on 24-bit PSNs), §7.2 (SACK content: ``ack_psn_offset``, ``base``, 64-bit bitmap,
CC_STATE ``ooo_count`` and ``rcvd_bytes``; the "new hole" and "advances cack over a run" triggers).

Members (Q = ``qps``, W = ``window``, a power of two, 64 <= W <= 2^15):

* ``configure``: In, ``{qp, initial_psn}``: ``cack = initial_psn - 1``, ``max_rcvd = cack``, bitmap
  clear, ``ooo_count = 0``, byte counter 0.
* ``arrival``: In, ``{qp, psn, length, mode}``: a validated data packet (``length``: payload bytes).
  ``mode`` (:class:`ArrivalMode`): MARK (a normal arrival: NEW changes the state), CLASSIFY (a trimmed
  packet, §7.5 row 6: the verdict says what the PSN is, nothing changes and nothing is counted but
  duplicates and out-of-window arrivals), PROBE (a reliability probe, §7.8: ``psn`` is ignored and
  replaced by cack + 1, so the SACK fields are those of a PR = 1 SACK, ``base = align8_down(cack + 1)``;
  nothing changes, no counter moves; ``kind`` is NEW and ``ack_psn_offset`` is 1, to be replaced by the
  probe id).
* ``verdict``: Out, one per arrival, in arrival order: ``{qp, psn, kind, cack, ooo_count, rcvd_bytes,
  ack_psn_offset, sack_offset, sack_bitmap, opened_hole, advanced_run}``, all after processing the
  arrival, with the arrival as the SACK trigger T:

  - ``kind`` (:class:`Verdict`): with d = (psn - cack) mod 2^24, NEW if 1 <= d <= W and the PSN was
    not received (the caller places it), DUPLICATE if d = 0, d >= 2^23 or already received,
    OUT_OF_WINDOW if W < d < 2^23 (the caller NACKs PSN_OOR_WINDOW). Only NEW changes the state.
  - ``cack`` (24 bits); ``ooo_count``: received PSNs above cack (< W, so the §7.2 saturation at
    0x7FFF never applies); ``rcvd_bytes``: floor(B / 256) mod 2^24, B the cumulative payload of NEW
    arrivals (kept exactly modulo 2^32).
  - ``ack_psn_offset`` = T - cack and ``sack_offset`` = base - cack, both signed 16-bit, the 24-bit
    serial difference saturated to [-32768, 32767];
    ``base = align8_down(max(T - 56, cack + 1))`` with the max in serial arithmetic (the later of the
    two, i.e. T - 56 when (T - 56 - (cack + 1)) mod 2^24 < 2^23).
  - ``sack_bitmap``: bit i <-> PSN base + i; 1 if that PSN <= cack (serially) or was received. PSNs
    beyond cack + W cannot be received, so their bits are 0 (only an OUT_OF_WINDOW trigger, or a
    DUPLICATE about 2^23 behind, whose base lands about 2^23 ahead, reaches them; past 2^23 ahead a PSN
    is serially <= cack again and its bit is 1).
  - ``opened_hole``: NEW and psn > max_rcvd + 1 (§7.2 "opens a new hole"; max_rcvd is the highest PSN
    received, initially cack).
  - ``advanced_run``: NEW, psn = cack + 1 and psn + 1 already received (cack moved past an
    out-of-order run).

* ``stat_duplicates``, ``stat_out_of_window``, ``stat_out_of_order`` (NEW arrivals with psn !=
  cack + 1): Out(32), wrapping modulo 2^32.

State. One ``lib.memory.Memory`` of Q entries ``{bitmap, cack, max_rcvd, ooo, bytes}``, one
synchronous read port (transparent to the write port) and one write port. A QP that was never
configured behaves as one configured with ``initial_psn = 1`` (the table resets to zero).

Bitmap scheme. The W-bit vector is indexed by PSN modulo W: bit ``p mod W`` is PSN p for the one p in
the window ``(cack, cack + W]`` with that residue. Invariant: a bit is set iff its PSN is in the window
and was received (so the bit of cack + 1 is always clear between arrivals). An out-of-order arrival sets
its bit; an in-order one (psn = cack + 1) moves cack to psn without touching the vector; then cack
advances one PSN a cycle while the bit of cack + 1 is set, clearing it (the slot now stands for the PSN
that enters the window at the top, not received). The ooo_count is +1 per out-of-order arrival and -1
per advance step, without a population count. So the vector never shifts: a W-bit barrel shifter cost
about 600 LUT4 at W = 64, and each bit is cleared once, so the steps cost on average one cycle per
packet, however the arrivals are reordered. The SACK fields' 64 bits start at ``base``, a multiple of
8: a rotation of the vector by ``base mod W`` (W / 8 choices) and, per bit, whether its PSN is in the
window, at or below cack (1), or beyond the window (0).

Timing. One operation at a time (no overlapping read-modify-writes, so no forwarding): an arrival that
changes the state takes 5 cycles (accept + read, classify + mark, advance + write, SACK fields, verdict
transfer) plus one cycle per PSN that cack moves over received ones (an arrival that fills a hole
below k out-of-order PSNs: k more), plus verdict backpressure; one that changes nothing (not NEW, or not
MARK) takes 4. A configure takes 1 cycle (a plain write, no read). Configure has priority over arrival.
The SACK fields' stage is the longest path of the Colorlight's core (docs/boards.md): the two candidates
of its base, T - 56 and the final cack + 1, are registered the cycle before it (CLASSIFY, or each ADVANCE
step) so that its carry chains start one later (``SackTracker(qps=1, window=64)`` alone, placed and routed
out of context on the 25F: 50.08 -> 54.13 MHz, 1,809 -> 1,835 cells).
"""

from amaranth import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..compare import at_least, at_most, below
from ..tables import small_table_attrs
from ..tx.layouts import bits_for

__all__ = [
    "STATS",
    "ArrivalMode",
    "SackTracker",
    "Verdict",
    "arrival_layout",
    "configure_layout",
    "verdict_layout",
]

PSN_BITS = 24
PSN_MOD = 1 << PSN_BITS
HALF = 1 << (PSN_BITS - 1)
BITMAP_BITS = 64
BASE_BACK = 56  # §7.2: base = align8_down(max(T - 56, cack + 1))

STATS = ("duplicates", "out_of_window", "out_of_order")


class Verdict(enum.Enum, shape=2):
    """Class of an arrival (§7.1)."""

    NEW = 0
    DUPLICATE = 1
    OUT_OF_WINDOW = 2


class ArrivalMode(enum.Enum, shape=2):
    """What an arrival may do to the state."""

    MARK = 0
    CLASSIFY = 1
    PROBE = 2


def configure_layout(qps: int) -> data.StructLayout:
    return data.StructLayout({"qp": bits_for(qps), "initial_psn": PSN_BITS})


def arrival_layout(qps: int) -> data.StructLayout:
    return data.StructLayout({"qp": bits_for(qps), "psn": PSN_BITS, "length": 16, "mode": ArrivalMode})


def verdict_layout(qps: int) -> data.StructLayout:
    return data.StructLayout(
        {
            "qp": bits_for(qps),
            "psn": PSN_BITS,
            "kind": Verdict,
            "cack": PSN_BITS,
            "ooo_count": 16,
            "rcvd_bytes": 24,
            "ack_psn_offset": signed(16),
            "sack_offset": signed(16),
            "sack_bitmap": BITMAP_BITS,
            "opened_hole": 1,
            "advanced_run": 1,
        }
    )


def entry_layout(window: int) -> data.StructLayout:
    return data.StructLayout(
        {"bitmap": window, "cack": PSN_BITS, "max_rcvd": PSN_BITS, "ooo": bits_for(window), "bytes": 32}
    )


def _serial_s16(value):
    """A 24-bit serial difference, read as signed and saturated to 16 bits."""
    # Bit tests, not comparisons: past 16 bits the top 9 bits are not all equal to the sign.
    sign, top = value[PSN_BITS - 1], value[15 : PSN_BITS - 1]
    return Mux(~sign & top.any(), 32767, Mux(sign & ~top.all(), -32768, value[:16].as_signed()))


class SackTracker(wiring.Component):
    def __init__(self, qps: int, window: int = 256):
        if window & (window - 1) or not 64 <= window <= 1 << 15:
            raise ValueError(f"window must be a power of two in [64, 2^15], not {window}")
        if qps < 1:
            raise ValueError("qps must be at least 1")
        self.qps = qps
        self.window = window
        super().__init__(
            {
                "configure": In(stream.Signature(configure_layout(qps))),
                "arrival": In(stream.Signature(arrival_layout(qps))),
                "verdict": Out(stream.Signature(verdict_layout(qps))),
                **{f"stat_{name}": Out(32) for name in STATS},
            }
        )

    def elaborate(self, platform):
        m = Module()
        W = self.window
        slot_bits = W.bit_length() - 1  # a PSN's bit is psn[:slot_bits] (psn mod W)
        ent = entry_layout(W)

        m.submodules.table = table = Memory(
            shape=ent, depth=self.qps, init=[], attrs=small_table_attrs(self.qps)
        )
        wr = table.write_port()
        rd = table.read_port(transparent_for=(wr,))

        cfg, arr, out = self.configure, self.arrival, self.verdict
        op = Signal(arrival_layout(self.qps))
        kind = Signal(Verdict)
        work = Signal(ent)  # the QP's state, updated in place from CLASSIFY to the write-back
        in_order = Signal()  # a NEW MARK arrival at cack + 1
        advanced = Signal()  # cack moved over at least one received PSN after it
        opened_hole = Signal()

        def one_hot(index):
            return Cat(index == j for j in range(W))

        counted = op.mode != ArrivalMode.PROBE
        # The two candidates of the SACK fields' base (T - 56 and cack + 1), registered before SACK from
        # adders that are there anyway, so that SACK's chain of carry chains starts one later.
        back = Signal(PSN_BITS)  # T - 56
        after_cack = Signal(PSN_BITS)  # cack + 1, the final cack's

        with m.FSM():
            with m.State("IDLE"):
                with m.If(cfg.valid):
                    init = Signal(ent)
                    c0 = (cfg.payload.initial_psn - 1)[:PSN_BITS]
                    m.d.comb += [
                        cfg.ready.eq(1),
                        init.cack.eq(c0),
                        init.max_rcvd.eq(c0),
                        wr.addr.eq(cfg.payload.qp),
                        wr.data.eq(init),
                        wr.en.eq(1),
                    ]
                with m.Elif(arr.valid):
                    m.d.comb += [arr.ready.eq(1), rd.addr.eq(arr.payload.qp)]
                    m.d.sync += op.eq(arr.payload)
                    m.next = "CLASSIFY"

            with m.State("CLASSIFY"):
                e = rd.data
                probe = op.mode == ArrivalMode.PROBE
                psn = Signal(PSN_BITS)
                m.d.comb += psn.eq(Mux(probe, e.cack + 1, op.psn))
                m.d.sync += op.psn.eq(psn)  # a probe stands for cack + 1 from here on
                m.d.sync += [back.eq(psn - BASE_BACK), after_cack.eq(e.cack + 1)]
                dd = (psn - e.cack)[:PSN_BITS]
                in_window = dd.any() & at_most(dd, W)
                seen = e.bitmap.bit_select(psn[:slot_bits], 1)
                ahead = (psn - e.max_rcvd)[:PSN_BITS]
                m.d.comb += rd.addr.eq(op.qp)  # hold the read
                m.d.sync += [work.eq(e), in_order.eq(0), advanced.eq(0), opened_hole.eq(0)]
                m.next = "SACK"
                with m.If(in_window & ~seen):
                    m.d.sync += kind.eq(Verdict.NEW)
                    with m.If(op.mode == ArrivalMode.MARK):  # only MARK changes the state
                        m.d.sync += [
                            work.bytes.eq(e.bytes + op.length),
                            work.max_rcvd.eq(Mux(ahead.any() & below(ahead, HALF), psn, e.max_rcvd)),
                            opened_hole.eq(at_least(ahead, 2) & below(ahead, HALF)),
                        ]
                        with m.If(dd == 1):
                            m.d.sync += [work.cack.eq(psn), in_order.eq(1)]
                        with m.Else():
                            m.d.sync += [
                                work.bitmap.eq(e.bitmap | one_hot(psn[:slot_bits])),
                                work.ooo.eq(e.ooo + 1),
                                self.stat_out_of_order.eq(self.stat_out_of_order + 1),
                            ]
                        m.next = "ADVANCE"
                with m.Elif((dd == 0) | at_least(dd, HALF) | in_window):
                    m.d.sync += [
                        kind.eq(Verdict.DUPLICATE),
                        self.stat_duplicates.eq(self.stat_duplicates + counted),
                    ]
                with m.Else():
                    m.d.sync += [
                        kind.eq(Verdict.OUT_OF_WINDOW),
                        self.stat_out_of_window.eq(self.stat_out_of_window + counted),
                    ]

            with m.State("ADVANCE"):
                following = Signal(PSN_BITS)
                m.d.comb += following.eq(work.cack + 1)
                m.d.sync += after_cack.eq(following)
                with m.If(work.bitmap.bit_select(following[:slot_bits], 1)):
                    m.d.sync += [
                        work.bitmap.eq(work.bitmap & ~one_hot(following[:slot_bits])),
                        work.cack.eq(following),
                        work.ooo.eq(work.ooo - 1),
                        advanced.eq(1),
                    ]
                with m.Else():
                    m.d.comb += [wr.addr.eq(op.qp), wr.data.eq(work), wr.en.eq(1)]
                    m.next = "SACK"

            with m.State("SACK"):
                cack = work.cack
                x, y = back, after_cack
                later = Mux(below((x - y)[:PSN_BITS], HALF), x, y)
                base = Signal(PSN_BITS)
                m.d.comb += base.eq(Cat(Const(0, 3), later[3:]))
                # base - cack is in [-6, 2^23] (base >= align8_down(cack + 1), later <= cack + 2^23):
                # at or below cack (the first bits are 1), in the window, or beyond it.
                ahead_of_cack = Signal(PSN_BITS)
                m.d.comb += ahead_of_cack.eq(base - cack)
                # Named signals, not expressions: each is used per bit below, and an expression would be
                # written out again at every use in the generated Verilog.
                at_or_below, in_window = Signal(), Signal()
                m.d.comb += [
                    at_or_below.eq((ahead_of_cack == 0) | at_least(ahead_of_cack, PSN_MOD - 8)),
                    in_window.eq(ahead_of_cack.any() & at_most(ahead_of_cack, W)),
                ]
                # bits i < edge: in the window (edge = W + 1 - (base - cack)); beyond it (2^23 - (base -
                # cack): from there the PSN is 2^23 or more ahead, serially <= cack again), both <= 64
                edge = Signal(range(BITMAP_BITS + 1))
                edge_from = Mux(in_window, W + 1 - ahead_of_cack, HALF - ahead_of_cack)[:PSN_BITS]
                m.d.comb += edge.eq(Mux(at_least(edge_from, BITMAP_BITS), BITMAP_BITS, edge_from))
                low_ones = Signal(3)  # at_or_below: bits 0 .. -(base - cack) are 1
                m.d.comb += low_ones.eq(-ahead_of_cack)
                # bit i of ``rotated``: the vector's bit of PSN base + i (a rotation by base mod W, in
                # whole bytes: one 2:1 multiplexer level per bit of base[3:], W / 8 choices)
                rotation = work.bitmap
                for level in range(3, slot_bits):
                    rotated_level = Signal(W, name=f"rotated_{level}")
                    shifted = rotation.rotate_right(1 << level)
                    m.d.comb += rotated_level.eq(Mux(base[level], shifted, rotation))
                    rotation = rotated_level
                rotated = rotation[:BITMAP_BITS]
                bitmap = Signal(BITMAP_BITS)
                for i in range(BITMAP_BITS):
                    m.d.comb += bitmap[i].eq(
                        Mux(
                            at_or_below,
                            rotated[i] | (i <= low_ones),
                            Mux(in_window, rotated[i] & (i < edge), i >= edge),
                        )
                    )
                p = out.payload
                m.d.sync += [
                    p.qp.eq(op.qp),
                    p.psn.eq(op.psn),
                    p.kind.eq(kind),
                    p.cack.eq(cack),
                    p.ooo_count.eq(work.ooo),
                    p.rcvd_bytes.eq(work.bytes[8:]),
                    p.ack_psn_offset.eq(_serial_s16((op.psn - cack)[:PSN_BITS])),
                    p.sack_offset.eq(_serial_s16(ahead_of_cack)),
                    p.sack_bitmap.eq(bitmap),
                    p.opened_hole.eq(opened_hole),
                    p.advanced_run.eq(in_order & advanced),
                ]
                m.next = "OUT"

            with m.State("OUT"):
                m.d.comb += out.valid.eq(1)
                with m.If(out.ready):
                    m.next = "IDLE"

        return m
