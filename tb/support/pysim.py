"""Helpers for fast Amaranth-simulator tests of small blocks (no Verilator build).

``stream_put``/``stream_get`` move one payload through an ``amaranth.lib.stream`` interface, with
optional random stalls so every stream test also exercises backpressure; ``run`` runs testbenches on a
clocked simulator and writes a VCD when ``WAVES=1``.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from amaranth.sim import Simulator

__all__ = ["run", "stream_get", "stream_put"]

CLOCK_PERIOD = 1e-8


async def stream_put(ctx, stream, payload, *, stall: float = 0.0, rng: random.Random | None = None):
    """Offer ``payload`` on ``stream`` until it is taken; ``stall``: chance to idle a cycle first."""
    rng = rng or random
    while stall and rng.random() < stall:
        await ctx.tick()
    ctx.set(stream.payload, payload)
    ctx.set(stream.valid, 1)
    await ctx.tick().until(stream.ready)
    ctx.set(stream.valid, 0)


async def stream_get(ctx, stream, *, stall: float = 0.0, rng: random.Random | None = None):
    """Take one payload from ``stream``; ``stall``: chance to hold ready low for a cycle first."""
    rng = rng or random
    while stall and rng.random() < stall:
        await ctx.tick()
    ctx.set(stream.ready, 1)
    (payload,) = await ctx.tick().sample(stream.payload).until(stream.valid)
    ctx.set(stream.ready, 0)
    return payload


class _DeadlinePassed(Exception):
    pass


def run(dut, *testbenches, processes=(), name: str = "sim", deadline: float | None = None) -> None:
    """Simulate ``dut`` with a 100 MHz ``sync`` clock until every testbench returns, or until
    ``deadline`` (seconds of simulated time) if that comes first: then the simulation just stops, and
    the test's own checks find what did not happen (``Simulator.run_until`` would always run to it)."""
    sim = Simulator(dut)
    sim.add_clock(CLOCK_PERIOD)
    for process in processes:
        sim.add_process(process)
    for bench in testbenches:
        sim.add_testbench(bench)
    if deadline is not None:

        async def watchdog(ctx):
            await ctx.delay(deadline)
            raise _DeadlinePassed

        sim.add_process(watchdog)

    def simulate():
        try:
            sim.run()
        except _DeadlinePassed:
            pass

    if os.environ.get("WAVES", "0") not in ("", "0"):
        path = Path("build") / "pysim" / f"{name}.vcd"
        path.parent.mkdir(parents=True, exist_ok=True)
        with sim.write_vcd(str(path)):
            simulate()
        print(f"[pysim] waveform: {path}")
    else:
        simulate()
