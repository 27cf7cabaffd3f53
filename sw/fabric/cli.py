"""``mrcnic sim``: run a scenario on the multi-plane fabric simulator, MRC next to the RoCE/ECMP baseline."""

from __future__ import annotations

import argparse
import json

__all__ = ["add_sim_parser", "parse_size", "run_sim"]


def parse_size(text: str) -> int:
    """``4096``, ``64K``/``64KiB``, ``4M``/``4MiB``, ``1G`` (binary units)."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    if mult != 1:
        t = t[:-1]
    return int(float(t) * mult)


def add_sim_parser(sub) -> argparse.ArgumentParser:
    from .scenarios import SCENARIOS

    p = sub.add_parser(
        "sim",
        help="packet-level simulation of MRC (or the RoCE/ECMP baseline) on a multi-plane Clos",
        description="Event-driven simulation of MRC endpoints on a multi-plane 2-tier Clos fabric. Prints a "
        "table (goodput as a fraction of line-rate goodput, FCT, retransmissions, trims, EV changes, "
        "recovery), "
        "writes PNG plots and optionally JSON and a pcap. All figures are in simulated time.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("scenario", choices=SCENARIOS, help="traffic pattern / failure schedule")
    p.add_argument("--hosts", type=int, default=64, help="hosts (each with one port per plane)")
    p.add_argument("--planes", type=int, default=4, help="network planes (ports per host)")
    p.add_argument("--radix", type=int, default=16, help="switch radix (T0: radix/2 down, radix/2 up)")
    p.add_argument("--link-rate", type=float, default=100.0, help="link rate per plane port, Gb/s")
    p.add_argument("--link-delay", type=float, default=500.0, help="propagation delay per link, ns")
    p.add_argument("--mtu", type=int, default=4096, help="payload bytes per data packet")
    p.add_argument(
        "--message-size",
        type=parse_size,
        default=4 << 20,
        help="bytes per flow (all-to-all: split over the destinations); K/M/G suffixes",
    )
    p.add_argument("--evs", type=int, default=128, help="EVs per QP (power of two), spread over the planes")
    p.add_argument("--loss", type=float, default=0.0, help="random loss probability per packet per link")
    p.add_argument("--seed", type=int, default=1, help="seed of every random choice")
    p.add_argument("--transport", choices=["mrc", "roce-ecmp"], default="mrc", help="transport under test")
    p.add_argument(
        "--no-baseline",
        action="store_true",
        help="do not also run the other transport (by default MRC and RoCE/ECMP run side by side)",
    )
    p.add_argument("--no-trim", action="store_true", help="switches drop instead of trimming (MRC)")
    p.add_argument("--ecn-bdp", type=float, default=0.2, help="ECN marking threshold, plane BDPs")
    p.add_argument("--trim-bdp", type=float, default=0.5, help="trimming threshold, plane BDPs")
    p.add_argument("--buffer-bdp", type=float, default=3.0, help="output buffer (tail drop), plane BDPs")
    p.add_argument("--incast-senders", type=int, default=8, help="incast: senders into host 0")
    p.add_argument(
        "--fail-at",
        type=float,
        default=None,
        help="link-failure: failure time in us (default: half the ideal FCT)",
    )
    p.add_argument(
        "--fail-link",
        default=None,
        metavar="PLANE,T0,T1",
        help="link-failure: the T0-T1 link to fail (default 0,<T0 of host 0>,0)",
    )
    p.add_argument(
        "--event",
        action="append",
        default=[],
        metavar="AT_US:KIND:ARGS",
        help="schedule a fabric event (repeatable, any scenario): link[-up]:PLANE,T0,T1, "
        "port[-up]:PLANE,HOST, switch[-up]:PLANE,TIER,INDEX or loss:P, e.g. 40:link:0,0,3 or 30:switch:1,1,2 "
        "or 10:loss:0.01",
    )
    p.add_argument("--max-time", type=float, default=None, help="stop after this much simulated time, us")
    p.add_argument("--json", metavar="FILE", help="write the metrics as JSON")
    p.add_argument("--pcap", metavar="FILE", help="write the frames that crossed --pcap-link to a pcap")
    p.add_argument(
        "--pcap-link",
        default=None,
        metavar="KIND,...",
        help="link to capture: host,PLANE,HOST or t0t1,PLANE,T0,T1 (default: the failed link, else host,0,0)",
    )
    p.add_argument("--plots", metavar="DIR", default="sim-plots", help="directory for the PNG plots")
    p.add_argument("--no-plots", action="store_true", help="do not write plots")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run_sim)
    return p


def _link(text: str | None, prefix: str | None = None):
    if text is None:
        return None
    parts = text.split(",")
    if prefix is not None:
        return (prefix, *map(int, parts))
    return (parts[0], *map(int, parts[1:]))


def run_sim(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from . import report
    from .scenarios import SimConfig, run
    from .topology import FabricConfig

    console = Console()
    transports = [args.transport]
    if not args.no_baseline:
        transports.append("roce-ecmp" if args.transport == "mrc" else "mrc")
    results, rows = [], []
    for transport in transports:
        fabric = FabricConfig(
            hosts=args.hosts,
            planes=args.planes,
            radix=args.radix,
            link_rate_bps=int(args.link_rate * 1e9),
            link_delay_ps=int(args.link_delay * 1000),
            ecn_bdp=args.ecn_bdp,
            trim_bdp=args.trim_bdp,
            buffer_bdp=args.buffer_bdp,
            trimming=not args.no_trim,
            loss=args.loss,
            seed=args.seed,
            mtu=args.mtu,
        )
        cfg = SimConfig(
            scenario=args.scenario,
            transport=transport,
            fabric=fabric,
            message_bytes=args.message_size,
            evs=args.evs,
            incast_senders=args.incast_senders,
            fail_at_us=args.fail_at,
            fail_link=_link(args.fail_link, "t0t1"),
            events=list(args.event),
            max_time_us=args.max_time,
            pcap=args.pcap if transport == args.transport else None,
            pcap_link=_link(args.pcap_link),
        )
        if args.quiet:
            result = run(cfg)
        else:
            with Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total} flows"),
                TextColumn("{task.fields[t]:.1f} us simulated"),
                TimeElapsedColumn(),
                console=console,
                transient=True,
            ) as progress:
                task = progress.add_task(f"{args.scenario} {transport}", total=1, t=0.0)

                def update(now, done, total, task=task, progress=progress):
                    progress.update(task, completed=done, total=total, t=now / 1e6)

                cfg.progress = update
                result = run(cfg)
        results.append(result)
        rows.append(report.metrics(result))
    report.print_table(rows, console)
    main = dict(rows[0])
    if len(rows) > 1:
        main["baseline"] = rows[1]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(main, f, indent=2)
        console.print(f"wrote {args.json}")
    if not args.no_plots:
        for path in report.plot(results, args.plots):
            console.print(f"wrote {path}")
    if args.pcap:
        console.print(f"wrote {args.pcap}")
    return 0 if rows[0]["completed"] else 1
