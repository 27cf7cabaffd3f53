"""RGMII PHY interface (1 Gb/s): GMII bytes to and from the RGMII pins, with the clock-to-data skew.

Ref: RGMII specification v2.0 (HP, 2002): §3 (signals ``TXC``, ``TD[3:0]``, ``TX_CTL``, ``RXC``,
``RD[3:0]``, ``RX_CTL``), §3.2 (at 1 Gb/s bits 3:0 of the GMII byte on the rising edge of the 125 MHz
clock, bits 7:4 on the falling edge; ``TX_CTL`` carries ``TX_EN`` on the rising edge and
``TX_EN XOR TX_ER`` on the falling edge, ``RX_CTL`` likewise ``RX_DV`` and ``RX_DV XOR RX_ER``, so an idle
line toggles nothing), §3.3 (timing: the clock must reach the receiver 1.0-2.6 ns after the data, i.e.
about 90 degrees; either the PCB, the transmitter ("RGMII-ID", internal delay) or the receiver adds
it). IEEE Std 802.3-2022 §35.2.2 for the GMII side. Only 1000 Mb/s is supported (no 10/100 nibble mode,
no in-band status decoding).

Members:

* ``gmii``: In(:class:`~mrcnic.hdl.eth.gmii.GmiiSignature`) (the MAC's ``gmii``, flipped): TX signals in
  ``tx_domain``, RX signals out in ``rx_domain``, registered.
* ``rgmii``: only without pins (simulation): Out(:class:`RgmiiPinsSignature`), the six pins as ports.

Clock domains (all defined by the parent, e.g. the board top): ``tx_domain`` (125 MHz, the board's)
drives the TX side; this block *drives* the clock of ``rx_domain`` from the ``RXC`` pin and its reset,
released synchronously to it after the TX domain's reset (``ResetSynchronizer``), so the parent defines
that domain and leaves it undriven. ``tx_clock_domain``, if given, is a copy of the TX clock shifted by
+90 degrees (a second PLL output) that drives ``TXC``.

With pins (``pins``: the ``eth_rgmii`` resource requested with ``dir="-"`` for its clock, control and
data subsignals, e.g. :func:`request_rgmii`; both the ``tx_ctl``/``rx_ctl`` and the ``tx_ctrl``/
``rx_ctrl`` spellings of amaranth-boards are accepted), on ECP5:

* data and control use ``io.DDRBuffer`` (ODDRX1F / IDDRX1F);
* ``TXC`` is a DDR output of (1, 0): from ``tx_clock_domain`` if given (the 90-degree PLL method, no
  delay element), else from the TX domain followed by a ``DELAYG`` of ``tx_delay`` seconds (none if 0);
* ``RD``/``RX_CTL`` pass through a ``DELAYG`` of ``rx_delay`` seconds before the IDDRX1F (none if 0).
  ``RXC`` drives the RX domain through a plain input buffer and gets a 125 MHz clock constraint.

``DELAYG`` is used with ``DEL_MODE="SCLK_ALIGNED"`` and ``DEL_VALUE`` in taps of about 25 ps (at most
127, about 3.2 ns). The right delays depend on how the board's PHY is strapped or configured over MDIO;
``tx_delay``/``rx_delay`` = ``None`` picks the board's entry in :data:`BOARD_DELAYS` by platform class,
else the RGMII v2.0 common case (the PHY delays its receive clock, the FPGA delays ``TXC``: 2 ns / 0).

Without pins (``platform`` must then be ``None``: ``io.DDRBuffer`` exists only on a vendor platform), a
behavioural model with the same pairing of edges, for Verilator and cocotbext-eth's ``RgmiiSource`` /
``RgmiiSink`` (which drive a half-cycle after and sample exactly at the edges of their clock):

* RX: ``rx_data``/``rx_ctl`` are sampled at the rising edge of ``rx_clk`` (bits 3:0, ``RX_DV``) and at
  the next falling edge (bits 7:4, ``RX_DV XOR RX_ER``); the pair is presented one cycle later.
* TX: the byte registered at a rising edge of the TX clock is on ``tx_data``/``tx_ctl`` as bits 3:0 while
  that clock is high and bits 7:4 while it is low; ``tx_clk`` is the clock of ``tx_clock_domain``
  (pass a domain clocked 2 ns after the TX clock, as a PLL's 90-degree output would be, so the sink
  samples mid-bit) or, without it, the TX clock itself (edge aligned, for a PHY that adds the delay).
"""

from __future__ import annotations

from amaranth import Cat, ClockDomain, ClockSignal, Const, Instance, Module, Mux, ResetSignal, Signal
from amaranth.build import Attrs, Resource, ResourceError
from amaranth.lib import io, wiring
from amaranth.lib.cdc import ResetSynchronizer
from amaranth.lib.wiring import In, Out

from .gmii import GmiiSignature

__all__ = ["BOARD_DELAYS", "DELAY_TAP_SECONDS", "RgmiiPhy", "RgmiiPinsSignature", "request_rgmii"]

DELAY_TAP_SECONDS = 25e-12
MAX_DELAY_TAPS = 127
CLOCK_HZ = 125e6

# (tx_delay, rx_delay) in seconds per amaranth-boards platform class (matched along the class's MRO).
# They follow how each board's PHY comes up without MDIO configuration, as used on hardware by LiteX's
# targets for the same boards; none has been tried on hardware with this design yet.
BOARD_DELAYS = {
    # Marvell 88E1512: its straps enable both internal RGMII delays.
    "VersaECP5Platform": (0.0, 0.0),
    # Broadcom B50612D: delays its TXC internally, not RXC.
    "Colorlight_5A75B_R70Platform": (0.0, 2e-9),
    # Realtek RTL8211FD: delays RXC internally, not TXC.
    "_ECPIX5Platform": (2e-9, 0.0),
}
DEFAULT_DELAYS = (2e-9, 0.0)


class RgmiiPinsSignature(wiring.Signature):
    """The RGMII pins as the FPGA drives them (the MAC side): ``tx_*`` Out, ``rx_*`` In."""

    def __init__(self):
        super().__init__(
            {
                "tx_clk": Out(1),
                "tx_ctl": Out(1),
                "tx_data": Out(4),
                "rx_clk": In(1),
                "rx_ctl": In(1),
                "rx_data": In(4),
            }
        )

    def __eq__(self, other):
        return isinstance(other, RgmiiPinsSignature)

    def __repr__(self):
        return "RgmiiPinsSignature()"


_PIN_SUBSIGNALS = ("tx_clk", "tx_ctl", "tx_ctrl", "tx_data", "rx_clk", "rx_ctl", "rx_ctrl", "rx_data")


def request_rgmii(platform, number: int = 0, resource: str = "eth_rgmii"):
    """The RGMII clock, control and data pins of an ``eth_rgmii`` resource, as raw ports for
    :class:`RgmiiPhy`.

    They are requested as a derived resource ``<resource>_pins`` holding only those subsignals (same
    pins and attributes), because on some boards (Colorlight 5A-75B) the two ports' resources share the
    ``rst``/``mdc``/``mdio`` pins and cannot both be requested. The caller drives the PHY reset and
    management pins through resources of its own, if it needs them."""
    original = platform.lookup(resource, number)
    name = f"{resource}_pins"
    try:
        platform.lookup(name, number)
    except ResourceError:
        subsignals = [sub for sub in original.ios if sub.name in _PIN_SUBSIGNALS]
        platform.add_resources([Resource(name, number, *subsignals, Attrs(**original.attrs))])
    subsignals = [sub.name for sub in platform.lookup(name, number).ios]
    return platform.request(name, number, dir={sub: "-" for sub in subsignals})


def _pin(pins, *names):
    for name in names:
        if hasattr(pins, name):
            return getattr(pins, name)
    raise AttributeError(f"RGMII pins have none of {names}")


def _taps(delay: float, what: str) -> int:
    taps = round(delay / DELAY_TAP_SECONDS)
    if not 0 <= taps <= MAX_DELAY_TAPS:
        raise ValueError(f"{what} {delay} s is outside 0..{MAX_DELAY_TAPS * DELAY_TAP_SECONDS} s")
    return taps


def board_delays(platform) -> tuple[float, float]:
    """The (tx_delay, rx_delay) of :data:`BOARD_DELAYS` for ``platform``, or the common default."""
    for cls in type(platform).__mro__:
        if cls.__name__ in BOARD_DELAYS:
            return BOARD_DELAYS[cls.__name__]
    return DEFAULT_DELAYS


class RgmiiPhy(wiring.Component):
    """Parameters: ``pins`` (None: behavioural model), ``tx_domain``, ``rx_domain``, ``tx_clock_domain``,
    ``tx_delay`` / ``rx_delay`` (seconds, None: per board)."""

    def __init__(
        self,
        pins=None,
        *,
        tx_domain: str = "eth_tx",
        rx_domain: str = "eth_rx",
        tx_clock_domain: str | None = None,
        tx_delay: float | None = None,
        rx_delay: float | None = None,
    ):
        self._pins = pins
        self.tx_domain, self.rx_domain, self.tx_clock_domain = tx_domain, rx_domain, tx_clock_domain
        self.tx_delay, self.rx_delay = tx_delay, rx_delay
        for value, what in ((tx_delay, "tx_delay"), (rx_delay, "rx_delay")):
            if value is not None:
                _taps(value, what)
        if tx_clock_domain is not None and tx_delay:
            raise ValueError("tx_clock_domain already shifts TXC; tx_delay must be 0 or None with it")
        members = {"gmii": In(GmiiSignature())}
        if pins is None:
            members["rgmii"] = Out(RgmiiPinsSignature())
        super().__init__(members)

    def elaborate(self, platform):
        if self._pins is None and platform is not None:
            raise ValueError("RgmiiPhy without pins is the simulation model; give it pins on a platform")
        if self._pins is not None and platform is None:
            raise ValueError("RgmiiPhy with pins needs a platform: io.DDRBuffer cannot be simulated")
        m = Module()
        m.submodules.rx_reset = ResetSynchronizer(ResetSignal(self.tx_domain), domain=self.rx_domain)
        if self._pins is None:
            self._elaborate_model(m)
        else:
            self._elaborate_pins(m, platform)
        return m

    # -- behavioural model ------------------------------------------------------------------------------
    def _elaborate_model(self, m):
        tx, rx = self.tx_domain, self.rx_domain
        gmii, pins = self.gmii, self.rgmii

        m.d.comb += ClockSignal(rx).eq(pins.rx_clk)
        m.domains.rgmii_rx_fall = ClockDomain("rgmii_rx_fall", clk_edge="neg", local=True, reset_less=True)
        m.d.comb += ClockSignal("rgmii_rx_fall").eq(pins.rx_clk)
        rise = Signal(5)
        fall = Signal(5)
        m.d[rx] += rise.eq(Cat(pins.rx_data, pins.rx_ctl))
        m.d.rgmii_rx_fall += fall.eq(Cat(pins.rx_data, pins.rx_ctl))
        # At the rising edge after a pair of samples: ``rise`` is from the previous rising edge and
        # ``fall`` from the falling edge after it.
        self._drive_rx(m, rise[:4], fall[:4], rise[4], fall[4])

        low = Signal(5)
        high = Signal(5)
        m.d[tx] += [
            low.eq(Cat(gmii.txd[:4], gmii.tx_en)),
            high.eq(Cat(gmii.txd[4:], gmii.tx_en ^ gmii.tx_er)),
        ]
        phase = ClockSignal(tx)
        m.d.comb += [
            pins.tx_data.eq(Mux(phase, low[:4], high[:4])),
            pins.tx_ctl.eq(Mux(phase, low[4], high[4])),
            pins.tx_clk.eq(ClockSignal(self.tx_clock_domain or tx)),
        ]

    def _drive_rx(self, m, data_rise, data_fall, ctl_rise, ctl_fall):
        gmii = self.gmii
        m.d[self.rx_domain] += [
            gmii.rxd.eq(Cat(data_rise, data_fall)),
            gmii.rx_dv.eq(ctl_rise),
            gmii.rx_er.eq(ctl_rise ^ ctl_fall),
        ]

    # -- ECP5 pins --------------------------------------------------------------------------------------
    def _elaborate_pins(self, m, platform):
        tx, rx = self.tx_domain, self.rx_domain
        gmii, pins = self.gmii, self._pins
        tx_delay, rx_delay = board_delays(platform)
        tx_delay = tx_delay if self.tx_delay is None else self.tx_delay
        rx_delay = rx_delay if self.rx_delay is None else self.rx_delay
        if self.tx_clock_domain is not None:
            tx_delay = 0.0
        tx_taps, rx_taps = _taps(tx_delay, "tx_delay"), _taps(rx_delay, "rx_delay")

        # TX: data and control through DDR output registers of the TX domain.
        m.submodules.tx_data = tx_data = io.DDRBuffer("o", _pin(pins, "tx_data"), o_domain=tx)
        m.submodules.tx_ctl = tx_ctl = io.DDRBuffer("o", _pin(pins, "tx_ctl", "tx_ctrl"), o_domain=tx)
        m.d.comb += [
            tx_data.o[0].eq(gmii.txd[:4]),
            tx_data.o[1].eq(gmii.txd[4:]),
            tx_ctl.o[0].eq(gmii.tx_en),
            tx_ctl.o[1].eq(gmii.tx_en ^ gmii.tx_er),
        ]
        tx_clk_pin = _pin(pins, "tx_clk")
        if tx_taps == 0:
            m.submodules.tx_clk = tx_clk = io.DDRBuffer("o", tx_clk_pin, o_domain=self.tx_clock_domain or tx)
            m.d.comb += [tx_clk.o[0].eq(1), tx_clk.o[1].eq(0)]
        else:
            # The delay element sits between the DDR register and the pad, which io.DDRBuffer hides.
            m.submodules.tx_clk = tx_clk = io.Buffer("o", tx_clk_pin)
            ddr, delayed = Signal(), Signal()
            m.submodules.tx_clk_ddr = Instance(
                "ODDRX1F", i_SCLK=ClockSignal(tx), i_RST=Const(0), i_D0=Const(1), i_D1=Const(0), o_Q=ddr
            )
            m.submodules.tx_clk_delay = Instance(
                "DELAYG", p_DEL_MODE="SCLK_ALIGNED", p_DEL_VALUE=tx_taps, i_A=ddr, o_Z=delayed
            )
            m.d.comb += tx_clk.o.eq(delayed)

        # RX clock: the PHY's RXC clocks the RX domain.
        rx_clk_pin = _pin(pins, "rx_clk")
        m.submodules.rx_clk = rx_clk = io.Buffer("i", rx_clk_pin)
        m.d.comb += ClockSignal(rx).eq(rx_clk.i)
        # On the pad (FREQUENCY PORT): a constraint on the buffer's net may not survive synthesis.
        platform.add_clock_constraint(getattr(rx_clk_pin, "io", rx_clk.i), CLOCK_HZ)

        # RX data and control.
        rx_data_pin, rx_ctl_pin = _pin(pins, "rx_data"), _pin(pins, "rx_ctl", "rx_ctrl")
        if rx_taps == 0:
            m.submodules.rx_data = rx_data = io.DDRBuffer("i", rx_data_pin, i_domain=rx)
            m.submodules.rx_ctl = rx_ctl = io.DDRBuffer("i", rx_ctl_pin, i_domain=rx)
            rising = Cat(rx_data.i[0], rx_ctl.i[0])
            falling = Cat(rx_data.i[1], rx_ctl.i[1])
        else:
            rising, falling = Signal(5), Signal(5)
            for name, pin, bits in (
                ("rx_data", rx_data_pin, range(0, 4)),
                ("rx_ctl", rx_ctl_pin, range(4, 5)),
            ):
                m.submodules[name] = buf = io.Buffer("i", pin)
                for k, bit in enumerate(bits):
                    delayed = Signal(name=f"{name}{k}_delayed")
                    m.submodules[f"{name}{k}_delay"] = Instance(
                        "DELAYG", p_DEL_MODE="SCLK_ALIGNED", p_DEL_VALUE=rx_taps, i_A=buf.i[k], o_Z=delayed
                    )
                    m.submodules[f"{name}{k}_ddr"] = Instance(
                        "IDDRX1F",
                        i_SCLK=ClockSignal(rx),
                        i_RST=Const(0),
                        i_D=delayed,
                        o_Q0=rising[bit],
                        o_Q1=falling[bit],
                    )
        self._drive_rx(m, rising[:4], falling[:4], rising[4], falling[4])
