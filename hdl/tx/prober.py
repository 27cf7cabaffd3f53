"""Reliability prober: schedules PETH probes for ASSUMED_BAD EVs (probe targets) and restores them after k
answers.

Ref: docs/protocol.md §6.4 (ASSUMED_BAD -> GOOD after ``probe_k`` answered probes, skip 1 if the last
answer had M = SKIP_ONCE; an EV restored from the probe list goes back to the backups), §7.8 (what is
probed: every ASSUMED_BAD EV, in a slot or on the probe list; timing, restore, probe ids), §5.1 (plane =
EV[31:29]), §5.8 (the answer comes back on the reverse of the probed path).

Parameters: ``qps`` (Q), ``ev_slots`` (N), ``targets`` (T, default N, at most 2N): the probe targets
per QP, numbered as in :class:`~mrcnic.hdl.tx.path_selector.PathSelector`: slot s is target s, reserve
entry (plane p, index b) is target N + p * B + b, so the pipeline passes T = N + P * B. State:
``{active, ev, at, interval, streak, outstanding, probe_id, last_skip_once}`` per (QP, target)
(:func:`entry_layout`), and a 16-bit probe id counter per QP (+1 per probe, modulo 2^16) in registers.
The ``active`` bits are a Q * T-bit register vector; the rest of an entry is a row of an
``amaranth.lib.memory.Memory`` (:func:`word_layout`, depth Q * T, row qp * T + target; one synchronous
read port, not transparent: see "Scan" below). The row of an inactive entry is don't-care (a watch
writes the whole row), so reset leaves every entry inactive with no clear pass.

Members.

* ``watch``: In stream :func:`watch_layout` ``{qp, target, ev}``: ``ev`` became ASSUMED_BAD in that
  slot, or went to the probe list in that reserve entry. The entry (re)starts for ``ev``: at = now +
  probe_interval, interval = probe_interval, streak 0, nothing outstanding (an answer to a probe of the
  previous EV is then stale). Out-of-range qp/target: ignored.
* ``unwatch``: In stream :func:`unwatch_layout` ``{qp, target}``: stop probing the target.
* ``answer``: In stream :func:`~mrcnic.hdl.rx.feedback_decoder.feedback_packet_layout`. Only SACKs with
  ``probe_answer`` = 1 matter (others are taken and ignored). Matched to the active entry of that QP
  with a probe outstanding and the same ``probe_id`` (lowest target first). Matched: ``stat_answers`` +=
  1, nothing outstanding any more, and

  - M = ALWAYS_SKIP (``path_event`` LOSS): streak 0, interval = min(2 * interval, probe_interval_max),
    at = now + interval;
  - otherwise streak += 1, interval = probe_interval, at = now + interval, last_skip_once = (M =
    SKIP_ONCE); when the streak reaches ``probe_k`` (0 is taken as 1): one ``restore`` record
    {qp, slot = target, ev, event}, event = PROBE_OK_SKIP if this last answer had M = SKIP_ONCE, else
    PROBE_OK; ``stat_restores`` += 1, and the entry stops.

  Not matched: ``stat_stale_answers`` += 1.
* Background scan, one entry per cycle (qp-major), when no input is taken and no output is pending:

  - an outstanding probe whose deadline has come (now >= at, serially) is unanswered: streak 0,
    interval doubles (<= max), at = now + interval, ``stat_unanswered`` += 1;
  - otherwise an active entry with nothing outstanding, now >= at (serially) and its plane up
    (``plane_up`` bit EV[31:29]) sends a probe: ``probe`` {qp, target, ev, probe_id = counter}, counter
    += 1, outstanding, at = now + ``rto`` (the answer's deadline), ``stat_probes`` += 1. A down plane
    only delays the probe.

  One field ``at`` serves both waits (the next probe, the answer), so each scan step makes one time
  comparison and every write one sum ``now + offset``. The ``rto`` in force when a probe is sent is the
  one its answer is held to.

* ``probe``: Out stream :func:`probe_layout` (the TX side builds the PETH packet from it).
* ``restore``: Out stream :func:`~mrcnic.hdl.tx.layouts.feedback_layout` ``(qps, ev_slots)`` (to
  ``PathSelector.feedback``; its ``slot`` field is a probe target).
* Registers, in cycles: ``now``, ``probe_interval`` (default 5000 = 20 µs at 250 MHz),
  ``probe_interval_max`` (default 250000 = 1 ms), ``rto`` (default 25000 = 100 µs); ``probe_k`` In(3)
  (default 3); ``plane_up`` In(8) (default all up).
* Counters Out(32): ``stat_probes``, ``stat_answers``, ``stat_unanswered``, ``stat_restores``,
  ``stat_stale_answers``. ``scan_ptr`` (Python attribute, not a port, a register): the entry the next
  scan step decides (qp * T + target; a step in this cycle sees this cycle's ``now``), for white-box
  tests.

Timing (measured in the Amaranth simulator, ``test_timing``). Priority watch > unwatch > answer > scan
step; while ``probe`` or ``restore`` holds a record (registered outputs, valid the cycle after the
decision) only ``watch`` and ``unwatch`` are taken (they make no output; the path selector that sends them
may be waiting, through the TX pipeline, for that very record to be taken), so a decision that emits
holds answers and the scan one more cycle with the consumer ready.

* ``watch`` (writes the whole row, sets ``active``), ``unwatch`` (clears ``active`` only), an answer that
  is not a probe answer or names a QP >= Q: 1 cycle, taken in the cycle offered.
* A probe answer walks the QP's T rows, lowest target first, one read per cycle (pipelined: row t + 1
  is read while row t is compared); a row matches when its ``active`` bit is set, it has a probe
  outstanding and the same probe id. The answer is taken in its decision cycle: t + 2 cycles from the
  first offer when it matches target t, T + 1 when it is stale. Meanwhile its payload stays offered (the
  stream rule) and nothing else is taken or scanned. (A linear walk, not an ``outstanding`` bit vector:
  one answer per probe, and only one register bit per entry.)
* Scan: one entry per cycle; row k + 1 is read while row k is decided and written. In every cycle that
  does not walk, the read port reads the row the next scan step decides. The read port is not
  transparent: when that cycle writes the same row (a watch, an answer's decision, or the step itself
  when Q * T = 1), the scan waits a cycle and reads it again, so the row it decides from is never stale
  (and the block RAM needs no read-during-write logic). The scan goes on in the cycle after a walk; after
  reset the first step is in the second
  cycle (its row is read in the first).

Worst-case delay from "due" (or timed out) to the decision: one scan pass, Q * T cycles, plus one cycle
per watch / unwatch / other answer taken, at most T + 1 per probe answer, and one per cycle an output
waits meanwhile. Times compare serially (differences below 2^31 cycles). Verilog for Q = 4, T = 24:
about 52 kB (2.1 MB with the entries in registers).
"""

from amaranth import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..rx.feedback_decoder import FeedbackKind, feedback_packet_layout
from ..tables import UNDEFINED_COLLISIONS
from .layouts import FeedbackEvent, bits_for, feedback_layout

__all__ = ["STATS", "Prober", "entry_layout", "probe_layout", "unwatch_layout", "watch_layout", "word_layout"]

STATS = ("probes", "answers", "unanswered", "restores", "stale_answers")


def watch_layout(qps: int, targets: int) -> data.StructLayout:
    return data.StructLayout({"qp": bits_for(qps), "target": bits_for(targets), "ev": 32})


def unwatch_layout(qps: int, targets: int) -> data.StructLayout:
    return data.StructLayout({"qp": bits_for(qps), "target": bits_for(targets)})


def probe_layout(qps: int, targets: int) -> data.StructLayout:
    return data.StructLayout({"qp": bits_for(qps), "target": bits_for(targets), "ev": 32, "probe_id": 16})


def entry_layout() -> data.StructLayout:
    return data.StructLayout(
        {
            "active": 1,
            "ev": 32,
            # nothing outstanding: the time of the next probe; a probe outstanding: its answer's deadline
            "at": 32,
            "interval": 32,
            "streak": 3,
            "outstanding": 1,
            "probe_id": 16,
            "last_skip_once": 1,
        }
    )


def word_layout() -> data.StructLayout:
    """One memory row: :func:`entry_layout` without ``active`` (kept in registers)."""
    return data.StructLayout({name: f.shape for name, f in entry_layout() if name != "active"})


class Prober(wiring.Component):
    def __init__(self, *, qps: int = 4, ev_slots: int = 8, targets: int | None = None):
        targets = ev_slots if targets is None else targets
        if not 1 <= targets <= 2 * ev_slots:  # a target must fit the feedback record's slot field
            self._MustUse__silence = True  # no "created but never used" warning for a rejected instance
            raise ValueError(f"targets must be 1 .. 2 * ev_slots = {2 * ev_slots}, not {targets}")
        self.qps, self.ev_slots, self.targets = qps, ev_slots, targets
        super().__init__(
            {
                "watch": In(stream.Signature(watch_layout(qps, targets))),
                "unwatch": In(stream.Signature(unwatch_layout(qps, targets))),
                "answer": In(stream.Signature(feedback_packet_layout(qps))),
                "probe": Out(stream.Signature(probe_layout(qps, targets))),
                "restore": Out(stream.Signature(feedback_layout(qps, ev_slots))),
                "plane_up": In(8, init=0xFF),
                "now": In(32),
                "probe_interval": In(32, init=5000),
                "probe_interval_max": In(32, init=250000),
                "rto": In(32, init=25000),
                "probe_k": In(3, init=3),
                **{f"stat_{name}": Out(32) for name in STATS},
            }
        )
        self.scan_ptr = Signal(range(qps * targets), name="scan_ptr")

    def elaborate(self, platform):
        m = Module()
        Q, T = self.qps, self.targets
        D = Q * T
        now = self.now

        # entry state: `active` bits in registers, the rest in memory (don't-care while inactive)
        active = Signal(D)
        ctr = Signal(data.ArrayLayout(16, Q))
        # Not transparent: a row written in the cycle it is read is read again (``sv`` below), so no
        # read-during-write is kept (a copy of the written row and a multiplexer after the block RAM).
        m.submodules.mem = mem = Memory(shape=word_layout(), depth=D, init=[], attrs=UNDEFINED_COLLISIONS)
        wp = mem.write_port()
        rp = mem.read_port()
        e = rp.data  # the row addressed in the previous cycle
        m.d.comb += wp.data.eq(e)  # read-modify-write: the fields set below change

        def write(addr, **fields):
            m.d.comb += [wp.en.eq(1), wp.addr.eq(addr)]
            m.d.comb += [getattr(wp.data, k).eq(v) for k, v in fields.items()]

        def set_active(addr, value):
            m.d.sync += active.bit_select(addr, 1).eq(value)

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

        # Every write that restarts a wait sets ``at`` to now + offset: one adder, its operand chosen.
        offset = Signal(32)
        later = Signal(32)
        m.d.comb += later.eq(now + offset)

        def wait(addr, after, **fields):
            m.d.comb += offset.eq(after)
            write(addr, at=later, **fields)

        def back_off(addr):
            """Unanswered probe or M = ALWAYS_SKIP: streak 0, interval doubles, next probe later."""
            iv = Signal(32)
            m.d.comb += iv.eq(doubled(e.interval))
            wait(addr, iv, outstanding=0, streak=0, interval=iv)

        # scan position, kept as (qp, target) and as the row sa = qp * T + target (no multiplier)
        sq = Signal(range(Q))
        ss = Signal(range(T))
        sa = self.scan_ptr
        sa_next = Signal.like(sa)
        m.d.comb += sa_next.eq(Mux(sa == D - 1, 0, sa + 1))
        sv = Signal()  # rp.data holds row sa, read in the previous cycle (a cycle that did not write it)
        # by default the read port reads the scan row, so the data stays fresh across any write
        m.d.comb += rp.addr.eq(sa)
        m.d.sync += sv.eq(1)

        # answer walk: row wa (target wt of the answer's QP) is on rp.data
        walking = Signal()
        wa = Signal(range(D))
        wt = Signal(range(T))

        w, u, a = self.watch.payload, self.unwatch.payload, self.answer.payload
        probe_answer = (a.kind == FeedbackKind.SACK) & a.probe_answer
        with m.If(walking):
            hit = Signal()
            m.d.comb += hit.eq(active.bit_select(wa, 1) & e.outstanding & (e.probe_id == a.probe_id))
            with m.If(hit | (wt == T - 1)):
                # decision: the answer is taken now; rp reads the scan row again (sa)
                m.d.comb += self.answer.ready.eq(1)
                m.d.sync += walking.eq(0)
                with m.If(hit):
                    bump("answers")
                    with m.If(a.has_path_event & (a.path_event == FeedbackEvent.LOSS)):
                        back_off(wa)
                    with m.Else():
                        skip = a.has_path_event & (a.path_event == FeedbackEvent.ECN)
                        streak = Signal(4)
                        m.d.comb += streak.eq(e.streak + 1)
                        with m.If(streak >= Mux(self.probe_k == 0, 1, self.probe_k)):
                            set_active(wa, 0)  # the row becomes don't-care: no write
                            m.d.sync += [
                                self.restore.valid.eq(1),
                                self.restore.payload.qp.eq(a.qp),
                                self.restore.payload.slot.eq(wt),
                                self.restore.payload.ev.eq(e.ev),
                                self.restore.payload.event.eq(
                                    Mux(skip, FeedbackEvent.PROBE_OK_SKIP, FeedbackEvent.PROBE_OK)
                                ),
                            ]
                            bump("restores")
                        with m.Else():
                            wait(
                                wa,
                                self.probe_interval,
                                outstanding=0,
                                streak=streak,
                                interval=self.probe_interval,
                                last_skip_once=skip,
                            )
                with m.Else():
                    bump("stale_answers")
            with m.Else():
                m.d.comb += rp.addr.eq(wa + 1)
                m.d.sync += [wa.eq(wa + 1), wt.eq(wt + 1), sv.eq(0)]
        # watch / unwatch make no output, so they are taken even while an output waits: the path selector
        # that sends them may itself be waiting (through the TX pipeline) for that output to be taken.
        with m.Elif(self.watch.valid):
            m.d.comb += self.watch.ready.eq(1)
            with m.If((w.qp < Q) & (w.target < T)):
                i = w.qp * T + w.target
                set_active(i, 1)
                wait(
                    i,
                    self.probe_interval,
                    ev=w.ev,
                    interval=self.probe_interval,
                    streak=0,
                    outstanding=0,
                    last_skip_once=0,
                )
        with m.Elif(self.unwatch.valid):
            m.d.comb += self.unwatch.ready.eq(1)
            with m.If((u.qp < Q) & (u.target < T)):
                set_active(u.qp * T + u.target, 0)
        with m.Elif(pending):
            pass
        with m.Elif(self.answer.valid):
            with m.If(probe_answer & (a.qp < Q)):
                # start the walk: read target 0 of the QP; the answer is taken at the decision
                m.d.comb += rp.addr.eq(a.qp * T)
                m.d.sync += [walking.eq(1), wa.eq(a.qp * T), wt.eq(0), sv.eq(0)]
            with m.Else():
                m.d.comb += self.answer.ready.eq(1)
                with m.If(probe_answer):
                    bump("stale_answers")
        with m.Elif(sv):
            # one scan step on row sa; rp reads the next row meanwhile
            act = active.bit_select(sa, 1)
            come = (now - e.at)[:32].as_signed() >= 0
            timed_out = act & e.outstanding & come
            due = act & ~e.outstanding & self.plane_up.bit_select(e.ev[29:32], 1) & come
            with m.If(timed_out):
                back_off(sa)
                bump("unanswered")
            with m.Elif(due):
                wait(sa, self.rto, outstanding=1, probe_id=ctr[sq])
                m.d.sync += [
                    ctr[sq].eq(ctr[sq] + 1),
                    self.probe.valid.eq(1),
                    self.probe.payload.qp.eq(sq),
                    self.probe.payload.target.eq(ss),
                    self.probe.payload.ev.eq(e.ev),
                    self.probe.payload.probe_id.eq(ctr[sq]),
                ]
                bump("probes")
            m.d.comb += rp.addr.eq(sa_next)
            m.d.sync += sa.eq(sa_next)
            with m.If(ss == T - 1):
                m.d.sync += [ss.eq(0), sq.eq(Mux(sq == Q - 1, 0, sq + 1))]
            with m.Else():
                m.d.sync += ss.eq(ss + 1)
        # The row read in a cycle that writes it is stale: the scan reads it again before using it (the
        # walk reads only in cycles without a write). Rare: a write is a watch, a probe or an answer.
        with m.If(wp.en & (wp.addr == rp.addr)):
            m.d.sync += sv.eq(0)
        return m
