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
4 cycles (LOSS, SACK without RTT sample or when disabled, hold, held decrease), 6 + max(``qa_gate``, 4)
(TRIM), 59 (increase: 53 cycles of the restoring divider), 23 (decrease: 17), plus one per bucket shift
(at most 3; a gap of 4 buckets or more takes 3 and then clears the ring). Measured in the Amaranth
simulator.

Cells (the Colorlight's ECP5-25F is full). With one QP an event works on the stored state in place; the
divider keeps 53 quotient bits (17 for a decrease), not 64; one clamp after the event instead of two; the
ring is summed as it turns; data registers leave the domain reset so their zeros use the flip-flops' own
(``python -m mrcnic.boards.synth_block mrcnic.hdl.tx.congestion:CongestionControl qps=1``: 2,669 -> 1,748
logic cells, 7 -> 9 DSPs; ``qps=2``: 3,071 -> 2,383). The results are the same bit for bit.

Fixed point: cwnd has 8 fraction bits; the increases are computed as Q.8 bytes (truncated, and saturated
at cwnd's 40 bits: any larger increase takes cwnd to max_cwnd all the same), the decrease factor as
Q0.16. Against the model (floats) the difference stays well under 0.5 % of cwnd (tests).
"""

from amaranth import Array, C, Cat, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .layouts import bits_for
from .tracker import CcKind, cc_event_layout

__all__ = ["STATS", "CongestionControl", "cc_configure_layout"]

FRAC = 8  # fraction bits of cwnd
BUCKETS = 4  # quick-adapt ring: BUCKETS buckets of base_rtt / BUCKETS
QUO_BITS = 53  # quotient bits of the increases: 52 exact, the top one stands for "2^52 or more"
STATS = ("proportional", "fair", "decreases", "decreases_held", "holds", "quick_adapts")


def cc_configure_layout(qps: int) -> data.StructLayout:
    return data.StructLayout({"qp": bits_for(qps)})


def _work_layout() -> data.StructLayout:
    """A QP's state besides its window."""
    return data.StructLayout(
        {
            "buckets": data.ArrayLayout(32, BUCKETS),
            "bstart": 32,
            "last_md": 32,
            "md_valid": 1,
            "last_qa": 32,
            "qa_valid": 1,
        }
    )


def _state_layout() -> data.StructLayout:
    return data.StructLayout({"cwnd": 32 + FRAC, "work": _work_layout()})


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
        # Only the FSM, the valid bits and the counters follow the domain's reset; the data registers do
        # not need it (a QP that is not valid starts afresh), which leaves their flip-flops' synchronous
        # reset for the zeros they load.
        ev = Signal(cc_event_layout(qps), reset_less=True)
        if qps == 1:
            # One QP: the event works on its stored state in place; the window is worked on in wc, which
            # stays the QP's window between events, and the stored copy (the output) changes at WRITE.
            # An event for QP 1 (out of range) counts as one for a fresh QP and changes no state.
            state = Signal(_state_layout(), name="state_0", reset_less=True)
            store = [state]
            valid = [Signal(name="valid_0")]  # 0: never configured / just configured: the reset state
            st = state.work
            own = ev.qp == 0
        else:
            store = Array(Signal(_state_layout(), name=f"state_{q}", reset_less=True) for q in range(qps))
            valid = Array(Signal(name=f"valid_{q}") for q in range(qps))
            st = Signal(_work_layout(), name="st", reset_less=True)  # the event's QP's, until WRITE
            own = C(1)
        # The window being worked on (Q.8), signed and 42 bits wide: it holds cwnd - mtu after a TRIM and
        # cwnd + increase after APPLY, unclamped until CLAMP.
        wc = Signal(signed(32 + FRAC + 2), reset_less=True)
        wc40 = wc[: 32 + FRAC]  # what it is before TRIM or APPLY

        # Outputs: a QP whose state is not valid reads as max_cwnd.
        for q in range(qps):
            cwnd_q = Signal(32, name=f"cwnd_{q}")
            m.d.comb += cwnd_q.eq(Mux(valid[q], store[q].cwnd[FRAC:], self.max_cwnd))
            m.d.comb += [
                self.cwnd[q].eq(cwnd_q),
                self.cwnd_open[q].eq(self.inflight[q] + self.mtu <= cwnd_q),
            ]

        mtu_q = Signal(32 + FRAC)
        max_q = Signal(32 + FRAC)
        m.d.comb += [mtu_q.eq(self.mtu << FRAC), max_q.eq(self.max_cwnd << FRAC)]
        bucket_w = Signal(16)
        m.d.comb += bucket_w.eq(self.base_rtt >> 2)
        since_b = Signal(32)
        m.d.comb += since_b.eq(self.now - st.bstart)
        delay = Signal(signed(18))
        m.d.comb += delay.eq(Cat(ev.rtt, 0).as_signed() - Cat(self.base_rtt, 0).as_signed())
        over = Signal(signed(19))  # delay - target: its sign is "below target"
        m.d.comb += over.eq(delay - self.target)
        below_target = over[-1]
        # Both hold-offs are "now - base_rtt - ... - last >= 0": one subtraction for the common part.
        now_nb = Signal(32)
        m.d.comb += now_nb.eq(self.now - self.base_rtt)

        def since_ok(d):  # serial d >= 0 for a 32-bit time difference
            s = Signal(32)
            m.d.comb += s.eq(d)
            return ~s[31]

        # Restoring divider, one quotient bit a cycle. {rem, dq} starts as the numerator, rem its part
        # above dq's QUO_BITS; the quotient bits shift into dq from below as the numerator's leave at the
        # top. rem < den holds when the quotient fits in QUO_BITS; otherwise its first bit (dq's top one)
        # is set, which is all that matters then (SCALE).
        dq = Signal(QUO_BITS, reset_less=True)
        rem = Signal(32 + FRAC, reset_less=True)
        den = Signal(32 + FRAC, reset_less=True)
        count = Signal(range(QUO_BITS), reset_less=True)  # also ADVANCE's shifts and QA_LIMIT's turns
        rem2 = Signal(32 + FRAC + 1)
        m.d.comb += rem2.eq(Cat(dq[-1], rem))
        ge = Signal()
        diff = Signal(32 + FRAC + 1)
        m.d.comb += [ge.eq(rem2 >= den), diff.eq(rem2 - den)]  # Yosys makes one carry chain of both

        # Both increases' numerators from one multiplier, acked * (target - delay or mtu) << 16 (the
        # proportional one's divisor is scaled by 2^8 to match). Registered every cycle (ev is there from
        # ADVANCE on): no enable, and no multiplier for Yosys to share behind operand multiplexers.
        prod = Signal(49, reset_less=True)
        m.d.sync += prod.eq(ev.newly_acked * Mux(below_target, (self.target - delay)[:17], self.mtu))

        applied = Signal(reset_less=True)  # an increase or decrease is on its way (DIVIDE..APPLY)
        trimmed = (ev.kind == CcKind.TRIM) & self.enabled
        increase = Signal(32 + FRAC, reset_less=True)
        # One adder for TRIM's cwnd - mtu (-mtu_q as ~mtu_q and a carry in) and APPLY's cwnd + increase.
        sum_ = Signal(signed(32 + FRAC + 2))
        m.d.comb += sum_.eq(wc40 + Mux(trimmed, ~mtu_q.as_signed(), increase) + trimmed)
        qa_limit = Signal(32, reset_less=True)  # max_cwnd >> qa_gate (QA_LIMIT)
        qa_shift = Signal(5, reset_less=True)
        acked = Signal(32 + 2, reset_less=True)  # the bytes acked in the ring (QA_LIMIT)
        # The ring's updates, set by the states and made below: one condition for each value, so the
        # zeros go to the flip-flops' synchronous resets.
        ring_clear = Signal()  # empty, from now
        ring_shift = Signal()  # one bucket on (ADVANCE)
        ring_turn = Signal()  # round by one bucket (QA_LIMIT)
        ring_add = Signal()  # bucket 0 += newly_acked (SACK)
        stats = {name: getattr(self, f"stat_{name}") for name in STATS}

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.configure.ready.eq(1)
                with m.If(self.configure.valid):
                    if qps == 1:
                        with m.If(self.configure.payload.qp == 0):
                            m.d.sync += valid[0].eq(0)
                    else:
                        m.d.sync += valid[self.configure.payload.qp].eq(0)
                with m.Else():
                    m.d.comb += self.cc_event.ready.eq(1)
                    with m.If(self.cc_event.valid):
                        m.d.sync += ev.eq(self.cc_event.payload)
                        # Load the QP's state in the same cycle. A fresh QP: max_cwnd, an empty ring from
                        # now, no decrease or quick adapt yet (last_md and last_qa do not matter then).
                        qp = self.cc_event.payload.qp
                        if qps > 1:
                            fresh = ~valid[qp]
                            m.d.sync += [wc.eq(Mux(fresh, max_q, store[qp].cwnd)), st.eq(store[qp].work)]
                        else:
                            fresh = ~valid[0] & (qp == 0)  # QP 1 leaves wc and st alone
                            with m.If(fresh):
                                m.d.sync += wc.eq(max_q)
                        with m.If(fresh):
                            m.d.comb += ring_clear.eq(1)
                            m.d.sync += [st.md_valid.eq(0), st.qa_valid.eq(0)]
                        m.d.sync += count.eq(BUCKETS - 1)
                        m.next = "ADVANCE"

            with m.State("ADVANCE"):
                # Shift the quick-adapt ring up to now, one bucket a cycle. Where a fourth shift would
                # follow (now - bstart >= 4 * w, w = 0, or now serially before bstart), the ring is emptied
                # and starts at now instead (no comparator with 4 * w).
                with m.If(~own):
                    m.next = "DISPATCH"  # a fresh ring starts at now
                with m.Elif(since_b >= bucket_w):
                    with m.If(count == 0):
                        m.d.comb += ring_clear.eq(1)
                        m.next = "DISPATCH"
                    with m.Else():
                        m.d.comb += ring_shift.eq(1)
                        m.d.sync += count.eq(count - 1)
                with m.Else():
                    m.next = "DISPATCH"

            with m.State("DISPATCH"):
                m.next = "CLAMP"
                m.d.sync += [count.eq(QUO_BITS - 1), applied.eq(0)]
                with m.If(ev.kind == CcKind.SACK):
                    with m.If(own):
                        m.d.comb += ring_add.eq(1)
                    with m.If(self.enabled & ev.rtt_valid):
                        with m.If(~ev.ecn):
                            m.d.sync += [rem.eq(prod[QUO_BITS - 16 :]), dq.eq(prod << 16), applied.eq(1)]
                            with m.If(own):
                                m.next = "DIVIDE"
                            with m.If(below_target):
                                m.d.sync += den.eq(self.target << FRAC)
                                m.d.sync += stats["proportional"].eq(stats["proportional"] + 1)
                            with m.Else():
                                # mtu * acked / cwnd(Q.8) in Q.8: numerator scaled by 2 * FRAC.
                                m.d.sync += den.eq(wc40)
                                m.d.sync += stats["fair"].eq(stats["fair"] + 1)
                        with m.Elif(~below_target):
                            with m.If(~st.md_valid | ~own | since_ok(now_nb - st.last_md)):
                                # (delay - target) << 16 / delay: 17 bits (delay >= target, both < 2^16),
                                # or all ones for 0 / 0.
                                x = over[:17]
                                m.d.sync += [
                                    applied.eq(1),
                                    rem.eq(x >> 1),
                                    dq.eq(x[0] << (QUO_BITS - 1)),
                                    den.eq(delay[:17]),
                                    count.eq(16),
                                ]
                                with m.If(own):
                                    m.d.sync += [st.last_md.eq(self.now), st.md_valid.eq(1)]
                                m.d.sync += stats["decreases"].eq(stats["decreases"] + 1)
                                with m.If(own):
                                    m.next = "DIVIDE"
                            with m.Else():
                                m.d.sync += stats["decreases_held"].eq(stats["decreases_held"] + 1)
                        with m.Else():
                            m.d.sync += stats["holds"].eq(stats["holds"] + 1)
                with m.Elif(trimmed):
                    # cwnd - mtu, which CLAMP raises to mtu: max(cwnd - mtu, mtu) and the quick adapt's
                    # min(cwnd, max(acked, mtu)) come out the same as min(cwnd - mtu, acked) raised to mtu.
                    with m.If(own):
                        m.d.sync += wc.eq(sum_)
                    m.d.sync += [qa_limit.eq(self.max_cwnd), qa_shift.eq(self.qa_gate)]
                    m.d.sync += [acked.eq(0), count.eq(BUCKETS)]
                    m.next = "QA_LIMIT"

            # max_cwnd >> qa_gate, one bit a cycle (a barrel shifter costs about 100 LUT4s; TRIMs are rare),
            # and the bytes acked in the ring, one bucket a cycle as the ring turns round once (one adder
            # of two words instead of a sum of four; the turn is the ring's shift with bucket 3 going round).
            with m.State("QA_LIMIT"):
                with m.If((qa_shift == 0) & (count == 0)):
                    m.next = "QUICK_ADAPT"
                with m.If(qa_shift != 0):
                    m.d.sync += [qa_limit.eq(qa_limit >> 1), qa_shift.eq(qa_shift - 1)]
                with m.If(count != 0):
                    m.d.sync += count.eq(count - 1)
                    with m.If(own):  # a fresh ring is empty
                        m.d.sync += acked.eq(acked + st.buckets[BUCKETS - 1])
                        m.d.comb += ring_turn.eq(1)

            with m.State("QUICK_ADAPT"):
                m.next = "CLAMP"
                qa_nt = Signal(32)  # a name of its own: Yosys makes a cheaper sum of two than of three
                m.d.comb += qa_nt.eq(now_nb - self.target)
                ready = ~st.qa_valid | ~own | since_ok(qa_nt - st.last_qa)
                with m.If(ready & (acked - qa_limit)[-1]):  # acked < qa_limit
                    # wc = min(wc, acked): acked << FRAC < wc as 2 * acked + 1 <= 2 * (wc >> FRAC) + (any
                    # fraction bit), 35 bits wide instead of 42.
                    with m.If(own & ~(Cat(wc[:FRAC].any(), wc[FRAC:]).as_signed() - Cat(1, acked))[-1]):
                        m.d.sync += wc.eq(acked << FRAC)
                    with m.If(own):
                        m.d.sync += [st.last_qa.eq(self.now), st.qa_valid.eq(1)]
                    m.d.sync += stats["quick_adapts"].eq(stats["quick_adapts"] + 1)

            with m.State("DIVIDE"):
                m.d.sync += [count.eq(count - 1), dq.eq(Cat(ge, dq))]
                m.d.sync += rem.eq(Mux(ge, diff, rem2))
                with m.If(count == 0):
                    m.next = "SCALE"

            # SCALE and APPLY: two stages, one multiplier each (the gamma product and the cwnd product in
            # one cycle were the core clock's longest path on the ECPIX-5, 26.8 ns). The stage registers
            # take their values every cycle (dq is final in SCALE): no enables, and no multipliers for
            # Yosys to share behind operand multiplexers.
            # Increases: what cwnd grows by, and ``huge`` when that is 2^40 or more (then cwnd goes to
            # max_cwnd all the same, so the sum stays within wc's 42 bits). A quotient of 2^52 or more
            # (dq's top bit) makes it huge whenever alpha or eta is not 0, as it did in full.
            huge = Signal(reset_less=True)
            grown = Signal(QUO_BITS + 16 - 12)
            m.d.comb += grown.eq((dq * Mux(below_target, self.alpha, self.eta)) >> 12)
            m.d.sync += [increase.eq(grown), huge.eq(grown[len(increase) :].any() & ~ev.ecn)]
            # Decrease: what cwnd is multiplied by (Q1.16); dq = (delay - target) / delay in Q0.16 (< 1).
            md_factor = Signal(17, reset_less=True)
            gq = Signal(17)
            factor = Signal(17)
            m.d.comb += gq.eq((dq[:17] * self.gamma) >> 16)
            m.d.comb += factor.eq((1 << 16) - gq)
            m.d.sync += md_factor.eq(Mux(factor < self.max_md_jump, self.max_md_jump, factor))

            with m.State("SCALE"):
                m.next = "APPLY"

            with m.State("APPLY"):
                m.next = "CLAMP"
                with m.If(ev.ecn):
                    m.d.sync += wc.eq((wc40 * md_factor) >> 16)
                with m.Else():
                    m.d.sync += wc.eq(sum_)  # wc40 + increase

            # To [mtu, max_cwnd], mtu first, as before: a TRIM, a quick adapt and APPLY leave their result
            # unclamped (see there), which with mtu <= max_cwnd comes out the same. With max_cwnd < mtu the
            # clamp is not idempotent, and their clamped result was max_cwnd after a TRIM, mtu after APPLY.
            inverted = Signal()
            m.d.comb += inverted.eq(~self.max_cwnd[16:].any() & (self.max_cwnd[:16] < self.mtu))
            with m.State("CLAMP"):
                m.next = "WRITE"
                with m.If(~own):
                    pass
                with m.Elif(inverted & (trimmed | applied)):
                    m.d.sync += wc.eq(Mux(trimmed, max_q, mtu_q))
                with m.Elif(applied & huge):
                    m.d.sync += wc.eq(max_q)
                with m.Elif(wc[-1] | (~wc[24:].any() & (wc[FRAC:24] < self.mtu))):  # wc < mtu_q
                    m.d.sync += wc.eq(mtu_q)
                with m.Elif((max_q - wc)[-1]):  # wc > max_q
                    m.d.sync += wc.eq(max_q)

            with m.State("WRITE"):
                if qps == 1:
                    with m.If(own):
                        m.d.sync += [valid[0].eq(1), state.cwnd.eq(wc40)]
                else:
                    m.d.sync += [valid[ev.qp].eq(1), store[ev.qp].eq(Cat(wc40, st))]
                m.next = "IDLE"

        buckets = st.buckets
        with m.If(ring_clear | ring_shift):
            m.d.sync += buckets[0].eq(0)
        with m.Elif(ring_turn):
            m.d.sync += buckets[0].eq(buckets[BUCKETS - 1])
        with m.Elif(ring_add):
            m.d.sync += buckets[0].eq(buckets[0] + ev.newly_acked)
        with m.If(ring_clear):
            m.d.sync += [buckets[i].eq(0) for i in range(1, BUCKETS)]
        with m.Elif(ring_shift | ring_turn):
            m.d.sync += [buckets[i].eq(buckets[i - 1]) for i in range(1, BUCKETS)]
        with m.If(ring_clear):
            m.d.sync += st.bstart.eq(self.now)
        with m.Elif(ring_shift):
            m.d.sync += st.bstart.eq(st.bstart + bucket_w)
        return m
