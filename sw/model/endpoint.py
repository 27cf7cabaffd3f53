"""An MRC endpoint (one NIC): QPs tying sender, receiver, EV table and NSCC together.

The endpoint is driven by its environment (the fabric simulator, or a test harness) through:

* ``on_frame(frame, plane, now)``: a frame arrived on plane port ``plane``;
* ``next_data(now, plane_ok)``: a transmission opportunity; returns ``(plane, frame)`` or None;

and it calls back ``nic.schedule(time, fn, *args)`` (``fn(now, *args)`` runs at ``time``),
``nic.send_control(plane, frame)`` (control/probe frames, priority queue of the port) and ``nic.wake()``
(data may be ready). Times are integer picoseconds.

A host layer learns of completions through the endpoint's callbacks (each None by default):

* ``on_message_placed(qp, msn, now)``: the responder completed message ``msn`` without error (placed);
* ``on_message_acked(qp, message, now)``: the requester got the transport ACK for ``message``
  (``message.status == "ok"``);
* ``on_message_failed(qp, message, now)``: a requester's message completed with an error,
  ``message.status`` one of "invalid_request", "remote_access", "remote_operation" (a NAK for it),
  "flushed" (a NAK or retry exhaustion of an earlier message) or "retry_exceeded"; the QP is then in
  error (``qp.sender.error``). Messages complete in MSN order, each exactly once, through one of the two.

Responder-side receive completions are in ``qp.receiver.completions``; ``post_receive(qpn, count)`` posts
receive WRs (once called, a WRITE_IMM without one is NAKed, docs/protocol.md §7.5 row 11).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..wire import Addressing, Opcode, RouteTemplate, port_address
from .ev import EvTable
from .memory import MemoryRegion
from .nscc import Nscc
from .params import Params
from .receiver import Receiver
from .sender import Sender

__all__ = ["Endpoint", "FabricInfo", "PlanePorts", "Qp", "gid", "host_mac"]


def gid(host: int) -> int:
    return (0xFD00 << 112) | (host + 1)


def host_mac(host: int, plane: int) -> int:
    return 0x020000000000 | (plane << 16) | host


@dataclass
class FabricInfo:
    """What an endpoint knows of the fabric: planes, uplinks per T0, hosts per T0, the uSID locator."""

    planes: int = 4
    uplinks: int = 8
    hosts_per_t0: int = 8
    locator: int = 0xFC000000

    def t0_of(self, host: int) -> int:
        return host // self.hosts_per_t0


class Qp:
    def __init__(self, endpoint: Endpoint, qpn: int, peer_host: int, peer_qpn: int, seed: int):
        self.endpoint = endpoint
        self.qpn = qpn
        self.peer_host = peer_host
        self.peer_qpn = peer_qpn
        p = endpoint.params
        info = endpoint.info
        self.evs = EvTable(
            p.n_evs,
            info.planes,
            info.uplinks,
            seed=seed,
            backups=p.backup_evs,
            min_active=p.ev_min_active,
            taps=p.lfsr_taps,
            skip_max=p.skip_max,
        )
        self.cc = Nscc(p)
        self.sender = Sender(self, p, self.evs, self.cc)
        self.receiver = Receiver(self, p, pmtu=p.mtu)
        me = endpoint.host
        self.template = RouteTemplate.for_clos(info.locator, info.t0_of(me), info.t0_of(peer_host), peer_host)
        self._addr: dict[int, Addressing] = {}
        self._rev: dict[int, Addressing] = {}

    # -- addressing ------------------------------------------------------------------------------
    def _make_addr(self, plane: int) -> Addressing:
        ep = self.endpoint
        srv6 = ep.params.srv6
        return Addressing(
            src_mac=host_mac(ep.host, plane),
            dst_mac=0x02FF00000000 | plane,
            src_gid=gid(ep.host),
            dst_gid=gid(self.peer_host),
            outer_src=port_address(ep.info.locator, plane, ep.host) if srv6 else None,
            outer_dst=0 if srv6 else None,
            hop_limit=ep.params.hop_limit,
        )

    def addressing(self, ev: int) -> Addressing:
        """Addressing of a packet to the peer on ``ev`` (outer DA from the route template and the EV)."""
        plane = ev >> 29
        addr = self._addr.get(plane)
        if addr is None:
            addr = self._addr[plane] = self._make_addr(plane)
        if addr.outer_dst is not None:
            addr.outer_dst = self.template.destination(ev)
        return addr

    def reverse_addressing(self, ev: int) -> Addressing:
        """Control packets go back on the path the echoed EV names (same plane, same T1)."""
        return self.addressing(ev)

    # -- environment -----------------------------------------------------------------------------
    def schedule(self, time: int, fn, *args) -> None:
        self.endpoint.nic.schedule(time, fn, *args)

    def send_control(self, plane: int, frame) -> None:
        self.endpoint.nic.send_control(plane, frame)

    def wake(self) -> None:
        self.endpoint.nic.wake()


class PlanePorts:
    """What every endpoint kind (MRC here, RoCE in the fabric's baseline) shares: one port per plane with
    an up/down bit (``port_up``), and the callback told when a whole message has been placed."""

    port_up: int
    on_message_placed = None  # callback(qp, msn, now)

    def message_placed(self, qp, msn: int, now: int) -> None:
        if self.on_message_placed is not None:
            self.on_message_placed(qp, msn, now)

    def set_port(self, plane: int, up: bool) -> None:
        """Port (plane) status: a down port's EVs are not used (they are passed like a busy port)."""
        if up:
            self.port_up |= 1 << plane
        else:
            self.port_up &= ~(1 << plane)


class Endpoint(PlanePorts):
    def __init__(self, host: int, params: Params, info: FabricInfo, nic, seed: int = 1):
        self.host = host
        self.params = params
        self.info = info
        self.nic = nic
        self.seed = seed
        self.qps: dict[int, Qp] = {}
        self.regions: dict[int, MemoryRegion] = {}
        self._rr: list[Qp] = []
        self._rr_pos = 0
        self.on_message_placed = None  # callback(qp, msn, now): responder placed a whole message
        self.on_message_acked = None  # callback(qp, message, now): requester got the transport ACK
        self.on_message_failed = None  # callback(qp, message, now): message.status says why (a NAK, ...)
        self.dropped = 0
        self.port_up = (1 << info.planes) - 1

    def create_qp(self, qpn: int, peer_host: int, peer_qpn: int) -> Qp:
        qp = Qp(self, qpn, peer_host, peer_qpn, seed=self.seed * 1_000_003 + qpn * 7919 + peer_host)
        self.qps[qpn] = qp
        self._rr.append(qp)
        return qp

    def register(self, rkey: int, region: MemoryRegion) -> MemoryRegion:
        self.regions[rkey] = region
        return region

    def post_write(
        self,
        qpn: int,
        va: int,
        rkey: int,
        length: int,
        source,
        imm: int | None = None,
        wr_id=None,
        now: int = 0,
    ):
        msg = self.qps[qpn].sender.post(va, rkey, length, source, imm, wr_id, now)
        self.nic.wake()
        return msg

    def post_receive(self, qpn: int, count: int = 1) -> None:
        """``count`` receive WRs posted on QP ``qpn`` (consumed by WRITE_IMM messages, §7.6)."""
        self.qps[qpn].receiver.post_receive(count)

    def message_acked(self, qp: Qp, msg, now: int) -> None:
        if self.on_message_acked is not None:
            self.on_message_acked(qp, msg, now)

    def message_failed(self, qp: Qp, msg, now: int) -> None:
        if self.on_message_failed is not None:
            self.on_message_failed(qp, msg, now)

    # -- datapath --------------------------------------------------------------------------------
    def on_frame(self, frame, plane: int, now: int) -> None:
        qp = self.qps.get(frame.bth.dest_qp)
        if qp is None:
            self.dropped += 1
            return
        op = frame.bth.opcode
        if Opcode.WRITE_FIRST <= op <= Opcode.WRITE_ONLY_IMM:
            qp.receiver.on_data(frame, now)
        elif op == Opcode.SACK:
            qp.sender.on_sack(frame, now)
            self.nic.wake()
        elif op == Opcode.NACK:
            qp.sender.on_nack(frame, now)
            self.nic.wake()
        elif op == Opcode.ACK:
            aeth = frame.ext[0]
            qp.sender.on_ack(aeth.msn, now, aeth.syndrome)
        elif op == Opcode.PROBE:
            if not frame.trimmed:
                qp.receiver.on_probe(frame, now)
        else:
            self.dropped += 1

    def has_work(self) -> bool:
        return any(qp.sender.has_work() for qp in self._rr)

    def next_data(self, now: int, plane_ok: int):
        plane_ok &= self.port_up
        if not plane_ok:
            return None
        rr = self._rr
        n = len(rr)
        for k in range(n):
            i = (self._rr_pos + k) % n
            s = rr[i].sender
            if s.error is None and (s.retx or s.pending or s.ack_probe):
                out = s.next_frame(now, plane_ok)
                if out is not None:
                    self._rr_pos = (i + 1) % n
                    return out
        return None
