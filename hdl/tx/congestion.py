"""NSCC-style window congestion control, one window per QP (the gateware twin of ``sw/model/nscc.py``).

Ref: docs/protocol.md §10 (NSCC: window, ECN + delay, four quadrants, quick adapt). The gateware follows
the reference model :class:`mrcnic.model.nscc.Nscc`, which is simpler than §10.3: no avg_delay EWMA, no
fast increase, no per-period ``adjust`` batching, no ``to_ignore`` after a quick adapt; the increases are
applied on every SACK. Where §10 and the model differ, the model is followed.

Per SACK with ``rtt_valid`` (and ``enabled``), ``delay = rtt - base_rtt`` (signed):

* no ECN, delay < target: proportional increase ``cwnd += alpha * acked * (target - delay) / target``;
* no ECN, delay >= target: fair increase ``cwnd += eta * mtu * acked / cwnd``;
* ECN, delay >= target: ``cwnd *= max(1 - gamma * (delay - target) / delay, max_md_jump)``, at most once per
  base_rtt (``now - last_md >= base_rtt``; a decrease inside that time is "held");
* ECN, delay < target: hold (no change).

Every SACK (also without an RTT sample, and also when disabled) adds ``newly_acked`` to the quick-adapt
measure. TRIM: ``cwnd = max(cwnd - mtu, mtu)`` (the model subtracts the trimmed packet's length, which
``cc_event`` does not carry; a full ``mtu`` is used), then quick adapt at most once per
``base_rtt + target``: if the bytes acked in the last base_rtt are below ``max_cwnd >> qa_gate``,
``cwnd = min(cwnd, max(acked, mtu))``. LOSS: no change (as in the model). cwnd stays in [mtu, max_cwnd].

Quick-adapt measure (approximation of the model's exact sliding window). Per QP a ring of 4 buckets of
``w = base_rtt >> 2`` time units; bucket 0 collects the bytes acked since ``bstart``; when ``now - bstart
>= w`` the ring shifts (one cycle per bucket, ``bstart += w``; after 4 * w or more all buckets are
cleared and ``bstart = now``). The measure is the sum of the 4 buckets: the bytes acked in
``[bstart - 3w, now]``, a window between 3/4 base_rtt and base_rtt long, so it never exceeds the model's.
It is exact when every event time is ``bstart`` of the first event plus a multiple of w and base_rtt is a
multiple of 4 (then the window is exactly the model's ``(now - base_rtt, now]``).

Members.

* ``cc_event``: In stream :func:`~mrcnic.hdl.tx.tracker.cc_event_layout` (from the tracker).
* ``configure``: In stream ``{qp}``: the QP's window goes back to ``max_cwnd`` and its state is reset
  (last_md / last_qa "long ago", quick-adapt buckets empty). A never configured QP behaves the same.
* Registers, In: ``mtu`` (16, bytes), ``max_cwnd`` (32, bytes), ``base_rtt`` and ``target`` (16 each, in
  128 ns units like ``rtt``; target must be > 0), ``now`` (32, the time in 128 ns units, compared serially,
  differences below 2^31), ``alpha`` and ``eta`` (16, unsigned Q4.12), ``gamma`` and ``max_md_jump`` (16,
  unsigned Q0.16, i.e. < 1), ``qa_gate`` (5, a shift), ``enabled`` (1; 0: the window never changes).
* ``inflight``: In(ArrayLayout(32, qps)) (from the tracker).
* ``cwnd``: Out(ArrayLayout(32, qps)), the window in bytes (integer part; held internally as Q32.8).
* ``cwnd_open``: Out(qps), bit q: ``inflight[q] + mtu <= cwnd[q]`` (combinational).
* Counters Out(32): ``stat_proportional``, ``stat_fair``, ``stat_decreases``, ``stat_decreases_held``,
  ``stat_holds`` (SACK quadrants taken), ``stat_quick_adapts``.

Timing. One event at a time; configure has priority (accepted only between events) and takes 1 cycle.
From acceptance of an event to ``cc_event.ready`` again (the new state and ``cwnd`` are visible then):
4 cycles (LOSS, SACK without RTT sample or when disabled, hold, held decrease), 6 + ``qa_gate`` (TRIM),
71 (increase or decrease: 64 cycles of the restoring divider), plus one per bucket shift (at most 3; a gap
of 4 buckets or more clears the ring in one cycle). Measured in the Amaranth simulator.

Fixed point: cwnd has 8 fraction bits; the increases are computed as Q.8 bytes (truncated, and saturated
at cwnd's 40 bits: any larger increase takes cwnd to max_cwnd all the same), the decrease factor as
Q0.16. Against the model (floats) the difference stays well under 0.5 % of cwnd (tests).
"""

from amaranth import Array, Cat, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .layouts import bits_for
from .tracker import CcKind, cc_event_layout

__all__ = ["STATS", "CongestionControl", "cc_configure_layout"]

FRAC = 8  # fraction bits of cwnd
BUCKETS = 4  # quick-adapt ring: BUCKETS buckets of base_rtt / BUCKETS
DIV_BITS = 64  # numerator width of the divider (one quotient bit per cycle)
STATS = ("proportional", "fair", "decreases", "decreases_held", "holds", "quick_adapts")


def cc_configure_layout(qps: int) -> data.StructLayout:
    return data.StructLayout({"qp": bits_for(qps)})


def _state_layout() -> data.StructLayout:
    return data.StructLayout(
        {
            "valid": 1,  # 0: never configured / just configured, read as the reset state
            "cwnd": 32 + FRAC,
            "buckets": data.ArrayLayout(32, BUCKETS),
            "bstart": 32,
            "last_md": 32,
            "md_valid": 1,
            "last_qa": 32,
            "qa_valid": 1,
        }
    )


class CongestionControl(wiring.Component):
    def __init__(self, *, qps: int):
        self.qps = qps
        members = {
            "cc_event": In(stream.Signature(cc_event_layout(qps))),
            "configure": In(stream.Signature(cc_configure_layout(qps))),
            "mtu": In(16),
            "max_cwnd": In(32),
            "base_rtt": In(16),
            "target": In(16),
            "alpha": In(16),
            "eta": In(16),
            "gamma": In(16),
            "max_md_jump": In(16),
            "qa_gate": In(5),
            "enabled": In(1),
            "now": In(32),
            "inflight": In(data.ArrayLayout(32, qps)),
            "cwnd": Out(data.ArrayLayout(32, qps)),
            "cwnd_open": Out(qps),
        }
        for name in STATS:
            members[f"stat_{name}"] = Out(32)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        qps = self.qps
        layout = _state_layout()
        store = Array(Signal(layout, name=f"state_{q}") for q in range(qps))

        # Outputs: a QP whose state is not valid reads as max_cwnd.
        for q in range(qps):
            cwnd_q = Signal(32, name=f"cwnd_{q}")
            m.d.comb += cwnd_q.eq(Mux(store[q].valid, store[q].cwnd[FRAC:], self.max_cwnd))
            m.d.comb += [
                self.cwnd[q].eq(cwnd_q),
                self.cwnd_open[q].eq(self.inflight[q] + self.mtu <= cwnd_q),
            ]

        ev = Signal(cc_event_layout(qps))
        st = Signal(layout)
        mtu_q = Signal(32 + FRAC)
        max_q = Signal(32 + FRAC)
        m.d.comb += [mtu_q.eq(self.mtu << FRAC), max_q.eq(self.max_cwnd << FRAC)]
        bucket_w = Signal(16)
        m.d.comb += bucket_w.eq(self.base_rtt >> 2)
        since_b = Signal(32)
        m.d.comb += since_b.eq(self.now - st.bstart)
        delay = Signal(signed(18))
        m.d.comb += delay.eq(Cat(ev.rtt, 0).as_signed() - Cat(self.base_rtt, 0).as_signed())
        below_target = delay < self.target

        def later_eq(a, b):  # serial a >= b for 32-bit times
            d = Signal(32)
            m.d.comb += d.eq(a - b)
            return ~d[31]

        # Restoring divider: quo = num / den, one bit per cycle.
        num = Signal(DIV_BITS)
        den = Signal(32 + FRAC)
        rem = Signal(32 + FRAC + 1)
        quo = Signal(DIV_BITS)
        count = Signal(range(DIV_BITS + 1))
        rem2 = Signal(32 + FRAC + 2)
        m.d.comb += rem2.eq(Cat(num[-1], rem))

        op = Signal(2)  # 0 proportional, 1 fair, 2 decrease
        qa_limit = Signal(32)  # max_cwnd >> qa_gate (QA_LIMIT)
        qa_shift = Signal(5)
        stats = {name: getattr(self, f"stat_{name}") for name in STATS}

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.configure.ready.eq(1)
                with m.If(self.configure.valid):
                    m.d.sync += store[self.configure.payload.qp].valid.eq(0)
                with m.Else():
                    m.d.comb += self.cc_event.ready.eq(1)
                    with m.If(self.cc_event.valid):
                        m.d.sync += ev.eq(self.cc_event.payload)
                        m.next = "LOAD"

            with m.State("LOAD"):
                cur = store[ev.qp]
                with m.If(cur.valid):
                    m.d.sync += st.eq(cur)
                with m.Else():
                    reset = Signal(layout)
                    m.d.comb += [reset.valid.eq(1), reset.cwnd.eq(max_q), reset.bstart.eq(self.now)]
                    m.d.sync += st.eq(reset)
                m.next = "ADVANCE"

            with m.State("ADVANCE"):
                # Shift the quick-adapt ring up to now, one bucket per cycle.
                with m.If((bucket_w == 0) | (since_b >= bucket_w * BUCKETS) | since_b[31]):
                    m.d.sync += [st.buckets.eq(0), st.bstart.eq(self.now)]
                    m.next = "DISPATCH"
                with m.Elif(since_b >= bucket_w):
                    m.d.sync += st.bstart.eq(st.bstart + bucket_w)
                    m.d.sync += st.buckets[0].eq(0)
                    for i in range(1, BUCKETS):
                        m.d.sync += st.buckets[i].eq(st.buckets[i - 1])
                with m.Else():
                    m.next = "DISPATCH"

            with m.State("DISPATCH"):
                m.next = "WRITE"
                m.d.sync += count.eq(DIV_BITS)
                m.d.sync += [rem.eq(0), quo.eq(0)]
                with m.If(ev.kind == CcKind.SACK):
                    m.d.sync += st.buckets[0].eq(st.buckets[0] + ev.newly_acked)
                    with m.If(self.enabled & ev.rtt_valid):
                        with m.If(~ev.ecn & below_target):
                            acked_x = ev.newly_acked * (self.target - delay)[:17]
                            m.d.sync += [op.eq(0), num.eq(acked_x << FRAC), den.eq(self.target)]
                            m.d.sync += stats["proportional"].eq(stats["proportional"] + 1)
                            m.next = "DIVIDE"
                        with m.Elif(~ev.ecn):
                            # mtu * acked / cwnd(Q.8) in Q.8: numerator scaled by 2 * FRAC.
                            m.d.sync += [
                                op.eq(1),
                                num.eq((self.mtu * ev.newly_acked) << (2 * FRAC)),
                                den.eq(st.cwnd),
                            ]
                            m.d.sync += stats["fair"].eq(stats["fair"] + 1)
                            m.next = "DIVIDE"
                        with m.Elif(~below_target):
                            with m.If(~st.md_valid | later_eq(self.now, st.last_md + self.base_rtt)):
                                # delay >= target > 0 here, so the divisor is positive.
                                m.d.sync += [
                                    op.eq(2),
                                    num.eq(((delay - self.target)[:17]) << 16),
                                    den.eq(delay[:17]),
                                ]
                                m.d.sync += [st.last_md.eq(self.now), st.md_valid.eq(1)]
                                m.d.sync += stats["decreases"].eq(stats["decreases"] + 1)
                                m.next = "DIVIDE"
                            with m.Else():
                                m.d.sync += stats["decreases_held"].eq(stats["decreases_held"] + 1)
                        with m.Else():
                            m.d.sync += stats["holds"].eq(stats["holds"] + 1)
                with m.Elif((ev.kind == CcKind.TRIM) & self.enabled):
                    m.d.sync += st.cwnd.eq(Mux(st.cwnd >= mtu_q + mtu_q, st.cwnd - mtu_q, mtu_q))
                    m.d.sync += [qa_limit.eq(self.max_cwnd), qa_shift.eq(self.qa_gate)]
                    m.next = "QA_LIMIT"

            # max_cwnd >> qa_gate, one bit a cycle (a barrel shifter costs about 100 LUT4s; TRIMs are rare).
            with m.State("QA_LIMIT"):
                with m.If(qa_shift == 0):
                    m.next = "QUICK_ADAPT"
                with m.Else():
                    m.d.sync += [qa_limit.eq(qa_limit >> 1), qa_shift.eq(qa_shift - 1)]

            with m.State("QUICK_ADAPT"):
                m.next = "WRITE"
                acked = Signal(32 + 2)
                m.d.comb += acked.eq(sum(st.buckets[i] for i in range(BUCKETS)))
                floor = Signal(32 + FRAC + 2)
                m.d.comb += floor.eq(Mux(acked > self.mtu, acked, self.mtu) << FRAC)
                ready = ~st.qa_valid | later_eq(self.now, st.last_qa + self.base_rtt + self.target)
                with m.If(ready & (acked < qa_limit)):
                    with m.If(floor < st.cwnd):
                        m.d.sync += st.cwnd.eq(floor)
                    m.d.sync += [st.last_qa.eq(self.now), st.qa_valid.eq(1)]
                    m.d.sync += stats["quick_adapts"].eq(stats["quick_adapts"] + 1)

            with m.State("DIVIDE"):
                with m.If(count == 0):
                    m.next = "SCALE"
                with m.Else():
                    m.d.sync += [count.eq(count - 1), num.eq(num << 1)]
                    with m.If(rem2 >= den):
                        m.d.sync += [rem.eq(rem2 - den), quo.eq(Cat(1, quo))]
                    with m.Else():
                        m.d.sync += [rem.eq(rem2), quo.eq(Cat(0, quo))]

            # Two stages, one multiplier each: the gamma product and the cwnd product in one cycle were
            # the core clock's longest path on the ECPIX-5 (26.8 ns).
            # Ops 0, 1: what cwnd grows by, saturated at cwnd's range (cwnd + that is then above max_cwnd
            # whenever the product was), so the sum and its clamp are 41 bits wide, not 81.
            increase = Signal(32 + FRAC)
            md_factor = Signal(17)  # op 2: what cwnd is multiplied by (Q1.16)

            def saturated(product):
                grown = product >> 12
                return Mux(grown[len(increase) :].any(), (1 << len(increase)) - 1, grown[: len(increase)])

            with m.State("SCALE"):
                m.next = "APPLY"
                with m.Switch(op):
                    with m.Case(0):
                        m.d.sync += increase.eq(saturated(quo * self.alpha))
                    with m.Case(1):
                        m.d.sync += increase.eq(saturated(quo * self.eta))
                    with m.Case(2):
                        # quo = (delay - target) / delay in Q0.16 (< 1).
                        gq = Signal(17)
                        factor = Signal(17)
                        m.d.comb += gq.eq((quo[:17] * self.gamma) >> 16)
                        m.d.comb += factor.eq((1 << 16) - gq)
                        m.d.sync += md_factor.eq(Mux(factor < self.max_md_jump, self.max_md_jump, factor))

            with m.State("APPLY"):
                m.next = "WRITE"
                wide = Signal(32 + FRAC + 1)  # cwnd + increase, or cwnd * md_factor (<= cwnd)
                with m.If(op == 2):
                    m.d.comb += wide.eq((st.cwnd * md_factor) >> 16)
                with m.Else():
                    m.d.comb += wide.eq(st.cwnd + increase)
                m.d.sync += st.cwnd.eq(Mux(wide > max_q, max_q, wide))

            with m.State("WRITE"):
                final = Signal(layout)
                m.d.comb += final.eq(st)
                with m.If(st.cwnd < mtu_q):
                    m.d.comb += final.cwnd.eq(mtu_q)
                with m.Elif(st.cwnd > max_q):
                    m.d.comb += final.cwnd.eq(max_q)
                m.d.sync += store[ev.qp].eq(final)
                m.next = "IDLE"

        return m
