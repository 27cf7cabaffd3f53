"""Counter bank (Amaranth simulator): totals follow narrow wrapping counters exactly, with host reads as
often as the bank is built for (every ``read_interval`` cycles, which stretches the scan the most),
totals that wrap (a 10-bit ``total_width`` here), and every other counter growing by ``max_step`` every
cycle (the others by up to it), so the narrow samples come as close to wrapping between two visits as
the sizing allows. Seeds printed (``COUNTER_BANK_SEED=<seed>`` reruns one)."""

import os
import random

import pytest
from amaranth import Const, Module, Signal
from amaranth.sim import Simulator

from mrcnic.hdl.host.counter_bank import (
    LFSR_TAPS,
    CounterBank,
    de_bruijn_positions,
    de_bruijn_step,
    sample_width_for,
)

from support.pysim import run


def new_seed() -> int:
    seed = int(os.environ.get("COUNTER_BANK_SEED", random.randrange(1 << 30)))
    print(f"seed {seed}")
    return seed


@pytest.mark.parametrize(
    "count, max_step, read_interval, fast",
    [(1, 1, 2, None), (5, 3, 2, None), (24, 2, 2, 5), (24, 2, 4, None), (92, 2, 4, 3)],
)
def test_totals_follow_the_counters(count, max_step, read_interval, fast):
    """``fast``: the first counters grow by up to ``max_step``, the others (sampled narrower) by 1."""
    rng = random.Random(new_seed())
    total_width = 10
    dut = CounterBank(
        count=count, max_step=max_step, total_width=total_width, read_interval=read_interval, fast=fast
    )
    n = dut.sample_width
    assert n == sample_width_for(count, max_step, read_interval) < total_width
    assert dut.slow_width == sample_width_for(count, 1, read_interval)
    if fast is not None and max_step > 1:
        assert dut.slow_width < n  # the slow counters' samples are narrower (the case under test)
    step = [max_step if fast is None or i < fast else 1 for i in range(count)]
    truth = [0] * count  # wide values, what the totals must equal mod 2**total_width
    history: list[list[int]] = []
    state = {"run": True, "busy": 0.0}

    async def counters(ctx):
        while state["run"]:
            for i in range(count):
                # the fastest growth allowed (every other counter), so the narrow samples wrap often
                truth[i] += step[i] if i % 2 == 0 or rng.random() < 0.8 else rng.randrange(step[i])
                # all n bits, as a block's counter gives them: a slow counter's top bits must be ignored
                ctx.set(dut.sample[i], truth[i] % (1 << n))
            history.append(list(truth))
            await ctx.tick()

    async def bench(ctx):
        cycles = 0
        while not ctx.get(dut.ready):
            await ctx.tick()
            cycles += 1
        assert cycles <= max(count, 2) + 2
        for phase, reads in (("idle", 0.0), ("busy", 1.0), ("mixed", 0.3)):
            for _ in range(300):
                if rng.random() < reads:
                    i = rng.randrange(count)
                    asked = len(history)  # the request; the bank samples a cycle later
                    ctx.set(dut.read_addr, i)
                    ctx.set(dut.read_en, 1)
                    await ctx.tick()
                    ctx.set(dut.read_en, 0)
                    assert not ctx.get(dut.read_valid)
                    await ctx.tick()
                    assert ctx.get(dut.read_valid)
                    got = ctx.get(dut.read_data)
                    # Exact: a fast counter's total counts the values set in the cycle after the
                    # request (the bank samples then), a slow one's a cycle earlier (its flips are
                    # counted a cycle late, see the module docstring).
                    at = asked + 1 if fast is None or i < fast else asked
                    want = history[at][i] % (1 << total_width)
                    assert got == want, (phase, i, got, want)
                    # The next request comes read_interval cycles after this one, not later.
                    for _ in range(read_interval - 2):
                        await ctx.tick()
                    continue
                assert not ctx.get(dut.read_valid) or phase != "idle"
                await ctx.tick()
        while min(truth) <= 1 << total_width:  # every total wraps its 10 bits at least once
            await ctx.tick()
        state["run"] = False
        await ctx.tick()
        for i in range(count):
            ctx.set(dut.read_addr, i)
            ctx.set(dut.read_en, 1)
            await ctx.tick()
            ctx.set(dut.read_en, 0)
            await ctx.tick()
            assert ctx.get(dut.read_valid) and ctx.get(dut.read_data) == truth[i] % (1 << total_width)
            await ctx.tick()

    run(dut, bench, counters, name=f"counter_bank_{count}")


def test_rejects_samples_wider_than_totals():
    with pytest.raises(ValueError, match="do not fit"):
        CounterBank(count=100, max_step=4, total_width=8)
    with pytest.raises(ValueError, match="at least one"):
        CounterBank(count=0)
    with pytest.raises(ValueError, match="fast counters"):
        CounterBank(count=4, fast=5)
    with pytest.raises(ValueError, match="at most 16"):
        CounterBank(count=40_000, max_step=1, total_width=32, fast=0)


@pytest.mark.parametrize("width", sorted(LFSR_TAPS))
def test_de_bruijn_counter_runs_through_every_state(width):
    """A slow counter's code: from 0, ``2**width`` steps visit every state once and come back to 0, so
    it counts modulo ``2**width`` as a binary counter does; the table turns a state into that count."""
    state, seen = 0, []
    for _ in range(1 << width):
        seen.append(state)
        state = de_bruijn_step(state, width)
    assert state == 0 and sorted(seen) == list(range(1 << width))
    positions = de_bruijn_positions(width)
    assert [positions[s] for s in seen] == list(range(1 << width))


@pytest.mark.parametrize("width", sorted(LFSR_TAPS))
def test_de_bruijn_step_in_gateware_matches_the_model(width):
    """The Amaranth expression and the integer model take the same step: from every state up to 10 bits,
    from every 61st state and the all-zero-below-the-top ones above (two and four taps alike)."""
    m = Module()
    state, after = Signal(width), Signal(width)
    m.d.comb += after.eq(de_bruijn_step(state, width))
    sim = Simulator(m)
    values = range(1 << width) if width <= 10 else [*range(0, 1 << width, 61), 1 << (width - 1), 1]

    async def bench(ctx):
        for value in values:
            ctx.set(state, Const(value, width))
            assert ctx.get(after) == de_bruijn_step(value, width), value

    sim.add_testbench(bench)
    sim.run()
