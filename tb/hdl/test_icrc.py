"""ICRC engine (hdl/icrc.py): Python model of its tricks, Amaranth-simulator unit tests, cocotb on Verilator.

The references are ``mrcnic.wire.icrc.compute_icrc``, zlib over independently masked frames (fields set
to ones through the header objects, not through ``ICRC_MASKED_OFFSETS``) and scapy's RoCEv2 ICRC.
"""

from __future__ import annotations

import logging
import os
import random
import zlib

import cocotb
import pytest
from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator
from cocotb.clock import Clock
from cocotb.simtime import get_sim_time
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSource

from mrcnic.hdl.crc import crc32_rewind_zeros, crc32_step
from mrcnic.hdl.icrc import (
    ICRC_PREFIX_REGISTER,
    ICRC_RESIDUE_REGISTER,
    IcrcEngine,
    covered_byte_rules,
)
from mrcnic.hdl.stream import AxiStreamSignature
from mrcnic.wire import Opcode, data_frame
from mrcnic.wire.examples import example_addressing, example_frames
from mrcnic.wire.icrc import ICRC_MASKED_OFFSETS, ICRC_PREFIX, ICRC_RESIDUE, compute_icrc, mask_variant_fields

from support.cocotb_runner import dut_params, run_cocotb

MASK32 = 0xFFFFFFFF
SKIP_SRV6 = 14 + 40  # Ethernet + outer IPv6
SKIP_SINGLE = 14  # Ethernet
MASKS = dict(ICRC_MASKED_OFFSETS)


# -- the tricks, in plain Python ---------------------------------------------------------------------
def test_skip_identity():
    """Register C0 can be injected by XOR into the first four bytes fed from register 0."""
    rng = random.Random(3)
    c0 = crc32_step(0xFFFFFFFF, ICRC_PREFIX)
    assert c0 == ICRC_PREFIX_REGISTER
    assert crc32_step(0, bytes(17)) == 0  # zero bytes from register 0 keep it 0
    for n in range(4, 40):
        d = rng.randbytes(n)
        head = bytes(a ^ b for a, b in zip(d[:4], c0.to_bytes(4, "little"), strict=True))
        assert crc32_step(0, bytes(rng.randrange(9)) + head + d[4:]) == crc32_step(c0, d)
    # Feeding le_bytes(C0) *before* the coverage would be wrong: it lands on C0 advanced by 4 zero bytes.
    assert crc32_step(0, c0.to_bytes(4, "little")) == crc32_step(c0, bytes(4)) != c0


def test_residue_constants():
    covered = random.Random(4).randbytes(100)
    with_icrc = covered + compute_icrc(covered).to_bytes(4, "little")
    assert zlib.crc32(ICRC_PREFIX + mask_variant_fields(with_icrc)) == ICRC_RESIDUE
    assert crc32_step(0xFFFFFFFF, ICRC_PREFIX + mask_variant_fields(with_icrc)) == ICRC_RESIDUE_REGISTER


def model_engine(packet: bytes, skip: int, width: int) -> int:
    """What the engine computes, beat by beat: per-lane rules, zero-padded last beat, then rewind."""
    rules = covered_byte_rules()
    register = 0
    beats = [packet[k : k + width] for k in range(0, len(packet), width)]
    for index, beat in enumerate(beats):
        lanes = bytearray(width)
        for lane, byte in enumerate(beat):
            position = index * width + lane - skip
            if position >= 0:
                or_mask, xor_value = rules.get(position, (0, 0))
                lanes[lane] = (byte | or_mask) ^ xor_value
        register = crc32_step(register, bytes(lanes))
    return ~crc32_rewind_zeros(register, width - len(beats[-1])) & MASK32


@pytest.mark.parametrize("width", (1, 2, 4, 8, 16, 32, 64))
def test_model_matches_definition(width):
    rng = random.Random(width)
    for _ in range(60):
        skip, covered = rng.randrange(0, 130), rng.randbytes(rng.randrange(4, 200))
        packet = rng.randbytes(skip) + covered
        assert model_engine(packet, skip, width) == compute_icrc(covered)


def test_rejects_bad_widths():
    for width in (0, 3, 12, 128):
        with pytest.raises(ValueError):
            IcrcEngine(width)


# -- Amaranth simulator ---------------------------------------------------------------------------------
def beats_of(packet: bytes, width: int, *, empty_tail: bool = False):
    """Packed beats of ``packet``; ``empty_tail``: the packet ends with an extra ``keep = 0`` beat (as a
    stream may close a packet) instead of ``last`` on its last bytes."""
    for k in range(0, len(packet), width):
        chunk = packet[k : k + width]
        last = int(k + width >= len(packet)) and not empty_tail
        yield int.from_bytes(chunk, "little"), (1 << len(chunk)) - 1, int(last)
    if empty_tail:
        yield 0, 0, 1


def simulate(width, packets, *, input_gap=0.0, ready_prob=1.0, seed=0, empty_tails=0.0):
    """Feed ``[(packet, skip)]``; return ``[(crc, residue_ok)]`` and the cycles the input was stalled.
    ``empty_tails``: the share of packets whose length is a multiple of ``width`` closed by an extra
    empty beat."""
    dut = IcrcEngine(width)
    rng = random.Random(seed)
    results, stalls = [], []

    async def producer(ctx):
        for packet, skip in packets:
            # only after a full beat: a partial beat is the last one of a packed stream
            empty_tail = len(packet) % width == 0 and rng.random() < empty_tails
            for data, keep, last in beats_of(packet, width, empty_tail=empty_tail):
                while rng.random() < input_gap:
                    await ctx.tick()
                ctx.set(dut.i.valid, 1)
                ctx.set(dut.i.payload, {"data": data, "keep": keep, "last": last, "skip": skip})
                while True:
                    _, _, ready = await ctx.tick().sample(dut.i.ready)
                    if ready:
                        break
                    stalls.append(1)
                ctx.set(dut.i.valid, 0)

    async def consumer(ctx):
        while len(results) < len(packets):
            ctx.set(dut.o.ready, rng.random() < ready_prob)
            _, _, valid, ready, payload = await ctx.tick().sample(dut.o.valid, dut.o.ready, dut.o.payload)
            if valid and ready:
                results.append((payload.crc, payload.residue_ok))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(producer)
    sim.add_testbench(consumer)
    sim.run()
    return results, len(stalls)


def check_results(packets, results):
    assert len(results) == len(packets)
    for (packet, skip), (crc, ok) in zip(packets, results, strict=True):
        assert crc == compute_icrc(packet[skip:]), (len(packet), skip)
        assert ok == (zlib.crc32(ICRC_PREFIX + mask_variant_fields(packet[skip:])) == ICRC_RESIDUE)


def small_packets(rng, count, width):
    """Random covered regions behind random skips, half of them closed with a valid ICRC."""
    packets = []
    for n in range(count):
        skip = rng.choice((0, 1, 3, 4, 14, 54, rng.randrange(0, 70)))
        covered = rng.randbytes(rng.randrange(4, 3 * width + 60))
        if n % 3 == 0:  # some packets end on a beat boundary (they may get an empty tail beat)
            covered += bytes(-(skip + len(covered)) % width)
        if n % 2:
            covered += compute_icrc(covered).to_bytes(4, "little")
        packets.append((rng.randbytes(skip) + covered, skip))
    return packets


@pytest.mark.parametrize("width", (4, 8))
def test_sim_small_packets(width):
    rng = random.Random(width)
    packets = small_packets(rng, 24, width)
    for _, frame in example_frames(srv6=True)[:2] + example_frames(srv6=False)[-2:]:
        raw = frame.encode()
        skip = SKIP_SRV6 if frame.srv6 else SKIP_SINGLE
        packets += [(raw, skip), (raw[:-4], skip)]
    results, _ = simulate(width, packets, input_gap=0.3, ready_prob=0.5, seed=width, empty_tails=0.3)
    check_results(packets, results)
    assert [ok for _, ok in results[-8:]] == [1, 0] * 4


@pytest.mark.parametrize("width", (1, 2, 16, 64))
def test_sim_other_widths(width):
    rng = random.Random(100 + width)
    packets = small_packets(rng, 6, width)
    results, _ = simulate(width, packets, input_gap=0.2, ready_prob=0.6, seed=width, empty_tails=0.3)
    check_results(packets, results)


def test_sim_full_rate():
    """o always ready: back-to-back one-beat packets never stall the input."""
    rng = random.Random(5)
    packets = [(rng.randbytes(rng.randrange(4, 9)), 0) for _ in range(30)] + small_packets(rng, 6, 8)
    results, stalls = simulate(8, packets)
    check_results(packets, results)
    assert stalls == 0


# -- cocotb on Verilator ----------------------------------------------------------------------------------
SKIP_BITS = 16


class IcrcAxiTop(wiring.Component):
    """The engine with AXI-stream port names: ``s_axis`` (skip in ``tuser``) in, ``m_result`` out."""

    def __init__(self, data_width: int):
        self.data_width = data_width
        axis = dict(AxiStreamSignature(data_width).members)
        axis["tuser"] = Out(SKIP_BITS)
        result = wiring.Signature({"valid": Out(1), "ready": In(1), "crc": Out(32), "ok": Out(1)})
        super().__init__({"s_axis": In(wiring.Signature(axis)), "m_result": Out(result)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine = engine = IcrcEngine(self.data_width)
        s, r = self.s_axis, self.m_result
        m.d.comb += [
            engine.i.valid.eq(s.tvalid),
            s.tready.eq(engine.i.ready),
            engine.i.payload.data.eq(s.tdata),
            engine.i.payload.keep.eq(s.tkeep),
            engine.i.payload.last.eq(s.tlast),
            engine.i.payload.skip.eq(s.tuser),
            r.valid.eq(engine.o.valid),
            engine.o.ready.eq(r.ready),
            r.crc.eq(engine.o.payload.crc),
            r.ok.eq(engine.o.payload.residue_ok),
        ]
        return m


WRITE_OPCODES = [op for op in Opcode if op.is_write]


def random_payload_length(rng) -> int:
    # Mostly short packets (they exercise the header masking and keep the run short), some up to 4 KiB.
    return rng.choice((rng.randint(1, 64), rng.randint(65, 1024), rng.randint(1025, 4096)))


def random_frame(rng, srv6: bool):
    """A random MRC frame: a WRITE with random payload, or a control template; variant fields random."""
    ev = rng.getrandbits(32)
    if rng.random() < 0.75:
        opcode = rng.choice(WRITE_OPCODES)
        frame = data_frame(
            example_addressing(srv6, ev=ev),
            ev=ev,
            opcode=opcode,
            dest_qp=rng.getrandbits(24),
            psn=rng.getrandbits(24),
            msn=rng.getrandbits(16),
            rqmsn=rng.getrandbits(16),
            va=rng.getrandbits(64),
            rkey=rng.getrandbits(32),
            dma_length=rng.getrandbits(32),
            payload=rng.randbytes(random_payload_length(rng)),
            imm=rng.getrandbits(32) if opcode.has_immediate else None,
            timestamp=rng.choice((None, rng.getrandbits(16))),
            rtx=rng.random() < 0.5,
        )
    else:
        _, template = rng.choice([(n, f) for n, f in example_frames(srv6) if not f.opcode.is_write])
        frame = template.copy()
        frame.set_ev(ev)
    frame.ip.flow_label = rng.getrandbits(20)
    frame.ip.hop_limit = rng.getrandbits(8)
    frame.ip.dscp = rng.getrandbits(6)
    frame.ip.ecn = rng.getrandbits(2)
    frame.udp.checksum = rng.getrandbits(16)
    frame.bth.resv8 = rng.getrandbits(8)
    if frame.outer is not None:
        frame.outer.hop_limit = rng.getrandbits(8)
    return frame


def masked_zlib(frame, skip: int) -> int:
    """zlib over the covered bytes with the variant fields set to ones through the header objects."""
    masked = frame.copy()
    masked.ip.dscp, masked.ip.ecn = 0x3F, 3
    masked.ip.flow_label, masked.ip.hop_limit = 0xFFFFF, 0xFF
    masked.udp.checksum = 0xFFFF
    masked.bth.resv8 = 0xFF
    return zlib.crc32(ICRC_PREFIX + masked.encode()[skip:-4])


def scapy_icrc(raw_single_ipv6: bytes) -> bytes:
    from scapy.contrib.roce import BTH
    from scapy.layers.inet6 import IPv6

    return IPv6(raw_single_ipv6[SKIP_SINGLE:])[BTH].compute_icrc(None)


def flip_unmasked_bit(rng, raw: bytes, skip: int) -> bytes:
    """One bit flipped in a covered byte (ICRC included) that the ICRC does not mask."""
    while True:
        offset = rng.randrange(len(raw) - skip)
        free_bits = ~MASKS.get(offset, 0) & 0xFF
        if free_bits:
            bits = [b for b in range(8) if free_bits >> b & 1]
            flipped = bytearray(raw)
            flipped[skip + offset] ^= 1 << rng.choice(bits)
            return bytes(flipped)


def scramble_variant_fields(rng, raw: bytes, skip: int) -> bytes:
    """Random new values in a random non-empty set of masked fields and in uncovered bytes."""
    fields = [[0, 1, 2, 3], [7], [46, 47], [52]]  # traffic class + flow label, hop limit, UDP csum, BTH[4]
    changed = bytearray(raw)
    for field in rng.sample(fields, rng.randint(1, len(fields))):
        for offset in field:
            changed[skip + offset] ^= rng.getrandbits(8) & MASKS[offset]
    for _ in range(rng.randint(0, 3)):
        changed[rng.randrange(skip)] ^= rng.randint(1, 255)  # Ethernet / outer IPv6 are not covered
    return bytes(changed)


CLOCK_NS = 10


def cycle_now() -> int:
    return get_sim_time(unit="ns") // CLOCK_NS


class ResultCollector:
    """Samples ``m_result`` every cycle with a random ready; records (crc, ok, cycle)."""

    def __init__(self, dut, ready_prob: float, rng: random.Random):
        self.dut, self.ready_prob, self.rng, self.results = dut, ready_prob, rng, []
        cocotb.start_soon(self._run())

    async def _run(self):
        dut = self.dut
        while True:
            dut.m_result__ready.value = int(self.rng.random() < self.ready_prob)
            await RisingEdge(dut.clk)
            if dut.m_result__valid.value and dut.m_result__ready.value:
                self.results.append((int(dut.m_result__crc.value), int(dut.m_result__ok.value), cycle_now()))

    async def wait_for(self, count: int, timeout_cycles: int):
        deadline = cycle_now() + timeout_cycles
        while len(self.results) < count:
            await RisingEdge(self.dut.clk)
            assert cycle_now() < deadline, f"{len(self.results)} of {count} results"


async def start(dut):
    cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
    source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis", bus_separator="__"), dut.clk, dut.rst)
    source.log.setLevel(logging.WARNING)
    dut.rst.value = 1
    for _ in range(3):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    return source


@cocotb.test()
async def random_frames_with_backpressure(dut):
    """TX (no ICRC), RX (with ICRC), RX with a bit flip, RX with masked fields changed; both modes."""
    width, count = dut_params()["data_width"], int(os.environ.get("ICRC_FRAMES", "120"))
    rng = random.Random(random.getrandbits(64))  # seeded by the harness (SEED reproduces)
    source = await start(dut)
    source.set_pause_generator(iter(lambda: rng.random() < 0.3, None))
    collector = ResultCollector(dut, ready_prob=0.6, rng=rng)
    start_cycle = cycle_now()

    jobs = []  # (packet, skip, expected crc or None, expected ok)
    for n in range(count):
        srv6 = n % 2 == 0
        skip = SKIP_SRV6 if srv6 else SKIP_SINGLE
        frame = random_frame(rng, srv6)
        raw = frame.encode()
        icrc = compute_icrc(raw[skip:-4])
        assert icrc == masked_zlib(frame, skip) == int.from_bytes(raw[-4:], "little")
        if not srv6:  # scapy computes the RoCEv2 ICRC only for IPv6 directly followed by UDP
            assert scapy_icrc(raw) == icrc.to_bytes(4, "little")  # so the DUT's crc is checked against it too
        jobs.append((raw[:-4], skip, icrc, 0))
        jobs.append((raw, skip, None, 1))
        jobs.append((flip_unmasked_bit(rng, raw, skip), skip, None, 0))
        jobs.append((scramble_variant_fields(rng, raw, skip), skip, None, 1))
    for packet, skip, _, _ in jobs:
        source.send_nowait(AxiStreamFrame(packet, tuser=skip))
    total_beats = sum(-(-len(p) // width) for p, *_ in jobs)
    await collector.wait_for(len(jobs), timeout_cycles=4 * total_beats + 1000)

    for k, (job, result) in enumerate(zip(jobs, collector.results, strict=True)):
        (packet, skip, crc, ok), (got_crc, got_ok, _) = job, result
        assert got_ok == ok, f"job {k}: residue_ok {got_ok}, expected {ok} ({len(packet)} B, skip {skip})"
        if crc is not None:
            assert got_crc == crc, f"job {k}: crc {got_crc:#010x}, expected {crc:#010x}"
    dut._log.info("%d packets, %d beats, %d cycles", len(jobs), total_beats, cycle_now() - start_cycle)


@cocotb.test()
async def full_rate_back_to_back(dut):
    """No backpressure: mixed packets (one-beat ones included) go in at one beat per cycle, no gaps."""
    width = dut_params()["data_width"]
    rng = random.Random(random.getrandbits(64))
    source = await start(dut)
    collector = ResultCollector(dut, ready_prob=1.0, rng=rng)

    packets = []
    for n in range(60):
        kind = n % 3
        if kind == 0:  # one beat (the shortest covered region the engine supports is 4 bytes)
            skip = rng.choice((0, 1, 2))
            packet = rng.randbytes(rng.randint(skip + 4, max(width, skip + 4)))
        elif kind == 1:
            skip = rng.choice((SKIP_SINGLE, SKIP_SRV6))
            packet = random_frame(rng, skip == SKIP_SRV6).encode()
        else:
            skip = rng.randrange(0, 70)
            packet = rng.randbytes(skip + rng.randint(4, 4 * width + 50))
        packets.append((packet, skip))
    total_beats = sum(-(-len(p) // width) for p, _ in packets)

    accepted = []  # cycle numbers of accepted input beats
    lasts = []  # cycle numbers of accepted last beats

    async def watch_input():
        while True:
            await RisingEdge(dut.clk)
            if dut.s_axis__tvalid.value and dut.s_axis__tready.value:
                accepted.append(cycle_now())
                if dut.s_axis__tlast.value:
                    lasts.append(cycle_now())

    cocotb.start_soon(watch_input())
    for packet, skip in packets:
        source.send_nowait(AxiStreamFrame(packet, tuser=skip))
    await collector.wait_for(len(packets), timeout_cycles=2 * total_beats + 200)

    assert len(accepted) == total_beats
    span = accepted[-1] - accepted[0] + 1
    assert span == total_beats, f"{total_beats} beats took {span} cycles"
    for (packet, skip), (crc, ok, _) in zip(packets, collector.results, strict=True):
        assert crc == compute_icrc(packet[skip:])
        assert ok == (zlib.crc32(ICRC_PREFIX + mask_variant_fields(packet[skip:])) == ICRC_RESIDUE)
    latencies = [done - last for (_, _, done), last in zip(collector.results, lasts, strict=True)]
    dut._log.info(
        "%d packets, %d beats in %d cycles; last beat -> result latency %d..%d cycles",
        len(packets),
        total_beats,
        span,
        min(latencies),
        max(latencies),
    )


@pytest.mark.parametrize("width", (8, 32))
def test_icrc_cocotb(width):
    run_cocotb(
        lambda: IcrcAxiTop(width),
        name="icrc",
        module=__name__,
        params={"data_width": width},
    )


@pytest.mark.slow
@pytest.mark.parametrize("width", (8, 32))
def test_icrc_cocotb_soak(width):
    run_cocotb(
        lambda: IcrcAxiTop(width),
        name="icrc",
        module=__name__,
        params={"data_width": width},
        testcase="random_frames_with_backpressure",
        extra_env={"ICRC_FRAMES": "1000"},
        test_dir_suffix="-soak",
    )
