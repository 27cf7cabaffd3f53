"""The clock-crossing queue (hdl/cdc_fifo.py) on the Amaranth simulator, with two free-running clocks.

* Order and completeness: random words through with random stalls on both sides, for writes 4x faster
  than reads, reads 4x faster, and two clocks 3 % apart (the phase between them drifts through every
  value); the reader gets exactly the words written, in order.
* Throughput: with both sides always ready, one word every read cycle (reads slower) or every write
  cycle (writes slower), after the first.
* Capacity: a stalled reader lets exactly ``depth`` + 2 words in, and ``i.ready`` never flickers back on
  until the reader takes one.
* Reset: the write domain's reset mid-stream empties the queue (no word written before it comes out
  afterwards; those after it come in order); the read domain's reset alone loses nothing.

Seeds are printed; ``CDC_SEED=n`` reproduces a run.
"""

from __future__ import annotations

import os
import random

import pytest
from amaranth import ClockDomain, Module
from amaranth.sim import Simulator

from mrcnic.hdl.cdc_fifo import ClockCrossingFifo

WIDTH = 12


def new_rng(label):
    seed = int(os.environ["CDC_SEED"]) if os.environ.get("CDC_SEED") else random.randrange(1 << 31)
    print(f"{label} seed {seed} (CDC_SEED={seed} reproduces)")
    return random.Random(seed)


def make(depth=8, w_ns=8.0, r_ns=32.0, ram_register=False):
    """The queue between domains ``w`` and ``r`` with clock periods ``w_ns`` and ``r_ns``, and its
    simulator (the read clock starts a third of a period late, so the edges never coincide)."""
    dut = ClockCrossingFifo(WIDTH, depth, w_domain="w", r_domain="r", ram_register=ram_register)
    top = Module()
    top.domains.w = cd_w = ClockDomain("w")
    top.domains.r = cd_r = ClockDomain("r")
    top.submodules.dut = dut
    sim = Simulator(top)
    sim.add_clock(w_ns * 1e-9, domain="w")
    sim.add_clock(r_ns * 1e-9, domain="r", phase=r_ns * 1e-9 / 3)
    return dut, sim, cd_w, cd_r


async def put(ctx, dut, word):
    """Offer ``word`` on ``i`` until the queue takes it (valid stays high for the caller to drop)."""
    ctx.set(dut.i.payload, word)
    ctx.set(dut.i.valid, 1)
    await ctx.tick("w").until(dut.i.ready)


def test_depth_must_be_a_power_of_two():
    for depth in (0, 1, 3, 12):
        with pytest.raises(ValueError, match="power of two"):
            ClockCrossingFifo(8, depth, w_domain="a", r_domain="b")


@pytest.mark.parametrize("ram_register", [False, True])
@pytest.mark.parametrize("w_ns, r_ns", [(8.0, 32.0), (32.0, 8.0), (8.0, 8.24)])
def test_words_arrive_in_order_with_random_stalls(w_ns, r_ns, ram_register):
    rng = new_rng(f"cdc order {w_ns}/{r_ns} ns")
    dut, sim, _, _ = make(depth=8, w_ns=w_ns, r_ns=r_ns, ram_register=ram_register)
    words = [rng.randrange(1 << WIDTH) for _ in range(600)]
    got = []

    async def writer(ctx):
        for word in words:
            # Bursts and pauses: some stretches fill the queue, some drain it.
            while rng.random() < (0.6 if len(got) % 200 < 100 else 0.05):
                await ctx.tick("w")
            await put(ctx, dut, word)
            ctx.set(dut.i.valid, 0)

    async def reader(ctx):
        # Bounded, so a queue that loses a word fails the comparison below instead of waiting forever.
        for _ in range(20 * len(words)):
            if len(got) == len(words):
                break
            ctx.set(dut.o.ready, rng.random() < (0.3 if len(got) % 150 < 75 else 0.95))
            *_, valid, ready, payload = await ctx.tick("r").sample(dut.o.valid, dut.o.ready, dut.o.payload)
            if valid and ready:
                got.append(payload)

    sim.add_testbench(writer)
    sim.add_testbench(reader)
    sim.run()
    assert got == words


@pytest.mark.parametrize(
    "w_ns, r_ns, per, ram_register",
    [(8.0, 32.0, "r", False), (32.0, 8.0, "w", False), (8.0, 8.0, "r", False), (8.0, 8.0, "r", True)],
)
def test_always_ready_sides_move_a_word_every_cycle_of_the_slower_clock(w_ns, r_ns, per, ram_register):
    """Without ``ram_register``; with it, two words every three read cycles."""
    # As many words as the ports' queues: more than the pointers' round trip (nine cycles with equal
    # clocks), which bounds the throughput of a smaller queue.
    dut, sim, _, _ = make(depth=16, w_ns=w_ns, r_ns=r_ns, ram_register=ram_register)
    count = 200
    r_cycles = []

    async def writer(ctx):
        ctx.set(dut.i.valid, 1)
        for word in range(count):
            ctx.set(dut.i.payload, word)
            await ctx.tick("w").until(dut.i.ready)
        ctx.set(dut.i.valid, 0)

    async def reader(ctx):
        ctx.set(dut.o.ready, 1)
        cycle, got = 0, []
        while len(got) < count:
            *_, valid, payload = await ctx.tick("r").sample(dut.o.valid, dut.o.payload)
            cycle += 1
            if valid:
                got.append(payload)
                r_cycles.append(cycle)
        assert got == list(range(count))

    sim.add_testbench(writer)
    sim.add_testbench(reader)
    sim.run()
    span = r_cycles[-1] - r_cycles[0]  # read cycles from the first word to the last
    ideal = (count - 1) * (1 if per == "r" else round(w_ns / r_ns))
    if ram_register:
        ideal = (count - 1) * 3 // 2
    assert span <= ideal + 2, f"{count} words took {span} read cycles after the first, ideal {ideal}"


@pytest.mark.parametrize("depth, ram_register", [(2, False), (8, False), (8, True)])
def test_a_stalled_reader_lets_in_exactly_depth_plus_two_words(depth, ram_register):
    dut, sim, _, _ = make(depth=depth, w_ns=8.0, r_ns=11.0, ram_register=ram_register)
    accepted = []

    async def writer(ctx):
        ctx.set(dut.i.valid, 1)
        word = 0
        for _ in range(200):
            ctx.set(dut.i.payload, word)
            *_, ready = await ctx.tick("w").sample(dut.i.ready)
            if ready:
                accepted.append(word)
                word += 1
        assert len(accepted) == depth + 2, f"{len(accepted)} words in a queue of {depth} + 2"
        # The reader takes one: exactly one more goes in.
        ctx.set(dut.i.valid, 0)
        await ctx.tick("w").repeat(3)

    async def reader(ctx):
        await ctx.tick("r").repeat(200 * 8 // 11 + 5)
        ctx.set(dut.o.ready, 1)
        *_, valid, payload = await ctx.tick("r").sample(dut.o.valid, dut.o.payload)
        ctx.set(dut.o.ready, 0)
        assert valid and payload == 0

    async def refill(ctx):
        await ctx.tick("w").repeat(200)
        await ctx.tick("w").repeat(30)  # the read pointer reaches the write side
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload, 999)
        more = 0
        for _ in range(20):
            *_, ready = await ctx.tick("w").sample(dut.i.ready)
            more += ready
        ctx.set(dut.i.valid, 0)
        assert more == 1, f"{more} words went in after the reader took one"

    sim.add_testbench(writer)
    sim.add_testbench(reader)
    sim.add_testbench(refill)
    sim.run()


@pytest.mark.parametrize(
    "w_ns, r_ns, ram_register", [(8.0, 32.0, False), (32.0, 8.0, True), (8.0, 9.0, False)]
)
def test_the_write_domains_reset_empties_the_queue(w_ns, r_ns, ram_register):
    rng = new_rng(f"cdc write reset {w_ns}/{r_ns} ns")
    dut, sim, cd_w, _ = make(depth=8, w_ns=w_ns, r_ns=r_ns, ram_register=ram_register)
    before = list(range(1, 40))  # words written before the reset: 1..39, some of them lost
    after = list(range(1000, 1100))
    got = []
    phase = {"reset": False}

    async def writer(ctx):
        for word in before:
            await put(ctx, dut, word)
        # Hold the last one on the input through the reset: it is not taken.
        ctx.set(cd_w.rst, 1)
        phase["reset"] = True
        for _ in range(rng.randint(1, 4)):  # single ticks: ``repeat`` raises on a reset
            await ctx.tick("w")
        ctx.set(cd_w.rst, 0)
        for word in after:
            while rng.random() < 0.2:
                ctx.set(dut.i.valid, 0)
                await ctx.tick("w")
            await put(ctx, dut, word)
        ctx.set(dut.i.valid, 0)

    async def reader(ctx):
        while not got or got[-1] != after[-1]:
            ctx.set(dut.o.ready, rng.random() < (0.1 if not phase["reset"] else 0.7))
            *_, valid, ready, payload = await ctx.tick("r").sample(dut.o.valid, dut.o.ready, dut.o.payload)
            if valid and ready:
                got.append(payload)

    sim.add_testbench(writer)
    sim.add_testbench(reader)
    sim.run()
    old = [word for word in got if word < 1000]
    assert old == before[: len(old)], "words before the reset came out of order"
    assert len(old) < len(before), "the reset lost nothing: it came too late to test anything"
    assert got[len(old) :] == after


@pytest.mark.parametrize("ram_register", [False, True])
def test_the_read_domains_reset_alone_loses_nothing(ram_register):
    rng = new_rng("cdc read reset")
    dut, sim, _, cd_r = make(depth=8, w_ns=8.0, r_ns=12.0, ram_register=ram_register)
    words = list(range(300))
    got = []

    async def writer(ctx):
        for word in words:
            await put(ctx, dut, word)
        ctx.set(dut.i.valid, 0)

    async def reader(ctx):
        cycle = 0
        while len(got) < len(words):
            cycle += 1
            ctx.set(cd_r.rst, cycle % 50 < 3)  # the read domain's reset, now and then
            ctx.set(dut.o.ready, rng.random() < 0.6)
            *_, rst, valid, ready, payload = await ctx.tick("r").sample(
                cd_r.rst, dut.o.valid, dut.o.ready, dut.o.payload
            )
            if valid and ready:
                got.append(payload)

    sim.add_testbench(writer)
    sim.add_testbench(reader)
    sim.run()
    assert got == words
