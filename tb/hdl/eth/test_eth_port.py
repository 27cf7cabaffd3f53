"""Ethernet port + RGMII PHY interface on Verilator (cocotb), through the RGMII pins at 1 Gb/s.

The DUT is :class:`~mrcnic.hdl.eth.port.EthernetPort` wired to the behavioural
:class:`~mrcnic.hdl.eth.rgmii.RgmiiPhy`, as a board top wires them. cocotbext-eth's ``RgmiiSource``
drives the receive pins (its own 125 MHz ``RXC``, 8.002 ns, unrelated in phase to the others) and
``RgmiiSink`` samples the transmit pins on the DUT's ``TXC`` (the 90-degree ``eth_tx90`` domain);
cocotbext-axi drives and collects the core side at 100 MHz, so every path crosses clock domains.

Each cocotb test checks byte-exact frames and every counter of the port exactly (a pure-Python
reference, tb/hdl/eth/eth_reference.py):

* ``tx_sweep``: frames of every size from 14 to 100 octets, random larger ones, ``max_frame - 4`` (the
  largest) and ``max_frame - 3`` (dropped), with random gaps at the source; each frame on the wire has
  7 x 0x55, 0xD5, the frame padded to 60 octets, a right FCS, no ``TX_ER``; no gap below 12 octets.
* ``rx_sweep``: the same sizes received, random backpressure from the core.
* ``rx_faults``: good frames mixed with bad FCS, ``RX_ER`` inside the frame, runts (63 octets and less),
  giants (``max_frame + 1`` and more), random backpressure; only good frames come out.
* ``back_to_back``: 12-octet gaps: a TX burst goes out with exactly 12 idle octets between frames, and
  minimum-size frames received back to back (gap 12, then a PHY-shrunk gap of 5) all come through.
* ``both_directions``: random traffic both ways at once, random backpressure on both core streams.
* ``icrc_both_ways`` (a build with ``icrc``, 4 octets a beat): MRC frames sent without their ICRC leave
  with it; received frames carry the ICRC verdict in ``tuser``.
* ``rx_overflow`` (small-buffer build): the core stops taking frames; frames that do not fit are
  dropped whole and counted, those kept come out intact once the core takes frames again, and
  traffic then flows normally.

``SEED=<n>`` reproduces a run (the seed is printed).
"""

from __future__ import annotations

import random

import cocotb
import pytest
from amaranth import ClockDomain, ClockSignal, Module, ResetSignal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Timer, with_timeout
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource
from cocotbext.eth import GmiiFrame, RgmiiSink, RgmiiSource
from eth_reference import PREAMBLE, SFD, Counters, fcs, outcome, padded

from mrcnic.hdl.eth.counters import COUNTERS
from mrcnic.hdl.eth.frame import RxOutcome
from mrcnic.hdl.eth.port import EthernetPort
from mrcnic.hdl.eth.rgmii import RgmiiPhy, RgmiiPinsSignature
from mrcnic.hdl.stream import AxiStreamSignature

from support.cocotb_runner import dut_params, run_cocotb
from support.mrc_frames import flip_covered_byte, icrc_ok_model, random_write, with_srh

CORE_NS = 10  # 100 MHz core clock
TX_PS = 8000  # 125 MHz
RX_PS = 8002  # the link partner's clock, 250 ppm off
TX90_OFFSET_PS = 2000  # TXC 90 degrees after the TX clock, as a PLL output would be
BYTE_PS = 8000


class PortBench(wiring.Component):
    """EthernetPort + behavioural RgmiiPhy: core streams, counters and the RGMII pins as ports."""

    def __init__(self, **params):
        self._port = EthernetPort(**params)
        self._phy = RgmiiPhy(tx_clock_domain="eth_tx90")
        width = self._port.data_width
        super().__init__(
            {
                "s_axis": In(AxiStreamSignature(width)),
                "m_axis": Out(AxiStreamSignature(width, user_width=int(self._port.icrc))),
                "rgmii": Out(RgmiiPinsSignature()),
                "eth_tx_clk": In(1),
                "eth_tx_rst": In(1),
                "eth_tx90_clk": In(1),
                **{name: Out(32) for name in COUNTERS},
            }
        )

    def elaborate(self, platform):
        m = Module()
        # As a board top: the TX clocks come from a PLL (here: ports), the RX domain from the PHY.
        m.domains.eth_tx = ClockDomain()
        m.domains.eth_tx90 = ClockDomain(reset_less=True)
        m.domains.eth_rx = ClockDomain()
        m.d.comb += [
            ClockSignal("eth_tx").eq(self.eth_tx_clk),
            ResetSignal("eth_tx").eq(self.eth_tx_rst),
            ClockSignal("eth_tx90").eq(self.eth_tx90_clk),
        ]
        m.submodules.port = port = self._port
        m.submodules.phy = phy = self._phy
        wiring.connect(m, wiring.flipped(self.s_axis), port.s_axis)
        wiring.connect(m, port.m_axis, wiring.flipped(self.m_axis))
        wiring.connect(m, port.gmii, phy.gmii)
        wiring.connect(m, phy.rgmii, wiring.flipped(self.rgmii))
        for name in COUNTERS:
            m.d.comb += getattr(self, name).eq(getattr(port, name))
        return m


# -- cocotb side -------------------------------------------------------------------------------------
class Bench:
    def __init__(self, dut):
        self.dut = dut
        self.params = dut_params()
        self.max_frame = self.params.get("max_frame", 9216)
        self.rng = random.Random(cocotb.RANDOM_SEED)
        self.expected = Counters()
        cocotb.start_soon(Clock(dut.clk, CORE_NS, unit="ns").start())
        cocotb.start_soon(Clock(dut.eth_tx_clk, TX_PS, unit="ps").start())
        cocotb.start_soon(self._delayed_clock(dut.eth_tx90_clk, TX_PS, TX90_OFFSET_PS))
        cocotb.start_soon(self._delayed_clock(dut.rgmii__rx_clk, RX_PS, 3100))
        self.source = AxiStreamSource(
            AxiStreamBus.from_prefix(dut, "s_axis", bus_separator="__"), dut.clk, dut.rst
        )
        self.sink = AxiStreamSink(
            AxiStreamBus.from_prefix(dut, "m_axis", bus_separator="__"), dut.clk, dut.rst
        )
        self.rgmii_source = RgmiiSource(dut.rgmii__rx_data, dut.rgmii__rx_ctl, dut.rgmii__rx_clk)
        self.rgmii_sink = RgmiiSink(dut.rgmii__tx_data, dut.rgmii__tx_ctl, dut.rgmii__tx_clk)

    @staticmethod
    async def _delayed_clock(signal, period_ps, offset_ps):
        signal.value = 0
        await Timer(offset_ps, unit="ps")
        await Clock(signal, period_ps, unit="ps").start()

    async def reset(self):
        dut = self.dut
        dut.rst.value = 1
        dut.eth_tx_rst.value = 1
        await ClockCycles(dut.clk, 10)
        dut.rst.value = 0
        dut.eth_tx_rst.value = 0
        await ClockCycles(dut.clk, 10)

    def backpressure(self, source_idle=0.3, sink_stall=0.3):
        rng = self.rng
        self.source.set_pause_generator(iter(lambda: rng.random() < source_idle, None))
        self.sink.set_pause_generator(iter(lambda: rng.random() < sink_stall, None))

    # TX: core -> wire
    def send(self, frame: bytes):
        self.source.send_nowait(AxiStreamFrame(frame))
        if len(frame) + 4 <= self.max_frame:
            self.expected.sent(frame)
            return True
        self.expected["tx_dropped"] += 1
        return False

    async def check_wire(self, frames, timeout_us=2000):
        """The next len(frames) frames on the TX pins are ``frames``; returns the idle gaps between them
        (in octets, one fewer than frames)."""
        times = []
        for k, frame in enumerate(frames):
            got = await with_timeout(self.rgmii_sink.recv(), timeout_us, "us")
            assert got.error is None, f"TX frame {k}: TX_ER on the wire"
            data = bytes(got.data)
            assert data[:8] == PREAMBLE + SFD, f"TX frame {k}: preamble {data[:8].hex()}"
            body = padded(frame)
            assert data[8:] == body + fcs(body), f"TX frame {k} ({len(frame)} octets) differs"
            times.append((got.sim_time_start, got.sim_time_end))
        gaps = [(start - end) / BYTE_PS for (_, end), (start, _) in zip(times, times[1:], strict=False)]
        assert all(g >= 12 for g in gaps), f"gap below 12 octets: {min(gaps)}"
        return gaps

    # RX: wire -> core
    async def receive(self, frame: GmiiFrame, body: bytes, error: bool = False):
        """Send a burst (``body``: octets after the SFD) and book its expected outcome."""
        await self.rgmii_source.send(frame)
        result = outcome(body, error, self.max_frame)
        self.expected.received(result, len(body) - 4)
        return result

    async def receive_good(self, frame: bytes):
        body = padded(frame)
        body += fcs(body)
        await self.receive(GmiiFrame.from_payload(frame), body)
        return padded(frame)

    async def check_core(self, frames, timeout_us=2000):
        for k, frame in enumerate(frames):
            got = await with_timeout(self.sink.recv(), timeout_us, "us")
            assert bytes(got.tdata) == frame, f"RX frame {k} ({len(frame)} octets) differs"

    async def check_counters(self, settle_cycles=200):
        # Dropped frames leave no trace at the core: wait for the last burst to be on the wire.
        await self.rgmii_source.wait()
        await ClockCycles(self.dut.clk, settle_cycles)
        got = {name: int(getattr(self.dut, name).value) for name in COUNTERS}
        want = self.expected.as_dict()
        assert got == want, {name: (got[name], want[name]) for name in COUNTERS if got[name] != want[name]}
        self.dut._log.info("counters %s", got)

    def sizes(self, larger=4):
        """14..100 octets, ``larger`` random ones up to the largest, and the largest."""
        top = self.max_frame - 4
        return list(range(14, 101)) + [self.rng.randint(101, top) for _ in range(larger)] + [top]


@cocotb.test()
async def tx_sweep(dut):
    tb = Bench(dut)
    await tb.reset()
    tb.backpressure(source_idle=0.3)
    frames = [tb.rng.randbytes(n) for n in tb.sizes()]
    frames.insert(tb.rng.randrange(len(frames)), tb.rng.randbytes(tb.max_frame - 3))  # one too long
    sent = [frame for frame in frames if tb.send(frame)]
    await tb.check_wire(sent)
    await tb.check_counters()


@cocotb.test()
async def rx_sweep(dut):
    tb = Bench(dut)
    await tb.reset()
    tb.backpressure(sink_stall=0.5)
    expected = [await tb.receive_good(tb.rng.randbytes(n)) for n in tb.sizes()]
    await tb.check_core(expected)
    await tb.check_counters()


async def random_burst(tb, kind: str, max_frame: int):
    """Queue one received burst of ``kind``; returns the frame the core must get, or None."""
    rng = tb.rng
    if kind == "good":
        top = min(2000, max_frame - 4)
        return await tb.receive_good(rng.randbytes(rng.choice([rng.randint(14, 200), rng.randint(60, top)])))
    if kind == "bad_fcs":
        body = bytearray(padded(rng.randbytes(rng.randint(60, min(1500, max_frame - 4)))))
        body += fcs(bytes(body))
        body[rng.randrange(len(body))] ^= 1 << rng.randrange(8)
        await tb.receive(GmiiFrame.from_raw_payload(bytes(body)), bytes(body))
    elif kind == "error":
        frame = padded(rng.randbytes(rng.randint(14, min(1500, max_frame - 4))))
        body = frame + fcs(frame)
        wire = GmiiFrame.from_raw_payload(body)
        wire.error = [0] * len(wire.data)
        wire.error[8 + rng.randrange(len(body))] = 1
        await tb.receive(wire, body, error=True)
    elif kind == "runt":
        frame = rng.randbytes(rng.choice([59, rng.randint(0, 59)]))
        body = frame + fcs(frame)
        await tb.receive(GmiiFrame.from_raw_payload(body), body)
    else:  # giant
        frame = rng.randbytes(rng.choice([max_frame - 3, max_frame - 3 + rng.randint(1, 100)]))
        body = frame + fcs(frame)
        await tb.receive(GmiiFrame.from_raw_payload(body), body)
    return None


@cocotb.test()
async def rx_faults(dut):
    tb = Bench(dut)
    await tb.reset()
    tb.backpressure(sink_stall=0.5)
    kinds = ["good"] * 40 + ["bad_fcs"] * 8 + ["error"] * 8 + ["runt"] * 8 + ["giant"] * 2
    tb.rng.shuffle(kinds)
    expected = []
    for kind in kinds:
        frame = await random_burst(tb, kind, tb.max_frame)
        if frame is not None:
            expected.append(frame)
    await tb.check_core(expected)
    await tb.check_counters()
    counts = tb.expected.as_dict()
    assert all(counts[name] for name in ("rx_bad_fcs", "rx_errors", "rx_runts", "rx_oversize"))


@cocotb.test()
async def back_to_back(dut):
    tb = Bench(dut)
    await tb.reset()
    # TX: frames queued at once leave with exactly 12 idle octets between them, except after the first:
    # the ring starts empty, so the second frame is stored (one octet per TX clock) while the first one
    # (preamble + frame + FCS) is on the wire, and a longer second frame makes that gap longer.
    burst = [tb.rng.randbytes(tb.rng.choice([60, 100])) for _ in range(30)]
    for frame in burst:
        tb.send(frame)
    gaps = await tb.check_wire(burst)
    first = max(12, len(burst[1]) - (8 + len(burst[0]) + 4))
    sizes = f"first frames {len(burst[0])} and {len(burst[1])} octets"
    assert gaps == [first] + [12.0] * (len(burst) - 2), f"gaps {gaps} ({sizes})"
    # RX: minimum-size frames back to back at the minimum gap, then with a gap shrunk to 5 octets.
    expected = []
    for ifg in (12, 5):
        tb.rgmii_source.ifg = ifg
        for _ in range(60):
            expected.append(await tb.receive_good(tb.rng.randbytes(60)))
    await tb.check_core(expected)
    await tb.check_counters()


@cocotb.test()
async def both_directions(dut):
    tb = Bench(dut)
    await tb.reset()
    tb.backpressure(source_idle=0.2, sink_stall=0.4)
    rng = tb.rng
    tx_frames = [rng.randbytes(rng.choice([rng.randint(14, 128), rng.randint(14, 3000)])) for _ in range(60)]
    for frame in tx_frames:
        tb.send(frame)
    rx_expected = []
    for _ in range(60):
        kind = rng.choice(["good"] * 6 + ["bad_fcs", "error", "runt"])
        frame = await random_burst(tb, kind, tb.max_frame)
        if frame is not None:
            rx_expected.append(frame)
    await tb.check_wire(tx_frames)
    await tb.check_core(rx_expected)
    await tb.check_counters()


@cocotb.test()
async def rx_overflow(dut):
    tb = Bench(dut)
    await tb.reset()
    rng = tb.rng
    size = 400
    # The core takes nothing: the data FIFO, the packer and the ring fill up, later frames are dropped.
    tb.sink.pause = True
    frames = [rng.randbytes(size) for _ in range(3 * tb.params["rx_buffer_bytes"] // size)]
    for frame in frames:
        await tb.rgmii_source.send(GmiiFrame.from_payload(frame))
    await tb.rgmii_source.wait()
    await ClockCycles(dut.clk, 200)
    dropped = int(dut.rx_overflow.value)
    kept = int(dut.rx_frames.value)
    assert kept + dropped == len(frames) and dropped > 0, (kept, dropped)
    # Equal sizes: once full, the ring stays full, so the frames kept are the first ones.
    tb.sink.pause = False
    await tb.check_core(frames[:kept])
    for frame in frames[:kept]:
        tb.expected.received(RxOutcome.GOOD, len(frame))
    tb.expected["rx_overflow"] = dropped
    # Traffic flows again.
    expected = [await tb.receive_good(rng.randbytes(rng.randint(60, 1000))) for _ in range(10)]
    await tb.check_core(expected)
    await tb.check_counters()
    capacity = tb.params["rx_buffer_bytes"] // size
    assert capacity <= kept <= capacity + 2, f"{kept} frames of {size} octets kept"


@cocotb.test()
async def icrc_both_ways(dut):
    """Built with ``icrc``: MRC frames from the core leave with the codec's ICRC appended (and scapy's,
    for single-IPv6 ones); received frames reach the core unchanged with ``tuser`` on their last beat
    = the ICRC verdict of the Python model (good, a covered byte flipped, SRHs, random non-MRC frames)."""
    from scapy.contrib.roce import BTH
    from scapy.layers.inet6 import IPv6

    tb = Bench(dut)
    await tb.reset()
    tb.backpressure(source_idle=0.2, sink_stall=0.4)
    rng = tb.rng

    def mrc_frame():
        frame = random_write(rng, rng.random() < 0.5, payload_max=rng.choice([64, 1500]))
        if frame.outer is not None and rng.random() < 0.3:
            frame = with_srh(frame, rng, rng.randrange(5))
        return frame.encode()

    tx_frames = [mrc_frame() for _ in range(30)]
    for raw in tx_frames:
        tb.source.send_nowait(AxiStreamFrame(raw[:-4]))
        tb.expected.sent(raw)
    rx_frames = []
    for _ in range(60):
        kind = rng.random()
        if kind < 0.5:
            frame = mrc_frame()
        elif kind < 0.8:
            frame = flip_covered_byte(rng, mrc_frame())
        else:
            frame = rng.randbytes(rng.randint(14, 300))
        rx_frames.append(await tb.receive_good(frame))
    await tb.check_wire(tx_frames)
    for raw in tx_frames:
        if raw[20] == 17:  # single IPv6: scapy decodes it
            assert raw[-4:] == IPv6(raw[14:])[BTH].compute_icrc(None)
    verdicts = []
    for k, frame in enumerate(rx_frames):
        got = await with_timeout(tb.sink.recv(), 2000, "us")
        assert bytes(got.tdata) == frame, f"RX frame {k} ({len(frame)} octets) differs"
        user = got.tuser if isinstance(got.tuser, int) else got.tuser[-1]
        verdicts.append(user)
        assert user == icrc_ok_model(frame), f"RX frame {k}: tuser {user}"
    assert 0 < sum(verdicts) < len(verdicts)
    await tb.check_counters()


# -- pytest side -------------------------------------------------------------------------------------
MAIN = {"data_width": 8, "max_frame": 9216}
SMALL = {"data_width": 8, "max_frame": 1522, "rx_buffer_bytes": 2048, "tx_buffer_bytes": 2048}
ICRC = {"data_width": 4, "max_frame": 4242, "icrc": True}


@pytest.mark.parametrize("testcase", ["tx_sweep", "rx_sweep", "rx_faults", "back_to_back", "both_directions"])
def test_eth_port(testcase):
    run_cocotb(lambda: PortBench(**MAIN), name="eth_port", module=__name__, params=MAIN, testcase=testcase)


@pytest.mark.parametrize("testcase", ["rx_overflow", "rx_faults"])
def test_eth_port_small(testcase):
    run_cocotb(lambda: PortBench(**SMALL), name="eth_port", module=__name__, params=SMALL, testcase=testcase)


def test_eth_port_icrc():
    run_cocotb(
        lambda: PortBench(**ICRC),
        name="eth_port_icrc",
        module=__name__,
        params=ICRC,
        testcase="icrc_both_ways",
    )
