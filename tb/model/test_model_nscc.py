"""NSCC quadrants, MD rate limit, trim quick adapt."""

from mrcnic.model.nscc import Nscc
from mrcnic.model.params import US, Params


def cc():
    p = Params(base_rtt_ps=8 * US, line_rate_bps=100_000_000_000, mtu=4096)
    c = Nscc(p)
    c.cwnd = 50_000.0
    return c


def test_quadrants():
    c = cc()
    base, target = c.base_rtt, c.target
    assert c.on_sack(0, 4096, base + target // 2, False) == "proportional"
    assert c.cwnd == 50_000 + 1.0 * 4096 * 0.5
    w = c.cwnd
    assert c.on_sack(0, 4096, base + 2 * target, False) == "fair"
    assert abs(c.cwnd - (w + 0.15 * 4096 * 4096 / w)) < 1e-6
    w = c.cwnd
    assert c.on_sack(0, 4096, base + target // 2, True) == "hold" and c.cwnd == w
    delay = 2 * target
    assert c.on_sack(10 * US, 4096, base + delay, True) == "decrease"
    assert abs(c.cwnd - w * max(1 - 0.8 * (delay - target) / delay, 0.5)) < 1e-6
    w = c.cwnd
    assert c.on_sack(11 * US, 4096, base + delay, True) == "decrease-held"  # once per base RTT
    assert c.cwnd == w
    assert c.on_sack(10 * US + base, 4096, base + 100 * target, True) == "decrease"
    assert c.cwnd == w * 0.5  # max_md_jump
    assert c.on_sack(0, 4096, None, True) == "none"


def test_bounds():
    c = cc()
    for _ in range(1000):
        c.on_sack(0, 65536, c.base_rtt, False)
    assert c.cwnd == c.max_cwnd == int(1.5 * 100e9 * 8e-6 / 8)
    for t in range(50):
        c.on_sack(t * c.base_rtt, 4096, c.base_rtt * 10, True)
    assert c.cwnd == 4096


def test_trim_quick_adapt():
    c = cc()
    c.on_acked(0, 8192)
    c.on_acked(1 * US, 8192)
    c.on_trim(2 * US, 4096)
    assert c.cwnd == 16384 and c.qa_count == 1  # bytes acked in the last base RTT
    c.cwnd = 40_000.0
    c.on_trim(3 * US, 4096)  # within base_rtt + target: only the per-packet cut
    assert c.cwnd == 40_000 - 4096 and c.qa_count == 1
    c.on_trim(20 * US, 4096)  # the log has expired: MTU floor
    assert c.cwnd == 4096
