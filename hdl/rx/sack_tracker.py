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

Bitmap scheme. The W-bit vector is stored relative to cack: bit j is PSN cack + 1 + j, so the window
``(cack, cack + W]`` is exactly the vector. Invariant: a bit is set iff its PSN was received. The arrival
sets bit d - 1; when cack advances by n (the number of trailing ones, the index of the lowest zero from
``~r & (r + 1)``), the vector shifts right by n: the received run leaves and n empty bits for the PSNs
that enter the window come in at the top. One shifter per arrival (the same shift also gives the SACK
fields their vector), no rotation on read or write. The ooo_count becomes ``ooo + 1 - n`` without a
population count.

Timing. One operation at a time (no overlapping read-modify-writes, so no forwarding): an arrival takes
5 cycles (accept + read, classify, update + write, SACK fields, verdict transfer) plus verdict
backpressure; a configure takes 1 cycle (a plain write, no read). Configure has priority over arrival.
"""

from amaranth import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

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
    s = value.as_signed()
    return Mux(s > 32767, 32767, Mux(s < -32768, -32768, s))


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
        wb = bits_for(W)  # index bits
        ent = entry_layout(W)

        m.submodules.table = table = Memory(
            shape=ent, depth=self.qps, init=[], attrs=small_table_attrs(self.qps)
        )
        wr = table.write_port()
        rd = table.read_port(transparent_for=(wr,))

        cfg, arr, out = self.configure, self.arrival, self.verdict
        op = Signal(arrival_layout(self.qps))

        # stage 1 -> 2 registers (classification)
        kind = Signal(Verdict)
        old = Signal(ent)
        r_set = Signal(W)  # bitmap (bit j <-> PSN old.cack + 1 + j), the arrival's bit set if NEW
        d = Signal(PSN_BITS)
        # stage 2 -> 3 registers (new state)
        cack = Signal(PSN_BITS)
        r_new = Signal(W)  # relative to the new cack
        ooo = Signal(wb)
        nbytes = Signal(32)
        opened_hole = Signal()
        advanced_run = Signal()

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
                psn = Mux(probe, e.cack + 1, op.psn)[:PSN_BITS]
                m.d.sync += op.psn.eq(psn)  # a probe stands for cack + 1 from here on
                dd = (psn - e.cack)[:PSN_BITS]
                r = e.bitmap
                in_window = (dd >= 1) & (dd <= W)
                seen = (r >> (dd - 1)[:wb])[0]
                m.d.comb += rd.addr.eq(op.qp)  # hold the read
                m.d.sync += [old.eq(e), d.eq(dd)]
                with m.If(in_window & ~seen):
                    bit = Mux(
                        op.mode == ArrivalMode.MARK, Const(1, W) << (dd - 1)[:wb], 0
                    )  # only MARK sets it
                    m.d.sync += [kind.eq(Verdict.NEW), r_set.eq(r | bit)]
                with m.Elif((dd == 0) | (dd >= HALF) | in_window):
                    m.d.sync += [kind.eq(Verdict.DUPLICATE), r_set.eq(r)]
                with m.Else():
                    m.d.sync += [kind.eq(Verdict.OUT_OF_WINDOW), r_set.eq(r)]
                m.next = "UPDATE"

            with m.State("UPDATE"):
                inc = Signal(W + 1)
                m.d.comb += inc.eq(r_set + 1)
                lowest_zero = ~Cat(r_set, 0) & inc  # one-hot, bit W if all ones
                n = Signal(wb + 1)  # index of the lowest zero = trailing ones, one-hot to binary
                for k in range(wb + 1):
                    select = Const(sum(1 << i for i in range(W + 1) if i >> k & 1), W + 1)
                    m.d.comb += n[k].eq((lowest_zero & select).any())
                shifted = Signal(W)  # relative to the new cack
                m.d.comb += shifted.eq(r_set >> n)
                new = Signal(ent)
                is_new = (kind == Verdict.NEW) & (op.mode == ArrivalMode.MARK)
                ahead = (op.psn - old.max_rcvd)[:PSN_BITS]
                m.d.comb += [
                    new.bitmap.eq(shifted),
                    new.cack.eq(old.cack + n),
                    new.max_rcvd.eq(Mux((ahead >= 1) & (ahead < HALF), op.psn, old.max_rcvd)),
                    new.ooo.eq(old.ooo + 1 - n),
                    new.bytes.eq(old.bytes + op.length),
                    wr.addr.eq(op.qp),
                    wr.data.eq(new),
                    wr.en.eq(is_new),
                ]
                with m.If(is_new):
                    m.d.sync += [
                        cack.eq(new.cack),
                        r_new.eq(shifted),
                        ooo.eq(new.ooo),
                        nbytes.eq(new.bytes),
                        opened_hole.eq((ahead >= 2) & (ahead < HALF)),
                        advanced_run.eq((d == 1) & (n >= 2)),
                    ]
                with m.Else():
                    m.d.sync += [
                        cack.eq(old.cack),
                        r_new.eq(r_set),
                        ooo.eq(old.ooo),
                        nbytes.eq(old.bytes),
                        opened_hole.eq(0),
                        advanced_run.eq(0),
                    ]
                counted = op.mode != ArrivalMode.PROBE
                m.d.sync += [
                    self.stat_duplicates.eq(self.stat_duplicates + (counted & (kind == Verdict.DUPLICATE))),
                    self.stat_out_of_window.eq(
                        self.stat_out_of_window + (counted & (kind == Verdict.OUT_OF_WINDOW))
                    ),
                    self.stat_out_of_order.eq(self.stat_out_of_order + (is_new & (d != 1))),
                ]
                m.next = "SACK"

            with m.State("SACK"):
                x = (op.psn - BASE_BACK)[:PSN_BITS]
                y = (cack + 1)[:PSN_BITS]
                later = Mux((x - y)[:PSN_BITS] < HALF, x, y)
                base = Cat(Const(0, 3), later[3:])
                s = (base - cack - 1)[:PSN_BITS].as_signed()
                u = s + 8  # >= 1 (base >= align8_down(cack + 1))
                ext = Cat(Const(0xFF, 8), r_new, Const(0, BITMAP_BITS))
                # a base near 2^23 ahead: bits whose PSN wraps to serially <= cack are 1 (§7.2 literally)
                thr = HALF - 1 - s
                ones = Const(2**BITMAP_BITS - 1, BITMAP_BITS)
                far = (ones << Mux(thr < BITMAP_BITS, thr[:7], BITMAP_BITS))[:BITMAP_BITS]
                p = out.payload
                m.d.sync += [
                    p.qp.eq(op.qp),
                    p.psn.eq(op.psn),
                    p.kind.eq(kind),
                    p.cack.eq(cack),
                    p.ooo_count.eq(ooo),
                    p.rcvd_bytes.eq(nbytes[8:]),
                    p.ack_psn_offset.eq(_serial_s16((op.psn - cack)[:PSN_BITS])),
                    p.sack_offset.eq(_serial_s16((base - cack)[:PSN_BITS])),
                    p.sack_bitmap.eq(Mux(u <= W + 8, (ext >> u[: bits_for(W + 9)])[:BITMAP_BITS], far)),
                    p.opened_hole.eq(opened_hole),
                    p.advanced_run.eq(advanced_run),
                ]
                m.next = "OUT"

            with m.State("OUT"):
                m.d.comb += out.valid.eq(1)
                with m.If(out.ready):
                    m.next = "IDLE"

        return m
