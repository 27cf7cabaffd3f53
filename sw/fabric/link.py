"""Egress ports and links: serial transmission, propagation delay, output queues, ECN, trimming, loss.

A port transmits one frame at a time (next departure = max(now, free_at) + serialization) and delivers
it to the peer node after the propagation delay, unless the link is down (then or at arrival) or the
random loss draw drops it. Queues: a strict-priority class (control and trimmed packets) and a data class
with ECN marking above ``ecn_bytes`` (not on the last hop), trimming above ``trim_bytes`` (headers only,
DSCP TRIMMED, TRIMMED_LASTHOP on the last hop, moved to the priority class), tail drop above ``buffer_bytes``.
"""

from __future__ import annotations

import random
from collections import deque
from functools import cache

from ..wire import Dscp, Ecn, header_length

__all__ = ["Port", "frame_wire_bytes", "link_bytes"]

FCS = 4
PREAMBLE_IFG = 20
_TRIMMABLE = (Dscp.TRIMMABLE, Dscp.TRIMMABLE_RETX)
_PRIO = (Dscp.CONTROL, Dscp.TRIMMED, Dscp.TRIMMED_LASTHOP)


@cache
def _hdr(opcode: int, ts: int, srv6: bool) -> int:
    return header_length(opcode, bool(ts), srv6)


def frame_wire_bytes(frame) -> int:
    """``len(frame.encode()) + FCS``, computed arithmetically."""
    n = _hdr(frame.bth.opcode, frame.bth.ts, frame.outer is not None) + len(frame.payload)
    return n + (0 if frame.trimmed else 4) + FCS


def link_bytes(frame) -> int:
    return frame_wire_bytes(frame) + PREAMBLE_IFG


class Port:
    def __init__(self, owner, index: int, rate_bps: int, delay_ps: int, *, plane: int = 0):
        self.owner = owner
        self.index = index
        self.plane = plane
        self.rate_bps = rate_bps
        self.ps_per_byte = 8e12 / rate_bps
        self.delay_ps = delay_ps
        self.peer = None  # node with receive(frame, port_index, now)
        self.peer_index = 0
        self.peer_port: Port | None = None
        self.up = True
        self.epoch = 0
        self.loss = 0.0
        self.rng = random.Random(index)
        self.prio: deque = deque()
        self.data: deque = deque()
        self.data_bytes = 0
        self.prio_bytes = 0
        self.busy = False
        self.last_hop = False  # T0 port toward a host: no ECN, TRIMMED_LASTHOP
        self.switch_port = False  # queue management applies (hosts: plain FIFO + priority)
        self.ecn_bytes = 1 << 62
        self.trim_bytes = 1 << 62
        self.buffer_bytes = 1 << 62
        self.prio_limit = 1 << 62
        self.trimming = True
        self.capture = None  # PcapWriter
        self.loop = None
        self.on_tx = None  # callback(port, frame, now) for statistics
        self.c = dict(
            tx_pkts=0, tx_bytes=0, drops=0, down_drops=0, loss_drops=0, trims=0, ecn_marks=0, max_q=0
        )

    def connect(self, peer, peer_index: int, peer_port: Port) -> None:
        self.peer = peer
        self.peer_index = peer_index
        self.peer_port = peer_port

    @property
    def idle(self) -> bool:
        return not self.busy and not self.data and not self.prio

    def set_up(self, up: bool) -> None:
        if not up and self.up:
            self.epoch += 1
        self.up = up

    # -- enqueue ---------------------------------------------------------------------------------
    def enqueue(self, frame, now: int) -> None:
        if not self.up:
            self.c["down_drops"] += 1
            return
        net = frame.outer if frame.outer is not None else frame.ip
        size = link_bytes(frame)
        if net.dscp in _PRIO:
            if self.prio_bytes + size > self.prio_limit:
                self.c["drops"] += 1
                return
            self.prio.append((frame, size))
            self.prio_bytes += size
        elif not self.switch_port:
            self.data.append((frame, size))
            self.data_bytes += size
        else:
            q = self.data_bytes
            if q + size > self.trim_bytes and self.trimming and net.dscp in _TRIMMABLE and frame.payload:
                self._trim(frame, net)
                size = link_bytes(frame)
                if self.prio_bytes + size > self.prio_limit:
                    self.c["drops"] += 1
                    return
                self.prio.append((frame, size))
                self.prio_bytes += size
            elif q + size > self.buffer_bytes:
                self.c["drops"] += 1
                return
            else:
                if q > self.ecn_bytes and not self.last_hop and net.ecn in (Ecn.ECT0, Ecn.ECT1):
                    net.ecn = Ecn.CE
                    self.c["ecn_marks"] += 1
                self.data.append((frame, size))
                self.data_bytes += size
                if self.data_bytes > self.c["max_q"]:
                    self.c["max_q"] = self.data_bytes
        if not self.busy:
            self._start(now)

    def _trim(self, frame, net) -> None:
        dscp = Dscp.TRIMMED_LASTHOP if self.last_hop else Dscp.TRIMMED
        frame.payload = b""
        frame.trimmed = True
        net.dscp = dscp
        frame.ip.dscp = dscp
        self.c["trims"] += 1

    # -- transmit --------------------------------------------------------------------------------
    def _start(self, now: int) -> None:
        if self.prio:
            frame, size = self.prio.popleft()
            self.prio_bytes -= size
        elif self.data:
            frame, size = self.data.popleft()
            self.data_bytes -= size
        else:
            return
        self.busy = True
        done = now + int(size * self.ps_per_byte)
        loop = self.loop
        loop.at(done, self._done)
        self.c["tx_pkts"] += 1
        self.c["tx_bytes"] += size
        if self.capture is not None:
            self.capture.write(frame.encode(), now // 1000)
        if self.on_tx is not None:
            self.on_tx(self, frame, now)
        if not self.up:
            self.c["down_drops"] += 1
            return
        if self.loss and self.rng.random() < self.loss:
            self.c["loss_drops"] += 1
            return
        loop.at(done + self.delay_ps, self._arrive, frame, self.epoch)

    def _arrive(self, now: int, frame, epoch: int) -> None:
        if epoch != self.epoch or not self.up:
            self.c["down_drops"] += 1
            return
        self.peer.receive(frame, self.peer_index, now)

    def _done(self, now: int) -> None:
        self.busy = False
        if self.prio or self.data:
            self._start(now)
        else:
            self.owner.port_idle(self, now)
