"""mrcnic.hdl.mux.select: a tree of 2:1 multiplexers picks exactly values[index]."""

import random

import pytest
from amaranth import Module, Signal
from amaranth.sim import Simulator

from mrcnic.hdl.mux import select


@pytest.mark.parametrize("count", [1, 2, 3, 5, 8, 13, 80])
def test_select_picks_the_indexed_value(count):
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    values = [Signal(9, name=f"v{k}") for k in range(count)]
    narrow = rng.randrange(count)  # one value narrower than the rest: zero-extended
    values[narrow] = Signal(3, name="narrow")
    index = Signal(range(count + 1))
    m = Module()
    out = Signal(9)
    m.d.comb += out.eq(select(values, index))

    async def bench(ctx):
        for _ in range(4 * count + 8):
            contents = [rng.randrange(1 << len(v)) for v in values]
            for v, x in zip(values, contents, strict=True):
                ctx.set(v, x)
            k = rng.randrange(count)
            ctx.set(index, k)
            assert ctx.get(out) == contents[k], (k, contents)

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()


def test_select_needs_values():
    with pytest.raises(ValueError, match="at least one value"):
        select([], Signal(2))
