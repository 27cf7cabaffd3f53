"""Store-and-forward buffers (hdl/eth/packet_ring.py, tx_buffer.py, rx_buffer.py) on the Amaranth
simulator.

* Ring (64 octets in one memory bank and in four; 48 in three, whose pointers wrap at 48): frames
  appended with random pauses and committed or discarded (some ends marked afterwards with
  ``w_mark_last``), read with random stalls or continuously, a read of the word being written
  returning it inverted (undefined on the block RAM); the reader gets exactly the committed frames,
  and a committed frame read continuously never has a gap; the ring fills up completely.
* TX buffer: frames of every length around the limit, empty frames, frames whose end comes in an empty
  beat, random backpressure from the MAC side (half the frames read slowly, so the ring fills) and random
  ``drop_ok``; the frames out and the drops are exactly the reference's, each drop while ``drop_ok``.
* RX buffer: MAC beats at line rate with random outcomes while the reader stalls for long stretches; the
  statuses are the MAC's outcomes, good frames become ``OVERFLOW`` only while the ring is short of room,
  and the frames out are exactly the good ones, whole.
* Ring through the ECP5 synthesis (Yosys, the board build's script): a bank is one block RAM whose
  outputs go straight to flip-flops (no read-during-write copy and multiplexer between them).
"""

from __future__ import annotations

import json

import pytest
from eth_reference import new_rng

from mrcnic.boards.synth_block import synthesise_component
from mrcnic.hdl.eth.frame import RxOutcome
from mrcnic.hdl.eth.packet_ring import PacketRing
from mrcnic.hdl.eth.rx_buffer import RxBuffer
from mrcnic.hdl.eth.tx_buffer import TxBuffer

from support.cocotb_runner import REPO_ROOT
from support.pysim import run, stream_get, stream_put


async def read_frames(ctx, port, count, rng, *, stall=0.3, continuous=0.5, out=None):
    """Take ``count`` frames from a ByteLayout stream. A frame is read either with random stalls or, with
    chance ``continuous``, with ready held high from its first octet, checking it comes without gaps."""
    frames = out if out is not None else []
    for _ in range(count):
        frame, steady = bytearray(), rng.random() < continuous
        while True:
            if steady and frame:
                ctx.set(port.ready, 1)
                *_, valid, payload = await ctx.tick().sample(port.valid, port.payload)
                assert valid, f"gap inside a committed frame after {len(frame)} octets"
            else:
                payload = await stream_get(ctx, port, stall=stall, rng=rng)
            frame.append(payload.data)
            if payload.last:
                break
        ctx.set(port.ready, 0)
        frames.append(bytes(frame))
    return frames


@pytest.mark.parametrize("depth, banks", [(64, 1), (64, 4), (48, 3)])
def test_packet_ring(depth, banks):
    """Random frames committed or discarded, some ending without an octet, random stalls on both sides;
    48 octets in three banks: a ring whose pointers wrap at its depth, not at a power of two."""
    rng = new_rng("packet_ring")
    # A read of the word being written comes out inverted, as the block RAM may give it (the ring leaves
    # read-during-write undefined): the frames stay exact only if no octet read out ever collided.
    dut = PacketRing(depth, bank_depth=depth // banks, poison_collisions=True)
    plan = []  # (octets, commit?, end marked afterwards?)
    for _ in range(400):  # many laps, so ends are marked across the wrap too
        # Up to depth - 1 octets: what the ring guarantees to hold (a frame of depth octets fits only
        # if its last two octets come back to back, and the writer here pauses at random).
        size = rng.choice([1, 2, rng.randint(1, 20), rng.randint(20, depth - 1)])
        plan.append((rng.randbytes(size), rng.random() < 0.75, size > 1 and rng.random() < 0.3))
    committed = [octets for octets, commit, _ in plan if commit]
    received = []
    full_seen = []

    async def writer(ctx):
        for octets, commit, mark_later in plan:
            body = octets[:-1] if mark_later else octets
            for k, byte in enumerate(body):
                while rng.random() < 0.2:
                    await ctx.tick()
                ctx.set(dut.w_data, byte)
                ctx.set(dut.w_last, k == len(octets) - 1)
                ctx.set(dut.w_en, 1)
                end = k == len(body) - 1 and not mark_later
                ctx.set(dut.w_commit, end and commit)
                ctx.set(dut.w_discard, end and not commit)
                while True:
                    *_, room = await ctx.tick().sample(dut.w_room)
                    if room:
                        break
                    full_seen.append(True)
                ctx.set(dut.w_en, 0)
                ctx.set(dut.w_commit, 0)
                ctx.set(dut.w_discard, 0)
            if mark_later:
                # The frame's end arrives without an octet: its final octet is the one appended last.
                ctx.set(dut.w_data, octets[-1])
                ctx.set(dut.w_last, 0)
                ctx.set(dut.w_en, 1)
                while not (await ctx.tick().sample(dut.w_room))[-1]:
                    full_seen.append(True)
                ctx.set(dut.w_en, 0)
                await ctx.tick().repeat(rng.randint(1, 3))
                ctx.set(dut.w_mark_last, 1)
                ctx.set(dut.w_commit if commit else dut.w_discard, 1)
                await ctx.tick()
                ctx.set(dut.w_mark_last, 0)
                ctx.set(dut.w_commit, 0)
                ctx.set(dut.w_discard, 0)

    async def reader(ctx):
        await read_frames(ctx, dut.r, len(committed), rng, stall=0.5, out=received)

    # A deadline some 25 times what a run takes (60-85 µs): a stuck ring fails the test, not hangs it.
    run(dut, writer, reader, name=f"packet_ring{depth}_{banks}", deadline=2e-3)
    assert len(received) == len(committed), f"{len(received)} of {len(committed)} frames out by the deadline"
    assert received == committed
    assert full_seen, "the ring never filled up"


def test_packet_ring_ecp5_ram_meets_flip_flops():
    """Synthesised for the ECP5 as a board build does it, a 2048-octet ring is one DP16KD, and every
    output bit the ring uses drives a flip-flop's data input directly: the 5.8 ns clock-to-output of a
    speed-6 block RAM leaves no room for a LUT before the register at 125 MHz (docs/ethernet.md)."""
    netlist = json.loads(
        synthesise_component(PacketRing(2048), REPO_ROOT / "build/test_packet_ring_ecp5").read_text()
    )
    cells = netlist["modules"]["top"]["cells"].values()
    rams = [c for c in cells if c["type"] == "DP16KD"]
    assert len(rams) == 1
    ff_inputs = {bit for c in cells if c["type"] == "TRELLIS_FF" for bit in c["connections"]["DI"]}
    loads = {}  # net -> (cell type, port) of every input it drives
    for c in cells:
        for port, bits in c["connections"].items():
            if c["port_directions"][port] == "input":
                for bit in bits:
                    loads.setdefault(bit, []).append((c["type"], port))
    outputs = [bits[0] for port, bits in rams[0]["connections"].items() if port.startswith("DOB")]
    used = [bit for bit in outputs if bit in loads]
    assert len(used) == 9, f"{len(used)} of the RAM's outputs used: expected 8 data bits and the end flag"
    for bit in used:
        assert bit in ff_inputs and loads[bit] == [("TRELLIS_FF", "DI")], f"RAM output feeds {loads[bit]}"


def test_tx_buffer():
    rng = new_rng("tx_buffer")
    max_frame, depth = 100, 128
    limit = max_frame - 4
    dut = TxBuffer(depth=depth, max_frame=max_frame)
    # Each frame: octets and how its end arrives ("octet": with the last octet, "empty": in an empty beat).
    sizes = [0, 1, limit - 1, limit, limit + 1, limit + 2, 3 * limit] + [
        rng.randint(0, 2 * limit) for _ in range(60)
    ]
    rng.shuffle(sizes)
    frames = [(rng.randbytes(n), "empty" if n == 0 or rng.random() < 0.3 else "octet") for n in sizes]
    expected = [octets for octets, _ in frames if 0 < len(octets) <= limit]
    expected_drops = sum(1 for octets, _ in frames if not 0 < len(octets) <= limit)
    drops = []

    async def source(ctx):
        for octets, end in frames:
            for k, byte in enumerate(octets):
                last = end == "octet" and k == len(octets) - 1
                await stream_put(ctx, dut.i, {"data": byte, "last": last, "empty": 0}, stall=0.2, rng=rng)
            if end == "empty":
                await stream_put(ctx, dut.i, {"data": 0, "last": 1, "empty": 1}, stall=0.2, rng=rng)
        await ctx.tick().repeat(20)

    async def drop_gate(ctx):
        while True:
            ctx.set(dut.drop_ok, int(rng.random() < 0.5))
            await ctx.tick()

    async def drop_monitor(ctx):
        async for _, _, dropped, drop_ok in ctx.tick().sample(dut.dropped, dut.drop_ok):
            if dropped:
                assert drop_ok, "a drop counted while drop_ok was low"
                drops.append(True)

    received = []

    async def sink(ctx):
        # Half the frames read slowly, so the ring fills and the writer waits for room with an octet staged.
        half = len(expected) // 2
        await read_frames(ctx, dut.o, half, rng, stall=0.8, continuous=0.2, out=received)
        await read_frames(ctx, dut.o, len(expected) - half, rng, out=received)

    # A deadline (over ten times the cycles the frames need), so a buffer that stops taking input fails.
    run(dut, source, sink, processes=[drop_gate, drop_monitor], name="tx_buffer", deadline=1e-3)
    assert received == expected
    assert len(drops) == expected_drops


def test_rx_buffer_overflow():
    rng = new_rng("rx_buffer")
    depth = 256
    dut = RxBuffer(depth=depth)
    outcomes = [RxOutcome.GOOD] * 6 + [RxOutcome.BAD_FCS, RxOutcome.RUNT, RxOutcome.ERROR, RxOutcome.OVERSIZE]
    frames = []
    for _ in range(150):
        result = rng.choice(outcomes)
        frames.append((rng.randbytes(rng.randint(1, 120)), result))
    statuses = []
    received = []
    finished = []

    async def mac(ctx):
        # Line rate: an octet per cycle, then a short gap (the preamble of the next frame).
        for octets, result in frames:
            for k, byte in enumerate(octets):
                ctx.set(dut.i.valid, 1)
                ctx.set(
                    dut.i.payload,
                    {"data": byte, "last": k == len(octets) - 1, "outcome": result, "length": len(octets)},
                )
                await ctx.tick()
            ctx.set(dut.i.valid, 0)
            await ctx.tick().repeat(rng.choice([1, 8, 20]))
        await ctx.tick().repeat(4)
        finished.append(True)

    async def status_monitor(ctx):
        async for _, _, valid, payload in ctx.tick().sample(dut.status.valid, dut.status.payload):
            if valid:
                statuses.append((RxOutcome(payload.outcome), payload.length))

    async def reader(ctx):
        # Long stalls so the ring overflows, then bursts of reading; at the end, no more stalls. A frame
        # is read only once its GOOD status is out (it is committed then), so the reader never waits for
        # a frame that will not come.
        while not (finished and len(received) == sum(r == RxOutcome.GOOD for r, _ in statuses)):
            if len(received) < sum(r == RxOutcome.GOOD for r, _ in statuses):
                await read_frames(ctx, dut.o, 1, rng, stall=0 if finished else 0.1, out=received)
            await ctx.tick().repeat(1 if finished else rng.choice([1, 1, 50, 400]))

    run(dut, mac, reader, processes=[status_monitor], name="rx_buffer")
    assert [length for _, length in statuses] == [len(octets) for octets, _ in frames]
    for (result, _), (_, sent) in zip(statuses, frames, strict=True):
        assert result == sent or (sent == RxOutcome.GOOD and result == RxOutcome.OVERFLOW)
    kept = [
        octets for (result, _), (octets, _) in zip(statuses, frames, strict=True) if result == RxOutcome.GOOD
    ]
    overflows = sum(result == RxOutcome.OVERFLOW for result, _ in statuses)
    assert overflows > 0, "the test never filled the ring"
    assert len(kept) > overflows // 4, "nothing got through"
    assert received == kept
