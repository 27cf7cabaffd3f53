"""RGMII PHY interface (hdl/eth/rgmii.py) on the ECP5 boards of amaranth-boards, without running the
toolchain: the design is prepared for each platform and its RTLIL checked for the DDR registers, the
delay elements (count and ``DEL_VALUE`` taps) and the RX clock constraint; plus the parameter checks.
The behaviour of the pins is tested on Verilator by test_eth_port.py (behavioural model) and the
timing by test_eth_ecp5_build.py (place and route, ``make test-slow``)."""

from __future__ import annotations

import re

import pytest
from amaranth import ClockDomain, ClockSignal, Module
from amaranth.lib import io, wiring
from amaranth_boards.colorlight_5a75b_r7_0 import Colorlight_5A75B_R70Platform
from amaranth_boards.ecpix5 import ECPIX585Platform
from amaranth_boards.versa_ecp5 import VersaECP5Platform

from mrcnic.hdl.eth.gmii import GmiiSignature
from mrcnic.hdl.eth.rgmii import RgmiiPhy, RgmiiPinsSignature, board_delays, request_rgmii


class PhyTop(wiring.Component):
    """Only the PHY interfaces of ``ports`` ports, each with its own RX domain."""

    def __init__(self, ports: int, **phy_params):
        self.ports, self.phy_params = ports, phy_params
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.domains.eth_tx = ClockDomain()
        m.domains.eth_tx90 = ClockDomain(reset_less=True)
        m.submodules.clk = clk = io.Buffer("i", platform.request(platform.default_clk, dir="-"))
        m.d.comb += [ClockSignal("eth_tx").eq(clk.i), ClockSignal("eth_tx90").eq(clk.i)]
        for p in range(self.ports):
            m.domains += ClockDomain(f"eth_rx{p}")
            pins = request_rgmii(platform, p)
            m.submodules[f"phy{p}"] = RgmiiPhy(pins, rx_domain=f"eth_rx{p}", **self.phy_params)
        return m


def prepare(platform, ports, **phy_params):
    plan = platform.prepare(PhyTop(ports, **phy_params), name="top")
    rtlil = plan.files["top.il"]
    lpf = plan.files["top.lpf"]
    cells = re.findall(r"^\s*cell \\(\w+) ", rtlil, re.M)
    taps = [int(v) for v in re.findall(r"parameter \\DEL_VALUE (\d+)", rtlil)]
    return {name: cells.count(name) for name in ("ODDRX1F", "IDDRX1F", "DELAYG")}, sorted(taps), lpf


# Per port: ODDRX1F for TD[3:0], TX_CTL and TXC; IDDRX1F for RD[3:0] and RX_CTL.
@pytest.mark.parametrize(
    "platform, ports, delayg, taps",
    [
        (VersaECP5Platform, 2, 0, []),  # both delays in the 88E1512
        (Colorlight_5A75B_R70Platform, 2, 10, [80] * 10),  # RX data and control delayed 2 ns, both ports
        (ECPIX585Platform, 1, 1, [80]),  # TXC delayed 2 ns
    ],
)
def test_board_defaults(platform, ports, delayg, taps):
    counts, got_taps, lpf = prepare(platform(), ports)
    assert counts == {"ODDRX1F": 6 * ports, "IDDRX1F": 5 * ports, "DELAYG": delayg}
    assert got_taps == taps
    assert len(re.findall(r'FREQUENCY PORT "eth_rgmii_pins_\d+__rx_clk__io" 125000000', lpf)) == ports


def test_explicit_delays_and_pll_clock():
    # Explicit values win over the board's; a 90-degree TX clock replaces the TXC delay element.
    counts, taps, _ = prepare(VersaECP5Platform(), 1, tx_delay=1e-9, rx_delay=0.5e-9)
    assert counts["DELAYG"] == 6 and taps == [20] * 5 + [40]
    counts, taps, _ = prepare(ECPIX585Platform(), 1, tx_clock_domain="eth_tx90")
    assert counts == {"ODDRX1F": 6, "IDDRX1F": 5, "DELAYG": 0}


def test_board_table():
    assert board_delays(VersaECP5Platform()) == (0.0, 0.0)
    assert board_delays(Colorlight_5A75B_R70Platform()) == (0.0, 2e-9)
    assert board_delays(ECPIX585Platform()) == (2e-9, 0.0)


# Components built only to be rejected or inspected are never elaborated.
@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_parameter_checks():
    with pytest.raises(ValueError, match="tx_delay"):
        RgmiiPhy(tx_delay=4e-9)
    with pytest.raises(ValueError, match="rx_delay"):
        RgmiiPhy(rx_delay=-1e-9)
    with pytest.raises(ValueError, match="tx_clock_domain"):
        RgmiiPhy(tx_clock_domain="eth_tx90", tx_delay=2e-9)
    # The model has its pins as ports; with pins it has none.
    model = RgmiiPhy()
    model._MustUse__silence = True  # inspected, never elaborated
    assert "rgmii" in model.signature.members
    assert model.signature.members["gmii"].signature == GmiiSignature().flip()
    assert RgmiiPinsSignature() == RgmiiPinsSignature() and repr(GmiiSignature()) == "GmiiSignature()"


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_model_and_pins_need_the_right_platform():
    with pytest.raises(ValueError, match="simulation model"):
        VersaECP5Platform().prepare(RgmiiPhy(), name="top")
    platform = VersaECP5Platform()
    pins = request_rgmii(platform, 0)
    phy = RgmiiPhy(pins)
    phy._MustUse__silence = True  # never elaborated, on purpose
    with pytest.raises(ValueError, match="needs a platform"):
        phy.elaborate(None)
