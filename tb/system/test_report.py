"""The demo report's figures from a synthetic timeline: goodput, shares, recovery time."""

from system.report import recovery_us, summarise

US = 1_000_000


def _arrivals(rate_gap_ps, start, end, hole=None, psn=0):
    """One 1000-byte packet every ``rate_gap_ps``; none inside ``hole`` (start, end)."""
    out, t = [], start
    while t < end:
        if not (hole and hole[0] <= t < hole[1]):
            out.append((t, psn % 4, psn, 1000, 0))
        psn += 1
        t += rate_gap_ps
    return out


def test_recovery_is_the_first_window_back_at_ninety_percent():
    fail = 100 * US
    arrivals = _arrivals(US // 10, 0, 300 * US, hole=(fail, fail + 30 * US))
    assert recovery_us(arrivals, 0, 300 * US, fail) == 30.0
    assert recovery_us(_arrivals(US // 10, 0, 300 * US), 0, 300 * US, fail) == 0.0
    assert recovery_us(arrivals, 0, 300 * US, None) is None


def test_trimmed_and_duplicate_arrivals_are_not_goodput():
    arrivals = _arrivals(US // 10, 0, 200 * US)
    noisy = arrivals + [(t + 1, p, psn, n, 1) for t, p, psn, n, _ in arrivals[:500]]
    noisy += [(t + 2, p, psn, n, 0) for t, p, psn, n, _ in arrivals[:500]]
    assert recovery_us(noisy, 0, 200 * US, 100 * US) == recovery_us(arrivals, 0, 200 * US, 100 * US)


def test_summary_fields():
    sent = [(i * 1000, i % 4, 1024, 0, 0) for i in range(400)]
    timeline = {
        "config": {"planes": 4},
        "start_ps": 0,
        "end_ps": 400 * 1000,
        "size": 400 * 1024,
        "limit_bps": 10e9,
        "sent": sent,
        "arrivals": [],
        "data_verified": True,
        "lost_frames": 2,
        "retx_frames": 2,
        "counters": {"path_retired": 1, "path_restored": 1},
        "fail_ps": None,
        "restore_ps": None,
        "sim_cycles_per_s": 1000.0,
        "model_checks": {"ev_decisions": 3, "sacks": 40},
        "model_mismatches": [],
    }
    s = summarise(timeline)
    assert s["model_agrees"] and s["model_checks"]["sacks"] == 40
    assert not summarise({**timeline, "model_mismatches": ["nic0: ..."]})["model_agrees"]
    assert s["plane_share"] == [0.25] * 4
    assert s["goodput_fraction"] == round(400 * 1024 * 8e12 / 400_000 / 10e9, 4)
    assert s["lost_packets"] == 2 and s["retx_packets"] == 2 and s["recovery_us"] is None
