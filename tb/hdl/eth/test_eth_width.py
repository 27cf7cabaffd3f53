"""Width conversion (hdl/eth/width.py) on the Amaranth simulator, random stalls on both sides.

* Serializer: beats with any ``keep`` pattern (contiguous runs, holes, none at all), frames that end in
  an empty beat and frames with no octets; out come the kept octets in lane order with ``last`` on the
  frame's last octet, or one ``empty`` beat where the end had no octet. Unstalled, it moves an octet
  every cycle across beats.
* Packer: random frames; the beats are full except each frame's last, whose ``keep`` is contiguous from
  lane 0, and they concatenate to the frames.
"""

from __future__ import annotations

import pytest
from eth_reference import new_rng

from mrcnic.hdl.eth.width import BytePacker, ByteSerializer

from support.pysim import run, stream_get, stream_put


def keep_pattern(rng, width: int) -> int:
    style = rng.random()
    if style < 0.1:
        return 0
    if style < 0.6:
        return (1 << width) - 1
    if style < 0.8:
        return (1 << rng.randint(1, width)) - 1
    return rng.randrange(1 << width)


@pytest.mark.parametrize("width", [4, 8])
def test_serializer(width):
    rng = new_rng("serializer")
    dut = ByteSerializer(width)
    beats, expected = [], []  # expected: (data, last, empty) per output beat
    for _ in range(80):
        frame_beats = [
            (rng.randbytes(width), keep_pattern(rng, width), False) for _ in range(rng.randint(0, 4))
        ]
        frame_beats.append((rng.randbytes(width), keep_pattern(rng, width), True))
        octets = [data[k] for data, keep, _ in frame_beats for k in range(width) if keep >> k & 1]
        for data, keep, last in frame_beats:
            beats.append((data, keep, last))
        if frame_beats[-1][1]:
            expected += [(b, int(k == len(octets) - 1), 0) for k, b in enumerate(octets)]
        else:
            expected += [(b, 0, 0) for b in octets] + [(None, 1, 1)]
    received = []

    async def source(ctx):
        for data, keep, last in beats:
            payload = {"data": int.from_bytes(data, "little"), "keep": keep, "last": last}
            await stream_put(ctx, dut.i, payload, stall=0.2, rng=rng)

    async def sink(ctx):
        for _ in expected:
            payload = await stream_get(ctx, dut.o, stall=0.2, rng=rng)
            received.append((None if payload.empty else payload.data, payload.last, payload.empty))

    run(dut, source, sink, name=f"serializer{width}")
    assert received == expected


def test_serializer_rate():
    """Full beats back to back come out at one octet per cycle."""
    width = 8
    dut = ByteSerializer(width)
    beats = 20
    cycles = []

    async def source(ctx):
        for k in range(beats):
            await stream_put(ctx, dut.i, {"data": k, "keep": 0xFF, "last": k == beats - 1})

    async def sink(ctx):
        ctx.set(dut.o.ready, 1)
        cycle = 0
        while len(cycles) < beats * width:
            *_, valid = await ctx.tick().sample(dut.o.valid)
            if valid:
                cycles.append(cycle)
            cycle += 1

    run(dut, source, sink, name="serializer_rate")
    assert cycles[-1] - cycles[0] == beats * width - 1


@pytest.mark.parametrize("width", [4, 8])
def test_packer(width, user_width=0):
    rng = new_rng("packer")
    dut = BytePacker(width, user_width)
    frames = [
        rng.randbytes(rng.choice([1, width - 1, width, width + 1, rng.randint(1, 50)])) for _ in range(80)
    ]
    users = [[rng.getrandbits(user_width) for _ in frame] for frame in frames]
    received, received_users = [], []

    async def source(ctx):
        for frame, user in zip(frames, users, strict=True):
            for k, byte in enumerate(frame):
                payload = {
                    "data": byte,
                    "last": k == len(frame) - 1,
                    **({"user": user[k]} if user_width else {}),
                }
                await stream_put(ctx, dut.i, payload, stall=0.2, rng=rng)

    async def sink(ctx):
        for _ in frames:
            octets = bytearray()
            while True:
                beat = await stream_get(ctx, dut.o, stall=0.2, rng=rng)
                count = bin(beat.keep).count("1")
                assert beat.keep == (1 << count) - 1, "keep not contiguous from lane 0"
                assert count == width or beat.last, "a partial beat before the frame's last"
                octets += beat.data.to_bytes(width, "little")[:count]
                if beat.last:
                    if user_width:
                        received_users.append(beat.user)
                    break
            received.append(bytes(octets))

    run(dut, source, sink, name=f"packer{width}")
    assert received == frames
    if user_width:  # a frame's last beat carries its last octet's user bits (the port's ICRC verdict)
        assert received_users == [user[-1] for user in users]


def test_packer_user_bits():
    test_packer(4, user_width=2)
