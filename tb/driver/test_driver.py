"""The driver scenarios (``scenarios.py``) against the ``model`` backend; the same scenarios run against
the ``cocotb`` backend once the gateware queue engine exists (issue 7). Seeds printed
(``DRIVER_SEED=<seed>`` reruns one)."""

import asyncio
import os
import random

import pytest

from mrcnic import driver
from mrcnic.driver.model_backend import ModelCluster

from . import scenarios


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


def test_model_write_and_write_imm():
    seed = new_seed()

    async def body():
        _, opening = model_pair(seed)
        pair = await opening
        await scenarios.write_and_write_imm(pair, random.Random(seed))

    asyncio.run(body())


def test_model_misuse():
    seed = new_seed()

    async def body():
        _, opening = model_pair(seed)
        await scenarios.misuse(await opening, random.Random(seed))

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
