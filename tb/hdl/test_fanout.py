"""StreamFork and StreamMerge: every record reaches every output once, in order, under random stalls;
the merge keeps each input's order, prefers input 0, and never changes an offered record."""

import random

import pytest

from mrcnic.hdl.fanout import StreamFork, StreamMerge

from support.pysim import run, stream_get, stream_put

RECORDS = 200


@pytest.mark.parametrize("outputs", [1, 2, 3])
def test_fork_delivers_every_record_to_every_output(outputs):
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    dut = StreamFork(16, outputs)
    values = [rng.randrange(1 << 16) for _ in range(RECORDS)]
    got = [[] for _ in range(outputs)]

    async def producer(ctx):
        for v in values:
            await stream_put(ctx, dut.i, v, stall=0.3, rng=rng)

    def consumer(k):
        async def bench(ctx):
            local = random.Random(seed + k)
            for _ in values:
                got[k].append(await stream_get(ctx, dut.o[k], stall=0.5, rng=local))

        return bench

    run(dut, producer, *(consumer(k) for k in range(outputs)), name="fork")
    assert all(g == values for g in got)


def test_merge_keeps_order_priority_and_stable_offers():
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    dut = StreamMerge(16, 3)
    sent = {k: [(k << 12) | n for n in range(RECORDS // 2)] for k in range(3)}
    got = []
    offers = []  # (cycle, payload) while valid and not ready: must not change until taken

    def producer(k):
        async def bench(ctx):
            local = random.Random(seed * 7 + k)
            for v in sent[k]:
                await stream_put(ctx, dut.i[k], v, stall=0.4, rng=local)

        return bench

    async def consumer(ctx):
        for _ in range(3 * (RECORDS // 2)):
            got.append(await stream_get(ctx, dut.o, stall=0.5, rng=rng))

    async def checker(ctx):
        held = None
        async for _clk, _rst, valid, ready, payload in ctx.tick().sample(
            dut.o.valid, dut.o.ready, dut.o.payload
        ):
            if held is not None:
                offers.append((held, payload if valid else None))
            held = payload if valid and not ready else None

    run(dut, *(producer(k) for k in range(3)), consumer, processes=[checker], name="merge")
    for k in range(3):
        assert [v for v in got if v >> 12 == k] == sent[k]
    assert all(before == after for before, after in offers), "an offered record changed before it was taken"


def test_merge_prefers_input_zero():
    dut = StreamMerge(8, 2)
    order = []

    async def bench(ctx):
        ctx.set(dut.i[0].payload, 1)
        ctx.set(dut.i[1].payload, 2)
        ctx.set(dut.i[0].valid, 1)
        ctx.set(dut.i[1].valid, 1)
        ctx.set(dut.o.ready, 1)
        for _ in range(3):
            _clk, _rst, payload = await ctx.tick().sample(dut.o.payload)
            order.append(payload)
            if payload == 1:
                ctx.set(dut.i[0].valid, 0)

    run(dut, bench, name="merge_priority")
    assert order[:2] == [1, 2]
