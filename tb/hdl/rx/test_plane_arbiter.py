"""Plane arbiter (Amaranth simulator): packets from random planes, random stalls on every side; each
packet comes out whole, uninterleaved, tagged with its plane, and under saturation the planes take
turns (round robin at packet granularity)."""

import random

import pytest

from mrcnic.hdl.rx.plane_arbiter import PlaneArbiter

from support.pysim import run, stream_get, stream_put


def _beats(data, w):
    out = []
    for i in range(0, len(data), w):
        chunk = data[i : i + w]
        out.append(
            {
                "data": int.from_bytes(chunk + bytes(w - len(chunk)), "little"),
                "keep": (1 << len(chunk)) - 1,
                "last": int(i + w >= len(data)),
            }
        )
    return out


def _packet(plane, seq, rng):
    """Bytes that say which plane and which packet they are, then random bytes."""
    return bytes([plane, seq & 0xFF, seq >> 8]) + rng.randbytes(rng.randrange(0, 40))


@pytest.mark.parametrize("w,planes,user", [(1, 4, 0), (4, 3, 0), (8, 2, 0), (4, 1, 0), (4, 2, 1)])
def test_packets_intact_tagged_and_not_interleaved(w, planes, user):
    """With ``user`` bits (the ports' ICRC verdict), a packet's last beat keeps its own: here bit 0 of
    the packet's sequence number, while the other beats carry random bits."""
    rng = random.Random(w * 10 + planes)
    dut = PlaneArbiter(data_width=w, planes=planes, user_width=user)
    sent = {p: [_packet(p, s, rng) for s in range(rng.randrange(10, 25))] for p in range(planes)}
    total = sum(len(v) for v in sent.values())
    received = {p: [] for p in range(planes)}

    def sender(p):
        async def bench(ctx):
            local = random.Random(rng.random())
            for pkt in sent[p]:
                for _ in range(local.randrange(0, 6)):  # gaps between packets
                    await ctx.tick()
                for beat in _beats(pkt, w):
                    if user:
                        beat["user"] = pkt[1] & 1 if beat["last"] else local.getrandbits(1)
                    await stream_put(ctx, dut.i[p], beat, stall=0.2, rng=local)

        return bench

    async def receiver(ctx):
        local = random.Random(7)
        for _ in range(total):
            data, plane = b"", None
            while True:
                beat = await stream_get(ctx, dut.o, stall=0.3, rng=local)
                if plane is None:
                    plane = beat.plane
                assert beat.plane == plane, "beats of two packets interleaved"
                n = bin(beat.keep).count("1")
                assert beat.keep == (1 << n) - 1
                data += beat.data.to_bytes(w, "little")[:n]
                if beat.last:
                    if user:
                        assert beat.user == data[1] & 1, "the last beat's user bit"
                    break
            assert data[0] == plane
            received[plane].append(data)

    run(dut, receiver, *(sender(p) for p in range(planes)), name=f"plane_arbiter_{w}_{planes}")
    assert received == sent


def _saturate(dut, w, queues, *, ready=lambda cycle: True):
    """One testbench drives every input and the output ready, cycle by cycle: every plane with packets
    left always offers its next beat. Returns the (plane, bytes) packets in output order and the number
    of cycles taken."""
    beats = {p: [b for pkt in pkts for b in _beats(pkt, w)] for p, pkts in queues.items()}
    out, result = [], {}

    async def bench(ctx):
        cycle, current = 0, {}
        while any(beats.values()):
            for p, q in beats.items():
                ctx.set(dut.i[p].valid, bool(q))
                if q:
                    ctx.set(dut.i[p].payload, q[0])
            ctx.set(dut.o.ready, ready(cycle))
            if ctx.get(dut.o.valid) and ctx.get(dut.o.ready):
                beat = ctx.get(dut.o.payload)
                taken = [p for p in beats if ctx.get(dut.i[p].ready) and beats[p]]
                assert taken == [beat.plane]
                beats[beat.plane].pop(0)
                n = bin(beat.keep).count("1")
                current.setdefault(beat.plane, b"")
                current[beat.plane] += beat.data.to_bytes(w, "little")[:n]
                assert len(current) == 1, "beats of two packets interleaved"
                if beat.last:
                    out.append((beat.plane, current.pop(beat.plane)))
            await ctx.tick()
            cycle += 1
        result["cycles"] = cycle

    run(dut, bench, name="plane_arbiter_saturated")
    return out, result["cycles"]


@pytest.mark.parametrize("planes", [1, 3, 4])
def test_single_busy_plane_has_full_throughput(planes):
    w = 4
    dut = PlaneArbiter(data_width=w, planes=planes)
    rng = random.Random(planes)
    p = planes - 1
    pkts = [_packet(p, s, rng) for s in range(20)]
    out, cycles = _saturate(dut, w, {p: pkts})
    assert out == [(p, pkt) for pkt in pkts]
    assert cycles == sum(len(_beats(pkt, w)) for pkt in pkts)  # one beat every cycle


@pytest.mark.parametrize("planes", [2, 3, 4])
def test_round_robin_under_saturation(planes):
    w = 2
    rng = random.Random(100 + planes)
    dut = PlaneArbiter(data_width=w, planes=planes)
    count = 12
    sent = {p: [_packet(p, s, rng) for s in range(count)] for p in range(planes)}
    stall = random.Random(planes)
    out, cycles = _saturate(dut, w, sent, ready=lambda cycle: stall.random() > 0.3)
    order = [p for p, _ in out]
    # While all planes are backlogged, every round of `planes` packets serves each plane exactly once.
    for r in range(count):
        window = order[r * planes : (r + 1) * planes]
        assert sorted(window) == list(range(planes)), (r, order)
    for p in range(planes):
        assert [pkt for q, pkt in out if q == p] == sent[p]
