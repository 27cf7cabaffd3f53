"""System tests: two RTL MRC NICs exchanging RDMA WRITEs over the Python multi-plane fabric.

Every test verifies the written bytes in the receiver's memory and the untouched bytes around them, and
prints its figures and the simulation speed.
"""

import cocotb
import pytest

from support.cocotb_runner import dut_params, run_cocotb
from system.bench import NicBench, SystemConfig
from system.cluster import NicCluster
from system.transfer import Transfer, describe


def _config(**overrides) -> SystemConfig:
    params = dut_params()
    cfg = SystemConfig(**{k: params[k] for k in ("nics", "data_width", "planes") if k in params})
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cfg


@cocotb.test()
async def clean_transfer(dut):
    """No faults: 512 KiB in 64 KiB messages; no retransmission, every plane used."""
    cfg = _config(seed=cocotb.RANDOM_SEED)
    bench = NicBench(dut, cfg)
    await bench.start()
    result = await Transfer(bench, 512 * 1024).run(timeout_cycles=2_000_000)
    print(describe(result))
    print(result.counters)
    assert result.data_verified
    assert result.retx_frames == 0
    assert all(n > 0 for n in result.plane_frames)


BASE = SystemConfig()
CONFIGS = [pytest.param(BASE.build_params(), id="dw8-p4")]
TESTS = ["clean_transfer"]


def design(params):
    cfg = SystemConfig(
        **{k: params[k] for k in ("nics", "data_width", "planes", "qps", "ev_slots", "backups", "window")}
    )
    return lambda: NicCluster(cfg.nics, **cfg.nic_params())


@pytest.mark.parametrize("params", CONFIGS)
def test_system(params):
    run_cocotb(design(params), name="nic_cluster", module="system.test_system", params=params, testcase=TESTS)
