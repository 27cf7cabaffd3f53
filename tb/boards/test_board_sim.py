"""Two board tops cabled to each other, simulated end to end (Verilator): the driver reaches each board
only over its simulated UART and performs an RDMA WRITE that crosses both planes.

The bench is two :class:`~mrcnic.boards.nic_board.NicBoard` (everything on a board's FPGA but its PLL and
pins: NIC, Ethernet MACs, behavioural RGMII PHYs, host memory, UART bridge) with their RGMII pins crossed
plane by plane, as two two-plane boards joined by two cables. Board A has the boards' default NIC (two
QPs, 8 EV slots, an 8-byte data path, SRv6); board B the Colorlight 5A-75B's (the smallest NIC: one QP,
4 EV slots, no backup EVs, one memory region, a 4-byte data path, PMTU 1024, no SRv6): in single-IPv6
mode the two interwork. Each board has its own
clocks, slightly off from the other's (core 62.5 MHz and TX 125 MHz, +-100 ppm), so every frame crosses
real clock-domain boundaries: RGMII at the pins, the MACs' FIFOs into the core domain.

On each side a bit-level UART model (:class:`~support.sim_uart.SimUart`) is the byte stream of the
driver's ``uart:`` transport (:class:`~mrcnic.driver.uart_backend.UartTransport`), exactly what
``mrcnic.driver.open("uart:///dev/ttyUSB1")`` uses on hardware. The test then only calls the driver:

* open both NICs (discovery reads the NIC_ID block over the UART), check the capabilities (B: no SRv6,
  and the driver refuses a route template before anything is sent);
* connect one QP each (:func:`~mrcnic.driver.fabric_setup.connect_cabled`: single-IPv6 mode, each port's
  next hop the peer's port, EV profiles over both planes);
* write a random pattern into board A's host memory through the bridge, register a memory region on
  board B, post an RDMA WRITE of it (PMTU 256: many packets, sprayed over both planes) and one
  WRITE_IMM, poll the completions on both sides;
* read board B's memory back through its bridge: the region holds the pattern byte for byte and the
  guard bytes around it are untouched;
* per-plane port counters (NIC registers) show data frames on both planes; the MACs' drop counters, read
  by the driver in the PORT blocks and on the bench's outputs, show no FCS error, runt or overflow; the
  UART bridges no bad frames, on their outputs and in the NIC's HOST_LINK_* counters alike.

Seeds: the harness prints one (``SEED=<n>`` reproduces).
"""

from __future__ import annotations

import random

import cocotb
import pytest
from amaranth import ClockDomain, ClockSignal, DomainRenamer, Module, ResetSignal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Timer

from mrcnic import driver
from mrcnic.boards.board_top import BOARDS
from mrcnic.boards.nic_board import NicBoard
from mrcnic.driver.fabric_setup import connect_cabled
from mrcnic.driver.uart_backend import UartTransport
from mrcnic.hdl.eth.counters import COUNTERS as MAC_COUNTERS
from mrcnic.hdl.host.uart_bridge import COUNTERS as UART_COUNTERS
from mrcnic.regmap import MAC_COUNTERS as REGISTER_MAC_COUNTERS
from mrcnic.wire import RouteTemplate

from support.cocotb_runner import run_cocotb
from support.sim_uart import SimUart

PLANES = 2
CORE_HZ = 62_500_000
DIVISOR = 4  # core cycles per UART bit in simulation, the bridge's minimum (1 Mbaud on hardware)
MEMORY = 1 << 14
SIDES = ("a", "b")
# Per side: core and TX clock periods (ps), a little off from each other.
CORE_PS = {"a": 16_000, "b": 15_998}
TX_PS = {"a": 8_000, "b": 8_001}
TX90_PS = 2_000  # the simulated 90-degree TX clock lags by a quarter period
# B: the Colorlight's NIC (the smallest: 1 QP, a 4-byte path, no SRv6, PMTU 1024 at most)
NIC = {"a": None, "b": BOARDS["colorlight_5a75b"].nic}


class CableBench(wiring.Component):
    """Two NicBoards, plane p of one cabled to plane p of the other. Per side ``s``: clock and reset
    inputs of its core and TX domains, its UART pins, its MAC and bridge counters."""

    def __init__(self):
        self._boards = {
            s: NicBoard(
                planes=PLANES,
                clock_hz=CORE_HZ,
                memory_size=MEMORY,
                max_frame=2048,
                baud=CORE_HZ // DIVISOR,
                phy_tx_clock_domain="eth_tx90",
                uart_timeout=4096,
                nic=NIC[s],
            )
            for s in SIDES
        }
        members = {}
        for s in SIDES:
            members.update(
                {
                    f"{s}_core_clk": In(1),
                    f"{s}_core_rst": In(1),
                    f"{s}_eth_tx_clk": In(1),
                    f"{s}_eth_tx_rst": In(1),
                    f"{s}_eth_tx90_clk": In(1),
                    f"{s}_uart_rx": In(1, init=1),
                    f"{s}_uart_tx": Out(1),
                    f"{s}_activity": Out(PLANES),
                    **{f"{s}_mac{p}_{name}": Out(32) for p in range(PLANES) for name in MAC_COUNTERS},
                    **{f"{s}_uart_{name}": Out(32) for name in UART_COUNTERS},
                }
            )
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        for s, board in self._boards.items():
            domains = {"sync": f"{s}_sync", "eth_tx": f"{s}_eth_tx", "eth_tx90": f"{s}_eth_tx90"}
            domains.update({f"eth_rx{p}": f"{s}_eth_rx{p}" for p in range(PLANES)})
            m.domains += ClockDomain(f"{s}_sync")
            m.domains += ClockDomain(f"{s}_eth_tx")
            m.domains += ClockDomain(f"{s}_eth_tx90", reset_less=True)
            for p in range(PLANES):
                m.domains += ClockDomain(f"{s}_eth_rx{p}")  # driven by the PHY model
            m.d.comb += [
                ClockSignal(f"{s}_sync").eq(getattr(self, f"{s}_core_clk")),
                ResetSignal(f"{s}_sync").eq(getattr(self, f"{s}_core_rst")),
                ClockSignal(f"{s}_eth_tx").eq(getattr(self, f"{s}_eth_tx_clk")),
                ResetSignal(f"{s}_eth_tx").eq(getattr(self, f"{s}_eth_tx_rst")),
                ClockSignal(f"{s}_eth_tx90").eq(getattr(self, f"{s}_eth_tx90_clk")),
                board.uart_rx.eq(getattr(self, f"{s}_uart_rx")),
                getattr(self, f"{s}_uart_tx").eq(board.uart_tx),
                getattr(self, f"{s}_activity").eq(board.activity),
            ]
            for p in range(PLANES):
                for name in MAC_COUNTERS:
                    m.d.comb += getattr(self, f"{s}_mac{p}_{name}").eq(getattr(board, f"stat_mac{p}_{name}"))
            for name in UART_COUNTERS:
                m.d.comb += getattr(self, f"{s}_uart_{name}").eq(getattr(board, f"stat_uart_{name}"))
            m.submodules[f"board_{s}"] = DomainRenamer(domains)(board)
        a, b = self._boards["a"], self._boards["b"]
        for p in range(PLANES):  # the cables: each side's TX pins are the other's RX pins
            for tx, rx in ((a, b), (b, a)):
                m.d.comb += [
                    rx.rgmii[p].rx_clk.eq(tx.rgmii[p].tx_clk),
                    rx.rgmii[p].rx_ctl.eq(tx.rgmii[p].tx_ctl),
                    rx.rgmii[p].rx_data.eq(tx.rgmii[p].tx_data),
                ]
        return m


# -- cocotb side -------------------------------------------------------------------------------------
def _clock(signal, period_ps):
    """A clock of any whole period in ps (an odd one is high for the shorter half)."""
    return Clock(signal, period_ps, unit="ps", period_high=period_ps // 2)


async def _delayed_clock(signal, period_ps, offset_ps):
    signal.value = 0
    await Timer(offset_ps, unit="ps")
    await _clock(signal, period_ps).start()


async def _start(dut):
    for s in SIDES:
        getattr(dut, f"{s}_uart_rx").value = 1  # an idle line from the start: low would be a break
        cocotb.start_soon(_clock(getattr(dut, f"{s}_core_clk"), CORE_PS[s]).start())
        cocotb.start_soon(_clock(getattr(dut, f"{s}_eth_tx_clk"), TX_PS[s]).start())
        cocotb.start_soon(_delayed_clock(getattr(dut, f"{s}_eth_tx90_clk"), TX_PS[s], TX90_PS))
        getattr(dut, f"{s}_core_rst").value = 1
        getattr(dut, f"{s}_eth_tx_rst").value = 1
    await ClockCycles(dut.a_core_clk, 8)
    for s in SIDES:
        getattr(dut, f"{s}_core_rst").value = 0
        getattr(dut, f"{s}_eth_tx_rst").value = 0
    # The path selector clears its EV table after reset; the UART lines idle high meanwhile.
    await ClockCycles(dut.a_core_clk, 200)


def _counters(dut, s: str, prefix: str, names) -> dict:
    return {name: int(getattr(dut, f"{s}_{prefix}{name}").value) for name in names}


async def _both(*steps):
    """Run driver steps side by side: one board's UART does not wait for the other's (at most one step
    per board: a transport carries one request at a time)."""
    for task in [cocotb.start_soon(step) for step in steps]:
        await task


@cocotb.test()
async def rdma_write_over_both_planes(dut):
    rng = random.Random(random.getrandbits(32))  # the harness seeds `random` (SEED reproduces)
    await _start(dut)
    for s in SIDES:  # no frame yet: the activity LEDs are dark
        assert int(getattr(dut, f"{s}_activity").value) == 0, s
    nics = {}
    for s in SIDES:
        uart = SimUart(
            getattr(dut, f"{s}_uart_rx"),
            getattr(dut, f"{s}_uart_tx"),
            DIVISOR * CORE_PS[s] / 1000,
            rng,
            clock_ns=CORE_PS[s] / 1000,
        )
        transport = UartTransport(
            uart, memory_base=0, memory_size=MEMORY, timeout=40 * uart.byte_time, name=f"board {s}"
        )
        nics[s] = cocotb.start_soon(driver.open(transport, cq_depth=16))  # each board has its own UART
    nics = {s: await task for s, task in nics.items()}
    a, b = nics["a"], nics["b"]
    dut._log.info("both NICs open over their UARTs: %s", a.caps)
    for nic in (a, b):
        assert nic.caps.planes == PLANES and nic.caps.host_queues, nic.caps
    assert a.caps.srv6 and not b.caps.srv6 and b.caps.destinations == 0
    assert (a.caps.max_pmtu, b.caps.max_pmtu) == (4096, 1024)
    with pytest.raises(driver.InvalidParameter, match="MAX_PMTU 1024"):
        await b.set_parameters(pmtu_log2=11)
    with pytest.raises(driver.InvalidParameter, match="without SRv6"):
        await b.set_route(0, RouteTemplate.for_clos(0xFCBB0000, 0, 1, 2))
    await _both(a.set_parameters(pmtu_log2=8), b.set_parameters(pmtu_log2=8))
    qa, qb = await connect_cabled(a, b, seed=rng.randrange(1 << 16))
    planes_of = {ev >> 29 & (PLANES - 1) for ev in qa.profile.slots}
    dut._log.info("QP A EV slots %s (planes %s)", [hex(ev) for ev in qa.profile.slots], sorted(planes_of))
    assert planes_of == set(range(PLANES)), "the EV profile must cover both planes"

    length, guard = 1500, 64
    source = a.memory.allocate(length)
    pattern = bytes(rng.getrandbits(8) for _ in range(length))
    target = b.memory.allocate(length + 2 * guard) + guard

    async def guards():  # known bytes around the target; the region itself is zero, as memory starts
        await b.t.mem_write(target - guard, bytes([0xA5]) * guard)
        await b.t.mem_write(target + length, bytes([0xA5]) * guard)

    await _both(a.t.mem_write(source, pattern), guards())
    mr = await b.register_memory(target, length)
    before = {s: await nics[s].port_counters() for s in SIDES}

    await qb.post_recv(wr_id=7)
    await qa.post_write(source, target, mr.rkey, length, wr_id=1)
    await qa.post_write_imm(source, target, mr.rkey, 16, 0x1234_5678, wr_id=2)
    done_a = await a.wait_completions(2, timeout_ns=2_000_000, step_ns=20_000)
    done_b = await b.wait_completions(1, timeout_ns=2_000_000, step_ns=20_000)
    assert [(c.wr_id, c.ok) for c in done_a] == [(1, True), (2, True)], done_a
    assert len(done_b) == 1 and done_b[0].ok and done_b[0].wr_id == 7 and done_b[0].imm == 0x1234_5678, done_b

    dut._log.info("completions: A %s, B %s", done_a, done_b)
    landed = await b.t.mem_read(target - guard, length + 2 * guard)
    assert landed[:guard] == bytes([0xA5]) * guard, "memory before the region was written"
    assert landed[guard + length :] == bytes([0xA5]) * guard, "memory after the region was written"
    assert landed[guard : guard + length] == pattern, "the region does not hold the data sent"

    after = {s: await nics[s].port_counters() for s in SIDES}
    packets = -(-length // 256) + 1
    sent = [after["a"][p]["tx_frames"] - before["a"][p]["tx_frames"] for p in range(PLANES)]
    received = [after["b"][p]["rx_frames"] - before["b"][p]["rx_frames"] for p in range(PLANES)]
    dut._log.info("data frames per plane: A sent %s, B received %s (%d packets)", sent, received, packets)
    assert sum(sent) >= packets and all(n > 0 for n in sent), "the WRITE did not cross both planes"
    assert received == sent, "frames lost on a cable"
    for s in SIDES:
        mac = {p: _counters(dut, s, f"mac{p}_", MAC_COUNTERS) for p in range(PLANES)}
        dut._log.info("board %s MAC counters %s", s, mac)
        for p in range(PLANES):
            for name in REGISTER_MAC_COUNTERS:  # the drop counters, also read by the driver
                assert mac[p][name] == 0, (s, p, name, mac[p][name])
                assert after[s][p][f"mac_{name}"] == 0, (s, p, name, after[s][p])
            assert mac[p]["rx_frames"] >= after[s][p]["rx_frames"] - before[s][p]["rx_frames"]
        # frames went both ways on every plane within the last 50 ms: every activity LED is lit
        assert int(getattr(dut, f"{s}_activity").value) == (1 << PLANES) - 1, s
        # the bridge's counters, as the driver reads them from the NIC's COUNTERS block (HOST_LINK_*)
        bridge_before = _counters(dut, s, "uart_", UART_COUNTERS)
        registers = await nics[s].counters()
        bridge = _counters(dut, s, "uart_", UART_COUNTERS)
        dut._log.info("board %s UART bridge counters %s", s, bridge)
        for name in ("bad_crc", "bad_frame", "framing_errors", "bus_errors", "timeouts"):
            assert bridge[name] == 0, (s, name, bridge[name])
            assert registers[f"host_link_{name}"] == 0, (s, name, registers)
        # every request so far went through the bridge: the register saw the ones before its read
        read = registers["host_link_frames_ok"]
        assert 0 < bridge_before["frames_ok"] <= read <= bridge["frames_ok"], (s, bridge_before, read, bridge)


@pytest.mark.long(seconds=470)
def test_board_sim():
    run_cocotb(CableBench, name="board_cable", module=__name__, params={"planes": PLANES})
