"""DMA writer (hdl/dma/writer.py).

* Amaranth simulator: a Python AXI4 write slave that checks every AW against the AXI rules (INCR,
  full-width beats, at most 256 beats, no 4 KiB crossing, aligned, AWID 0) and every WLAST, applies
  WSTRB to memory regions filled with a pattern, answers with random AW/W/B pauses and injected SLVERR
  (a failed burst writes nothing); optionally a *strict* slave that takes W beats only once their AW
  was accepted. Random stalls on ``cmd``, ``data`` and ``done``; random commands (small/large,
  aligned/unaligned, across 4 KiB boundaries, overlapping, ending at 2**64), rejected ones, data
  shorter and longer than ``length``. The whole memory is compared with a model (so no other byte
  changed), the bursts with the expected split, ``done`` order and error bits, every counter.
* cocotb on Verilator, widths 8 and 32, with cocotbext-axi ``AxiRamWrite`` bound through
  ``AxiWriteBus.from_prefix(dut, "m_axi", bus_separator="__")`` and an ``AxiStreamSource`` on the
  data port: hundreds of random commands with random backpressure everywhere, memory checked byte for
  byte including the untouched neighbours of every command (and every write checked to land inside a
  command's range); rejections, length mismatches and SLVERR with counters; a full-rate test
  (back-to-back 4 KiB commands at random alignment, ``data.ready`` ratio measured).
"""

from __future__ import annotations

import bisect
import collections
import logging
import os
import random

import cocotb
import pytest
from amaranth import Module
from amaranth.back import verilog
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator
from cocotb.clock import Clock
from cocotb.simtime import get_sim_time
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiRamWrite, AxiStreamBus, AxiStreamFrame, AxiStreamSource, AxiWriteBus
from cocotbext.axi.sparse_memory import SparseMemory

from mrcnic.hdl.dma.axi import Axi4WriteSignature, AxiResp
from mrcnic.hdl.dma.writer import DmaWriter, dma_write_command_layout, dma_write_done_layout
from mrcnic.hdl.stream import AxiStreamSignature

from support.cocotb_runner import dut_params, run_cocotb
from support.pysim import stream_get, stream_put

MAX_LENGTH = 4096 + 64
TOP = 1 << 64

# -- reference model ---------------------------------------------------------------------------------


def expected_bursts(addr: int, length: int, width: int):
    """``(address, beats)`` of every burst of a command: as long as allowed (256 beats, 4 KiB page)."""
    word = addr // width * width
    end_word = (addr + length + width - 1) // width * width
    out = []
    while word < end_word:
        beats = min((end_word - word) // width, 256, (4096 - word % 4096) // width)
        out.append((word, beats))
        word += beats * width
    return out


def data_beats(payload: bytes, width: int):
    """The packet-stream beats ``(data, keep, last)`` of ``payload``, packed from lane 0; an empty
    payload is one beat ``keep = 0, last = 1``."""
    beats = []
    for start in range(0, max(len(payload), 1), width):
        chunk = payload[start : start + width]
        beats.append((int.from_bytes(chunk, "little"), (1 << len(chunk)) - 1, 0))
    beats[-1] = beats[-1][:2] + (1,)
    return beats


class Command:
    """One write: ``addr``, ``length`` (the command) and ``payload`` (the bytes actually sent on
    ``data``; a different count than ``length`` is a length mismatch)."""

    def __init__(self, addr: int, length: int, payload: bytes):
        self.addr, self.length, self.payload = addr, length, payload

    @property
    def rejected(self) -> bool:
        return not 1 <= self.length <= MAX_LENGTH or self.addr + self.length > TOP

    @property
    def mismatch(self) -> bool:
        return not self.rejected and len(self.payload) != self.length

    def written(self):
        """``(address, byte)`` the command may write: its payload clipped to ``length``."""
        if self.rejected:
            return []
        n = min(self.length, len(self.payload))
        return [(self.addr + k, self.payload[k]) for k in range(n)]

    def __repr__(self):
        return f"Command({self.addr:#x}, {self.length}, payload {len(self.payload)})"


def test_expected_bursts_model():
    assert expected_bursts(5, 2, 8) == [(0, 1)]
    assert expected_bursts(4090, 10, 8) == [(4088, 1), (4096, 1)]
    assert expected_bursts(0x10000, 4096, 8) == [(0x10000, 256), (0x10800, 256)]
    assert expected_bursts(0x10000 - 4, 4096 + 64, 32) == [(0x10000 - 32, 1), (0x10000, 128), (0x11000, 2)]
    assert data_beats(b"", 4) == [(0, 0, 1)]
    assert data_beats(bytes(range(1, 7)), 4) == [(0x04030201, 0xF, 0), (0x0605, 0x3, 1)]


def test_interface():
    dut = DmaWriter(data_width=8)
    assert dut.cmd.payload.shape() == dma_write_command_layout(64)
    assert dut.done.payload.shape() == dma_write_done_layout()
    assert dut.axi.signature == Axi4WriteSignature(data_width_bytes=8)
    assert len(dut.data.payload.data) == 64 and len(dut.data.payload.keep) == 8
    for name in ("stat_commands", "stat_bytes", "stat_write_errors", "stat_rejected", "stat_length_mismatch"):
        assert len(getattr(dut, name)) == 32
    for bad in ({"max_length": 1 << 16}, {"max_length": 0}, {"max_outstanding": 1}, {"data_width": 3}):
        with pytest.raises(ValueError):
            DmaWriter(**{"data_width": 8, **bad})


# -- Amaranth simulator: a checking AXI write slave ------------------------------------------------------


class Regions:
    """Host memory for the Amaranth-simulator tests: a few regions filled with a pattern. A write
    anywhere else fails the test."""

    def __init__(self, regions, rng):
        self.regions = {base: bytearray(rng.randbytes(size)) for base, size in regions}

    def copy(self):
        other = Regions([], None)
        other.regions = {base: bytearray(mem) for base, mem in self.regions.items()}
        return other

    def locate(self, addr):
        for base, mem in self.regions.items():
            if base <= addr < base + len(mem):
                return mem, addr - base
        raise AssertionError(f"write to {addr:#x}, outside every region")

    def __setitem__(self, addr, value):
        mem, offset = self.locate(addr)
        mem[offset] = value


class PysimAxiWriteSlave:
    """AXI4 write slave for the Amaranth simulator.

    Checks every AW (INCR, full-width beats, aligned, at most 256 beats, no 4 KiB crossing, AWID 0)
    and WLAST, writes the strobed bytes to ``memory`` in AW order, answers each burst with a B
    ``latency`` cycles after its last W beat. Bursts whose index is in ``fail`` answer SLVERR and write
    nothing. ``pause``: chance of holding ``awready``/``wready`` low or delaying a B for a cycle.
    ``strict``: ``wready`` only while an accepted AW still waits for beats (else W beats are buffered
    before their AW, as AXI allows).
    """

    def __init__(self, axi, width, rng, memory, *, pause=0.3, fail=(), strict=False, latency=1):
        self.axi, self.width, self.rng, self.memory = axi, width, rng, memory
        self.pause, self.fail, self.strict, self.latency = pause, set(fail), strict, latency
        self.bursts = []  # (addr, beats) of every AW, in order
        self.w_cycles = []  # cycle of every W beat
        self.b_cycles = []  # cycle of every B response
        self.max_outstanding = 0  # bursts accepted on AW and not yet answered on B

    async def process(self, ctx):
        axi, width, rng = self.axi, self.width, self.rng
        aws = collections.deque()  # [addr, beats, beats taken, failed] of accepted bursts
        w_beats = collections.deque()  # (data, strb, last) received, not yet applied
        responses = collections.deque()  # (cycle it may go out, resp)
        b_current = None
        answered = 0
        cycle = 0
        while True:
            ctx.set(axi.awready, int(rng.random() >= self.pause))
            waiting = sum(a[1] - a[2] for a in aws) - len(w_beats)
            ctx.set(axi.wready, int((waiting > 0 or not self.strict) and rng.random() >= self.pause))
            if b_current is None and responses and responses[0][0] <= cycle and rng.random() >= self.pause:
                b_current = responses.popleft()[1]
                ctx.set(axi.bresp, b_current)
                ctx.set(axi.bid, 0)
                ctx.set(axi.bvalid, 1)
            elif b_current is None:
                ctx.set(axi.bvalid, 0)
            sampled = await ctx.tick().sample(
                axi.awvalid, axi.awready, axi.awaddr, axi.awlen, axi.awsize, axi.awburst, axi.awid,
                axi.wvalid, axi.wready, axi.wdata, axi.wstrb, axi.wlast, axi.bvalid, axi.bready,
            )  # fmt: skip
            (_, _, awvalid, awready, awaddr, awlen, awsize, awburst, awid,
             wvalid, wready, wdata, wstrb, wlast, bvalid, bready) = sampled  # fmt: skip
            cycle += 1
            if awvalid and awready:
                count = awlen + 1
                assert awburst == 1 and 1 << awsize == width and awid == 0, (awburst, awsize, awid)
                assert awaddr % width == 0, hex(awaddr)
                assert awaddr // 4096 == (awaddr + count * width - 1) // 4096, (
                    f"{awaddr:#x}+{count} crosses 4K"
                )
                aws.append([awaddr, count, 0, len(self.bursts) in self.fail])
                self.bursts.append((awaddr, count))
                self.max_outstanding = max(self.max_outstanding, len(self.bursts) - answered)
            if wvalid and wready:
                w_beats.append((wdata, wstrb, wlast))
                self.w_cycles.append(cycle)
            while aws and w_beats:
                burst = aws[0]
                data, strb, last = w_beats.popleft()
                assert last == (burst[2] == burst[1] - 1), f"WLAST wrong in burst at {burst[0]:#x}"
                if not burst[3]:
                    word = burst[0] + burst[2] * width
                    for lane in range(width):
                        if strb >> lane & 1:
                            self.memory[word + lane] = data >> 8 * lane & 0xFF
                burst[2] += 1
                if last:
                    aws.popleft()
                    responses.append((cycle + self.latency - 1, AxiResp.SLVERR if burst[3] else AxiResp.OKAY))
            if b_current is not None and bvalid and bready:
                b_current = None
                self.b_cycles.append(cycle)
                answered += 1
            assert len(w_beats) < 4096, "W beats without an AW"


def random_payload_commands(rng, width, count, regions, *, mismatch=0.0, reject=0.0):
    """Random commands inside ``regions`` (list of (base, size)): small and large, aligned and not,
    many across 4 KiB boundaries; a fraction with a payload of another length or a rejected length."""
    commands = []
    for _ in range(count):
        base, size = rng.choice(regions)
        kind = rng.random()
        if kind < 0.45:
            length = rng.randint(1, 2 * width + 2)
        elif kind < 0.85:
            length = rng.randint(1, 700)
        else:
            length = rng.randint(1, MAX_LENGTH)
        if rng.random() < 0.4:  # straddle a 4 KiB boundary of the region
            boundary = rng.randrange(base // 4096 + 1, (base + size) // 4096) * 4096
            addr = boundary - rng.randint(1, min(length, 4095))
        elif rng.random() < 0.3:
            addr = base + rng.randrange(size // width) * width
        else:
            addr = base + rng.randrange(size)
        addr = min(max(addr, base), base + size - length)
        n = length
        if rng.random() < mismatch:
            n = rng.choice(
                [0, max(length - rng.randint(1, 3 * width), 0), length + rng.randint(1, 3 * width)]
            )
            if n == length:
                n += 1
        if rng.random() < reject:
            length = rng.choice([0, MAX_LENGTH + 1, 0xFFFF])
        commands.append(Command(addr, length, rng.randbytes(n)))
    return commands


def run_pysim(commands, width, rng, memory, *, fail_rate=0.0, strict=False, stall=0.3, pause=0.3,
              max_outstanding=16):  # fmt: skip
    """Run ``commands`` through a DmaWriter against the checking slave; compare everything."""
    want_bursts = []  # (addr, beats, command index)
    for n, c in enumerate(commands):
        if not c.rejected:
            want_bursts += [(a, b, n) for a, b in expected_bursts(c.addr, c.length, width)]
    fail = {k for k in range(len(want_bursts)) if rng.random() < fail_rate}
    failed_commands = {want_bursts[k][2] for k in fail}

    model = memory.copy()
    for n, c in enumerate(commands):
        if n in failed_commands:
            failed = [(a, b) for k, (a, b, m) in enumerate(want_bursts) if m == n and k in fail]
            skip = {a + j for a, b in failed for j in range(b * width)}
        else:
            skip = set()
        for addr, byte in c.written():
            if addr not in skip:
                model[addr] = byte

    dut = DmaWriter(data_width=width, max_length=MAX_LENGTH, max_outstanding=max_outstanding)
    slave = PysimAxiWriteSlave(dut.axi, width, rng, memory, pause=pause, fail=fail, strict=strict)
    done = []
    stats = {}

    async def feed_commands(ctx):
        for c in commands:
            await stream_put(ctx, dut.cmd, {"addr": c.addr, "length": c.length}, stall=stall, rng=rng)

    async def feed_data(ctx):
        for c in commands:
            for data, keep, last in data_beats(c.payload, width):
                await stream_put(
                    ctx, dut.data, {"data": data, "keep": keep, "last": last}, stall=stall, rng=rng
                )

    async def drain(ctx):
        while len(done) < len(commands):
            done.append((await stream_get(ctx, dut.done, stall=stall, rng=rng)).error)
        for _ in range(20):  # nothing more may happen: no extra done, no stray W beat
            assert not ctx.get(dut.done.valid)
            await ctx.tick()
        for name in ("commands", "bytes", "write_errors", "rejected", "length_mismatch"):
            stats[name] = ctx.get(getattr(dut, f"stat_{name}"))

    done_cycles = []

    async def watch_done(ctx):  # counts cycles like the slave, so the two can be compared
        cycle = 0
        async for _, _, valid, ready in ctx.tick().sample(dut.done.valid, dut.done.ready):
            cycle += 1
            if valid and ready:
                done_cycles.append(cycle)

    beats = sum(len(data_beats(c.payload, width)) + 2 for c in commands)
    # Like support.pysim.run, but a stuck writer fails the test instead of hanging it.
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    for process in (slave.process, watch_done):
        sim.add_process(process)
    for bench in (feed_commands, feed_data, drain):
        sim.add_testbench(bench)
    steps = 0
    while sim.advance() and steps < 60 * beats + 20000:  # a few simulator steps per cycle
        steps += 1
    assert len(done) == len(commands) and stats, f"stuck after {len(done)} of {len(commands)} commands"

    for k, (got, (addr, beats, n)) in enumerate(zip(slave.bursts, want_bursts, strict=False)):
        if got != (addr, beats):
            raise AssertionError(f"burst {k} (command {n}, {commands[n]}): {got}, expected {(addr, beats)}")
    assert len(slave.bursts) == len(want_bursts), (len(slave.bursts), len(want_bursts))
    for base, mem in model.regions.items():
        got = memory.regions[base]
        if got != mem:
            k = next(k for k in range(len(mem)) if got[k] != mem[k])
            raise AssertionError(f"memory differs at {base + k:#x}: {got[k]:#x}, expected {mem[k]:#x}")
    # `done` is a fence: it comes only after the B response of the command's final burst.
    last_burst = {n: k for k, (_, _, n) in enumerate(want_bursts)}
    for n, k in last_burst.items():
        assert done_cycles[n] > slave.b_cycles[k], f"done of command {n} before its last B response"
    want_errors = [int(c.rejected or c.mismatch or n in failed_commands) for n, c in enumerate(commands)]
    assert done == want_errors, f"done errors {done}, expected {want_errors}"
    assert stats == {
        "commands": len(commands),
        "bytes": sum(c.length for c, e in zip(commands, want_errors, strict=True) if not e),
        "write_errors": len(failed_commands),
        "rejected": sum(c.rejected for c in commands),
        "length_mismatch": sum(c.mismatch for c in commands),
    }
    return slave, stats


REGIONS = [(0x7_FFFF_E000, 3 * 16384), (0x1234_0000_0000 + 1, 9000), (TOP - 12288, 12288)]


@pytest.mark.parametrize(
    ("width", "strict"), [(8, False), (8, True), (32, False), (64, False), (4, True), (1, False)]
)
def test_pysim_random_commands(width, strict):
    """Random commands, stalls everywhere, injected SLVERR, a few rejected or mismatched commands."""
    seed = int(os.environ.get("SEED") or random.randrange(1 << 30))
    print(f"seed {seed} (SEED={seed} reproduces)")
    rng = random.Random(seed)
    count = {1: 6, 4: 20}.get(width, 45)
    commands = random_payload_commands(rng, width, count, REGIONS, mismatch=0.1, reject=0.06)
    top = TOP - 12288
    commands += [
        Command(TOP - 7, 7, rng.randbytes(7)),  # ends exactly at 2**64
        Command(TOP - 7, 8, rng.randbytes(8)),  # wraps: rejected
        Command(top + 4096 - 3, 10, rng.randbytes(10)),  # crosses 4K
        Command(0x7_FFFF_E000 + 8192, MAX_LENGTH, rng.randbytes(MAX_LENGTH)),  # aligned, largest
    ]
    rng.shuffle(commands)
    memory = Regions(REGIONS, rng)
    slave, stats = run_pysim(commands, width, rng, memory, fail_rate=0.04, strict=strict)
    print(stats, f"max outstanding bursts {slave.max_outstanding}")
    assert stats["rejected"] >= 1 and slave.max_outstanding > 1


def test_pysim_rejects_and_mismatches():
    """Directed: every kind of rejection and length mismatch, with the neighbours of each range."""
    width = 8
    rng = random.Random(5)
    base = 0x7_FFFF_E000
    commands = [
        Command(base + 3, 20, rng.randbytes(20)),  # good
        Command(base + 100, 0, rng.randbytes(5)),  # rejected: length 0, its 1 data beat dropped
        Command(base + 200, MAX_LENGTH + 1, rng.randbytes(30)),  # rejected: too long
        Command(base + 300, 0xFFFF, b""),  # rejected, a single empty beat
        Command(TOP - 100, 101, rng.randbytes(101)),  # rejected: wraps past 2**64
        Command(base + 403, 40, rng.randbytes(17)),  # short: 3 beats instead of 5, last early
        Command(base + 509, 40, rng.randbytes(60)),  # long: 8 beats instead of 5, extra ones dropped
        Command(base + 613, 20, rng.randbytes(18)),  # same beat count, last keep short
        Command(base + 705, 20, rng.randbytes(23)),  # same beat count, last keep too long
        Command(base + 805, 12, b""),  # no bytes at all: one empty last beat
        Command(base + 901, 4000, rng.randbytes(4100)),  # long, crossing 4K
        Command(base + 4096 * 2 - 5, 3000, rng.randbytes(1000)),  # short, across 4K, spill beats
        Command(base + 13, 9, rng.randbytes(9)),  # good again: the writer recovered
        Command(TOP - 16, 16, rng.randbytes(16)),  # good, the last 16 bytes of the address space
    ]
    memory = Regions(REGIONS, rng)
    _, stats = run_pysim(commands, width, rng, memory)
    assert stats["rejected"] == 4 and stats["length_mismatch"] == 7 and stats["write_errors"] == 0


def test_pysim_slverr():
    """Every third burst fails: its command's done has error, nothing of that burst is written."""
    width = 8
    rng = random.Random(9)
    commands = random_payload_commands(rng, width, 30, REGIONS[:1])
    memory = Regions(REGIONS, rng)
    _, stats = run_pysim(commands, width, rng, memory, fail_rate=0.33)
    assert 0 < stats["write_errors"] < 30


@pytest.mark.parametrize("width", [8, 32])
def test_pysim_full_rate(width):
    """Always-ready memory, no stalls: W carries a beat every cycle across bursts and commands, and
    the data input only waits on the spill beats."""
    rng = random.Random(width)
    regions = [(0x40_0000, 65536)]
    commands = []
    for _ in range(30):
        length = rng.choice([rng.randint(1, 2 * width), rng.randint(1, 600), rng.randint(1, MAX_LENGTH)])
        addr = 0x40_0000 + rng.randrange(65536 - length)
        commands.append(Command(addr, length, rng.randbytes(length)))
    memory = Regions(regions, rng)
    slave, _ = run_pysim(commands, width, rng, memory, stall=0, pause=0)
    total = sum(b for _, b in slave.bursts)
    span = slave.w_cycles[-1] - slave.w_cycles[0] + 1
    print(f"{total} W beats in {span} cycles")
    assert len(slave.w_cycles) == total and span == total


# -- cocotb on Verilator ---------------------------------------------------------------------------------


class WriterTop(wiring.Component):
    """The writer with flat ports: ``s_cmd__*``, ``s_data`` (AXI-stream names), ``m_done__*``,
    ``m_axi`` (AXI4 write channels) and the counters."""

    STATS = ("stat_commands", "stat_bytes", "stat_write_errors", "stat_rejected", "stat_length_mismatch")

    def __init__(self, width: int):
        self.width = width
        members = {
            "s_cmd": In(
                wiring.Signature({"valid": Out(1), "ready": In(1), "addr": Out(64), "length": Out(16)})
            ),
            "s_data": In(AxiStreamSignature(width)),
            "m_done": Out(wiring.Signature({"valid": Out(1), "ready": In(1), "error": Out(1)})),
            "m_axi": Out(Axi4WriteSignature(data_width_bytes=width)),
        }
        members.update({name: Out(32) for name in self.STATS})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.writer = writer = DmaWriter(data_width=self.width, max_length=MAX_LENGTH)
        m.d.comb += [
            writer.cmd.valid.eq(self.s_cmd.valid),
            writer.cmd.payload.addr.eq(self.s_cmd.addr),
            writer.cmd.payload.length.eq(self.s_cmd.length),
            self.s_cmd.ready.eq(writer.cmd.ready),
            writer.data.valid.eq(self.s_data.tvalid),
            writer.data.payload.data.eq(self.s_data.tdata),
            writer.data.payload.keep.eq(self.s_data.tkeep),
            writer.data.payload.last.eq(self.s_data.tlast),
            self.s_data.tready.eq(writer.data.ready),
            self.m_done.valid.eq(writer.done.valid),
            self.m_done.error.eq(writer.done.payload.error),
            writer.done.ready.eq(self.m_done.ready),
        ]
        m.d.comb += [getattr(self, name).eq(getattr(writer, name)) for name in self.STATS]
        for name, member in writer.axi.signature.members.items():
            port, inner = getattr(self.m_axi, name), getattr(writer.axi, name)
            m.d.comb += port.eq(inner) if member.flow == Out else inner.eq(port)
        return m


def test_port_names_after_conversion():
    text = verilog.convert(WriterTop(8), name="top", emit_src=False)
    ports = (
        "m_axi__awaddr m_axi__wstrb m_axi__bready s_data__tdata s_data__tready s_cmd__length m_done__error"
    )
    for port in ports.split():
        assert f" {port};" in text, port


CLOCK_NS = 10


def cycle_now() -> int:
    return get_sim_time(unit="ns") // CLOCK_NS


class Memory64(SparseMemory):
    """The whole 64-bit address space (``len()`` cannot return 2**64; writes bypass ``% len``)."""

    def __init__(self):
        super().__init__(1 << 64)

    def __len__(self):
        return (1 << 63) - 1


def random_command(rng, width: int):
    """A random ``(addr, length)`` anywhere in the 64-bit space, many across 4 KiB boundaries."""
    kind = rng.random()
    if kind < 0.5:
        length = rng.randint(1, 2 * width)
    elif kind < 0.88:
        length = rng.randint(1, 600)
    else:
        length = rng.randint(1, MAX_LENGTH)
    where = rng.random()
    if where < 0.3:
        addr = rng.randrange(1, 1 << 40) * 4096 - rng.randint(1, min(length, 4095) + 1)
    elif where < 0.45:
        addr = rng.randrange((TOP - 2 * MAX_LENGTH) // width) * width
    elif where < 0.5:
        addr = TOP - length  # ends exactly at 2**64
    else:
        addr = rng.randrange(TOP - 2 * MAX_LENGTH)
    return addr, length


class Bench:
    MARGIN = 80  # untouched bytes checked on each side of every command

    def __init__(self, dut, rng):
        self.dut, self.rng = dut, rng
        self.width = dut_params()["data_width"]
        cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
        self.mem = Memory64()
        self.ram = AxiRamWrite(
            AxiWriteBus.from_prefix(dut, "m_axi", bus_separator="__"), dut.clk, dut.rst, mem=self.mem
        )
        self.source = AxiStreamSource(
            AxiStreamBus.from_prefix(dut, "s_data", bus_separator="__"), dut.clk, dut.rst
        )
        self.source.log.setLevel(logging.WARNING)
        self.ram.log.setLevel(logging.ERROR)  # per-burst INFO lines; "write failed" on every poisoned word
        self.ram._write = self._write
        self.bad_words = set()
        self.allowed = []  # sorted (start, end) of the commands' ranges
        self.model = {}
        self.done = []

    async def _write(self, address, data):
        """Every write must land inside a command's range; poisoned words fail (the slave answers
        SLVERR and writes nothing of them)."""
        k = bisect.bisect_right(self.allowed, (address, TOP + 1)) - 1
        assert any(
            s <= address and address + len(data) <= e for s, e in self.allowed[max(k - 64, 0) : k + 1]
        ), f"write {address:#x}+{len(data)} outside every command"
        if address // self.width * self.width in self.bad_words:
            raise OSError(f"poisoned word {address:#x}")
        self.mem.write(address, data)

    def prepare(self, commands):
        """Fill every command's range and its neighbours with random bytes; build the expected image."""
        self.allowed = sorted((c.addr, c.addr + c.length) for c in commands if not c.rejected)
        for c in commands:
            lo = max(c.addr - self.MARGIN, 0)
            hi = min(c.addr + max(c.length, len(c.payload)) + self.MARGIN, TOP)
            fill = self.rng.randbytes(hi - lo)
            self.mem.write(lo, fill)
            self.model.update(zip(range(lo, hi), fill, strict=True))
        failed = []
        for c in commands:
            bad = False
            for addr, byte in c.written():
                if addr // self.width * self.width in self.bad_words:
                    bad = True
                else:
                    self.model[addr] = byte
            failed.append(bad)
        return failed

    def check_memory(self):
        keys = sorted(self.model)
        run_start = 0
        for k in range(1, len(keys) + 1):  # compare contiguous runs at once
            if k == len(keys) or keys[k] != keys[k - 1] + 1:
                lo, hi = keys[run_start], keys[k - 1] + 1
                got = self.mem.read(lo, hi - lo)
                want = bytes(self.model[a] for a in range(lo, hi))
                if got != want:
                    j = next(j for j in range(hi - lo) if got[j] != want[j])
                    raise AssertionError(f"memory at {lo + j:#x}: {got[j]:#x}, expected {want[j]:#x}")
                run_start = k

    async def reset(self):
        dut = self.dut
        dut.s_cmd__valid.value = 0
        dut.m_done__ready.value = 0
        dut.rst.value = 1
        for _ in range(3):
            await RisingEdge(dut.clk)
        dut.rst.value = 0

    async def drive_commands(self, commands, gap=0.0):
        dut = self.dut
        for c in commands:
            while gap and self.rng.random() < gap:
                dut.s_cmd__valid.value = 0
                await RisingEdge(dut.clk)
            dut.s_cmd__addr.value = c.addr
            dut.s_cmd__length.value = c.length
            dut.s_cmd__valid.value = 1
            await RisingEdge(dut.clk)
            while not dut.s_cmd__ready.value:
                await RisingEdge(dut.clk)
        dut.s_cmd__valid.value = 0

    async def send_data(self, commands):
        for c in commands:
            if c.payload:
                await self.source.send(AxiStreamFrame(c.payload))
            else:  # one empty last beat
                await self.source.send(AxiStreamFrame(bytes(self.width), tkeep=[0] * self.width))

    async def collect_done(self, count, stall=0.0):
        dut = self.dut
        while len(self.done) < count:
            dut.m_done__ready.value = int(self.rng.random() >= stall)
            await RisingEdge(dut.clk)
            if dut.m_done__valid.value and dut.m_done__ready.value:
                self.done.append(int(dut.m_done__error.value))
        dut.m_done__ready.value = 0

    def stats(self):
        return {name[5:]: int(getattr(self.dut, name).value) for name in WriterTop.STATS}

    async def run(self, commands, *, gap=0.0, done_stall=0.0):
        failed = self.prepare(commands)
        await self.reset()
        cocotb.start_soon(self.drive_commands(commands, gap))
        cocotb.start_soon(self.send_data(commands))
        await self.collect_done(len(commands), done_stall)
        for _ in range(10):
            await RisingEdge(self.dut.clk)
            assert not self.dut.m_done__valid.value, "a done too many"
        self.check_memory()
        want = [int(c.rejected or c.mismatch or f) for c, f in zip(commands, failed, strict=True)]
        assert self.done == want, f"done errors {self.done}, expected {want}"
        stats = self.stats()
        assert stats == {
            "commands": len(commands),
            "bytes": sum(c.length for c, e in zip(commands, want, strict=True) if not e),
            "write_errors": sum(f and not c.rejected for c, f in zip(commands, failed, strict=True)),
            "rejected": sum(c.rejected for c in commands),
            "length_mismatch": sum(c.mismatch for c in commands),
        }, stats
        return stats


def set_pauses(bench, rng, chance):
    for channel in (bench.ram.aw_channel, bench.ram.w_channel, bench.ram.b_channel, bench.source):
        channel.set_pause_generator(iter(lambda: rng.random() < chance, None))


@cocotb.test()
async def random_commands_with_backpressure(dut):
    """Random commands, gaps, data/AW/W/B pauses, done backpressure: memory byte for byte."""
    rng = random.Random(random.getrandbits(64))  # seeded by the harness (SEED reproduces)
    bench = Bench(dut, rng)
    width = bench.width
    count = int(os.environ.get("DMA_COMMANDS", 1000))
    commands = [
        Command(a, n, rng.randbytes(n)) for a, n in (random_command(rng, width) for _ in range(count))
    ]
    set_pauses(bench, rng, 0.2)
    start = cycle_now()
    stats = await bench.run(commands, gap=0.2, done_stall=0.2)
    dut._log.info("%d commands, %d bytes, %d cycles", count, stats["bytes"], cycle_now() - start)


@cocotb.test()
async def errors_rejects_and_mismatches(dut):
    """Poisoned words (SLVERR), rejected lengths and wrapping ranges, short and long data."""
    rng = random.Random(random.getrandbits(64))
    bench = Bench(dut, rng)
    width = bench.width
    commands = []
    for _ in range(400):
        addr, length = random_command(rng, width)
        n = length
        choice = rng.random()
        if choice < 0.1:
            n = rng.choice(
                [0, max(length - rng.randint(1, 3 * width), 0), length + rng.randint(1, 3 * width)]
            )
        elif choice < 0.15:
            length = rng.choice([0, MAX_LENGTH + 1, 0xFFFF])
        elif choice < 0.18:
            addr = TOP - rng.randint(1, length)  # wraps unless it ends exactly at 2**64
        commands.append(Command(addr, length, rng.randbytes(n)))
    words = [a // width * width for c in commands for a, _ in c.written()]
    bench.bad_words = set(rng.sample(words, 12))
    set_pauses(bench, rng, 0.15)
    stats = await bench.run(commands, gap=0.1, done_stall=0.2)
    dut._log.info("stats %s", stats)
    assert stats["write_errors"] > 0 and stats["rejected"] > 0 and stats["length_mismatch"] > 0


@cocotb.test()
async def full_rate(dut):
    """Always-ready memory, no input stalls, back-to-back 4 KiB commands at random alignment:
    ``data.ready`` is high on almost every cycle (the only waits are the spill beats)."""
    rng = random.Random(random.getrandbits(64))
    bench = Bench(dut, rng)
    width = bench.width
    count = 60 if width < 32 else 150
    commands = []
    for _ in range(count):
        addr = rng.randrange(1, 1 << 50)
        commands.append(Command(addr, 4096, rng.randbytes(4096)))
    ready_cycles = []
    transfers = []

    async def watch():
        while True:
            await RisingEdge(dut.clk)
            if dut.s_data__tready.value:
                ready_cycles.append(cycle_now())
            if dut.s_data__tvalid.value and dut.s_data__tready.value:
                transfers.append(cycle_now())

    cocotb.start_soon(watch())
    dut.m_done__ready.value = 1
    await bench.run(commands)
    span = transfers[-1] - transfers[0] + 1
    ready = sum(1 for t in ready_cycles if transfers[0] <= t <= transfers[-1])
    ratio = ready / span
    dut._log.info("full rate W=%d: %d data beats, ready on %d of %d cycles (%.2f %%)",
                     width, len(transfers), ready, span, 100 * ratio)  # fmt: skip
    assert len(transfers) == count * 4096 // width
    assert ratio >= 0.95, ratio


@pytest.mark.parametrize("width", [8, 32])
def test_dma_writer_cocotb(width):
    run_cocotb(lambda: WriterTop(width), name="dma_writer", module=__name__, params={"data_width": width})


@pytest.mark.slow
@pytest.mark.parametrize("width", [8, 32])
def test_dma_writer_cocotb_soak(width):
    run_cocotb(
        lambda: WriterTop(width),
        name="dma_writer",
        module=__name__,
        params={"data_width": width},
        testcase="random_commands_with_backpressure",
        extra_env={"DMA_COMMANDS": "5000"},
        test_dir_suffix="-soak",
    )
