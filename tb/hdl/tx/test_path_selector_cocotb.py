"""Path selector on Verilator (cocotb): the generated Verilog against the pure-Python reference of
``test_path_selector.py``: the §6.2 test vector, a random sequential mix of requests, feedback (probe
restores of slot and reserve targets included), slot and reserve configuration, reseeds and plane
patterns with random stalls, every ``watch`` record compared, and the table clear after a reset.
"""

import random

import cocotb
import pytest
from amaranth.hdl import Const
from amaranth.lib import data
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge
from test_path_selector import PROBE_OKS, VECTOR, Reference, slot_evs

from mrcnic.hdl.tx.layouts import FeedbackEvent as Ev
from mrcnic.hdl.tx.layouts import feedback_layout
from mrcnic.hdl.tx.path_selector import (
    STATS,
    EvState,
    PathSelector,
    configure_layout,
    request_layout,
    reserve_configure_layout,
    response_layout,
    seed_layout,
    watch_layout,
)
from mrcnic.wire import make_ev

from support.cocotb_runner import dut_params, run_cocotb

CLOCK_NS = 10


class Driver:
    """Stream transfers on the Verilog ports. Inputs change just after a rising edge; handshakes are
    sampled at the falling edge, when everything has settled."""

    def __init__(self, dut, qps, n, planes, backups, rng, stall=0.3):
        self.dut, self.rng, self.stall = dut, rng, stall
        self.watch_layout = watch_layout(qps, n)
        self.watched = []
        self.layouts = {
            "configure": configure_layout(qps, n),
            "reserve_configure": reserve_configure_layout(qps, planes, backups),
            "seed": seed_layout(qps),
            "feedback": feedback_layout(qps, n),
            "request": request_layout(qps, n),
        }
        self.response_layout = response_layout(qps, n, planes)

    def port(self, name):
        return getattr(self.dut, name)

    async def idle(self, cycles=1):
        for _ in range(cycles):
            await RisingEdge(self.dut.clk)

    async def put(self, name, payload):
        while self.rng.random() < self.stall:
            await self.idle()
        self.port(f"{name}__payload").value = Const.cast(self.layouts[name].const(payload)).value
        self.port(f"{name}__valid").value = 1
        while True:
            await FallingEdge(self.dut.clk)
            taken = int(self.port(f"{name}__ready").value)
            await RisingEdge(self.dut.clk)
            if taken:
                break
        self.port(f"{name}__valid").value = 0

    async def get(self):
        while self.rng.random() < self.stall:
            await self.idle()
        self.dut.response__ready.value = 1
        while True:
            await FallingEdge(self.dut.clk)
            valid = int(self.dut.response__valid.value)
            raw = int(self.dut.response__payload.value)
            await RisingEdge(self.dut.clk)
            if valid:
                break
        self.dut.response__ready.value = 0
        return data.Const(self.response_layout, raw)

    async def drain_watch(self):
        """Forever: take ``watch`` records (ready low a random 30 % of cycles) into ``watched``."""
        while True:
            self.dut.watch__ready.value = int(self.rng.random() >= 0.3)
            await FallingEdge(self.dut.clk)
            if int(self.dut.watch__valid.value) and int(self.dut.watch__ready.value):
                w = data.Const(self.watch_layout, int(self.dut.watch__payload.value))
                self.watched.append((w.qp, w.target, w.ev, w.start))
            await RisingEdge(self.dut.clk)

    async def choose(self, qp, avoid=None):
        await self.put("request", {"qp": qp, "avoid_slot": avoid or 0, "avoid_valid": avoid is not None})
        return await self.get()

    async def stats(self):
        await self.idle(3)
        return {name: int(getattr(self.dut, f"stat_{name}").value) for name in STATS}


async def reset(dut):
    dut.rst.value = 1
    await RisingEdge(dut.clk)
    await RisingEdge(dut.clk)
    dut.rst.value = 0


@cocotb.test()
async def reference_mix(dut):
    params = dut_params()
    qps, n, planes, ops = params["qps"], params["ev_slots"], params["planes"], params["ops"]
    nb = params["backups"]
    rng = random.Random(cocotb.RANDOM_SEED)
    cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
    all_planes = (1 << planes) - 1
    for name in ("configure", "reserve_configure", "seed", "feedback", "request"):
        getattr(dut, f"{name}__valid").value = 0
    dut.response__ready.value = 0
    dut.plane_ready.value = all_planes
    dut.plane_up.value = all_planes
    dut.min_active.value = n // 4
    await reset(dut)
    d = Driver(dut, qps, n, planes, nb, rng)
    cocotb.start_soon(d.drain_watch())
    ref = Reference(qps, n, planes, nb)
    evs = slot_evs(qps, n, planes, rng)

    # §6.2 test vector on the last QP.
    for q in range(qps):
        for s in range(n):
            await d.put("configure", {"qp": q, "slot": s, "ev": evs[q][s], "state": EvState.GOOD})
            ref.configure(q, s, evs[q][s], EvState.GOOD)
        for p in range(planes):
            for idx in range(nb):
                ev = make_ev(p, rng.randrange(256), n + rng.randrange(1 << 20))
                await d.put("reserve_configure", {"qp": q, "plane": p, "index": idx, "ev": ev, "valid": 1})
                ref.reserve_configure(q, p, idx, ev, 1)
        seed = 0xACE1 if q == qps - 1 else rng.randrange(1 << 16)
        await d.put("seed", {"qp": q, "seed": seed})
        ref.seed(q, seed)
    got = []
    for _ in range(32):
        r = await d.choose(qps - 1)
        assert r.found and r.ev == evs[qps - 1][r.slot]
        got.append(r.slot)
        assert ref.request(qps - 1, None, all_planes, all_planes) == r.slot
    if n == 8:
        assert got == VECTOR

    # Random sequential mix, each response compared at once.
    ready = up = all_planes
    min_active = n // 4
    last = [None] * qps
    events = [Ev.ECN, Ev.TRIM, Ev.LOSS, Ev.PROBE_OK, Ev.PROBE_OK_SKIP, Ev.DENY, Ev.RESTORE]
    for i in range(ops):
        x = rng.random()
        if x < 0.05:
            await d.idle()  # a feedback accepted last cycle is decided with this cycle's plane_up, min_active
            ready = sum((rng.random() < 0.85) << p for p in range(planes))
            up = sum((rng.random() < 0.9) << p for p in range(planes))
            min_active = rng.choice([0, n // 4, n // 2, n])
            dut.plane_ready.value, dut.plane_up.value, dut.min_active.value = ready, up, min_active
        elif x < 0.35:
            q, s = rng.randrange(qps), rng.randrange(n)
            ev = evs[q][s] if rng.random() < 0.9 else rng.randrange(1 << 32)
            event = rng.choices(events, [30, 12, 16, 12, 8, 2, 8])[0]
            started = [w[:3] for w in ref.watch if w[3]]
            if event in PROBE_OKS and started and rng.random() < 0.7:
                q, s, ev = rng.choice(started[-8:])  # a probed EV (maybe already back: stale)
            await d.put("feedback", {"qp": q, "slot": s, "ev": ev, "event": event})
            ref.feedback(q, s, ev, event, up, min_active)
            evs[q][s % n] = ref.table[q][s % n][0]  # a backup may have taken the slot
        elif x < 0.38:
            q, s = rng.randrange(qps), rng.randrange(n)
            ev = make_ev((s + rng.randrange(2)) % planes, rng.randrange(256), rng.randrange(1 << 21))
            state = rng.choice([EvState.GOOD] * 6 + [EvState.ASSUMED_BAD, EvState.DENIED])
            if ev >> 29 == s % planes:
                evs[q][s] = ev
            await d.put("configure", {"qp": q, "slot": s, "ev": ev, "state": state})
            ref.configure(q, s, ev, state)
        elif x < 0.40:
            q, p, idx, valid = rng.randrange(qps), rng.randrange(planes), rng.randrange(max(nb, 1)), 1
            ev = make_ev(p if rng.random() < 0.9 else (p + 1) % 8, rng.randrange(256), rng.randrange(1 << 21))
            valid = int(rng.random() < 0.8)
            await d.put("reserve_configure", {"qp": q, "plane": p, "index": idx, "ev": ev, "valid": valid})
            ref.reserve_configure(q, p, idx, ev, valid)
        elif x < 0.41:
            q, seed = rng.randrange(qps), rng.randrange(1 << 16)
            await d.put("seed", {"qp": q, "seed": seed})
            ref.seed(q, seed)
        else:
            q = rng.randrange(qps)
            avoid = last[q] if rng.random() < 0.3 else None
            r = await d.choose(q, avoid)
            c = ref.request(q, avoid, ready, up)
            assert (r.qp, r.found) == (q, c is not None), f"op {i}"
            if c is not None:
                assert (r.slot, r.ev, r.plane) == (c, ref.table[q][c][0], c % planes), f"op {i}"
            last[q] = c
    stats = await d.stats()
    await d.idle(20)  # the last watch records leave
    assert stats == {name: ref.stats[name] for name in STATS}
    assert d.watched == ref.watch
    dut._log.info("stats %s, %d watch records", stats, len(d.watched))
    assert stats["replaced"] > 0 and stats["restored"] > 0 and any(not w[3] for w in d.watched)

    # A reset clears the table (every slot DENIED) and puts every rotation back to seed 1.
    await reset(dut)
    dut.plane_ready.value = dut.plane_up.value = all_planes
    ref = Reference(qps, n, planes, nb)
    r = await d.choose(0)
    assert not r.found and ref.request(0, None, all_planes, all_planes) is None
    for s in range(n):
        await d.put("configure", {"qp": 0, "slot": s, "ev": evs[0][s], "state": EvState.GOOD})
        ref.configure(0, s, evs[0][s], EvState.GOOD)
    for _ in range(3 * n):
        assert (await d.choose(0)).slot == ref.request(0, None, all_planes, all_planes)


@pytest.mark.long(seconds=65)
@pytest.mark.parametrize("qps, ev_slots, planes, backups", [(3, 8, 2, 2), (2, 64, 4, 3)])
def test_path_selector_cocotb(qps, ev_slots, planes, backups):
    run_cocotb(
        lambda: PathSelector(qps=qps, ev_slots=ev_slots, planes=planes, backups=backups),
        name="path_selector",
        module=__name__,
        params={"qps": qps, "ev_slots": ev_slots, "planes": planes, "backups": backups, "ops": 3000},
    )
