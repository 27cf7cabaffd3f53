"""UART receiver/transmitter and the bridge's COBS codec blocks (Amaranth simulator).

The receiver is driven bit by bit with fractional bit times (baud error tolerance), framing errors, a
break and glitches; the transmitter's waveform is checked bit by bit. The COBS decoder and encoder are
checked byte-exact against :mod:`mrcnic.driver.uart_protocol` on random frames (zero runs, 254-byte
blocks, both frame tails), with random gaps and backpressure. Seeds printed (``UART_SEED=<seed>``)."""

import os
import random

import pytest
from amaranth import Module

from mrcnic.driver.uart_protocol import cobs_encode
from mrcnic.hdl.host.uart import UartRx, UartTx
from mrcnic.hdl.host.uart_bridge import CobsDecoder, CobsEncoder

from support.pysim import run


def new_rng() -> random.Random:
    seed = int(os.environ.get("UART_SEED", random.randrange(1 << 30)))
    print(f"seed {seed} (UART_SEED={seed} reproduces)")
    return random.Random(seed)


def random_frame(rng: random.Random) -> bytes:
    """Frames that exercise COBS: empty, zero runs, exactly 254 / 255 / 508 non-zero bytes, mixtures."""
    kind = rng.randrange(6)
    if kind == 0:
        return bytes(rng.randrange(0, 4))  # zeros only (maybe empty)
    if kind == 1:
        return bytes(rng.randrange(1, 256) for _ in range(rng.choice((253, 254, 255, 508))))
    if kind == 2:
        return bytes(rng.randrange(1, 256) for _ in range(254)) + bytes(rng.randrange(1, 3))
    return bytes(rng.choice((0, 0, rng.randrange(1, 256))) for _ in range(rng.randrange(1, 300)))


# -- receiver -------------------------------------------------------------------------------------------
class LineDriver:
    """Drives ``rx`` with a bit time of ``period`` cycles (a float: the transmitter's clock may differ)."""

    def __init__(self, ctx, pin, period: float):
        self.ctx, self.pin, self.period = ctx, pin, period
        self.time = 0.0  # cycles elapsed, fractional
        self.now = 0  # cycles ticked

    async def hold(self, level: int, bits: float):
        self.ctx.set(self.pin, level)
        self.time += bits * self.period
        while self.now < round(self.time):
            await self.ctx.tick()
            self.now += 1

    async def send(self, byte: int, *, stop: int = 1):
        await self.hold(0, 1)
        for i in range(8):
            await self.hold((byte >> i) & 1, 1)
        await self.hold(stop, 1)


def rx_bench(divisor: int, script):
    """Run ``script(line)`` against a UartRx; returns the characters it delivered."""
    dut = UartRx()
    got = []

    async def drive(ctx):
        ctx.set(dut.divisor, divisor)
        ctx.set(dut.rx, 1)
        await ctx.tick().repeat(5)
        await script(ctx, dut)
        await ctx.tick().repeat(3 * divisor)

    async def watch(ctx):
        async for _, _, valid, data, error in ctx.tick().sample(
            dut.data.valid, dut.data.payload.data, dut.data.payload.framing_error
        ):
            if valid:
                got.append((data, error))

    run(dut, drive, processes=[watch], name="uart_rx")
    return got


@pytest.mark.parametrize("error", [-0.04, -0.02, 0.0, 0.02, 0.04])
def test_rx_tolerates_baud_error(error):
    rng = new_rng()
    divisor = 64
    payload = [rng.randrange(256) for _ in range(12)] + [0x00, 0xFF, 0x55, 0xAA]

    async def script(ctx, dut):
        line = LineDriver(ctx, dut.rx, divisor * (1 + error))
        for byte in payload:
            await line.send(byte)  # back to back: no idle between stop and start bits
        await line.hold(1, 2)

    assert rx_bench(divisor, script) == [(b, 0) for b in payload]


def test_rx_fast_divisor_back_to_back():
    rng = new_rng()
    payload = [rng.randrange(256) for _ in range(40)]

    async def script(ctx, dut):
        line = LineDriver(ctx, dut.rx, 8)
        for byte in payload:
            await line.send(byte)
            await line.hold(1, rng.choice((0, 0, 0.5, 3)))

    assert rx_bench(8, script) == [(b, 0) for b in payload]


def test_rx_framing_error_break_and_glitch():
    divisor = 16

    async def script(ctx, dut):
        line = LineDriver(ctx, dut.rx, divisor)
        await line.send(0x41)
        await line.send(0x42, stop=0)  # stop bit low: framing error, byte still reported
        await line.hold(1, 1)
        await line.send(0x43)
        await line.hold(0, 30)  # a break: one framing error, not one per 10 bit times
        await line.hold(1, 2)
        await line.hold(0, 0.3)  # a glitch shorter than half a bit: no character
        await line.hold(1, 3)
        await line.send(0x44)

    assert rx_bench(divisor, script) == [(0x41, 0), (0x42, 1), (0x43, 0), (0x00, 1), (0x44, 0)]


# -- transmitter ----------------------------------------------------------------------------------------
def test_tx_waveform():
    rng = new_rng()
    divisor = 5
    payload = [rng.randrange(256) for _ in range(20)]
    dut = UartTx()
    levels = []

    async def feed(ctx):
        ctx.set(dut.divisor, divisor)
        for byte in payload:
            ctx.set(dut.data.payload, byte)
            ctx.set(dut.data.valid, 1)
            await ctx.tick().until(dut.data.ready)
            ctx.set(dut.data.valid, 0)
        await ctx.tick().until(dut.data.ready)
        await ctx.tick().repeat(2 * divisor)

    async def watch(ctx):
        async for _, _, tx in ctx.tick().sample(dut.tx):
            levels.append(tx)

    run(dut, feed, processes=[watch], name="uart_tx")
    start = levels.index(0)
    assert all(levels[:start])
    bits = levels[start : start + 10 * divisor * len(payload)]
    # Every bit lasts exactly `divisor` cycles, characters back to back.
    want = []
    for byte in payload:
        for bit in [0] + [(byte >> i) & 1 for i in range(8)] + [1]:
            want += [bit] * divisor
    assert bits == want
    assert all(levels[start + len(want) :])


def test_tx_to_rx_loopback():
    rng = new_rng()
    payload = [rng.randrange(256) for _ in range(30)]
    m = Module()
    m.submodules.tx = tx = UartTx()
    m.submodules.rx = rx = UartRx()
    m.d.comb += [rx.rx.eq(tx.tx), rx.divisor.eq(6), tx.divisor.eq(6)]
    got = []

    async def feed(ctx):
        for byte in payload:
            ctx.set(tx.data.payload, byte)
            ctx.set(tx.data.valid, 1)
            await ctx.tick().until(tx.data.ready)
            ctx.set(tx.data.valid, 0)
        await ctx.tick().repeat(200)

    async def watch(ctx):
        async for _, _, valid, data, error in ctx.tick().sample(
            rx.data.valid, rx.data.payload.data, rx.data.payload.framing_error
        ):
            if valid:
                got.append((data, error))

    run(m, feed, processes=[watch], name="uart_loopback")
    assert got == [(b, 0) for b in payload]


# -- COBS -------------------------------------------------------------------------------------------------
def decode_with_gateware(characters, rng):
    """Feed ``(byte, framing_error)`` characters to a CobsDecoder with random gaps; returns the frames
    it delivered as ``(bytes, error)``."""
    dut = CobsDecoder()
    frames, current = [], bytearray()

    async def feed(ctx):
        for byte, error in characters:
            ctx.set(dut.i.payload.data, byte)
            ctx.set(dut.i.payload.framing_error, error)
            ctx.set(dut.i.valid, 1)
            await ctx.tick()
            ctx.set(dut.i.valid, 0)
            for _ in range(rng.choice((0, 0, 1, 3))):
                await ctx.tick()
        await ctx.tick().repeat(3)

    async def watch(ctx):
        async for _, _, valid, data, end, error in ctx.tick().sample(
            dut.o.valid, dut.o.payload.data, dut.o.payload.end, dut.o.payload.error
        ):
            if valid and end:
                frames.append((bytes(current), error))
                current.clear()
            elif valid:
                current.append(data)

    run(dut, feed, processes=[watch], name="cobs_decoder")
    return frames


def test_cobs_decoder_matches_codec():
    rng = new_rng()
    frames = [random_frame(rng) for _ in range(40)]
    characters = [(0, 0), (0, 0)]  # leading delimiters: empty frames give nothing
    for frame in frames:
        characters += [(b, 0) for b in cobs_encode(frame)] + [(0, 0)] * rng.choice((1, 1, 2))
    assert decode_with_gateware(characters, rng) == [(f, 0) for f in frames]


def test_cobs_decoder_flags_bad_frames():
    rng = new_rng()
    good = bytes(rng.randrange(1, 256) for _ in range(20)) + b"\x00\x07"
    encoded = cobs_encode(good)
    characters = [(b, 0) for b in encoded[:-3]] + [(0, 0)]  # truncated inside a block
    characters += [(b, 0) for b in encoded] + [(0, 0)]  # then a good one
    characters += [(b, i == 5) for i, b in enumerate(encoded)] + [(0, 0)]  # a framing error inside
    characters += [(0, 1), (0, 0)]  # a break character alone is a (bad) frame, not a delimiter
    characters += [(b, 0) for b in cobs_encode(bytes(254 * [9]))[:-1]] + [(0, 0)]  # no final 0x01 block
    got = decode_with_gateware(characters, rng)
    assert [e for _, e in got] == [1, 0, 1, 1, 0]
    assert got[1][0] == good and got[4][0] == bytes(254 * [9])


@pytest.mark.parametrize("stall", [0.0, 0.5])
def test_cobs_encoder_matches_codec(stall):
    rng = new_rng()
    frames = [random_frame(rng) for _ in range(25)]
    frames = [f for f in frames if f] + [bytes(254 * [1]), bytes([0]), bytes(254 * [1]) + b"\x00"]
    dut = CobsEncoder()
    out = bytearray()
    want = b"".join(cobs_encode(f) + b"\x00" for f in frames)

    async def feed(ctx):
        for frame in frames:
            for i, byte in enumerate(frame):
                while rng.random() < stall:
                    await ctx.tick()
                ctx.set(dut.i.payload.data, byte)
                ctx.set(dut.i.payload.last, i == len(frame) - 1)
                ctx.set(dut.i.valid, 1)
                await ctx.tick().until(dut.i.ready)
                ctx.set(dut.i.valid, 0)

    async def drain(ctx):
        while len(out) < len(want):
            ctx.set(dut.o.ready, rng.random() >= stall)
            _, _, valid, ready, byte = await ctx.tick().sample(dut.o.valid, dut.o.ready, dut.o.payload)
            if valid and ready:
                out.append(byte)

    run(dut, feed, drain, name="cobs_encoder")
    assert bytes(out) == want
