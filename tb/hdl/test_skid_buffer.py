"""The stream register slice (hdl/skid_buffer.py) on the Amaranth simulator.

* Random words with random stalls on both sides arrive in order, none lost or doubled.
* A word a cycle when both sides are always ready.
* ``i.ready`` and ``o.valid`` do not follow ``o.ready`` / ``i.valid`` within a cycle (they are
  registers: the point of the block).

Seeds are printed; ``SKID_SEED=n`` reproduces a run.
"""

from __future__ import annotations

import os
import random

from mrcnic.hdl.skid_buffer import SkidBuffer

from support.pysim import run


def new_rng(label):
    seed = int(os.environ["SKID_SEED"]) if os.environ.get("SKID_SEED") else random.randrange(1 << 31)
    print(f"{label} seed {seed} (SKID_SEED={seed} reproduces)")
    return random.Random(seed)


def test_words_arrive_in_order_with_random_stalls():
    rng = new_rng("skid order")
    dut = SkidBuffer(16)
    words = [rng.randrange(1 << 16) for _ in range(2000)]
    got = []

    async def writer(ctx):
        for word in words:
            ctx.set(dut.i.valid, rng.random() < 0.7)
            ctx.set(dut.i.payload, word)
            while True:
                *_, valid, ready = await ctx.tick().sample(dut.i.valid, dut.i.ready)
                if valid and ready:
                    break
                ctx.set(dut.i.valid, valid or rng.random() < 0.7)

    async def reader(ctx):
        while len(got) < len(words):
            ctx.set(dut.o.ready, rng.random() < 0.6)
            *_, valid, ready, payload = await ctx.tick().sample(dut.o.valid, dut.o.ready, dut.o.payload)
            if valid and ready:
                got.append(payload)

    run(dut, writer, reader, name="skid_order")
    assert got == words


def test_a_word_every_cycle_when_both_sides_are_ready():
    dut = SkidBuffer(8)
    cycles = []

    async def writer(ctx):
        ctx.set(dut.i.valid, 1)
        for word in range(100):
            ctx.set(dut.i.payload, word)
            await ctx.tick().until(dut.i.ready)
        ctx.set(dut.i.valid, 0)

    async def reader(ctx):
        ctx.set(dut.o.ready, 1)
        cycle, got = 0, []
        while len(got) < 100:
            *_, valid, payload = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            cycle += 1
            if valid:
                got.append(payload)
                cycles.append(cycle)
        assert got == list(range(100))

    run(dut, writer, reader, name="skid_rate")
    assert cycles[-1] - cycles[0] == 99


def test_its_outputs_are_registers():
    dut = SkidBuffer(8)

    async def bench(ctx):
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload, 7)
        ctx.set(dut.o.ready, 0)
        await ctx.tick()  # 7 in main
        ctx.set(dut.i.payload, 8)
        await ctx.tick()  # 8 in the skid: i.ready falls
        ctx.set(dut.i.valid, 0)
        for o_ready in (0, 1, 0, 1):
            ctx.set(dut.o.ready, o_ready)
            assert ctx.get(dut.i.ready) == 0, "i.ready followed o.ready within the cycle"
        await ctx.tick()  # 7 taken (o.ready was left at 1): 8 moves to main, the skid frees
        assert ctx.get(dut.o.payload) == 8 and ctx.get(dut.i.ready) == 1
        for i_valid in (1, 0, 1):
            ctx.set(dut.i.valid, i_valid)
            assert ctx.get(dut.o.valid) == 1 and ctx.get(dut.o.payload) == 8
        ctx.set(dut.i.valid, 0)
        await ctx.tick()  # 8 taken
        assert ctx.get(dut.o.valid) == 0
        ctx.set(dut.i.valid, 1)
        assert ctx.get(dut.o.valid) == 0, "o.valid followed i.valid within the cycle"

    run(dut, bench, name="skid_registers")
