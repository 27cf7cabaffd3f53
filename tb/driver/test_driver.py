"""The driver scenarios (``scenarios.py``), the same code against both backends: ``model`` (reference-model
NICs, pytest functions ``test_model_*``) and ``cocotb`` (two whole RTL NICs, ``MrcNicTop``, in Verilator
on the Python fabric: the cocotb tests ``rtl_*`` run by ``test_rtl_backend``). Seeds printed
(``DRIVER_SEED=<seed>`` reruns a model test, ``SEED=<seed>`` the RTL ones)."""

import asyncio
import os
import random

import cocotb
import pytest

from mrcnic import driver
from mrcnic.driver.fabric_setup import connect_cabled
from mrcnic.driver.model_backend import ModelCluster
from mrcnic.regmap import Capabilities, CqeStatus
from mrcnic.wire import RouteTemplate

from . import scenarios
from support.cocotb_runner import run_cocotb
from system.bench import NicBench, SystemConfig
from system.cluster import BUILD_NAME, design


def new_seed() -> int:
    seed = int(os.environ.get("DRIVER_SEED", random.randrange(1 << 30)))
    print(f"seed {seed}")
    return seed


def model_pair(seed):
    cluster = ModelCluster(2, link_rate_bps=10_000_000_000, link_delay_ps=200_000)
    cfg = cluster.fabric_config
    hosts = [d.host for d in cluster.devices]
    return cluster, scenarios.open_pair(
        cluster.devices, hosts, uplinks=cfg.t1_count, half=cfg.half, seed=seed
    )


@pytest.mark.parametrize(
    "scenario",
    [
        "write_and_write_imm",
        "misuse",
        "protection_error",
        "write_imm_without_receive",
        "ev_slots_read_back",
        "completion_queue_full",
    ],
)
def test_model(scenario):
    seed = new_seed()

    async def body():
        _, opening = model_pair(seed)
        await getattr(scenarios, scenario)(await opening, random.Random(seed))

    asyncio.run(body())


def test_model_peer_stops_answering():
    seed = new_seed()

    async def body():
        cluster, opening = model_pair(seed)
        pair = await opening
        # B's QP forgets its peer: A's packets reach no QP there, nothing is answered
        cluster.devices[1].endpoint.qps.clear()
        await scenarios.peer_stops_answering(pair, random.Random(seed), retry_ns=2e8)

    asyncio.run(body())


def test_open_urls():
    async def body():
        nic = await driver.open("model:")
        info = await nic.query()
        assert info["capabilities"].planes == 4 and all(info["ports_up"])
        for url, error in (
            ("model:x", driver.InvalidParameter),
            ("uart:/dev/mrcnic-no-such-port?baud=115200", driver.DriverError),
            ("uart:///dev/ttyUSB1?parity=even", driver.InvalidParameter),
            ("uart:///dev/ttyUSB1?memory=0x1000", driver.InvalidParameter),
            ("pcie:0", driver.InvalidParameter),
        ):
            with pytest.raises(error):
                await driver.open(url)

    asyncio.run(body())


def test_a_nic_without_srv6_refuses_routes_and_stays_single_ipv6():
    """A NIC built with DESTINATIONS 0 (the two-plane boards'): the driver finds it has no SRv6 and says
    so for every SRv6-only request, before anything reaches the device; single-IPv6 set-up works."""
    caps = Capabilities(planes=2, qps=2, ev_slots=8, backups=1, mrs=4, destinations=0)

    async def body():
        cluster = ModelCluster(2, caps=caps)
        a = await driver.open(cluster.devices[0], cq_depth=16)
        b = await driver.open(cluster.devices[1], cq_depth=16)
        assert not a.caps.srv6 and a.caps.destinations == 0
        for call in (
            a.set_route(0, RouteTemplate.for_clos(0xFCBB0000, 0, 1, 2)),
            a.set_parameters(srv6=1),
            a.set_addresses(gid=1, port_addresses=[1, 2]),
        ):
            with pytest.raises(driver.InvalidParameter, match="SRv6|SRV6|srv6"):
                await call
        await a.set_parameters(srv6=0)  # the value it is fixed at: accepted, nothing written
        assert await a.regs.read("transport", "SRV6") == 0
        qa, qb = await connect_cabled(a, b, seed=1)
        with pytest.raises(driver.InvalidParameter, match="without SRv6"):
            await (await a.create_qp()).connect(driver.PeerAddress(1, 0x100, 1), psn=0, peer_psn=0)
        assert (qa.index, qb.index) == (0, 0)

    asyncio.run(body())


def test_addresses_past_the_nics_reach_are_refused_before_the_device_sees_them():
    """A NIC built with ADDR_WIDTH 16 (a board with 64 KiB of on-chip host memory): the driver reads the
    width and refuses a host memory window, a memory region or a source buffer past 2^16, naming the
    width; within it everything works as usual."""
    caps = Capabilities(planes=2, qps=2, ev_slots=8, backups=1, mrs=4, destinations=0, addr_width=16)

    async def body():
        with pytest.raises(driver.InvalidParameter, match="ADDR_WIDTH is 16"):
            await driver.open(ModelCluster(2, caps=caps).devices[0], cq_depth=16)  # 16 MiB of memory
        cluster = ModelCluster(2, caps=caps, memory_size=0x8000)  # [0x1000, 0x9000)
        a = await driver.open(cluster.devices[0], cq_depth=16)
        b = await driver.open(cluster.devices[1], cq_depth=16)
        assert a.caps.addr_width == 16
        with pytest.raises(driver.InvalidParameter, match="memory region .* ADDR_WIDTH is 16"):
            await b.register_memory(0xF000, 0x1001)
        region = await b.register_memory(0xF000, 0x1000)  # ends exactly at 2^16
        qa, _ = await connect_cabled(a, b, seed=2)
        with pytest.raises(driver.InvalidParameter, match="source buffer .* ADDR_WIDTH is 16"):
            await qa.post_write(0xFFF0, region.address, region.rkey, 0x11)
        assert qa.outstanding == 0
        # The device refuses it too (the reference model as the gateware): past the driver's check, the
        # WQE completes LOCAL_DMA_ERROR and the QP goes to ERROR.
        a.check_reach = lambda *_: None
        await qa.post_write(0xFFF0, region.address, region.rkey, 0x11, wr_id="past")
        [done] = await a.wait_completions(1)
        assert (done.status, done.wr_id) == (CqeStatus.LOCAL_DMA_ERROR, "past")

    asyncio.run(body())


def test_a_nic_with_16_bit_ack_timers_refuses_longer_ones():
    """A NIC built with RX_TIMER_WIDTH 16 (the Colorlight's): the driver reads the width, writes an ACK
    timer that fits and refuses one that does not, naming the register and its width."""
    caps = Capabilities(planes=2, qps=2, ev_slots=8, backups=1, mrs=4, destinations=0, rx_timer_width=16)

    async def body():
        a = await driver.open(ModelCluster(2, caps=caps).devices[0], cq_depth=16)
        assert a.caps.rx_timer_width == 16
        await a.set_parameters(ack_interval_cycles=0xFFFF, base_rtt_cycles=5000)
        assert await a.regs.read("reliability", "ACK_INTERVAL_CYCLES") == 0xFFFF
        for name in ("ack_gen_cycles", "ack_interval_cycles", "base_rtt_cycles"):
            with pytest.raises(
                driver.InvalidParameter, match=f"{name.upper()}: 0x10000 does not fit its 16 bits"
            ):
                await a.set_parameters(**{name: 0x10000})
        assert await a.regs.read("reliability", "ACK_INTERVAL_CYCLES") == 0xFFFF
        assert await a.regs.read("reliability", "RTO_CYCLES") == caps.cycles(40)  # other timers: 32 bits

    asyncio.run(body())


def test_a_nic_with_a_smaller_max_pmtu_refuses_larger_ones_and_sends_within_it():
    """A NIC built with MAX_PMTU 1024 (the Colorlight's, frames within a 1500-byte Ethernet MTU): the driver
    reads it, PMTU_LOG2 resets to 10, a larger PMTU is refused by name before the device sees it, and a
    write of several packets arrives byte-exact, in packets of 1024 bytes at most."""
    cluster = ModelCluster(2, caps=Capabilities(max_pmtu=1024), link_rate_bps=10_000_000_000)
    cfg = cluster.fabric_config

    async def body():
        hosts = [d.host for d in cluster.devices]
        pair = await scenarios.open_pair(cluster.devices, hosts, uplinks=cfg.t1_count, half=cfg.half, seed=3)
        a, b, qa = pair.a, pair.b, pair.qa
        assert a.caps.max_pmtu == 1024
        assert await a.regs.read("transport", "PMTU_LOG2") == 10
        for value in (7, 11, 12):
            with pytest.raises(driver.InvalidParameter, match="MAX_PMTU 1024"):
                await a.set_parameters(pmtu_log2=value)
        with pytest.raises(driver.InvalidParameter, match="PMTU 2048: one of 256, 512, 1024 "):
            await (await a.create_qp()).connect(driver.PeerAddress(1, 0x100, 0), psn=0, peer_psn=0, pmtu=2048)
        size = 3000
        data = random.Random(3).randbytes(size)
        source, region = a.memory.allocate(size), b.memory.allocate(size)
        await a.t.mem_write(source, data)
        mr = await b.register_memory(region, size)
        await qa.post_write(source, mr.address, mr.rkey, size, wr_id="w")
        [done] = await a.wait_completions(1, timeout_ns=1e6)
        assert done.ok and done.wr_id == "w", done
        assert await b.t.mem_read(region, size) == data
        counters = await a.counters()
        assert counters["tx_packets"] == 3, counters  # 1024 + 1024 + 952

    asyncio.run(body())


class BlockCounting(driver.Transport):
    """A reference-model NIC whose register traffic is recorded as block transfers: what one UART bridge
    frame carries, so the list is the number of frames a board would exchange."""

    def __init__(self, device):
        self.device = device
        self.memory_base, self.memory_size = device.memory_base, device.memory_size
        self.transfers: list[tuple[str, int, object]] = []

    async def read32(self, address):
        return await self.device.read32(address)

    async def write32(self, address, value):
        await self.device.write32(address, value)

    async def read_block(self, address, count):
        self.transfers.append(("read", address, count))
        return await super().read_block(address, count)

    async def write_block(self, address, words):
        self.transfers.append(("write", address, list(words)))
        await super().write_block(address, words)

    async def mem_read(self, address, length):
        return await self.device.mem_read(address, length)

    async def mem_write(self, address, data):
        await self.device.mem_write(address, data)

    async def idle(self, ns):
        await self.device.idle(ns)


def test_consecutive_registers_move_in_one_transfer():
    """Block headers, multi-word registers, table records and counter sets each take one transfer (one
    UART frame on a board), in address order; a table's COMMAND is written after its whole record; a
    value too wide for its register is refused before anything is written."""

    async def body():
        transport = BlockCounting(ModelCluster(2).devices[0])
        nic = await driver.open(transport)
        regs = nic.regs
        # Discovery: one read of the four header words per block, in list order, then the NIC_ID fields.
        bases = sorted(regs.bases.values())
        assert transport.transfers[: len(bases)] == [("read", base, 4) for base in bases]
        assert len(regs.map.blocks) == len(bases)

        transport.transfers.clear()
        await nic.set_route(1, RouteTemplate(0xFC00_0001, [0x11, 0x22, 0x33], t1_slot=1))
        route, base = regs.block("route")
        fields = [r for r in route.registers if r.name not in ("STATUS", "COMMAND")]
        fields.sort(key=lambda r: route.offsets[r.name])
        values = {"DEST": 1, "LOCATOR": 0xFC00_0001, "COUNT": 3, "T1_SLOT": 1}
        values.update({f"USID{i}": u for i, u in enumerate([0x11, 0x22, 0x33, 0, 0, 0])})
        words = [(values[r.name] >> (32 * w)) & 0xFFFFFFFF for r in fields for w in range(r.words)]
        assert transport.transfers == [
            ("write", base + route.offsets[fields[0].name], words),
            ("write", base + route.offsets["COMMAND"], [1]),
        ]

        transport.transfers.clear()
        with pytest.raises(driver.InvalidParameter, match="COUNT"):
            await regs.write_many("route", {"DEST": 0, "COUNT": 1 << 20})
        assert transport.transfers == []

        # A read-back: key fields in one write, COMMAND, STATUS polls, the other fields in one read; what
        # was pushed comes back.
        await regs.push("ev_slot", {"QP": 0, "SLOT": 3, "EV": 0x2000_0005, "STATE": 0})
        transport.transfers.clear()
        entry = await regs.read_back("ev_slot", {"QP": 0, "SLOT": 3})
        slot, base = regs.block("ev_slot")
        # The same registers word by word (the QP is not connected, so the model reports the slot DENIED).
        state = await transport.device.read32(base + slot.offsets["STATE"])
        assert entry == {"EV": 0x2000_0005, "STATE": state}, entry
        assert transport.transfers[0] == ("write", base + slot.offsets["QP"], [0, 3])
        assert transport.transfers[1] == ("write", base + slot.offsets["COMMAND"], [2])
        assert transport.transfers[-1][0] == "read" and transport.transfers[-1][2] == 2

        transport.transfers.clear()
        counters = await nic.counters()
        block, base = regs.block("counters")
        assert transport.transfers == [("read", base + block.offsets[block.registers[0].name], len(counters))]

    asyncio.run(body())


# -- the same scenarios on two simulated RTL NICs (MrcNicTop, Verilator) on the Python fabric ----------

RTL_CONFIG = SystemConfig()


async def _rtl_pair(dut, **config):
    """Two RTL NICs on the fabric, opened and configured by the bench through the driver, one QP each
    connected (also through the driver)."""
    bench = NicBench(dut, SystemConfig(seed=cocotb.RANDOM_SEED, **config))
    await bench.start(cq_depth=64)
    a, b = bench.nics
    qa, qb = await bench.connect(a, b)
    pair = scenarios.Pair(a.driver, b.driver, qa, qb, [a.host, b.host], bench.fabric.cfg.t1_count)
    return bench, pair


@cocotb.test()
async def rtl_write_and_write_imm(dut):
    _, pair = await _rtl_pair(dut)
    await scenarios.write_and_write_imm(pair, random.Random(cocotb.RANDOM_SEED))


@cocotb.test()
async def rtl_write_under_loss(dut):
    """The same WRITEs with 1 % random loss on every link (data and control): the NICs recover
    selectively; the host sees only successful completions and the exact data."""
    bench, pair = await _rtl_pair(dut, loss=0.01)
    await scenarios.write_and_write_imm(pair, random.Random(cocotb.RANDOM_SEED), size=192 * 1024, messages=9)
    dropped = bench.fabric.switch_counters()["loss_drops"]
    counters = await pair.a.counters()
    print(f"{dropped} frames lost on the links; {counters['tracker_retransmit_requests']} retransmissions")
    assert dropped > 0


@cocotb.test()
async def rtl_misuse(dut):
    _, pair = await _rtl_pair(dut)
    await scenarios.misuse(pair, random.Random(cocotb.RANDOM_SEED))


@cocotb.test()
async def rtl_protection_error(dut):
    _, pair = await _rtl_pair(dut)
    await scenarios.protection_error(pair, random.Random(cocotb.RANDOM_SEED))


@cocotb.test()
async def rtl_write_imm_without_receive(dut):
    _, pair = await _rtl_pair(dut)
    await scenarios.write_imm_without_receive(pair, random.Random(cocotb.RANDOM_SEED))


@cocotb.test()
async def rtl_ev_slots_read_back(dut):
    """``Nic.ev_slots`` (``mrcnic paths``) on the RTL: the EV table read back through the registers."""
    _, pair = await _rtl_pair(dut)
    await scenarios.ev_slots_read_back(pair, random.Random(cocotb.RANDOM_SEED))


@cocotb.test()
async def rtl_completion_queue_full(dut):
    _, pair = await _rtl_pair(dut)
    await scenarios.completion_queue_full(pair, random.Random(cocotb.RANDOM_SEED))


@cocotb.test()
async def rtl_peer_stops_answering(dut):
    bench, pair = await _rtl_pair(dut)
    bench.nics[1].fault = lambda nic, plane, frame, raw: []  # nothing reaches B any more
    await scenarios.peer_stops_answering(pair, random.Random(cocotb.RANDOM_SEED), retry_ns=5e6)


@pytest.mark.long(seconds=290)
def test_rtl_backend():
    params = RTL_CONFIG.build_params()
    run_cocotb(
        design(params),
        name=BUILD_NAME,
        module="driver.test_driver",
        params=params,
        testcase=[
            "rtl_write_and_write_imm",
            "rtl_write_under_loss",
            "rtl_misuse",
            "rtl_protection_error",
            "rtl_write_imm_without_receive",
            "rtl_ev_slots_read_back",
            "rtl_completion_queue_full",
            "rtl_peer_stops_answering",
        ],
    )
