"""Reliability prober: schedules PETH probes for ASSUMED_BAD EV slots and restores them after k answers.

Ref: docs/protocol.md §6.4 (ASSUMED_BAD -> GOOD after ``probe_k`` answered probes, skip 1 if the last
answer had M = SKIP_ONCE), §7.8 (what is probed, timing, restore, probe ids), §5.1 (plane = EV[31:29]),
§5.8 (the answer comes back on the reverse of the probed path).

Parameters: ``qps`` (Q), ``ev_slots`` (N). State, in registers (Q * N entries, meant to be small):
``{active, ev, due, interval, streak, outstanding, probe_id, sent_at, last_skip_once}`` per (QP, slot)
(:func:`entry_layout`), and a 16-bit probe id counter per QP (+1 per probe, modulo 2^16).

Members.

* ``watch``: In stream :func:`watch_layout` ``{qp, slot, ev}``: the slot's EV became ASSUMED_BAD. The
  entry (re)starts for ``ev``: due = now + probe_interval, interval = probe_interval, streak 0, nothing
  outstanding (an answer to a probe of the previous EV is then stale). Out-of-range qp/slot: ignored.
* ``unwatch``: In stream :func:`unwatch_layout` ``{qp, slot}``: stop probing the slot.
* ``answer``: In stream :func:`~mrcnic.hdl.rx.feedback_decoder.feedback_packet_layout`. Only SACKs with
  ``probe_answer`` = 1 matter (others are taken and ignored). Matched to the active entry of that QP
  with a probe outstanding and the same ``probe_id`` (lowest slot first). Matched: ``stat_answers`` += 1,
  nothing outstanding any more, and

  - M = ALWAYS_SKIP (``path_event`` LOSS): streak 0, interval = min(2 * interval, probe_interval_max),
    due = now + interval;
  - otherwise streak += 1, interval = probe_interval, due = now + interval, last_skip_once = (M =
    SKIP_ONCE); when the streak reaches ``probe_k`` (0 is taken as 1): one ``restore`` record
    {qp, slot, ev, PROBE_OK} with ``restore_skip`` = last_skip_once, ``stat_restores`` += 1, and the
    entry stops.

  Not matched: ``stat_stale_answers`` += 1.
* Background scan, one entry per cycle (qp-major), when no input is taken and no output is pending:

  - an outstanding probe with now - sent_at >= ``rto`` is unanswered: streak 0, interval doubles
    (<= max), due = now + interval, ``stat_unanswered`` += 1;
  - otherwise an active entry with nothing outstanding, now >= due (serially) and its plane up
    (``plane_up`` bit EV[31:29]) sends a probe: ``probe`` {qp, slot, ev, probe_id = counter}, counter
    += 1, outstanding, sent_at = now, ``stat_probes`` += 1. A down plane only delays the probe.

* ``probe``: Out stream :func:`probe_layout` (the TX side builds the PETH packet from it).
* ``restore``: Out stream :func:`~mrcnic.hdl.tx.layouts.feedback_layout` (to ``PathSelector.feedback``);
  ``restore_skip``: Out(1), valid with ``restore`` (1: restore with skip 1).
* Registers, in cycles: ``now``, ``probe_interval`` (default 5000 = 20 µs at 250 MHz),
  ``probe_interval_max`` (default 250000 = 1 ms), ``rto`` (default 25000 = 100 µs); ``probe_k`` In(3)
  (default 3); ``plane_up`` In(8) (default all up).
* Counters Out(32): ``stat_probes``, ``stat_answers``, ``stat_unanswered``, ``stat_restores``,
  ``stat_stale_answers``. ``scan_ptr`` (Python attribute, not a port): the entry the scan looks at in
  this cycle (qp * N + slot), for white-box tests.

Timing. One operation per cycle, priority watch > unwatch > answer > scan step; nothing is taken while
``probe`` or ``restore`` holds a record (registered outputs, valid the cycle after the decision), so a
decision that emits costs 2 cycles with the consumer ready. Worst-case delay from "due" (or timed out)
to the decision: one scan pass, Q * N cycles, plus one cycle per input taken and per cycle an output
waits meanwhile. Times compare serially (differences below 2^31 cycles).
"""

from amaranth import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..rx.feedback_decoder import FeedbackKind, feedback_packet_layout
from .layouts import FeedbackEvent, bits_for, feedback_layout

__all__ = ["STATS", "Prober", "entry_layout", "probe_layout", "unwatch_layout", "watch_layout"]

STATS = ("probes", "answers", "unanswered", "restores", "stale_answers")


def watch_layout(qps: int, ev_slots: int) -> data.StructLayout:
    return data.StructLayout({"qp": bits_for(qps), "slot": bits_for(ev_slots), "ev": 32})


def unwatch_layout(qps: int, ev_slots: int) -> data.StructLayout:
    return data.StructLayout({"qp": bits_for(qps), "slot": bits_for(ev_slots)})


def probe_layout(qps: int, ev_slots: int) -> data.StructLayout:
    return data.StructLayout({"qp": bits_for(qps), "slot": bits_for(ev_slots), "ev": 32, "probe_id": 16})


def entry_layout() -> data.StructLayout:
    return data.StructLayout(
        {
            "active": 1,
            "ev": 32,
            "due": 32,  # next probe time (when nothing is outstanding)
            "interval": 32,
            "streak": 3,
            "outstanding": 1,
            "probe_id": 16,
            "sent_at": 32,
            "last_skip_once": 1,
        }
    )


class Prober(wiring.Component):
    def __init__(self, *, qps: int = 4, ev_slots: int = 8):
        self.qps = qps
        self.ev_slots = ev_slots
        super().__init__(
            {
                "watch": In(stream.Signature(watch_layout(qps, ev_slots))),
                "unwatch": In(stream.Signature(unwatch_layout(qps, ev_slots))),
                "answer": In(stream.Signature(feedback_packet_layout(qps))),
                "probe": Out(stream.Signature(probe_layout(qps, ev_slots))),
                "restore": Out(stream.Signature(feedback_layout(qps, ev_slots))),
                "restore_skip": Out(1),
                "plane_up": In(8, init=0xFF),
                "now": In(32),
                "probe_interval": In(32, init=5000),
                "probe_interval_max": In(32, init=250000),
                "rto": In(32, init=25000),
                "probe_k": In(3, init=3),
                **{f"stat_{name}": Out(32) for name in STATS},
            }
        )
        self.scan_ptr = Signal(range(qps * ev_slots), name="scan_ptr")

    def elaborate(self, platform):
        m = Module()
        Q, N = self.qps, self.ev_slots
        st = Signal(data.ArrayLayout(entry_layout(), Q * N))
        ctr = Signal(data.ArrayLayout(16, Q))
        now = self.now

        # registered outputs: valid drops when taken
        pending = self.probe.valid | self.restore.valid
        with m.If(self.probe.ready):
            m.d.sync += self.probe.valid.eq(0)
        with m.If(self.restore.ready):
            m.d.sync += self.restore.valid.eq(0)

        def bump(name):
            c = getattr(self, f"stat_{name}")
            m.d.sync += c.eq(c + 1)

        def doubled(interval):
            x = interval << 1  # 33 bits: no wrap before the clamp
            return Mux(x > self.probe_interval_max, self.probe_interval_max, x)

        def back_off(idx, e):
            """Unanswered probe or M = ALWAYS_SKIP: streak 0, interval doubles, next probe later."""
            iv = Signal(32)
            m.d.comb += iv.eq(doubled(e.interval))
            m.d.sync += [
                st[idx].outstanding.eq(0),
                st[idx].streak.eq(0),
                st[idx].interval.eq(iv),
                st[idx].due.eq(now + iv),
            ]

        # scan position, kept as (qp, slot) so N need not be a power of two
        sq = Signal(range(Q))
        ss = Signal(range(N))
        sp = self.scan_ptr
        m.d.comb += sp.eq(sq * N + ss)

        w, u, a = self.watch.payload, self.unwatch.payload, self.answer.payload
        with m.If(pending):
            pass
        with m.Elif(self.watch.valid):
            m.d.comb += self.watch.ready.eq(1)
            with m.If((w.qp < Q) & (w.slot < N)):
                i = w.qp * N + w.slot
                m.d.sync += [
                    st[i].active.eq(1),
                    st[i].ev.eq(w.ev),
                    st[i].due.eq(now + self.probe_interval),
                    st[i].interval.eq(self.probe_interval),
                    st[i].streak.eq(0),
                    st[i].outstanding.eq(0),
                    st[i].last_skip_once.eq(0),
                ]
        with m.Elif(self.unwatch.valid):
            m.d.comb += self.unwatch.ready.eq(1)
            with m.If((u.qp < Q) & (u.slot < N)):
                i = u.qp * N + u.slot
                m.d.sync += [st[i].active.eq(0), st[i].outstanding.eq(0)]
        with m.Elif(self.answer.valid):
            m.d.comb += self.answer.ready.eq(1)
            with m.If((a.kind == FeedbackKind.SACK) & a.probe_answer):
                hits = []
                for s in range(N):
                    e = st[a.qp * N + s]
                    hit = Signal(name=f"hit{s}")
                    m.d.comb += hit.eq((a.qp < Q) & e.active & e.outstanding & (e.probe_id == a.probe_id))
                    hits.append(hit)
                for s in range(N):
                    i = a.qp * N + s
                    e = st[i]
                    with (m.If if s == 0 else m.Elif)(hits[s]):
                        bump("answers")
                        with m.If(a.has_path_event & (a.path_event == FeedbackEvent.LOSS)):
                            back_off(i, e)
                        with m.Else():
                            skip = a.has_path_event & (a.path_event == FeedbackEvent.ECN)
                            streak = Signal(4, name=f"streak{s}")
                            m.d.comb += streak.eq(e.streak + 1)
                            with m.If(streak >= Mux(self.probe_k == 0, 1, self.probe_k)):
                                m.d.sync += [
                                    st[i].active.eq(0),
                                    st[i].outstanding.eq(0),
                                    self.restore.valid.eq(1),
                                    self.restore.payload.qp.eq(a.qp),
                                    self.restore.payload.slot.eq(s),
                                    self.restore.payload.ev.eq(e.ev),
                                    self.restore.payload.event.eq(FeedbackEvent.PROBE_OK),
                                    self.restore_skip.eq(skip),
                                ]
                                bump("restores")
                            with m.Else():
                                m.d.sync += [
                                    st[i].outstanding.eq(0),
                                    st[i].streak.eq(streak),
                                    st[i].interval.eq(self.probe_interval),
                                    st[i].due.eq(now + self.probe_interval),
                                    st[i].last_skip_once.eq(skip),
                                ]
                with m.Else():
                    bump("stale_answers")
        with m.Else():
            # one scan step on entry sp
            e = st[sp]
            timed_out = e.active & e.outstanding & ((now - e.sent_at)[:32] >= self.rto)
            due = (
                e.active
                & ~e.outstanding
                & self.plane_up.bit_select(e.ev[29:32], 1)
                & ((now - e.due)[:32].as_signed() >= 0)
            )
            with m.If(timed_out):
                back_off(sp, e)
                bump("unanswered")
            with m.Elif(due):
                m.d.sync += [
                    st[sp].outstanding.eq(1),
                    st[sp].probe_id.eq(ctr[sq]),
                    st[sp].sent_at.eq(now),
                    ctr[sq].eq(ctr[sq] + 1),
                    self.probe.valid.eq(1),
                    self.probe.payload.qp.eq(sq),
                    self.probe.payload.slot.eq(ss),
                    self.probe.payload.ev.eq(e.ev),
                    self.probe.payload.probe_id.eq(ctr[sq]),
                ]
                bump("probes")
            with m.If(ss == N - 1):
                m.d.sync += [ss.eq(0), sq.eq(Mux(sq == Q - 1, 0, sq + 1))]
            with m.Else():
                m.d.sync += ss.eq(ss + 1)
        return m
