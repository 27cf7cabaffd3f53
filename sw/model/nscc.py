"""NSCC-style window congestion control (per QP), after UEC NSCC, made explicit and deterministic.

On every SACK carrying an RTT sample (echoed timestamp of a never-retransmitted packet):
``delay = rtt - base_rtt``; with ``ecn`` = the SACK's SKIP_ONCE verdict:

* no ECN, delay < target: proportional increase ``cwnd += alpha * acked * (target - delay) / target``
* no ECN, delay >= target: fair increase ``cwnd += eta * mtu * acked / cwnd``
* ECN, delay >= target: ``cwnd *= max(1 - gamma * (delay - target) / delay, max_md_jump)``, at most once per
  base_rtt
* ECN, delay < target: no change

On a trim NACK: ``cwnd = max(cwnd - pkt, mtu)`` then quick adapt (at most once per base_rtt + target):
``cwnd = max(bytes acked in the last base_rtt, mtu)`` (never an increase), applied only when those bytes are
below ``max_cwnd >> qa_gate`` (UEC's qa_gate: quick adapt is for severe congestion such as incast).
cwnd stays within [mtu, max_cwnd].
"""

from __future__ import annotations

from collections import deque

from .params import Params

__all__ = ["Nscc"]


class Nscc:
    def __init__(self, params: Params):
        self.p = params
        self.max_cwnd = params.max_cwnd
        self.cwnd = float(self.max_cwnd)
        self.base_rtt = params.base_rtt_ps
        self.target = params.target_qdelay_ps
        self.last_md = -(1 << 62)
        self.last_qa = -(1 << 62)
        self.acked_log: deque[tuple[int, int]] = deque()
        self.acked_window = 0
        self.md_count = 0
        self.qa_count = 0

    def _clamp(self) -> None:
        self.cwnd = min(max(self.cwnd, float(self.p.mtu)), float(self.max_cwnd))

    def on_acked(self, now: int, nbytes: int) -> None:
        """Record newly acknowledged bytes (for quick adapt)."""
        if nbytes:
            self.acked_log.append((now, nbytes))
            self.acked_window += nbytes
        self._expire(now)

    def _expire(self, now: int) -> None:
        log = self.acked_log
        while log and log[0][0] <= now - self.base_rtt:
            self.acked_window -= log.popleft()[1]

    def on_sack(self, now: int, acked: int, rtt: int | None, ecn: bool) -> str:
        """Apply one SACK; returns the quadrant name (for tests and counters)."""
        if not self.p.cc_enabled or rtt is None:
            return "none"
        delay = rtt - self.base_rtt
        target = self.target
        if not ecn:
            if delay < target:
                self.cwnd += self.p.alpha * acked * (target - delay) / target
                quadrant = "proportional"
            else:
                self.cwnd += self.p.eta * self.p.mtu * acked / self.cwnd
                quadrant = "fair"
        elif delay >= target:
            if now - self.last_md >= self.base_rtt:
                factor = 1 - self.p.gamma * (delay - target) / delay if delay > 0 else 1.0
                self.cwnd *= max(factor, self.p.max_md_jump)
                self.last_md = now
                self.md_count += 1
                quadrant = "decrease"
            else:
                quadrant = "decrease-held"
        else:
            quadrant = "hold"
        self._clamp()
        return quadrant

    def on_trim(self, now: int, pkt: int) -> None:
        if not self.p.cc_enabled:
            return
        self.cwnd = max(self.cwnd - pkt, float(self.p.mtu))
        if now - self.last_qa >= self.base_rtt + self.target:
            self._expire(now)
            if self.acked_window < self.max_cwnd >> self.p.qa_gate:
                self.cwnd = min(self.cwnd, float(max(self.acked_window, self.p.mtu)))
                self.last_qa = now
                self.qa_count += 1
        self._clamp()
