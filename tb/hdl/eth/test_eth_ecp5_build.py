"""Ethernet ports through synthesis and place-and-route for the ECP5 boards (``make test-slow``).

Each board gets every RGMII port it has, as a loopback (frames received are sent back through a small
FIFO in the core domain), with the core
and TX domains on one 125 MHz PLL output and the counters kept alive through a pipelined XOR to an LED;
nextpnr fails the build if a 125 MHz clock does not meet timing. The maximum frequencies and the
utilisation are printed (docs/ethernet.md records them). About a minute per board.
"""

from __future__ import annotations

import re

import pytest
from amaranth import Cat, ClockDomain, ClockSignal, Module, Signal
from amaranth.lib import fifo, io, wiring
from amaranth.lib.cdc import ResetSynchronizer
from amaranth_boards.colorlight_5a75b_r7_0 import Colorlight_5A75B_R70Platform
from amaranth_boards.ecpix5 import ECPIX585Platform
from amaranth_boards.versa_ecp5 import VersaECP5Platform

from mrcnic.boards.ecp5_pll import Ecp5Pll
from mrcnic.hdl.eth.counters import COUNTERS
from mrcnic.hdl.eth.port import EthernetPort
from mrcnic.hdl.eth.rgmii import RgmiiPhy, request_rgmii
from mrcnic.toolchain import apply_tool_environment

from support.cocotb_runner import REPO_ROOT


class LoopbackTop(wiring.Component):
    def __init__(self, ports: int, max_frame: int):
        self.ports, self.max_frame = ports, max_frame
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = ClockDomain()
        m.domains.eth_tx = ClockDomain()
        m.submodules.clk_in = clk_in = io.Buffer("i", platform.request(platform.default_clk, dir="-"))
        f_in = platform.lookup(platform.default_clk).clock.frequency
        m.submodules.pll = pll = Ecp5Pll(clk_in.i, f_in, 125e6, 125e6)
        clk, lock = pll.clkop, pll.lock
        m.d.comb += [ClockSignal("sync").eq(clk), ClockSignal("eth_tx").eq(clk)]
        m.submodules.sync_reset = ResetSynchronizer(~lock, domain="sync")
        m.submodules.tx_reset = ResetSynchronizer(~lock, domain="eth_tx")
        counters = []
        for p in range(self.ports):
            m.domains += ClockDomain(f"eth_rx{p}")
            port = EthernetPort(max_frame=self.max_frame, rx_domain=f"eth_rx{p}")
            phy = RgmiiPhy(request_rgmii(platform, p), rx_domain=f"eth_rx{p}")
            m.submodules[f"port{p}"], m.submodules[f"phy{p}"] = port, phy
            wiring.connect(m, port.gmii, phy.gmii)
            # Looped back through a FIFO, as a core would register its ports (two AsyncFIFOs back to back
            # would make one long ready path that no real design has).
            m.submodules[f"loop{p}"] = loop = fifo.SyncFIFOBuffered(width=8 * 8 + 8 + 1, depth=4)
            m.d.comb += [
                loop.w_data.eq(Cat(port.m_axis.tdata, port.m_axis.tkeep, port.m_axis.tlast)),
                loop.w_en.eq(port.m_axis.tvalid),
                port.m_axis.tready.eq(loop.w_rdy),
                Cat(port.s_axis.tdata, port.s_axis.tkeep, port.s_axis.tlast).eq(loop.r_data),
                port.s_axis.tvalid.eq(loop.r_rdy),
                loop.r_en.eq(port.s_axis.tready),
            ]
            counters += [getattr(port, name) for name in COUNTERS]
        if "rgb_led" in {name for name, _ in platform.resources}:
            led = platform.request("rgb_led", 0, dir={"r": "-", "g": "-", "b": "-"}).r
        else:
            led = platform.request("led", 0, dir="-")
        m.submodules.led = led_buf = io.Buffer("o", led)
        parts = [Signal(name=f"xor{k}") for k in range(len(counters))]
        m.d.sync += [part.eq(counter.xor()) for part, counter in zip(parts, counters, strict=True)]
        m.d.sync += led_buf.o.eq(Cat(*parts).xor())
        return m


BOARDS = {
    # board: (platform, ports, max_frame)
    "versa_ecp5": (VersaECP5Platform, 2, 9216),
    "colorlight_5a75b_r7_0": (Colorlight_5A75B_R70Platform, 2, 4242),
    "ecpix5_85": (ECPIX585Platform, 1, 9216),
}


@pytest.mark.slow
@pytest.mark.parametrize("board", list(BOARDS))
def test_eth_ecp5_build(board, monkeypatch):
    apply_tool_environment()
    # amaranth-boards names a programmer for these boards; nothing is programmed here.
    monkeypatch.setenv("OPENFPGALOADER", "true")
    platform_cls, ports, max_frame = BOARDS[board]
    build_dir = REPO_ROOT / "build" / "eth_ecp5" / board
    platform_cls().build(
        LoopbackTop(ports, max_frame), name="top", build_dir=str(build_dir), do_program=False
    )
    report = (build_dir / "top.tim").read_text()
    # Pre- and post-route figures: the dict keeps the last (post-route) one of each clock.
    fmax = dict(re.findall(r"Max frequency for clock\s+'\$glbnet\$([^']+)': ([\d.]+) MHz", report))
    use = dict(
        re.findall(r"^Info:\s+(DP16KD|TRELLIS_COMB|TRELLIS_FF|DELAYG|TRELLIS_RAMW):\s+(\d+)/", report, re.M)
    )
    print(f"{board}: {ports} port(s), max_frame {max_frame}: fmax {fmax} MHz, use {use}")
    assert fmax and all(float(f) >= 125 for f in fmax.values())
