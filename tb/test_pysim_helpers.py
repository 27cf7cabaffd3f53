"""The Amaranth-simulator helpers: payloads cross a FIFO in order under random stalls on both sides."""

import random

from amaranth.lib import fifo

from support.pysim import run, stream_get, stream_put


def test_stream_helpers_through_a_fifo():
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    dut = fifo.SyncFIFOBuffered(width=16, depth=4)
    values = [rng.randrange(1 << 16) for _ in range(200)]
    received = []

    async def producer(ctx):
        for v in values:
            await stream_put(ctx, dut.w_stream, v, stall=0.3, rng=rng)

    async def consumer(ctx):
        for _ in values:
            received.append(await stream_get(ctx, dut.r_stream, stall=0.3, rng=rng))

    run(dut, producer, consumer, name="fifo_helpers")
    assert received == values
