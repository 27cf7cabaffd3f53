"""ECP5 clock generation for the board tops: one EHXPLLL with a 125 MHz output (the RGMII / MAC transmit
clock) and the core clock, both from the board's oscillator.

Ref: Lattice FPGA-TN-02200 (ECP5 and ECP5-5G sysClock PLL/DLL Design and Usage Guide): the VCO runs at
400-800 MHz; with the feedback taken from CLKOP, f_CLKOP = f_in * CLKFB_DIV / CLKI_DIV and
f_VCO = f_CLKOP * CLKOP_DIV; each secondary output divides the VCO by its own divider; CPHASE = DIV - 1
(with FPHASE 0) aligns an output with CLKOP.
"""

from __future__ import annotations

from fractions import Fraction

from amaranth import Elaboratable, Instance, Module, Signal

__all__ = ["Ecp5Pll", "pll_dividers"]

VCO_HZ = (400e6, 800e6)
PFD_HZ = (3.125e6, 400e6)


def pll_dividers(f_in: float, f_op: float, f_os: float) -> dict:
    """Dividers for CLKOP = ``f_op`` and CLKOS = ``f_os`` exactly from ``f_in``; ValueError if none."""
    for clkop_div in range(1, 129):
        vco = f_op * clkop_div
        if not VCO_HZ[0] <= vco <= VCO_HZ[1]:
            continue
        os_div = Fraction(vco) / Fraction(f_os)
        if os_div.denominator != 1 or not 1 <= os_div <= 128:
            continue
        ratio = Fraction(f_op) / Fraction(f_in)  # = CLKFB_DIV / CLKI_DIV
        for clki_div in range(1, 129):
            clkfb_div = ratio * clki_div
            if clkfb_div.denominator == 1 and 1 <= clkfb_div <= 128 and PFD_HZ[0] <= f_in / clki_div:
                return dict(
                    clki_div=clki_div, clkfb_div=int(clkfb_div), clkop_div=clkop_div, clkos_div=int(os_div)
                )
    raise ValueError(f"no ECP5 PLL setting makes {f_op / 1e6} MHz and {f_os / 1e6} MHz from {f_in / 1e6} MHz")


class Ecp5Pll(Elaboratable):
    """``clkop`` (``f_op``) and ``clkos`` (``f_os``) from ``clkin`` (``f_in``); ``lock`` is the PLL's lock
    output. The signals are attributes for the parent to use."""

    def __init__(self, clkin, f_in: float, f_op: float, f_os: float):
        self.clkin, self.f_in, self.f_op, self.f_os = clkin, f_in, f_op, f_os
        self.div = pll_dividers(f_in, f_op, f_os)
        self.clkop = Signal(name="clk_op")
        self.clkos = Signal(name="clk_os")
        self.lock = Signal(name="pll_lock")

    def elaborate(self, platform):
        m = Module()
        d = self.div
        m.submodules.pll = Instance(
            "EHXPLLL",
            p_CLKI_DIV=d["clki_div"],
            p_CLKFB_DIV=d["clkfb_div"],
            p_CLKOP_DIV=d["clkop_div"],
            p_CLKOP_CPHASE=d["clkop_div"] - 1,
            p_CLKOP_FPHASE=0,
            p_CLKOP_ENABLE="ENABLED",
            p_CLKOS_DIV=d["clkos_div"],
            p_CLKOS_CPHASE=d["clkos_div"] - 1,
            p_CLKOS_FPHASE=0,
            p_CLKOS_ENABLE="ENABLED",
            p_FEEDBK_PATH="CLKOP",
            i_CLKI=self.clkin,
            i_CLKFB=self.clkop,
            i_RST=0,
            i_STDBY=0,
            i_PHASESEL0=0,
            i_PHASESEL1=0,
            i_PHASEDIR=0,
            i_PHASESTEP=0,
            i_PHASELOADREG=0,
            i_PLLWAKESYNC=0,
            i_ENCLKOP=0,
            i_ENCLKOS=0,
            o_CLKOP=self.clkop,
            o_CLKOS=self.clkos,
            o_LOCK=self.lock,
        )
        # No clock constraints on the outputs: nextpnr derives them from the input's and the dividers
        # ("Derived frequency constraint of 125.0 MHz for net ..."), and Yosys renames these nets anyway.
        return m
