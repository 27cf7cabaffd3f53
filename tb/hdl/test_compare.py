"""Comparisons with a constant in LUTs (hdl/compare.py) against Python's, in the Amaranth simulator:
every value of a 6-bit signal against every constant from below 0 to past its range, and random 24-bit
values against the constants the SACK tracker uses and random ones (seed printed)."""

import os
import random

from amaranth import Module, Signal
from amaranth.sim import Simulator

from mrcnic.hdl.compare import above, at_least, at_most, below

FUNCTIONS = {
    "below": (below, lambda x, k: x < k),
    "at_least": (at_least, lambda x, k: x >= k),
    "at_most": (at_most, lambda x, k: x <= k),
    "above": (above, lambda x, k: x > k),
}


def check(width, constants, values):
    """Every function, constant and value through one simulation of one combinational module."""
    m = Module()
    x = Signal(width)
    outputs = {}
    for name, (function, _) in FUNCTIONS.items():
        for k in constants:
            out = Signal(name=f"{name}_{k}".replace("-", "m"))
            m.d.comb += out.eq(function(x, k))
            outputs[name, k] = out
    failures = []

    async def testbench(ctx):
        for value in values:
            ctx.set(x, value)
            for (name, k), out in outputs.items():
                expected = FUNCTIONS[name][1](value, k)
                if ctx.get(out) != expected:
                    failures.append((name, value, k, expected))

    sim = Simulator(m)
    sim.add_testbench(testbench)
    sim.run()
    assert not failures, failures[:10]


def test_every_six_bit_value_against_every_constant():
    check(6, range(-2, 67), range(64))


def test_random_24_bit_values():
    seed = int(os.environ.get("SEED", random.randrange(1 << 30)))
    print(f"seed {seed} (SEED={seed} reproduces)")
    rng = random.Random(seed)
    constants = [
        1,
        2,
        64,
        65,
        1 << 23,
        (1 << 24) - 8,
        (1 << 24) - 1,
        *(rng.getrandbits(24) for _ in range(6)),
    ]
    values = [0, 1, (1 << 24) - 1, *constants, *(k - 1 for k in constants if k), *(k + 1 for k in constants)]
    values += [rng.getrandbits(24) for _ in range(200)]
    check(24, constants, [v for v in values if 0 <= v < 1 << 24])
