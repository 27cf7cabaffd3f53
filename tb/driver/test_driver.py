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
from mrcnic.driver.cocotb_backend import CocotbTransport
from mrcnic.driver.model_backend import ModelCluster
from mrcnic.hdl.host.nic_top import MrcNicTop

from . import scenarios
from support.cocotb_runner import run_cocotb
from system.bench import NicBench, SystemConfig
from system.cluster import NicCluster


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
    ["write_and_write_imm", "misuse", "protection_error", "write_imm_without_receive", "ev_slots_read_back"],
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
            ("uart:/dev/ttyUSB0", driver.DriverError),
            ("pcie:0", driver.InvalidParameter),
        ):
            with pytest.raises(error):
                await driver.open(url)

    asyncio.run(body())


# -- the same scenarios on two simulated RTL NICs (MrcNicTop, Verilator) on the Python fabric ----------

RTL_CONFIG = SystemConfig(host_interface=True)


def _rtl_setup(dut, **config):
    cfg = SystemConfig(host_interface=True, seed=cocotb.RANDOM_SEED, **config)
    bench = NicBench(dut, cfg)
    transports = [
        CocotbTransport(dut, f"nic{i}__", nic.ram, memory_base=0x1000, memory_size=cfg.memory - 0x1000)
        for i, nic in enumerate(bench.nics)
    ]

    async def prepare(nic, index):
        """The timers of the simulated fabric and the port addresses (what NicBench.registers gives the
        cores), written through the driver."""
        regs = bench.registers(bench.nics[index])
        config = regs.pop("config")
        await nic.set_parameters(**{k: v for k, v in regs.items()})
        await nic.set_parameters(
            hop_limit=config["hop_limit"], dscp_data=config["dscp_data"], dscp_retx=config["dscp_retx"]
        )
        await nic.set_addresses(
            gid=config["own_gid"],
            port_macs=config["port_mac"],
            next_hop_macs=config["next_hop_mac"],
            port_addresses=config["port_address"],
        )

    return bench, transports, prepare


async def _rtl_pair(dut, **config):
    bench, transports, prepare = _rtl_setup(dut, **config)
    await bench.start()
    fc = bench.fabric.cfg
    hosts = [nic.host for nic in bench.nics]
    pair = await scenarios.open_pair(
        transports, hosts, uplinks=fc.t1_count, half=fc.half, seed=cocotb.RANDOM_SEED, prepare=prepare
    )
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
async def rtl_peer_stops_answering(dut):
    bench, pair = await _rtl_pair(dut)
    bench.nics[1].fault = lambda nic, plane, frame, raw: []  # nothing reaches B any more
    await scenarios.peer_stops_answering(pair, random.Random(cocotb.RANDOM_SEED), retry_ns=5e6)


def test_rtl_backend():
    params = RTL_CONFIG.build_params()
    keys = ("data_width", "planes", "qps", "ev_slots", "backups", "window")
    nic_params = {**{k: params[k] for k in keys}, **{"destinations": params["destinations"]}}
    run_cocotb(
        lambda: NicCluster(params["nics"], component=MrcNicTop, **nic_params, clock_hz=250_000_000),
        name="nic_top_cluster",
        module="driver.test_driver",
        params=params,
        testcase=[
            "rtl_write_and_write_imm",
            "rtl_write_under_loss",
            "rtl_misuse",
            "rtl_protection_error",
            "rtl_write_imm_without_receive",
            "rtl_ev_slots_read_back",
            "rtl_peer_stops_answering",
        ],
    )
