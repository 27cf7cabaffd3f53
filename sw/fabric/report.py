"""Figures of a simulation run: metrics dict (the JSON), a rich table, PNG plots.

Definitions (simulated time): a flow's ideal FCT = bytes / (host line rate x per-packet goodput
efficiency) + the unloaded one-way latency of its path (links x (propagation + MTU-packet
serialization)); fct_slowdown = FCT / ideal; goodput_fraction = mean over flows of 1 / fct_slowdown
(an unfinished flow counts 0). aggregate_goodput_fraction: the busiest host's bytes (sent or received) at
line-rate goodput over the time the last flow completed (the figure that matters for incast / all-to-all,
where flows share a host). recovery_us: for each flow crossing the failed element, the time from
the failure to the start of the first 10 us window whose goodput is >= 90% of the flow's goodput over
the preceding half of the run up to the failure (a window cut short by the flow's completion counts
over its actual length); the maximum over those flows; null without a failure.
"""

from __future__ import annotations

import math

from .scenarios import SimResult

__all__ = ["metrics", "plot", "print_table"]

US = 1_000_000
RECOVERY_WINDOW_PS = 10 * US


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    k = max(0, min(len(values) - 1, math.ceil(q * len(values)) - 1))
    return values[k]


def _sum_counters(result: SimResult) -> dict[str, int]:
    tot: dict[str, int] = {}
    for ep in result.endpoints:
        for qp in ep.qps.values():
            for k, v in qp.sender.c.items():
                tot[k] = tot.get(k, 0) + v
    return tot


def _duplicates(result: SimResult) -> int | None:
    """Data packets a receiver already had (a retransmission of a packet that had arrived, or a copy):
    what spurious loss declarations cost. None for a transport whose receiver does not count them."""
    total = 0
    for ep in result.endpoints:
        for qp in ep.qps.values():
            receiver = getattr(qp, "receiver", None)
            if receiver is None:
                return None
            total += receiver.c["dups"]
    return total


def _first_failure(result: SimResult):
    return next((e for e in result.failures if e.is_failure), None)


def _recovery(result: SimResult) -> tuple[float | None, list[float]]:
    failure = _first_failure(result)
    if failure is None:
        return None, []
    fail = failure.at_ps
    info = result.fabric.cfg.info()
    bin_ps = result.bin_ps
    out = []
    for flow in result.flows:
        if not failure.affects_flow(flow, info):
            continue
        end = flow.placed_at if flow.placed_at is not None else result.sim_end_ps
        if end <= fail:
            continue
        pre_start = fail // 2
        pre = sum(v for b, v in flow.bins.items() if pre_start <= b * bin_ps < fail)
        pre_rate = pre / (fail - pre_start)
        if pre_rate <= 0:
            continue
        t = fail
        rec = None
        while t < end:
            w_end = min(t + RECOVERY_WINDOW_PS, end)
            if w_end - t < 2 * bin_ps:
                rec = t - fail
                break
            got = sum(flow.bins.get(b, 0) for b in range(t // bin_ps, w_end // bin_ps))
            if got >= 0.9 * pre_rate * (w_end - t):
                rec = t - fail
                break
            t += bin_ps
        if rec is None:
            rec = end - fail
        out.append(rec / US)
    return (max(out) if out else 0.0), out


def _failover(result: SimResult) -> float | None:
    """Time from the failure to the last retirement of an EV through the failed element (flows it hits)."""
    failure = _first_failure(result)
    if failure is None or result.cfg.transport != "mrc":
        return None
    info = result.fabric.cfg.info()
    fail = failure.at_ps
    last = fail
    for flow in result.flows:
        if not failure.affects_flow(flow, info):
            continue
        for t, ev in flow.qp.sender.retire_log:
            if t >= fail and failure.affects_ev(ev):
                last = max(last, t)
    return (last - fail) / US


def metrics(result: SimResult) -> dict:
    flows = result.flows
    fcts, slow, inv = [], [], []
    for f in flows:
        if f.placed_at is not None:
            fct = f.placed_at - f.start
            fcts.append(fct / US)
            s = fct / f.ideal_ps
            slow.append(s)
            inv.append(1 / s)
        else:
            inv.append(0.0)
    c = _sum_counters(result)
    sw = result.fabric.switch_counters()
    retired = restored = 0
    for ep in result.endpoints:
        for qp in ep.qps.values():
            evs = getattr(qp, "evs", None)
            if evs is not None:
                retired += evs.retired
                restored += evs.restored
    errors = sum(1 for f in flows if getattr(f.qp.sender, "error", None))
    completed = all(f.verified and f.acked_at is not None for f in flows) and errors == 0
    recovery, per_flow = _recovery(result)
    # aggregate: the busiest host (bytes sent or received) at line-rate goodput vs the last completion
    load: dict[tuple[str, int], int] = {}
    for f in flows:
        load[("tx", f.src)] = load.get(("tx", f.src), 0) + f.nbytes
        load[("rx", f.dst)] = load.get(("rx", f.dst), 0) + f.nbytes
    bottleneck_ps = max(load.values()) * 8e12 / (result.line_rate_bps * result.efficiency)
    last = max((f.placed_at for f in flows if f.placed_at is not None), default=None)
    aggregate = bottleneck_ps / last if last and len(fcts) == len(flows) else 0.0
    fc = result.fabric.cfg
    return {
        "scenario": result.cfg.scenario,
        "transport": result.cfg.transport,
        "hosts": fc.hosts,
        "planes": fc.planes,
        "radix": fc.radix,
        "link_rate_gbps": fc.link_rate_bps / 1e9,
        "mtu": fc.mtu,
        "message_bytes": result.cfg.message_bytes,
        "evs": result.cfg.evs,
        "loss": fc.loss,
        "seed": fc.seed,
        "flows": len(flows),
        "completed": completed,
        "flows_completed": sum(1 for f in flows if f.verified),
        "qp_errors": errors,
        "goodput_fraction": sum(inv) / len(inv) if inv else 0.0,
        "aggregate_goodput_fraction": aggregate,
        "per_packet_efficiency": result.efficiency,
        "fct_mean_us": sum(fcts) / len(fcts) if fcts else None,
        "fct_p99_us": _pct(fcts, 0.99) if fcts else None,
        "fct_max_us": max(fcts) if fcts else None,
        "fct_slowdown_mean": sum(slow) / len(slow) if slow else None,
        "fct_slowdown_p99": _pct(slow, 0.99) if slow else None,
        "fct_slowdown_max": max(slow) if slow else None,
        "retx_bytes": c.get("retx_bytes", 0),
        "lost_bytes": c.get("lost_bytes", 0),
        "timeouts": c.get("timeouts", 0),
        "duplicate_arrivals": _duplicates(result),
        "nack_trimmed": c.get("nack_trimmed", 0) + c.get("nack_lasthop", 0),
        "trims": sw.get("trims", 0),
        "drops": sw.get("drops", 0) + sw.get("loss_drops", 0) + sw.get("down_drops", 0),
        "ecn_marks": sw.get("ecn_marks", 0),
        "evs_retired": retired,
        "evs_restored": restored,
        "recovery_us": recovery,
        "recovery_us_per_flow": per_flow,
        "failover_us": _failover(result),
        "failures": [{"at_us": e.at_ps / US, "what": e.describe()} for e in result.failures],
        "sim_time_us": result.sim_end_ps / US,
        "events": result.events,
        "wall_s": result.wall_s,
        "events_per_s": result.events / result.wall_s if result.wall_s > 0 else None,
    }


def print_table(rows: list[dict], console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(
        title=f"mrcnic sim: {rows[0]['scenario']}, {rows[0]['hosts']} hosts x {rows[0]['planes']} planes"
    )
    table.add_column("metric")
    for r in rows:
        table.add_column(r["transport"], justify="right")

    def fmt(v):
        if v is None:
            return "-"
        if isinstance(v, bool):
            return "yes" if v else "NO"
        if isinstance(v, float):
            return f"{v:.3f}" if abs(v) < 100 else f"{v:.1f}"
        return str(v)

    for key, label in [
        ("completed", "all transfers completed + verified"),
        ("goodput_fraction", "goodput / line-rate goodput (mean/flow)"),
        ("aggregate_goodput_fraction", "bottleneck goodput / line rate (all flows)"),
        ("fct_mean_us", "FCT mean (us)"),
        ("fct_p99_us", "FCT p99 (us)"),
        ("fct_max_us", "FCT max (us)"),
        ("fct_slowdown_p99", "FCT slowdown p99"),
        ("retx_bytes", "retransmitted bytes"),
        ("lost_bytes", "bytes declared lost"),
        ("timeouts", "timeout-driven losses"),
        ("duplicate_arrivals", "data packets received twice"),
        ("trims", "trims"),
        ("drops", "drops"),
        ("evs_retired", "EVs retired"),
        ("evs_restored", "EVs restored"),
        ("recovery_us", "recovery after failure (us)"),
        ("failover_us", "last EV on the failed link retired (us)"),
        ("sim_time_us", "simulated time (us)"),
        ("events_per_s", "events / s (wall)"),
    ]:
        table.add_row(label, *[fmt(r.get(key)) for r in rows])
    console.print(table)


def plot(results: list[SimResult], directory: str) -> list[str]:
    """Throughput over time per plane and the FCT distribution, one PNG each; returns the paths."""
    import os

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(directory, exist_ok=True)
    scenario = results[0].cfg.scenario
    paths = []
    fig, axes = plt.subplots(len(results), 1, figsize=(8, 3 * len(results)), squeeze=False)
    for ax, res in zip(axes[:, 0], results, strict=True):
        for plane, bins in enumerate(res.plane_bins):
            if not bins:
                continue
            last = max(bins)
            xs = [b * res.bin_ps / US for b in range(last + 1)]
            ys = [bins.get(b, 0) * 8 / (res.bin_ps / 1e12) / 1e9 for b in range(last + 1)]
            ax.plot(xs, ys, label=f"plane {plane}")
        for event in res.failures:
            ax.axvline(event.at_ps / US, color="red", linestyle="--", label=event.describe())
        ax.set_title(f"{res.cfg.transport}: goodput delivered per plane")
        ax.set_xlabel("simulated time (us)")
        ax.set_ylabel("Gb/s (all hosts)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(directory, f"{scenario}-throughput.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    paths.append(path)
    fig, ax = plt.subplots(figsize=(6, 4))
    for res in results:
        slow = sorted((f.placed_at - f.start) / f.ideal_ps for f in res.flows if f.placed_at is not None)
        if slow:
            ax.step(
                slow, [(i + 1) / len(slow) for i in range(len(slow))], where="post", label=res.cfg.transport
            )
    ax.set_xlabel("FCT / ideal FCT")
    ax.set_ylabel("fraction of flows")
    ax.set_title(f"{scenario}: FCT distribution")
    ax.legend()
    fig.tight_layout()
    path = os.path.join(directory, f"{scenario}-fct.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    paths.append(path)
    return paths
