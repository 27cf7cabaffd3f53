"""``mrcnic info | counters | qp list | paths --device URL``: look at a NIC through the driver.

``--device model:`` is a reference-model NIC on a simulated fabric (no hardware); ``model:demo`` the same
after it has connected a QP to its peer and sent it 1 MiB of RDMA WRITEs, so every view has content.
"""

from __future__ import annotations

import argparse
import asyncio

from ..wire import ev_fields
from . import DriverError, open
from .nic import Nic

__all__ = ["add_driver_parsers"]

DEMO_BYTES = 1 << 20


async def _open(url: str) -> Nic:
    if url != "model:demo":
        return await open(url)
    from .fabric_setup import connect_over_fabric
    from .model_backend import ModelCluster

    cluster = ModelCluster(2)
    a, b = [await open(device) for device in cluster.devices]
    cfg = cluster.fabric_config
    hosts = (cluster.devices[0].host, cluster.devices[1].host)
    qa, _ = await connect_over_fabric(a, b, hosts, uplinks=cfg.t1_count, hosts_per_t0=cfg.half, seed=1)
    source = a.memory.allocate(DEMO_BYTES)
    await a.t.mem_write(source, bytes(range(256)) * (DEMO_BYTES // 256))
    target = b.memory.allocate(DEMO_BYTES)
    mr = await b.register_memory(target, DEMO_BYTES)
    messages = 8
    for i in range(messages):
        n = DEMO_BYTES // messages
        await qa.post_write(source + i * n, target + i * n, mr.rkey, n, wr_id=i)
    done = await a.wait_completions(messages, timeout_ns=1e7)
    if not all(c.ok for c in done):
        raise DriverError(f"the demo transfer failed: {done}")
    return a


def _table(rows: list[tuple], header: tuple) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    for row in (header, *rows):
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)).rstrip())


async def _info(nic: Nic, args) -> None:
    info = await nic.query()
    caps = info["capabilities"]
    print(f"device      {args.device} ({info['transport']})")
    print(
        f"build       {caps.planes} planes, {caps.qps} QPs, {caps.ev_slots} EV slots + {caps.backups} "
        f"backups per plane, window {caps.window}, {caps.mrs} MRs, "
        f"{f'{caps.destinations} routes' if caps.srv6 else 'no SRv6'}, "
        f"{8 * caps.data_width}-bit data path at {caps.clock_hz / 1e6:g} MHz, "
        f"{caps.addr_width}-bit host addresses, PMTU up to {caps.max_pmtu}"
    )
    print(
        "ports       "
        + ", ".join(f"plane {p} {'up' if up else 'DOWN'}" for p, up in enumerate(info["ports_up"]))
    )
    print(f"registers   {len(nic.regs.map.blocks)} blocks, {nic.regs.map.size:#x} bytes")


async def _counters(nic: Nic, args) -> None:
    ports = await nic.port_counters()
    drops = [{k: v for k, v in c.items() if k.startswith("mac_")} for c in ports]
    _table(
        [
            (p, c["rx_frames"], c["rx_bytes"], c["tx_frames"], c["tx_bytes"], sum(drops[p].values()))
            for p, c in enumerate(ports)
        ],
        ("plane", "rx frames", "rx bytes", "tx frames", "tx bytes", "MAC drops"),
    )
    for p, counts in enumerate(drops):
        for name, value in counts.items():
            if value:  # which MAC counters moved (bad FCS, runts, ...)
                print(f"plane {p} {name}: {value}")
    print()
    counters = await nic.counters()
    rows = [(name, value) for name, value in counters.items() if value or args.all]
    if not rows:
        print("every event counter is 0 (--all lists them)")
        return
    _table(rows, ("counter", "value"))


async def _qp_list(nic: Nic, args) -> None:
    rows = []
    for q in range(nic.caps.qps):
        state = await nic.queue_state(q)
        driver_qp = nic.qps.get(q)
        rows.append(
            (
                q,
                f"{0x100 | q:#x}",
                "error" if state["status"] & 1 else (driver_qp.state.value if driver_qp else "-"),
                state["sq_size_log2"] and 1 << state["sq_size_log2"],
                state["sq_producer"],
                state["sq_consumer"],
                state["sq_completed"],
                state["rq_producer"],
                state["rq_consumer"],
            )
        )
    _table(rows, ("qp", "qpn", "state", "sq", "posted", "fetched", "completed", "recv", "recv done"))


async def _paths(nic: Nic, args) -> None:
    qps = [args.qp] if args.qp is not None else sorted(nic.qps) or list(range(nic.caps.qps))
    for q in qps:
        slots = await nic.ev_slots(q)
        print(f"QP {q}:")
        rows = [(s, *ev_fields(ev)[:2], f"{ev:#010x}", state) for s, (ev, state) in enumerate(slots)]
        _table(rows, ("slot", "plane", "uplink", "ev", "state"))
        good = sum(1 for _, state in slots if state == "GOOD")
        print(f"  {good} of {len(slots)} slots GOOD")


COMMANDS = {"info": _info, "counters": _counters, "qp": _qp_list, "paths": _paths}


def _run(args: argparse.Namespace) -> int:
    async def main():
        nic = await _open(args.device)
        try:
            await COMMANDS[args.command](nic, args)
        finally:
            await nic.close()

    try:
        asyncio.run(main())
    except DriverError as error:
        print(f"mrcnic {args.command}: {error}")
        return 1
    return 0


def add_driver_parsers(sub) -> None:
    def device(p):
        p.add_argument(
            "--device",
            default="model:",
            help="device URL: model: (reference-model NIC, default), model:demo (after a 1 MiB transfer)",
        )
        p.set_defaults(func=_run)
        return p

    device(sub.add_parser("info", help="identity, build parameters and port state of a NIC"))
    counters = device(sub.add_parser("counters", help="the NIC's event counters"))
    counters.add_argument("--all", action="store_true", help="list counters that are 0 too")
    qp = sub.add_parser("qp", help="queue pairs")
    qp_sub = qp.add_subparsers(dest="qp_command", required=True)
    device(qp_sub.add_parser("list", help="every QP: state and queue indices"))
    paths = device(sub.add_parser("paths", help="EV slots of each QP and their state"))
    paths.add_argument("--qp", type=int, help="only this QP")
