"""ICRC inserter (Amaranth simulator): every packet comes out with its own ICRC appended, whatever the
backpressure on either side and wherever the packet ends in its last beat (including a spill beat)."""

import random

import pytest

from mrcnic.hdl.tx.icrc_inserter import IcrcInserter
from mrcnic.wire.examples import example_frames
from mrcnic.wire.icrc import compute_icrc

from support.pysim import run, stream_get, stream_put


def _beats(data, w, rng):
    out = []
    for i in range(0, len(data), w):
        chunk = data[i : i + w]
        # Lanes past the valid bytes carry garbage, as they may in the pipeline.
        chunk_bytes = chunk + rng.randbytes(w - len(chunk))
        out.append(
            {
                "data": int.from_bytes(chunk_bytes, "little"),
                "keep": (1 << len(chunk)) - 1,
                "last": int(i + w >= len(data)),
            }
        )
    return out


@pytest.mark.parametrize("w", [4, 8, 32])
def test_icrc_appended_under_backpressure(w):
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    templates = [f.encode()[:-4] for srv6 in (False,) for _, f in example_frames(srv6) if f.opcode.is_write]
    packets = []
    for _ in range(40):
        base = rng.choice(templates)
        extra = rng.randbytes(rng.randrange(0, 3 * w))  # vary where the last beat ends
        packets.append(base + extra)
    dut = IcrcInserter(data_width=w)
    got = []

    async def source(ctx):
        ctx.set(dut.skip, 14)
        for p in packets:
            for beat in _beats(p, w, rng):
                await stream_put(ctx, dut.i, beat, stall=0.3, rng=rng)

    async def sink(ctx):
        current = b""
        while len(got) < len(packets):
            beat = await stream_get(ctx, dut.o, stall=0.5, rng=rng)
            n = bin(beat.keep).count("1")
            assert beat.keep == (1 << n) - 1
            current += beat.data.to_bytes(w, "little")[:n]
            if beat.last:
                got.append(current)
                current = b""

    run(dut, source, sink, name=f"icrc_inserter_{w}")
    for p, out in zip(packets, got, strict=True):
        # The ICRC covers the single-IPv6 frame from its IPv6 header (skip 14) onward.
        assert out == p + compute_icrc(p[14:]).to_bytes(4, "little")
