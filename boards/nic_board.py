"""Everything a board's FPGA holds except its clocking and its pins: the NIC, one Ethernet port per plane,
the on-chip host memory and the UART host bridge.

Ref: docs/boards.md (what each board gets, the address map, how to build and program); docs/ethernet.md
(ports), docs/uart-bridge.md (the host's protocol), docs/host-interface.md (registers, queues, memory).

::

    uart_rx/tx ► UartBridge ─ registers (AXI4-Lite) ─► MrcNicTop ◄─► EthernetPort[p] ◄─► RgmiiPhy[p] ◄─► pins
                     └──── memory (AXI4-Lite) ─► HostMemory ◄─ m_axi (AXI4) ┘

Clock domains, defined by the parent (a board top, or a testbench): ``sync`` (the core clock: NIC, host
memory, bridge; ``clock_hz``), ``eth_tx`` (125 MHz, the MACs' transmit side) and, per plane, ``eth_rx<p>``
which the PHY interface drives from the port's receive clock (the parent defines the domain and leaves it
undriven). On boards the PHYs or ``DELAYG`` elements provide the RGMII clock skew
(``mrcnic.hdl.eth.rgmii.BOARD_DELAYS``); a simulation passes a 90-degree TX clock domain instead
(``phy_tx_clock_domain``).

Members:

* ``uart_rx`` (In), ``uart_tx`` (Out): the bridge's serial pins (8N1, ``baud``).
* ``rgmii``: without pins only (simulation): Out(:class:`~mrcnic.hdl.eth.rgmii.RgmiiPinsSignature`) per
  plane, the RGMII pins of the behavioural PHY model.
* ``activity`` (Out(planes)): a frame was sent or received on the plane in the last ``activity_cycles``
  (an LED blinks while traffic flows); ``heartbeat`` (Out(1)): toggles every 2^24 core cycles, so a
  board shows that its bitstream runs.
* ``stat_uart_<name>`` for the bridge's counters, ``stat_mac<p>_<name>`` for every port's MAC counters
  (:data:`mrcnic.hdl.eth.counters.COUNTERS`): Out(32), in the core domain. The drop counters
  (``mrcnic.regmap.MAC_COUNTERS``) are also wired to the NIC, so software reads them in the PORT blocks
  (``MAC_RX_BAD_FCS``, ...) next to the NIC's own per-plane frame and byte counters, and so are the
  bridge's (``HOST_LINK_BAD_CRC``, ... in the COUNTERS block).

Address map of the host memory: bytes [0, ``memory_size``) on the NIC's ``m_axi`` and on the bridge's
``memory`` port alike (the driver's ``uart:`` default window, ``DEFAULT_MEMORY_BASE`` /
``DEFAULT_MEMORY_SIZE``); other addresses answer DECERR.

Link status. A board without MDIO management cannot read its PHYs' link status, so every plane's
``link_up`` input to the NIC is 1 and software takes a plane out of service with its ``LINK_UP``
register (docs/registers.md); the activity outputs show whether frames flow.
"""

from __future__ import annotations

from amaranth import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mrcnic.hdl.eth.counters import COUNTERS as MAC_COUNTERS
from mrcnic.hdl.eth.port import EthernetPort
from mrcnic.hdl.eth.rgmii import RgmiiPhy, RgmiiPinsSignature
from mrcnic.hdl.host.host_memory import HostMemory
from mrcnic.hdl.host.nic_top import ID_WIDTH, MrcNicTop
from mrcnic.hdl.host.uart import DIVISOR_BITS
from mrcnic.hdl.host.uart_bridge import COUNTERS as UART_COUNTERS
from mrcnic.hdl.host.uart_bridge import UartBridge
from mrcnic.regmap import HOST_LINK_COUNTERS
from mrcnic.regmap import MAC_COUNTERS as REGISTER_MAC_COUNTERS

__all__ = ["BOARD_NIC", "NicBoard", "board_nic_parameters"]

# The NIC configuration of the boards: 1 Gb/s planes need little of the core (8 bytes per beat at the
# core clock is several times the line rate), so the tables are sized for the small ECP5s. Two payload
# reads ahead hide the on-chip host memory's few cycles, and keep the parked jobs (about 500 bits each)
# in flip-flops: four took 123 LUT-RAM blocks, 738 logic cells (docs/boards.md). The ports append and check
# the ICRC an octet per cycle, far smaller than the core's 4- or 8-byte ICRC engines (``port_icrc``).
BOARD_NIC = dict(
    data_width=8,
    qps=2,
    ev_slots=8,
    backups=1,
    window=64,
    mrs=4,
    destinations=2,
    lookahead=2,
    port_icrc=1,
    max_pmtu=4096,
)


def board_nic_parameters(memory_size: int, nic: dict | None = None) -> dict:
    """The ``MrcNicTop`` parameters of a board with ``memory_size`` bytes of host memory: :data:`BOARD_NIC`,
    then ``addr_width``, then ``nic``'s overrides. The NIC reaches just the host memory: its addresses,
    descriptors and region checks are that wide (about 1,000 logic cells and 1,250 flip-flops fewer than
    64 bits on the Colorlight's smallest NIC, docs/benchmarks.md); the AXI address is at least 12 bits."""
    memory_bits = max(12, (memory_size - 1).bit_length())
    return {**BOARD_NIC, "addr_width": memory_bits, **(nic or {})}


class NicBoard(wiring.Component):
    """Parameters: ``planes`` (Ethernet ports), ``clock_hz`` (core clock), ``nic`` (``MrcNicTop``
    parameters other than ``planes`` and ``clock_hz``; default :data:`BOARD_NIC`), ``memory_size``
    (bytes of host memory), ``max_frame`` (octets with FCS, per port), ``baud`` (UART), ``rgmii_pins``
    (one pin record per plane from :func:`~mrcnic.hdl.eth.rgmii.request_rgmii`, or None for the
    behavioural PHY model), ``activity_cycles``, ``uart_timeout`` (core cycles the bridge waits for a bus
    access), ``phy_tx_clock_domain`` (the PHYs' ``tx_clock_domain``: a simulation's 90-degree TX clock,
    so the peer's behavioural model samples mid-bit; None on boards)."""

    def __init__(
        self,
        *,
        planes: int,
        clock_hz: int,
        nic: dict | None = None,
        memory_size: int = 1 << 16,
        max_frame: int = 9216,
        baud: int = 1_000_000,
        rgmii_pins: list | None = None,
        activity_cycles: int | None = None,
        uart_timeout: int = 1 << 16,
        phy_tx_clock_domain: str | None = None,
    ):
        self.planes, self.clock_hz, self.memory_size, self.baud = planes, int(clock_hz), memory_size, baud
        self.nic_params = board_nic_parameters(memory_size, nic)
        divisor = self.clock_hz // baud
        if not 4 <= divisor < 1 << DIVISOR_BITS:
            raise ValueError(f"{baud} baud at {clock_hz} Hz needs a divisor of {divisor}: must be 4..65535")
        if abs(self.clock_hz / divisor - baud) > 0.02 * baud:
            raise ValueError(
                f"{baud} baud is {self.clock_hz / divisor:.0f} baud at {clock_hz} Hz: over 2% off"
            )
        self.divisor = divisor
        if rgmii_pins is not None and len(rgmii_pins) != planes:
            raise ValueError(f"{planes} planes need {planes} RGMII pin records, not {len(rgmii_pins)}")
        self._pins = rgmii_pins
        self.phy_tx_clock_domain = phy_tx_clock_domain
        self.activity_cycles = activity_cycles or self.clock_hz // 20  # 50 ms
        self._nic = MrcNicTop(planes=planes, clock_hz=self.clock_hz, **self.nic_params)
        self._memory = HostMemory(
            size=memory_size,
            data_width_bytes=self.nic_params["data_width"],
            id_width=ID_WIDTH + 1,
            addr_width=self.nic_params["addr_width"],
            lite_addr_width=32,
        )
        self._bridge = UartBridge(reg_addr_width=16, mem_addr_width=32, timeout=uart_timeout)
        self._ports = [
            EthernetPort(
                data_width=self.nic_params["data_width"],
                max_frame=max_frame,
                rx_domain=f"eth_rx{p}",
                icrc=bool(self.nic_params["port_icrc"]),
            )
            for p in range(planes)
        ]
        members = {
            "uart_rx": In(1, init=1),
            "uart_tx": Out(1, init=1),
            "activity": Out(planes),
            "heartbeat": Out(1),
            **{f"stat_uart_{name}": Out(32) for name in UART_COUNTERS},
            **{f"stat_mac{p}_{name}": Out(32) for p in range(planes) for name in MAC_COUNTERS},
        }
        if rgmii_pins is None:
            members["rgmii"] = Out(RgmiiPinsSignature()).array(planes)
        super().__init__(members)

    @property
    def caps(self):
        """The NIC's capabilities (``mrcnic.regmap.Capabilities``), as its NIC_ID block publishes them."""
        return self._nic.caps

    def elaborate(self, platform):
        m = Module()
        nic, memory, bridge = self._nic, self._memory, self._bridge
        m.submodules.nic = nic
        m.submodules.host_memory = memory
        m.submodules.uart_bridge = bridge

        m.d.comb += [
            bridge.rx.eq(self.uart_rx),
            self.uart_tx.eq(bridge.tx),
            bridge.divisor.eq(self.divisor),
            nic.link_up.eq((1 << self.planes) - 1),
        ]
        wiring.connect(m, bridge.registers, nic.s_axil)
        wiring.connect(m, bridge.memory, memory.axil)
        wiring.connect(m, nic.m_axi, memory.axi)
        for name in UART_COUNTERS:
            m.d.comb += getattr(self, f"stat_uart_{name}").eq(getattr(bridge, f"stat_{name}"))
        for name, _ in HOST_LINK_COUNTERS:  # the same counters, for the NIC's COUNTERS block
            m.d.comb += getattr(nic, f"stat_host_link_{name}").eq(getattr(bridge, f"stat_{name}"))

        heartbeat = Signal(24)
        m.d.sync += heartbeat.eq(heartbeat + 1)
        m.d.comb += self.heartbeat.eq(heartbeat[-1])

        for p, port in enumerate(self._ports):
            pins = None if self._pins is None else self._pins[p]
            phy = RgmiiPhy(
                pins, tx_domain="eth_tx", rx_domain=f"eth_rx{p}", tx_clock_domain=self.phy_tx_clock_domain
            )
            m.submodules[f"port{p}"], m.submodules[f"phy{p}"] = port, phy
            wiring.connect(m, port.gmii, phy.gmii)
            if pins is None:
                wiring.connect(m, phy.rgmii, wiring.flipped(self.rgmii[p]))
            wiring.connect(m, nic.m_axis[p], port.s_axis)
            wiring.connect(m, port.m_axis, nic.s_axis[p])
            for name in MAC_COUNTERS:
                m.d.comb += getattr(self, f"stat_mac{p}_{name}").eq(getattr(port, name))
            for name in REGISTER_MAC_COUNTERS:  # the drop counters, for the PORT blocks
                m.d.comb += getattr(nic, f"mac_{name}")[p].eq(getattr(port, name))

            # Activity: any frame through the port in the last activity_cycles (core domain). Each counter
            # moves by at most one a cycle, so its low two bits show every change (and synthesis keeps
            # only those bits of the port's frame counters).
            frames = Cat(port.tx_frames[:2], port.rx_frames[:2])
            seen = Signal(4, name=f"frames_seen{p}")
            quiet = Signal(range(self.activity_cycles + 1), name=f"quiet{p}")
            m.d.sync += seen.eq(frames)
            with m.If(seen != frames):
                m.d.sync += quiet.eq(self.activity_cycles)
            with m.Elif(quiet != 0):
                m.d.sync += quiet.eq(quiet - 1)
            m.d.comb += self.activity[p].eq(quiet != 0)
        return m
