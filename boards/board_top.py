"""Board top levels: the clocking, pins and LEDs of each supported ECP5 board around :class:`NicBoard`.

Ref: docs/boards.md. One RGMII port is one plane: the Lattice Versa ECP5 and the Colorlight 5A-75B are
two-plane NICs, the LambdaConcept ECPIX-5 a one-plane NIC. Platforms come from amaranth-boards; the
RGMII pins are requested without the shared reset/management pins (``request_rgmii``), and every PHY
reset pin is driven inactive once (the PHYs come up from their straps: no MDIO management).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from amaranth import ClockDomain, ClockSignal, Elaboratable, Instance, Module, ResetSignal
from amaranth.build import Attrs, Resource
from amaranth.lib import io
from amaranth.lib.cdc import ResetSynchronizer
from amaranth_boards.colorlight_5a75b_r7_0 import Colorlight_5A75B_R70Platform
from amaranth_boards.ecpix5 import ECPIX585Platform
from amaranth_boards.versa_ecp5 import VersaECP5Platform

from mrcnic.hdl.eth.rgmii import request_rgmii

from .ecp5_pll import Ecp5Pll
from .nic_board import BOARD_NIC, NicBoard

__all__ = ["BOARDS", "BoardSpec", "BoardTop", "nic_setting"]

ETH_HZ = 125e6


@dataclass(frozen=True)
class BoardSpec:
    """One supported board: its amaranth-boards platform, planes (RGMII ports used), core clock, host
    memory, largest frame, the LEDs it has (``"led"``: plain LEDs, ``"rgb_led"``: RGB LEDs whose green
    part is used, None: none free), the openFPGALoader arguments that program it over JTAG (SRAM) and the
    nextpnr seeds a build tries in turn (the next when routing stops converging; the first is the
    documented build's)."""

    platform: type
    planes: int
    core_hz: float
    memory_size: int
    max_frame: int
    leds: str | None
    program: str
    nic: dict = field(default_factory=dict)
    seeds: tuple[int, ...] = (1,)  # nextpnr placement seeds, in the order a build tries them (docs/boards.md)
    # Seeds a build places with before it routes the best placement only (mrcnic.boards.place_best);
    # empty: one placement per seed of ``seeds``.
    place_seeds: tuple[int, ...] = ()
    router: str = "router2"  # nextpnr's router for this board's build
    # nextpnr's timing-driven placement; off leaves less wire to route on a nearly full device, at the
    # cost of the clocks' margins (docs/boards.md, "Colorlight 5A-75B").
    timing_driven_placement: bool = True
    # nextpnr BEL of the core reset's DCCA global buffer; None lets the placer choose.
    reset_buffer_bel: str | None = None
    # Memories (name patterns in the flattened design, Yosys's wildcards) put in block RAM although Yosys
    # would take LUT RAM: on a board short of logic cells and with block RAM to spare (docs/boards.md).
    block_ram: tuple[str, ...] = ()
    # Adders and comparisons up to this many bits in LUTs instead of carry chains (0: none): nextpnr puts
    # a CCU2C more at each end of every chain, so a short one costs more than its LUTs (docs/boards.md).
    # The Ethernet blocks (125 MHz) keep their chains.
    small_arithmetic: int = 0


# The Colorlight's LUT-RAM memories that go to block RAM, with the DP16KD each takes (36 bits a word).
# Not the TX plane-order queue: its read data goes straight into the plane demux's ready/valid logic, and a
# block RAM's 5.8 ns clock-to-output began the core clock's critical path (2026-12-07, docs/boards.md).
COLORLIGHT_BLOCK_RAM = (
    "*.rx.engine.completion_fence.storage",  # 3
    "*.rx.engine.ack_fence.storage",  # 3
    "*.prober.mem",  # 4
    "*.rx.buffer.meta.storage",  # 1
    "*.rx.buffer.records.storage",  # 1
    "*.rx.writer.w_queue.storage",  # 1
    "*.rx.writer.b_queue.storage",  # 1
    "*.tx_fifo.storage",  # 2 in each port: the clock-domain crossing towards the MAC
)

BOARDS = {
    "versa_ecp5": BoardSpec(
        platform=VersaECP5Platform,
        planes=2,
        # The boards' NIC (2 QPs, 8 EV slots, an 8-byte data path at 31.25 MHz: 2 Gb/s through the core,
        # both planes at line rate) without SRv6 (no route templates: single-IPv6 frames only), to fit the
        # 45F: 95 % of its logic cells (docs/boards.md, "Versa ECP5: the bitstream").
        core_hz=31.25e6,
        memory_size=1 << 16,
        # The NIC's largest frame (PMTU 4096, docs/ethernet.md): 6 KiB rings, 12 block RAMs for the four
        # where 9216 would take 20.
        max_frame=4242,
        leds="led",
        program="openFPGALoader -b ecp5_evn",
        nic={"destinations": 0},
        seeds=(3,),
        # router2 came down to 2,841 overused wires and climbed again; router1 finished in 7 minutes.
        router="router1",
        # Placed at the top (TDCC0), router2 found no path from the fabric to the reset buffer's input on
        # three builds: the bottom edge's first DCC.
        reset_buffer_bel="X40/Y71/BDCC0",
    ),
    "colorlight_5a75b": BoardSpec(
        # The only LED shares its pin with the UART's TX (amaranth-boards' UART on J19): no LEDs.
        platform=Colorlight_5A75B_R70Platform,
        planes=2,
        # A 4-byte path at 25 MHz: 0.8 Gb/s through the core (the two planes carry 2). 31.25 MHz was
        # not met on this nearly full device (routed: 26.3-28.6 MHz); 25 MHz is (27.03 MHz, 776f3d4's
        # gateware, docs/boards.md "Colorlight 5A-75B: the bitstream"). 1 Mbaud is then an
        # exact UART divisor (25).
        core_hz=25e6,
        memory_size=1 << 14,
        # PMTU 1024: every frame fits a standard 1500-byte Ethernet MTU (no jumbo frames on the switch),
        # and the NIC's plane FIFOs, frame buffer and the ports' rings need a quarter of the block RAM
        # (the largest frame: 142 header octets, 1024, the ICRC; one block RAM per ring).
        max_frame=1170,
        leds=None,
        program="openFPGALoader -c <your JTAG cable, e.g. ft232RL or dirtyJtag>",
        # The smallest NIC the parameters allow (1 QP, 4 EV slots, a 64-PSN window, no backup EVs, one
        # memory region, a 4-byte path), without SRv6 as the Versa: the boards' NIC is about twice the
        # 25F. One payload read ahead: the on-chip memory answers within a header's time, so the TX line
        # rate is the same as with two (docs/benchmarks.md, "Payload reads ahead") and the parked job
        # needs no second register and multiplexer (about 300 cells).
        nic={
            "qps": 1,
            "ev_slots": 4,
            "window": 64,
            "backups": 0,
            "mrs": 1,
            "data_width": 4,
            "destinations": 0,
            "max_pmtu": 1024,
            "lookahead": 1,
            # The ACK timers' registers span 2.6 ms at 25 MHz (RX_TIMER_WIDTH in NIC_ID), about 200
            # logic cells fewer than 32 bits.
            "rx_timer_width": 16,
        },
        # The block RAM PMTU 1024 leaves (20 of the 56) holds these queues and tables instead of LUT RAM:
        # six logic cells per 16 words of 4 bits there, none here.
        block_ram=COLORLIGHT_BLOCK_RAM,
        small_arithmetic=16,
        # The top edge's DCC (where nextpnr put it) had no free path from the fabric once the clocks
        # were routed, as on the Versa: the bottom edge's (the 25F's DCCs: X31/Y0 top, X31/Y50 bottom).
        reset_buffer_bel="X31/Y50/BDCC0",
        # router2 went from 38,652 overused wires to 16,281 at iteration 7 and climbed; router1 keeps going.
        router="router1",
        # Placed for timing (the default) with seed 2, 87b36ed's gateware routed in 55 minutes with every
        # clock met: core 39.61 MHz, MAC transmit 133.24, receive 147.19 / 143.53 (docs/boards.md,
        # "Colorlight 5A-75B"). At 97 % of the logic cells the route time and the clocks swing with every
        # netlist and seed (seed 1 of the same netlist had 13,436 arcs left after 56 minutes), so the
        # build uses the seed that met; a changed netlist may need another (``--seed``, ``--place-seeds``).
        seeds=(2,),
    ),
    "ecpix5": BoardSpec(
        # One plane: a 31.25 MHz core moves 2 Gb/s (8 bytes a beat), twice the line rate. The whole NIC
        # does not meet 62.5 MHz yet (45.1 MHz after routing at 931f604, docs/boards.md).
        platform=ECPIX585Platform,
        planes=1,
        core_hz=31.25e6,
        memory_size=1 << 16,
        max_frame=9216,
        leds="rgb_led",
        program="openFPGALoader -b ecpix5",
        # router2 converged with some seeds and stalled with others, which ones changing with the netlist;
        # router1 routed at once and left the core 39 % faster (docs/boards.md, "ECPIX-5: the bitstream").
        router="router1",
        seeds=(1, 2, 3),  # in turn if a route stalls (router2 only: router1 reports no progress to watch)
    ),
}


def nic_setting(text: str) -> tuple[str, int]:
    """``"window=128"`` -> ``("window", 128)``: one ``--nic`` item of the board tools (argparse ``type``);
    the key must be one of :data:`~mrcnic.boards.nic_board.BOARD_NIC`, the value an integer."""
    key, sep, value = text.partition("=")
    if not sep or key not in BOARD_NIC:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected KEY=INTEGER with KEY one of {', '.join(BOARD_NIC)}"
        )
    try:
        return key, int(value, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: {value!r} is not an integer") from None


class BoardTop(Elaboratable):
    """The top level of ``board`` (a key of :data:`BOARDS`); ``nic`` overrides NIC parameters, ``core_hz``
    the core clock (the PLL must make it exactly, with the 125 MHz Ethernet clock)."""

    def __init__(self, board: str, *, nic: dict | None = None, core_hz: float | None = None):
        if board not in BOARDS:
            raise ValueError(f"unknown board {board!r}: one of {', '.join(BOARDS)}")
        self.board, self.spec = board, BOARDS[board]
        self.nic_params = {**self.spec.nic, **(nic or {})}
        self.core_hz = core_hz or self.spec.core_hz

    def elaborate(self, platform):
        spec = self.spec
        m = Module()
        m.domains.sync = ClockDomain()
        m.domains.eth_tx = ClockDomain()
        for p in range(spec.planes):
            m.domains += ClockDomain(f"eth_rx{p}")

        clk = platform.lookup(platform.default_clk)
        m.submodules.clk_in = clk_in = io.Buffer("i", platform.request(platform.default_clk, dir="-"))
        m.submodules.pll = pll = Ecp5Pll(clk_in.i, clk.clock.frequency, ETH_HZ, self.core_hz)
        m.d.comb += [ClockSignal("eth_tx").eq(pll.clkop), ClockSignal("sync").eq(pll.clkos)]
        # The core's reset reaches about 23 k flip-flops. nextpnr puts only clocks on the global
        # network, so it went to every tile over fabric wires; through a DCCA global buffer it takes a
        # clock spine instead (docs/boards.md, "ECPIX-5: the bitstream").
        m.domains.sync_lock = ClockDomain()
        m.d.comb += ClockSignal("sync_lock").eq(pll.clkos)
        m.submodules.sync_reset = ResetSynchronizer(~pll.lock, domain="sync_lock")
        placed = {"a_BEL": spec.reset_buffer_bel} if spec.reset_buffer_bel else {}
        m.submodules.sync_reset_global = Instance(
            "DCCA", i_CLKI=ResetSignal("sync_lock"), i_CE=1, o_CLKO=ResetSignal("sync"), **placed
        )
        m.submodules.eth_tx_reset = ResetSynchronizer(~pll.lock, domain="eth_tx")

        self._release_phy_resets(m, platform)
        board = NicBoard(
            planes=spec.planes,
            clock_hz=int(self.core_hz),
            nic=self.nic_params,
            memory_size=spec.memory_size,
            max_frame=spec.max_frame,
            rgmii_pins=[request_rgmii(platform, p) for p in range(spec.planes)],
        )
        m.submodules.board = board

        uart = platform.request("uart", 0, dir={"rx": "-", "tx": "-"})
        m.submodules.uart_rx = uart_rx = io.Buffer("i", uart.rx)
        m.submodules.uart_tx = uart_tx = io.Buffer("o", uart.tx)
        m.d.comb += [board.uart_rx.eq(uart_rx.i), uart_tx.o.eq(board.uart_tx)]

        # LED 0: heartbeat; LED 1 + p: activity of plane p.
        if spec.leds is not None:
            lights = [board.heartbeat, *board.activity]
            for k, light in enumerate(lights):
                if spec.leds == "rgb_led":
                    pin = platform.request("rgb_led", k, dir={"r": "-", "g": "-", "b": "-"}).g
                else:
                    pin = platform.request("led", k, dir="-")
                m.submodules[f"led{k}"] = led = io.Buffer("o", pin)
                m.d.comb += led.o.eq(light)
        return m

    def _release_phy_resets(self, m, platform):
        """Drive each distinct PHY reset pin inactive (the Colorlight's two PHYs share one)."""
        seen = set()
        for p in range(self.spec.planes):
            original = platform.lookup("eth_rgmii", p)
            rst = next((sub for sub in original.ios if sub.name == "rst"), None)
            if rst is None:
                continue
            pins = rst.ios[0]
            key = tuple(pins.names)
            if key in seen:
                continue
            seen.add(key)
            name = f"eth_phy_rst{len(seen) - 1}"
            platform.add_resources([Resource(name, 0, pins, Attrs(**{**original.attrs, **rst.attrs}))])
            port = platform.request(name, 0, dir="-")
            m.submodules[name] = buffer = io.Buffer("o", port)
            m.d.comb += buffer.o.eq(0)  # the pin is active-low (PinsN): 0 = not in reset
