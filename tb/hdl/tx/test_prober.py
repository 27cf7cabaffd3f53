"""Reliability prober (hdl/tx/prober.py) in the Amaranth simulator: directed cases and a Python reference.

Probe targets: slots (below ``ev_slots``) and reserve entries (``ev_slots`` .. ``targets`` - 1) are
handled alike; the restore record names the target and says PROBE_OK_SKIP when the last answer had M =
SKIP_ONCE.

``now`` and ``plane_up`` change only between commands; after each change the bench waits until the
block has scanned a whole pass with no output pending. At a fixed ``now`` every entry acts at most once
(a timeout or an answer moves ``due`` into the future), and commands never make anything due, so the
reference replays one pass from the scan pointer the block had when the time changed and every output
stream (in order) and every counter is compared exactly. Outputs are drained with random stalls; the
seed is printed (``SEED=<n>`` reproduces).
"""

import os
import random

import pytest

from mrcnic.hdl.rx.feedback_decoder import FeedbackKind
from mrcnic.hdl.tx.layouts import FeedbackEvent as Ev
from mrcnic.hdl.tx.prober import STATS, Prober

from support.pysim import run, stream_put

M32 = (1 << 32) - 1
PI, PMAX, RTO, K = 50, 400, 120, 3


def _seed():
    seed = int(os.environ.get("SEED", random.randrange(1 << 32)))
    print(f"SEED={seed}")
    return seed


def make_ev(plane, salt):
    return (plane << 29) | salt


class Reference:
    """The prober's rules, entry by entry, in the block's scan order."""

    def __init__(self, qps, n, pi=PI, pmax=PMAX, rto=RTO, k=K):
        self.Q, self.N = qps, n
        self.pi, self.pmax, self.rto, self.k = pi, pmax, rto, k
        self.e = [
            dict(active=0, ev=0, due=0, iv=0, streak=0, out=0, pid=0, sent=0, skip=0) for _ in range(qps * n)
        ]
        self.ctr = [0] * qps
        self.probes, self.restores = [], []
        self.stats = dict.fromkeys(STATS, 0)

    def watch(self, now, q, s, ev):
        self.e[q * self.N + s].update(
            active=1, ev=ev, due=(now + self.pi) & M32, iv=self.pi, streak=0, out=0, skip=0
        )

    def unwatch(self, q, s):
        self.e[q * self.N + s].update(active=0, out=0)

    def _back_off(self, now, e):
        e["iv"] = min(2 * e["iv"], self.pmax)
        e.update(out=0, streak=0, due=(now + e["iv"]) & M32)

    def answer(self, now, q, pid, m):
        for s in range(self.N):
            e = self.e[q * self.N + s]
            if e["active"] and e["out"] and e["pid"] == pid:
                break
        else:
            self.stats["stale_answers"] += 1
            return
        self.stats["answers"] += 1
        if m == "always":
            self._back_off(now, e)
            return
        e.update(out=0, streak=e["streak"] + 1, iv=self.pi, due=(now + self.pi) & M32, skip=int(m == "once"))
        if e["streak"] >= max(1, self.k):
            e["active"] = 0
            self.restores.append((q, s, e["ev"], e["skip"]))
            self.stats["restores"] += 1

    def scan_pass(self, now, planes, sp):
        for j in range(self.Q * self.N):
            i = (sp + j) % (self.Q * self.N)
            e = self.e[i]
            q, s = divmod(i, self.N)
            if e["active"] and e["out"] and ((now - e["sent"]) & M32) >= self.rto:
                self._back_off(now, e)
                self.stats["unanswered"] += 1
            elif (
                e["active"]
                and not e["out"]
                and planes >> (e["ev"] >> 29) & 1
                and ((now - e["due"]) & M32) < (1 << 31)
            ):
                e.update(out=1, pid=self.ctr[q], sent=now)
                self.probes.append((q, s, e["ev"], self.ctr[q]))
                self.ctr[q] = (self.ctr[q] + 1) & 0xFFFF
                self.stats["probes"] += 1


class Bench:
    """Drives one Prober; ``probes``/``restores`` collect the outputs (drained by ``drain``)."""

    def __init__(self, dut, rng, stall=0.3):
        self.dut, self.rng, self.stall = dut, rng, stall
        self.probes, self.restores = [], []
        self.done = False
        self.ctx = None

    def benches(self, body):
        async def drain(ctx):
            while not self.done:
                take = self.rng.random() >= self.stall
                ctx.set(self.dut.probe.ready, take)
                ctx.set(self.dut.restore.ready, take)
                pv, p = ctx.get(self.dut.probe.valid), ctx.get(self.dut.probe.payload)
                rv, r = ctx.get(self.dut.restore.valid), ctx.get(self.dut.restore.payload)
                await ctx.tick()
                if take and pv:
                    self.probes.append((p.qp, p.target, p.ev, p.probe_id))
                if take and rv:
                    assert r.event in (Ev.PROBE_OK, Ev.PROBE_OK_SKIP)
                    self.restores.append((r.qp, r.slot, r.ev, int(r.event == Ev.PROBE_OK_SKIP)))

        async def main(ctx):
            self.ctx = ctx
            await body(self)
            await self.settle()
            self.done = True

        return main, drain

    async def settle(self):
        """Wait until a whole scan pass ran with no output pending."""
        ctx, dut, quiet = self.ctx, self.dut, 0
        while quiet < dut.qps * dut.targets + 2:
            busy = ctx.get(dut.probe.valid) or ctx.get(dut.restore.valid)
            quiet = 0 if busy else quiet + 1
            await ctx.tick()

    async def set_time(self, now, planes=0xFF):
        """New ``now`` / ``plane_up``; returns the scan pointer the first scan step sees them at."""
        await self.settle()
        self.ctx.set(self.dut.now, now)
        self.ctx.set(self.dut.plane_up, planes)
        sp = self.ctx.get(self.dut.scan_ptr)
        await self.settle()
        return sp

    async def watch(self, q, t, ev):
        await stream_put(self.ctx, self.dut.watch, {"qp": q, "target": t, "ev": ev}, stall=0.3, rng=self.rng)

    async def unwatch(self, q, t):
        await stream_put(self.ctx, self.dut.unwatch, {"qp": q, "target": t}, stall=0.3, rng=self.rng)

    async def answer(self, q, pid, m="none", kind=FeedbackKind.SACK, pr=1):
        f = {"qp": q, "kind": kind, "probe_answer": pr, "probe_id": pid, "ev": self.rng.randrange(1 << 32)}
        if m == "once":
            f.update(has_path_event=1, path_event=Ev.ECN)
        elif m == "always":
            f.update(has_path_event=1, path_event=Ev.LOSS)
        await stream_put(self.ctx, self.dut.answer, f, stall=0.3, rng=self.rng)
        await self.ctx.tick().repeat(2)  # the restore (if any) is loaded before the next command

    def stats(self):
        return {k: self.ctx.get(getattr(self.dut, f"stat_{k}")) for k in STATS}


def _dut(qps=2, n=3, targets=None):
    return Prober(qps=qps, ev_slots=n, targets=targets)


def _run(dut, rng, body, name):
    b = Bench(dut, rng)

    async def with_regs(bench):
        ctx = bench.ctx
        ctx.set(dut.probe_interval, PI)
        ctx.set(dut.probe_interval_max, PMAX)
        ctx.set(dut.rto, RTO)
        ctx.set(dut.probe_k, K)
        await body(bench)

    run(dut, *b.benches(with_regs), name=name)
    return b


@pytest.mark.parametrize("targets, target", [(None, 2), (6, 5)], ids=["slot", "reserve"])
@pytest.mark.parametrize("last, skip", [("none", 0), ("once", 1)])
def test_k_answers_restore_with_skip(last, skip, targets, target):
    """A restore names the target (a slot, or a reserve entry >= ev_slots); PROBE_OK_SKIP after M =
    SKIP_ONCE in the last answer."""
    rng = random.Random(_seed())
    dut = _dut(targets=targets)
    ev = make_ev(1, 0x1234)
    seen = {}

    async def body(b):
        await b.set_time(1000)
        await b.watch(1, target, ev)
        await b.set_time(1000 + PI - 1)
        assert b.probes == []
        ms = ["once", "none", last]  # an early SKIP_ONCE does not matter, only the last answer
        for i, m in enumerate(ms):
            t = 1000 + PI * (i + 1)
            await b.set_time(t)
            assert b.probes[-1] == (1, target, ev, i), b.probes
            await b.answer(1, i, m)
            if i < K - 1:
                assert b.restores == []
        await b.settle()
        seen.update(b.stats())

    b = _run(dut, rng, body, "prober_restore")
    assert b.restores == [(1, target, ev, skip)]
    assert seen == dict(probes=3, answers=3, unanswered=0, restores=1, stale_answers=0)


def test_always_skip_resets_streak_and_wrong_ids_are_stale():
    rng = random.Random(_seed())
    dut = _dut()
    ev = make_ev(0, 7)
    seen = {}

    async def body(b):
        t = 0
        await b.set_time(t)
        await b.watch(0, 0, ev)
        t += PI
        await b.set_time(t)
        await b.answer(0, 0, "none")  # streak 1
        await b.answer(0, 0, "none")  # same id again: nothing outstanding any more -> stale
        t += PI
        await b.set_time(t)
        await b.answer(1, 1, "none")  # right id, wrong QP -> stale
        await b.answer(0, 5, "none")  # wrong id -> stale
        await b.answer(0, 1, "none", pr=0)  # not a probe answer: ignored
        await b.answer(0, 1, "none", kind=FeedbackKind.NACK)  # ignored
        await b.answer(0, 1, "always")  # streak 0, interval 2 * PI
        t += 2 * PI - 1
        await b.set_time(t)
        assert len(b.probes) == 2
        t += 1
        await b.set_time(t)
        assert b.probes[-1] == (0, 0, ev, 2)
        for pid in (2, 3):
            await b.answer(0, pid, "none")
            t += PI
            await b.set_time(t)
        assert b.restores == []  # only 2 in a row since the ALWAYS_SKIP
        await b.answer(0, 4, "none")
        await b.settle()
        seen.update(b.stats())

    b = _run(dut, rng, body, "prober_always_skip")
    assert b.restores == [(0, 0, ev, 0)]
    assert seen == dict(probes=5, answers=5, unanswered=0, restores=1, stale_answers=3)


def test_unanswered_doubles_interval_up_to_max():
    rng = random.Random(_seed())
    dut = _dut()
    ev = make_ev(3, 99)
    times = []

    async def body(b):
        await b.set_time(0)
        await b.watch(0, 1, ev)
        # next probe at sent + RTO (timeout) + interval, interval = PI * 2^i capped at PMAX
        expect, iv = [PI], PI
        for _ in range(6):
            iv = min(2 * iv, PMAX)
            expect.append(expect[-1] + RTO + iv)
        for i, t in enumerate(expect):
            await b.set_time(t - 1)
            assert len(b.probes) == i, (t, b.probes)
            await b.set_time(t)
            assert len(b.probes) == i + 1, (t, b.probes)
            assert b.probes[-1] == (0, 1, ev, i)
            times.append(t)
            if i < len(expect) - 1:
                await b.set_time(t + RTO - 1)
                assert b.stats()["unanswered"] == i
                await b.set_time(t + RTO)  # lost now: next probe one (doubled) interval later
                assert b.stats()["unanswered"] == i + 1
        assert b.stats()["unanswered"] == len(expect) - 1

    _run(dut, rng, body, "prober_backoff")
    gaps = [b - a - RTO for a, b in zip(times, times[1:], strict=False)]
    assert gaps == [100, 200, 400, 400, 400, 400]


def test_down_plane_is_not_probed_and_unwatch_stops():
    rng = random.Random(_seed())
    dut = _dut()
    up_ev, down_ev = make_ev(0, 1), make_ev(5, 2)

    async def body(b):
        await b.set_time(0, planes=0xFF & ~(1 << 5))
        await b.watch(0, 0, up_ev)
        await b.watch(1, 1, down_ev)
        await b.set_time(10 * PI, planes=0xFF & ~(1 << 5))
        assert b.probes == [(0, 0, up_ev, 0)]
        await b.set_time(20 * PI, planes=0xFF & ~(1 << 5))  # probe (0,0) timed out meanwhile
        assert len(b.probes) == 1 and b.stats()["unanswered"] == 1
        await b.unwatch(0, 0)
        await b.set_time(40 * PI, planes=0xFF)  # plane 5 up: the waiting probe goes at once
        assert b.probes == [(0, 0, up_ev, 0), (1, 1, down_ev, 0)]
        await b.unwatch(1, 1)
        await b.answer(1, 0, "none")  # unwatched: stale
        await b.set_time(100 * PI)
        assert len(b.probes) == 2
        assert b.stats() == dict(probes=2, answers=0, unanswered=1, restores=0, stale_answers=1)

    _run(dut, rng, body, "prober_planes")


@pytest.mark.parametrize(
    "qps, ev_slots, n, steps", [(2, 3, 3, 1400), (3, 4, 4, 1400), (2, 4, 7, 700), (1, 1, 1, 8000)]
)
def test_against_reference(qps, ev_slots, n, steps):
    """``n`` probe targets per QP (the third case: 4 slots and 3 reserve entries; the last: a single
    entry, so the scan writes and reads the same memory row in every cycle, and more steps so that k
    answers in a row, a restore, happen too; the first two cases also run longer for that reason)."""
    seed = _seed()
    rng = random.Random(seed)
    dut = _dut(qps, ev_slots, n)
    ref = Reference(qps, n)
    final = {}

    async def body(b):
        now, planes = 0, 0xFF
        await b.set_time(now, planes)
        for _ in range(steps):
            op = rng.choices(["time", "watch", "unwatch", "answer"], [30, 8, 2, 30])[0]
            if op == "time":
                step = rng.choices(
                    [1, rng.randrange(PI), rng.randrange(2 * PI), rng.randrange(3 * RTO)], [2, 4, 4, 1]
                )
                now = (now + step[0]) & M32
                if rng.random() < 0.15:
                    planes ^= 1 << rng.randrange(4)
                sp = await b.set_time(now, planes)
                ref.scan_pass(now, planes, sp)
            elif op == "watch":
                q, s = rng.randrange(qps), rng.randrange(n)
                ev = make_ev(rng.randrange(4), rng.randrange(1 << 21))
                await b.watch(q, s, ev)
                ref.watch(now, q, s, ev)
            elif op == "unwatch":
                q, s = rng.randrange(qps), rng.randrange(n)
                await b.unwatch(q, s)
                ref.unwatch(q, s)
            else:
                q = rng.randrange(qps)
                outs = [e["pid"] for e in ref.e[q * n : (q + 1) * n] if e["active"] and e["out"]]
                if outs and rng.random() < 0.9:
                    pid = rng.choice(outs)
                else:
                    pid = (ref.ctr[q] - rng.randrange(1, 4)) & 0xFFFF  # an old or never-sent id
                m = rng.choices(["none", "once", "always"], [6, 3, 1])[0]
                await b.answer(q, pid, m)
                ref.answer(now, q, pid, m)
            await b.settle()
            assert b.probes == ref.probes
            assert b.restores == ref.restores
        await b.settle()
        final.update(b.stats())

    b = _run(dut, rng, body, f"prober_ref_{qps}_{ev_slots}_{n}")
    assert b.probes == ref.probes and b.restores == ref.restores
    assert final == ref.stats
    print(final)
    # The run must have exercised every path. The rarest, restores (K answers in a row), came 4 to 26
    # times in 6 to 7 seeds of each case before the second and the last ran twice as long.
    assert all(final[k] > 0 for k in STATS), f"seed {seed}: {final}"


async def _offer(ctx, stream, payload):
    """Offer ``payload`` from this cycle on; returns the cycles until it is taken (1: taken at once)."""
    ctx.set(stream.payload, payload)
    ctx.set(stream.valid, 1)
    n = 1
    while not ctx.get(stream.ready):
        await ctx.tick()
        n += 1
    await ctx.tick()
    ctx.set(stream.valid, 0)
    return n


@pytest.mark.parametrize("target", [0, 2, 4, None], ids=["t0", "t2", "t4", "stale"])
def test_timing(target):
    """The documented costs: watch / unwatch 1 cycle, an answer (the walk over the QP's entries)
    target + 2 cycles when it matches, T + 1 when it does not, 1 when it is not a probe answer; the scan
    steps one entry per cycle and goes on in the cycle after a walk; no input is taken during a walk."""
    rng = random.Random(_seed())
    Q, T = 2, 5
    dut = _dut(Q, 3, T)
    ev = make_ev(2, 5)
    costs = {}

    async def body(b):
        ctx = b.ctx
        b.stall = 0.0  # the consumer is always ready: a probe holds the block for its one cycle
        for q, t in [(1, 0), (1, 2), (1, 4), (0, 1)]:
            costs.setdefault("watch", set()).add(
                await _offer(ctx, dut.watch, {"qp": q, "target": t, "ev": ev})
            )
        await b.set_time(PI)
        assert len(b.probes) == 4  # probe ids: 0, 1, 2 for QP 1 (targets 0, 2, 4), 0 for QP 0
        ids = {t: pid for q, t, _, pid in b.probes if q == 1}
        # the scan: one entry per cycle, in order
        sp = ctx.get(dut.scan_ptr)
        for _ in range(2 * Q * T):
            await ctx.tick()
            sp = (sp + 1) % (Q * T)
            assert ctx.get(dut.scan_ptr) == sp
        # an answer walks the QP's entries; a watch offered meanwhile waits for the decision
        pid = ids[target] if target is not None else 7
        sp = ctx.get(dut.scan_ptr)
        f = {"qp": 1, "kind": FeedbackKind.SACK, "probe_answer": 1, "probe_id": pid}
        f.update(has_path_event=1, path_event=Ev.LOSS)  # backs off: no restore record
        ctx.set(dut.answer.payload, f)
        ctx.set(dut.answer.valid, 1)
        n = 1
        while not ctx.get(dut.answer.ready):
            assert ctx.get(dut.scan_ptr) == sp  # no scan step during the walk
            await ctx.tick()
            n += 1
            ctx.set(dut.watch.payload, {"qp": 0, "target": 3, "ev": ev})
            ctx.set(dut.watch.valid, 1)
            assert not ctx.get(dut.watch.ready) or ctx.get(dut.answer.ready)
        assert not ctx.get(dut.watch.ready)
        costs["answer"] = n
        await ctx.tick()
        ctx.set(dut.answer.valid, 0)
        assert ctx.get(dut.watch.ready)  # taken in the cycle after the decision
        await ctx.tick()
        ctx.set(dut.watch.valid, 0)
        assert ctx.get(dut.scan_ptr) == sp
        await ctx.tick()  # the scan goes on at once: the decision cycle read its row
        assert ctx.get(dut.scan_ptr) == (sp + 1) % (Q * T)
        costs["unwatch"] = await _offer(ctx, dut.unwatch, {"qp": 0, "target": 3})
        f = {"qp": 1, "kind": FeedbackKind.NACK, "probe_answer": 1, "probe_id": pid}
        costs["other"] = await _offer(ctx, dut.answer, f)
        await b.settle()
        costs["stats"] = b.stats()

    _run(dut, rng, body, "prober_timing")
    walk = T + 1 if target is None else target + 2
    assert {k: costs[k] for k in ("watch", "unwatch", "answer", "other")} == dict(
        watch={1}, unwatch=1, answer=walk, other=1
    )
    hit = int(target is not None)
    assert costs["stats"] == dict(probes=4, answers=hit, unanswered=0, restores=0, stale_answers=1 - hit)


def test_verilog_and_defaults():
    from amaranth.back import verilog

    dut = Prober(qps=4, ev_slots=8)
    assert dut.targets == 8
    text = verilog.convert(dut, name="prober")
    assert "module prober" in text
    assert "restore_skip" not in text
    text = verilog.convert(Prober(qps=2, ev_slots=8, targets=16), name="prober")
    assert "probe__payload" in text
    # the entries are in a memory, not in registers: the Verilog stays small (2.1 MB with registers)
    text = verilog.convert(Prober(qps=4, ev_slots=16, targets=24), name="prober", emit_src=False)
    assert len(text) < 150_000, len(text)
    for bad in (0, 17):
        with pytest.raises(ValueError):
            Prober(qps=2, ev_slots=8, targets=bad)
    assert dut.probe_interval.init == 5000 and dut.probe_interval_max.init == 250000
    assert dut.probe_k.init == 3 and dut.plane_up.init == 0xFF
