"""Congestion control (hdl/tx/congestion.py) against the reference model ``mrcnic.model.nscc.Nscc``, in the
Amaranth simulator.

Units: the gateware works in 128 ns units, the model in picoseconds (x 128_000). Event times are kept on
the quick-adapt bucket grid (base_rtt / 4), where the gateware's bucket ring equals the model's exact
sliding window, so quick-adapt decisions must match exactly. cwnd tolerance (fixed point vs floats):
max(0.5 % of the model's cwnd, mtu / 64). Quadrant and quick-adapt counters are compared exactly.
Seeds are printed (``SEED=<n>`` reproduces).
"""

import os
import random

from mrcnic.hdl.tx.congestion import STATS, CongestionControl
from mrcnic.hdl.tx.tracker import CcKind
from mrcnic.model.nscc import Nscc
from mrcnic.model.params import Params

from support.pysim import run, stream_put

UNIT_PS = 128_000
QPS = 3
BASE = 64  # base_rtt in 128 ns units (8.192 us), a multiple of 4: exact quick-adapt buckets
GRID = BASE // 4
EVENTS = 1500
QUADRANT_STAT = {
    "proportional": "proportional",
    "fair": "fair",
    "decrease": "decreases",
    "decrease-held": "decreases_held",
    "hold": "holds",
}


def _seed():
    seed = int(os.environ.get("SEED", random.randrange(1 << 32)))
    print(f"SEED={seed}")
    return seed


def _params(**kw):
    return Params(mtu=4096, base_rtt_ps=BASE * UNIT_PS, **kw)


def _setup(ctx, dut, p, enabled=True):
    ctx.set(dut.mtu, p.mtu)
    ctx.set(dut.max_cwnd, p.max_cwnd)
    ctx.set(dut.base_rtt, p.base_rtt_ps // UNIT_PS)
    ctx.set(dut.target, p.target_qdelay_ps // UNIT_PS)
    ctx.set(dut.alpha, round(p.alpha * 4096))
    ctx.set(dut.eta, round(p.eta * 4096))
    ctx.set(dut.gamma, round(p.gamma * 65536))
    ctx.set(dut.max_md_jump, round(p.max_md_jump * 65536))
    ctx.set(dut.qa_gate, p.qa_gate)
    ctx.set(dut.enabled, int(enabled))


async def _event(ctx, dut, now, qp, kind, acked=0, rtt=None, ecn=0, rng=None):
    """Send one cc_event at time ``now`` and wait until the block is idle again (state written)."""
    ctx.set(dut.now, now)
    payload = {
        "qp": qp,
        "kind": kind,
        "newly_acked": acked,
        "rtt_valid": rtt is not None,
        "rtt": rtt or 0,
        "ecn": ecn,
    }
    await stream_put(ctx, dut.cc_event, payload, stall=0.3 if rng else 0.0, rng=rng)
    await ctx.tick().until(dut.cc_event.ready)


async def _configure(ctx, dut, qp):
    await stream_put(ctx, dut.configure, {"qp": qp})


def _stats(ctx, dut):
    return {name: ctx.get(getattr(dut, f"stat_{name}")) for name in STATS}


def _close(hw, model, mtu):
    return abs(hw - model) <= max(0.005 * model, mtu / 64)


def test_random_against_model():
    seed = _seed()
    rng = random.Random(seed)
    p = _params(qa_gate=rng.choice([2, 3]))
    target = p.target_qdelay_ps // UNIT_PS
    dut = CongestionControl(qps=QPS)
    checked = {"events": 0, "worst": 0.0}

    async def bench(ctx):
        _setup(ctx, dut, p)
        models = [Nscc(p) for _ in range(QPS)]
        expect = dict.fromkeys(STATS, 0)
        now = 1000
        for _ in range(EVENTS):
            now += GRID * rng.choice([0, 0, 0, 1, 1, 2, 3, 4, 9])
            qp = rng.randrange(QPS)
            model = models[qp]
            r = rng.random()
            now_ps = now * UNIT_PS
            if r < 0.02:
                await _configure(ctx, dut, qp)
                models[qp] = Nscc(p)
            elif r < 0.17:
                await _event(ctx, dut, now, qp, CcKind.TRIM, rng=rng)
                before = model.qa_count
                model.on_trim(now_ps, p.mtu)
                expect["quick_adapts"] += model.qa_count - before
            elif r < 0.22:
                await _event(ctx, dut, now, qp, CcKind.LOSS, acked=rng.randrange(1 << 20), rng=rng)
            else:
                acked = rng.choice([0, rng.randrange(1, 4096), rng.randrange(20000), rng.randrange(1 << 17)])
                rtt = rng.choice([None, rng.randrange(BASE), rng.randrange(BASE, BASE + 2 * target), 0xFFFF])
                ecn = rng.randrange(2)
                await _event(ctx, dut, now, qp, CcKind.SACK, acked, rtt, ecn, rng=rng)
                model.on_acked(now_ps, acked)
                quadrant = model.on_sack(now_ps, acked, None if rtt is None else rtt * UNIT_PS, bool(ecn))
                if quadrant != "none":
                    expect[QUADRANT_STAT[quadrant]] += 1
            for q in range(QPS):
                hw, ref = ctx.get(dut.cwnd[q]), models[q].cwnd
                assert _close(hw, ref, p.mtu), f"t={now} qp {q}: cwnd {hw} model {ref:.1f}"
                checked["worst"] = max(checked["worst"], abs(hw - ref) / ref)
                inflight = rng.randrange(hw + 2 * p.mtu)
                ctx.set(dut.inflight[q], inflight)
            await ctx.delay(0)
            for q in range(QPS):
                hw = ctx.get(dut.cwnd[q])
                assert ctx.get(dut.cwnd_open[q]) == (ctx.get(dut.inflight[q]) + p.mtu <= hw)
            assert _stats(ctx, dut) == expect
            checked["events"] += 1
        print("stats", expect, f"worst cwnd difference {checked['worst']:.2e} of cwnd")
        assert all(expect[k] > 0 for k in STATS), expect

    run(dut, bench, name="congestion_random")
    assert checked["events"] == EVENTS


def test_decrease_once_per_base_rtt():
    p = _params()
    target = p.target_qdelay_ps // UNIT_PS
    dut = CongestionControl(qps=2)

    async def bench(ctx):
        _setup(ctx, dut, p)
        rtt = BASE + 2 * target  # delay = 2 * target: factor 1 - 0.8 / 2 = 0.6
        await _event(ctx, dut, 100, 1, CcKind.SACK, 4096, rtt, 1)
        assert abs(ctx.get(dut.cwnd[1]) - p.max_cwnd * 0.6) <= 12  # factor in Q0.16: 2^-16 relative
        assert ctx.get(dut.cwnd[0]) == p.max_cwnd  # the other QP is untouched
        await _event(ctx, dut, 100 + BASE - 1, 1, CcKind.SACK, 4096, rtt, 1)
        assert _stats(ctx, dut)["decreases"] == 1 and _stats(ctx, dut)["decreases_held"] == 1
        assert abs(ctx.get(dut.cwnd[1]) - p.max_cwnd * 0.6) <= 12  # factor in Q0.16: 2^-16 relative
        await _event(ctx, dut, 100 + BASE, 1, CcKind.SACK, 4096, rtt, 1)
        assert _stats(ctx, dut)["decreases"] == 2
        assert abs(ctx.get(dut.cwnd[1]) - p.max_cwnd * 0.36) <= 12
        # Very high delay: the factor is limited by max_md_jump (0.5).
        await _event(ctx, dut, 100 + 2 * BASE, 1, CcKind.SACK, 0, 60000, 1)
        assert abs(ctx.get(dut.cwnd[1]) - p.max_cwnd * 0.18) <= 12
        # ECN with low delay: hold; no ECN, high delay: fair increase eta * mtu * acked / cwnd.
        c = ctx.get(dut.cwnd[1])
        await _event(ctx, dut, 100 + 3 * BASE, 1, CcKind.SACK, 65536, BASE, 1)
        assert ctx.get(dut.cwnd[1]) == c and _stats(ctx, dut)["holds"] == 1
        await _event(ctx, dut, 100 + 3 * BASE, 1, CcKind.SACK, 65536, rtt, 0)
        assert abs(ctx.get(dut.cwnd[1]) - (c + 0.15 * 4096 * 65536 / c)) <= 2
        # Proportional increase at delay 0: alpha * acked.
        c = ctx.get(dut.cwnd[1])
        await _event(ctx, dut, 100 + 3 * BASE, 1, CcKind.SACK, 10000, BASE, 0)
        assert abs(ctx.get(dut.cwnd[1]) - (c + 10000)) <= 2
        # Clamp at max_cwnd, at mtu; a LOSS changes nothing; configure resets.
        await _event(ctx, dut, 100 + 3 * BASE, 1, CcKind.SACK, 1 << 24, 0, 0)
        assert ctx.get(dut.cwnd[1]) == p.max_cwnd
        await _event(ctx, dut, 100 + 4 * BASE, 1, CcKind.SACK, 0, 60000, 1)
        await _event(ctx, dut, 100 + 4 * BASE, 1, CcKind.LOSS, 5000)
        assert ctx.get(dut.cwnd[1]) == p.max_cwnd // 2
        # An increase past cwnd's range saturates, it does not wrap: alpha 1.0, target 1, delay -BASE, so
        # the increase is acked * 65 bytes, in Q.8 2^40 + 1024 (2^40 would add 4 bytes if it wrapped).
        ctx.set(dut.target, 1)
        ctx.set(dut.alpha, 4096)
        await _event(ctx, dut, 100 + 4 * BASE, 1, CcKind.SACK, 66076420, 0, 0)
        assert ctx.get(dut.cwnd[1]) == p.max_cwnd
        ctx.set(dut.target, target)
        ctx.set(dut.alpha, round(p.alpha * 4096))
        assert _stats(ctx, dut) == {
            "proportional": 3,
            "fair": 1,
            "decreases": 4,
            "decreases_held": 1,
            "holds": 1,
            "quick_adapts": 0,
        }
        await _configure(ctx, dut, 1)
        await ctx.tick()
        assert ctx.get(dut.cwnd[1]) == p.max_cwnd
        # Disabled: nothing changes.
        ctx.set(dut.enabled, 0)
        await _event(ctx, dut, 100 + 9 * BASE, 0, CcKind.SACK, 0, 60000, 1)
        await _event(ctx, dut, 100 + 9 * BASE, 0, CcKind.TRIM)
        assert ctx.get(dut.cwnd[0]) == p.max_cwnd and _stats(ctx, dut)["decreases"] == 4

    run(dut, bench, name="congestion_decrease")


def test_trim_and_quick_adapt_gate():
    p = _params()  # max_cwnd 614400, qa_gate 3: quick adapt only below 76800 bytes acked per base_rtt
    dut = CongestionControl(qps=2)
    mtu, mx = p.mtu, p.max_cwnd
    target = p.target_qdelay_ps // UNIT_PS
    t0 = 1000

    async def bench(ctx):
        _setup(ctx, dut, p)
        # 80000 bytes acked within base_rtt: above the gate, the trim only takes one mtu.
        await _event(ctx, dut, t0, 0, CcKind.SACK, 80000)
        await _event(ctx, dut, t0 + GRID, 0, CcKind.TRIM)
        assert ctx.get(dut.cwnd[0]) == mx - mtu and _stats(ctx, dut)["quick_adapts"] == 0
        # At t0 + base_rtt the 80000 bytes have left the window: quick adapt to max(0, mtu) = mtu.
        await _event(ctx, dut, t0 + 2 * GRID, 0, CcKind.SACK, 30000)
        await _event(ctx, dut, t0 + 3 * GRID, 0, CcKind.SACK, 20000)
        await _event(ctx, dut, t0 + BASE, 0, CcKind.TRIM)
        assert ctx.get(dut.cwnd[0]) == 50000 and _stats(ctx, dut)["quick_adapts"] == 1
        # Within base_rtt + target of the last quick adapt: trims only subtract.
        await _event(ctx, dut, t0 + BASE + target - 1, 0, CcKind.TRIM)
        assert ctx.get(dut.cwnd[0]) == 50000 - mtu and _stats(ctx, dut)["quick_adapts"] == 1
        # base_rtt + target after the last quick adapt, with nothing acked in the last base_rtt: to mtu.
        await _event(ctx, dut, t0 + 2 * BASE + target, 0, CcKind.TRIM)
        assert ctx.get(dut.cwnd[0]) == mtu and _stats(ctx, dut)["quick_adapts"] == 2
        # Trims never go below mtu; quick adapt never increases.
        await _event(ctx, dut, t0 + 2 * BASE + target, 0, CcKind.TRIM)
        assert ctx.get(dut.cwnd[0]) == mtu and _stats(ctx, dut)["quick_adapts"] == 2
        # cwnd_open boundary: inflight + mtu <= cwnd.
        ctx.set(dut.inflight[0], 0)
        ctx.set(dut.inflight[1], mx - mtu)
        await ctx.delay(0)
        assert ctx.get(dut.cwnd_open) == 0b11
        ctx.set(dut.inflight[0], 1)
        ctx.set(dut.inflight[1], mx - mtu + 1)
        await ctx.delay(0)
        assert ctx.get(dut.cwnd_open) == 0b00
        # Long idle: the whole ring is cleared (the 50000 bytes of t0 do not count).
        await _event(ctx, dut, t0, 1, CcKind.SACK, 50000)
        await _event(ctx, dut, t0 + 100 * BASE, 1, CcKind.SACK, 70000)
        await _event(ctx, dut, t0 + 100 * BASE + GRID, 1, CcKind.SACK, 6799)
        await _event(ctx, dut, t0 + 100 * BASE + 2 * GRID, 1, CcKind.TRIM)
        assert ctx.get(dut.cwnd[1]) == 76799 and _stats(ctx, dut)["quick_adapts"] == 3
        # Exactly max_cwnd >> qa_gate acked: no quick adapt (strictly below only).
        await _event(ctx, dut, t0 + 200 * BASE, 1, CcKind.SACK, mx >> 3)
        await _event(ctx, dut, t0 + 200 * BASE + GRID, 1, CcKind.TRIM)
        assert ctx.get(dut.cwnd[1]) == 76799 - mtu and _stats(ctx, dut)["quick_adapts"] == 3

    run(dut, bench, name="congestion_quick_adapt")


def test_edge_registers():
    """Register values the model comparison does not reach, pinned to exact windows: max_cwnd below mtu
    (the clamp to [mtu, max_cwnd] takes mtu first), and increases whose quotient is near the 2^52 where,
    with alpha = 1/4096, the increase reaches cwnd's 40 bits."""
    p = _params()
    dut = CongestionControl(qps=1)
    t = 1000

    async def bench(ctx):
        _setup(ctx, dut, p)
        ctx.set(dut.max_cwnd, 1000)  # below mtu (4096)
        await ctx.delay(0)
        assert ctx.get(dut.cwnd[0]) == 1000  # a fresh QP reads as max_cwnd
        await _event(ctx, dut, t, 0, CcKind.LOSS)
        assert ctx.get(dut.cwnd[0]) == 4096  # max_cwnd, then up to mtu
        await _event(ctx, dut, t, 0, CcKind.LOSS)
        assert ctx.get(dut.cwnd[0]) == 1000  # mtu is above max_cwnd: down to it
        await _event(ctx, dut, t, 0, CcKind.SACK, 10000, BASE, 0)
        assert ctx.get(dut.cwnd[0]) == 4096  # an increase: to max_cwnd, then up to mtu
        await _event(ctx, dut, t, 0, CcKind.TRIM)
        assert ctx.get(dut.cwnd[0]) == 1000  # max(cwnd - mtu, mtu), then down to max_cwnd
        await _event(ctx, dut, t + BASE, 0, CcKind.SACK, 0, BASE + 100, 1)
        assert ctx.get(dut.cwnd[0]) == 4096  # a decrease: up to mtu

        # The quotient acked * (target - delay) * 2^8 / target (Q.8 bytes before alpha) near 2^52.
        ctx.set(dut.max_cwnd, (1 << 32) - 1)
        ctx.set(dut.base_rtt, 0xFFFF)
        ctx.set(dut.target, 1)
        ctx.set(dut.alpha, 1)
        await _configure(ctx, dut, 0)
        await _event(ctx, dut, t, 0, CcKind.TRIM)  # nothing acked: quick adapt to mtu
        assert ctx.get(dut.cwnd[0]) == 4096
        await _event(ctx, dut, t, 0, CcKind.SACK, 1 << 31, 0x10000 - 4096, 0)  # quotient 2^51
        assert ctx.get(dut.cwnd[0]) == 4096 + (1 << 31)
        await _event(ctx, dut, t, 0, CcKind.SACK, (1 << 31) + 1, 0x10000 - 8192, 0)  # 2^52 + 2^21
        assert ctx.get(dut.cwnd[0]) == (1 << 32) - 1  # 2^40 or more in Q.8: to max_cwnd, not wrapped
        assert _stats(ctx, dut)["proportional"] == 3 and _stats(ctx, dut)["quick_adapts"] == 1

    run(dut, bench, name="congestion_edges")
