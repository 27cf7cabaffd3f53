"""The demo's report: figures from ``timeline.json``, ``summary.json``, the per-plane throughput plot."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["summarise", "plot", "print_summary"]

BIN_PS = 10_000_000  # 10 us bins for the plot and the recovery measure
RECOVERY_WINDOW_PS = 10_000_000


def _first_arrivals(arrivals) -> list[tuple[int, int]]:
    """(time, payload bytes) of the first whole arrival of each PSN: trimmed and duplicate arrivals are not
    goodput."""
    seen, out = set(), []
    for t, _plane, psn, length, trimmed in sorted(arrivals):
        if not trimmed and psn not in seen:
            seen.add(psn)
            out.append((t, length))
    return out


def _goodput_bins(arrivals, start: int) -> dict[int, int]:
    """New payload bytes per :data:`BIN_PS` bin."""
    bins = {}
    for t, length in _first_arrivals(arrivals):
        b = (t - start) // BIN_PS
        bins[b] = bins.get(b, 0) + length
    return bins


def recovery_us(arrivals, start: int, end: int, fail: int | None) -> float | None:
    """Time from the failure until the goodput over a 10 us window is back to 90 % of its average over
    the half of the pre-failure time just before the failure (the method of ``mrcnic sim``)."""
    if fail is None:
        return None
    firsts = _first_arrivals(arrivals)
    pre_start = start + (fail - start) // 2
    pre = sum(n for t, n in firsts if pre_start <= t < fail)
    rate = pre / max(1, fail - pre_start)
    step = 1_000_000  # 1 us
    t = fail
    while t + RECOVERY_WINDOW_PS <= end:
        got = sum(n for u, n in firsts if t <= u < t + RECOVERY_WINDOW_PS)
        if got >= 0.9 * rate * RECOVERY_WINDOW_PS:
            return (t - fail) / 1e6
        t += step
    return (end - fail) / 1e6


def summarise(timeline: dict) -> dict:
    start, end = timeline["start_ps"], timeline["end_ps"]
    planes = timeline["config"]["planes"]
    sent = timeline["sent"]
    share = [0] * planes
    for _t, plane, *_ in sent:
        share[plane] += 1
    elapsed = max(1, end - start)
    goodput = timeline["size"] * 8e12 / elapsed
    c = timeline["counters"]
    return {
        "data_verified": timeline["data_verified"],
        "bytes": timeline["size"],
        "goodput_gbps": round(goodput / 1e9, 3),
        "limit_gbps": round(timeline["limit_bps"] / 1e9, 3),
        "goodput_fraction": round(goodput / timeline["limit_bps"], 4),
        "plane_share": [round(n / max(1, len(sent)), 4) for n in share],
        "data_packets": len(sent),
        "lost_packets": timeline["lost_frames"],
        "retx_packets": timeline["retx_frames"],
        "evs_retired": c.get("path_retired", 0),
        "evs_replaced_from_backups": c.get("path_replaced", 0),
        "evs_restored": c.get("path_restored", 0),
        "probes": c.get("prober_probes", 0),
        "recovery_us": recovery_us(timeline["arrivals"], start, end, timeline["fail_ps"]),
        "failure_at_us": None
        if timeline["fail_ps"] is None
        else round((timeline["fail_ps"] - start) / 1e6, 1),
        "restore_at_us": None
        if timeline["restore_ps"] is None
        else round((timeline["restore_ps"] - start) / 1e6, 1),
        "simulated_us": round(elapsed / 1e6, 1),
        "sim_cycles_per_s": round(timeline["sim_cycles_per_s"]),
        # the reference-model scoreboards (tb/system/scoreboard.py) over the same run
        "model_agrees": not timeline.get("model_mismatches", []),
        "model_checks": timeline.get("model_checks", {}),
        "counters": c,
    }


def plot(timeline: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    start, end = timeline["start_ps"], timeline["end_ps"]
    planes = timeline["config"]["planes"]
    nbins = (end - start) // BIN_PS + 1
    per_plane = [[0.0] * nbins for _ in range(planes)]
    for t, plane, n, *_ in timeline["sent"]:
        b = (t - start) // BIN_PS
        if 0 <= b < nbins:
            per_plane[plane][b] += n
    good = _goodput_bins(timeline["arrivals"], start)
    xs = [(b * BIN_PS) / 1e6 for b in range(nbins)]
    to_gbps = 8e12 / BIN_PS / 1e9
    fig, ax = plt.subplots(figsize=(10, 5))
    for p in range(planes):
        ax.plot(xs, [v * to_gbps for v in per_plane[p]], label=f"plane {p} (sent)", linewidth=1)
    ax.plot(xs, [good.get(b, 0) * to_gbps for b in range(nbins)], label="goodput (received)", color="black")
    ax.axhline(timeline["limit_bps"] / 1e9, color="grey", linestyle=":", label="theoretical limit")
    for key, label, color in (("fail_ps", "link down", "red"), ("restore_ps", "link up", "green")):
        if timeline.get(key):
            ax.axvline((timeline[key] - start) / 1e6, color=color, linestyle="--", label=label)
    ax.set_xlabel("simulated time (us)")
    ax.set_ylabel("Gb/s (10 us bins)")
    ax.set_title("RTL MRC NICs: per-plane throughput, a T0-T1 link of plane 1 fails and comes back")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _model_line(summary: dict) -> str:
    checks = summary.get("model_checks", {})
    return (
        f"{summary.get('model_agrees')} ({checks.get('ev_decisions', 0)} EV decisions, "
        f"{checks.get('data_frames_on_model_evs', 0)} data-frame EVs, {checks.get('sacks', 0)} SACKs checked)"
    )


def print_summary(summary: dict) -> None:
    rows = [
        ("data verified", summary["data_verified"]),
        ("bytes written", f"{summary['bytes']:,}"),
        (
            "goodput",
            f"{summary['goodput_gbps']} Gb/s = {summary['goodput_fraction']:.3f} of the limit "
            f"({summary['limit_gbps']} Gb/s)",
        ),
        ("per-plane share", ", ".join(f"{100 * s:.1f} %" for s in summary["plane_share"])),
        ("data packets", summary["data_packets"]),
        ("lost / retransmitted", f"{summary['lost_packets']} / {summary['retx_packets']}"),
        (
            "EVs retired (from backups) / restored",
            f"{summary['evs_retired']} ({summary['evs_replaced_from_backups']}) / {summary['evs_restored']}",
        ),
        ("probes sent", summary["probes"]),
        ("link down / up at", f"{summary['failure_at_us']} us / {summary['restore_at_us']} us"),
        ("recovery (goodput back to 90 %)", f"{summary['recovery_us']} us"),
        ("simulated", f"{summary['simulated_us']} us at {summary['sim_cycles_per_s']:,} cycles/s"),
        ("reference model agrees", _model_line(summary)),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")


def main(folder: str) -> dict:
    out = Path(folder)
    timeline = json.loads((out / "timeline.json").read_text())
    summary = summarise(timeline)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    plot(timeline, out / "throughput.png")
    return summary
