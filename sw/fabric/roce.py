"""The baseline: RoCEv2 RC over ECMP, one path per QP, go-back-N.

Each QP uses one plane (``hash(src GID, dst GID, QPN) mod planes``) and one fixed UDP source port; the
switches pick the uplink by hashing the 5-tuple, so a QP's packets all follow one path. Single-IPv6
frames, DSCP NO_TRIM (switches drop instead of trimming). Sender: PSNs in order, at most ``window_bytes``
outstanding (1.5 plane BDPs: RoCE here has no congestion control), go back to the first unacknowledged PSN
on a NAK (PSN sequence error) or a timeout (RTO = 4 base RTT, same as MRC). Receiver: in-order only;
cumulative ACK every 16 KiB, on a message end or 2 us after the first unacknowledged packet; a NAK once
per gap; duplicates are re-ACKed.
"""

from __future__ import annotations

import zlib

from ..model.endpoint import FabricInfo, PlanePorts, gid, host_mac
from ..model.memory import MemoryRegion
from ..model.params import Params
from ..model.sender import PSN_MOD, Message, ts128, unwrap
from ..wire import Addressing, Aeth, AethSyndrome, Dscp, Meth, Opcode, Reth, control_frame, data_frame

__all__ = ["NAK_SEQ", "RoceEndpoint", "RoceQp"]

NAK_SEQ = 0x60  # AETH: NAK, PSN sequence error


class RoceQp:
    def __init__(self, ep: RoceEndpoint, qpn: int, peer_host: int, peer_qpn: int):
        self.endpoint = ep
        self.qpn = qpn
        self.peer_host = peer_host
        self.peer_qpn = peer_qpn
        key = gid(ep.host).to_bytes(16, "big") + gid(peer_host).to_bytes(16, "big") + qpn.to_bytes(4, "big")
        h = zlib.crc32(key)
        lo, hi = min(ep.host, peer_host), max(ep.host, peer_host)
        pair = zlib.crc32(gid(lo).to_bytes(16, "big") + gid(hi).to_bytes(16, "big") + qpn.to_bytes(4, "big"))
        self.plane = pair % ep.info.planes  # both directions of the connection on one plane
        self.ev = (0xC000 | (h & 0x3FFF)) | (((h >> 14) & 0xFFFF) << 16)
        self.addr = Addressing(
            src_mac=host_mac(ep.host, self.plane),
            dst_mac=0x02FF00000000 | self.plane,
            src_gid=gid(ep.host),
            dst_gid=gid(peer_host),
            hop_limit=ep.params.hop_limit,
        )
        self.pending: list[Message] = []
        self.msgs: list[Message] = []
        self.entries: list[tuple[Message, int, int, int]] = []  # per PSN: (msg, offset, length, opcode)
        self.next_psn = 0
        self.una = 0
        self.sent_max = -1
        self.next_msn = 0
        self.window = 0
        self.timer_gen = 0
        self.timer_armed = False
        self.last_progress = 0
        self.error = None
        self.completions: list = []
        # receiver
        self.expected = 0
        self.nak_sent = False
        self.unacked_bytes = 0
        self.ack_timer = False
        self.msg_bytes = 0
        self.msn_done = -1
        self.c = dict(
            tx_pkts=0,
            tx_bytes=0,
            retx_pkts=0,
            retx_bytes=0,
            lost_pkts=0,
            lost_bytes=0,
            timeouts=0,
            naks=0,
            rx_pkts=0,
            rx_bytes=0,
            dups=0,
            ooo_drops=0,
            acks=0,
            bad_access=0,
        )

    # -- sender ------------------------------------------------------------------------------------
    @property
    def sender(self):
        return self

    @property
    def idle(self) -> bool:
        return self.una >= len(self.entries) and not self.pending

    def post(self, va, rkey, length, source, imm, wr_id, now) -> Message:
        msg = Message(self.next_msn, 0, va, rkey, length, source, imm, wr_id, now)
        self.next_msn += 1
        mtu = self.endpoint.params.mtu
        msg.first_psn = len(self.entries)
        n = max(1, -(-length // mtu))
        for k in range(n):
            off = k * mtu
            ln = min(mtu, length - off)
            first, last = k == 0, k == n - 1
            if first and last:
                op = Opcode.WRITE_ONLY_IMM if imm is not None else Opcode.WRITE_ONLY
            elif first:
                op = Opcode.WRITE_FIRST
            elif last:
                op = Opcode.WRITE_LAST_IMM if imm is not None else Opcode.WRITE_LAST
            else:
                op = Opcode.WRITE_MIDDLE
            self.entries.append((msg, off, ln, op))
        msg.last_psn = len(self.entries) - 1
        self.msgs.append(msg)
        return msg

    def has_work(self) -> bool:
        return self.error is None and self.next_psn < len(self.entries)

    def next_frame(self, now: int, plane_ok: int):
        if not (plane_ok >> self.plane) & 1 or not self.has_work():
            return None
        mtu = self.endpoint.params.mtu
        if (self.next_psn - self.una) * mtu >= self.window:
            return None
        psn = self.next_psn
        msg, off, ln, op = self.entries[psn]
        self.next_psn += 1
        rtx = psn <= self.sent_max
        self.c["tx_pkts"] += 1
        self.c["tx_bytes"] += ln
        if rtx:
            self.c["retx_pkts"] += 1
            self.c["retx_bytes"] += ln
        self.sent_max = max(self.sent_max, psn)
        frame = data_frame(
            self.addr,
            ev=self.ev,
            opcode=op,
            dest_qp=self.peer_qpn,
            psn=psn % PSN_MOD,
            msn=msg.msn & 0xFFFF,
            rqmsn=0,
            va=msg.va + off,
            rkey=msg.rkey,
            dma_length=msg.length,
            payload=msg.source.read(off, ln),
            imm=msg.imm if Opcode(op).has_immediate else None,
            timestamp=ts128(now),
            rtx=rtx,
            dscp=Dscp.NO_TRIM,
        )
        if not self.timer_armed:
            self._arm(now)
        return self.plane, frame

    def _arm(self, now: int) -> None:
        self.timer_armed = True
        self.timer_gen += 1
        self.endpoint.nic.schedule(now + self.endpoint.params.rto_ps, self._timeout, self.timer_gen)

    def _timeout(self, now: int, gen: int) -> None:
        if gen != self.timer_gen:
            return
        self.timer_armed = False
        if self.una < self.next_psn:
            self.c["timeouts"] += 1
            self._go_back(self.una)
            self._arm(now)
            self.endpoint.nic.wake()

    def _go_back(self, psn: int) -> None:
        lost = self.next_psn - psn
        if lost > 0:
            self.c["lost_pkts"] += lost
            self.c["lost_bytes"] += sum(self.entries[p][2] for p in range(psn, self.next_psn))
        self.next_psn = psn

    def on_ack(self, frame, now: int) -> None:
        aeth = frame.ext[0]
        psn = unwrap(frame.bth.psn, self.una)
        if aeth.syndrome == NAK_SEQ:
            self.c["naks"] += 1
            if psn > self.una:
                self._advance(psn - 1, now)
            if psn >= self.una:
                self._go_back(max(psn, self.una))
        else:
            self._advance(psn, now)
        self.endpoint.nic.wake()

    def _advance(self, psn: int, now: int) -> None:
        if psn + 1 > self.una:
            self.una = min(psn + 1, len(self.entries))
            if self.next_psn < self.una:
                self.next_psn = self.una
            while self.msgs and self.msgs[0].last_psn < self.una:
                msg = self.msgs.pop(0)
                msg.done_at = now
                self.completions.append((now, msg))
                if self.endpoint.on_message_acked is not None:
                    self.endpoint.on_message_acked(self, msg, now)
            self.timer_armed = False
            self.timer_gen += 1
            if self.una < self.next_psn:
                self._arm(now)

    # -- receiver ----------------------------------------------------------------------------------
    def on_data(self, frame, now: int) -> None:
        psn = unwrap(frame.bth.psn, self.expected)
        if psn > self.expected:
            self.c["ooo_drops"] += 1
            if not self.nak_sent:
                self.nak_sent = True
                self._control(NAK_SEQ, self.expected)
            return
        if psn < self.expected:
            self.c["dups"] += 1
            self._control(AethSyndrome.ACK, self.expected - 1)
            return
        reth = frame[Reth]
        region = self.endpoint.regions.get(reth.rkey)
        if region is None or not region.contains(reth.va, len(frame.payload)):
            self.c["bad_access"] += 1
            return
        region.write(reth.va, frame.payload)
        self.expected += 1
        self.nak_sent = False
        n = len(frame.payload)
        self.c["rx_pkts"] += 1
        self.c["rx_bytes"] += n
        self.unacked_bytes += n
        self.msg_bytes += n
        immediate = self.unacked_bytes >= self.endpoint.params.sack_bytes
        if Opcode(frame.bth.opcode).ends_message:
            immediate = True
            self.msg_bytes = 0
            self.msn_done = unwrap(frame[Meth].msn, self.msn_done + 1, 16)
            self.endpoint.message_placed(self, self.msn_done, now)
        if immediate:
            self._ack_now()
        elif not self.ack_timer:
            self.ack_timer = True
            self.endpoint.nic.schedule(now + self.endpoint.params.sack_delay_ps, self._ack_timeout)

    def _ack_timeout(self, now: int) -> None:
        self.ack_timer = False
        if self.unacked_bytes:
            self._ack_now()

    def _ack_now(self) -> None:
        self.unacked_bytes = 0
        self._control(AethSyndrome.ACK, self.expected - 1)

    def _control(self, syndrome: int, psn: int) -> None:
        self.c["acks"] += 1
        frame = control_frame(
            self.addr,
            ev=self.ev,
            opcode=Opcode.ACK,
            dest_qp=self.peer_qpn,
            psn=psn % PSN_MOD,
            headers=[Aeth(syndrome=syndrome, msn=self.msn_done % PSN_MOD)],
        )
        self.endpoint.nic.send_control(self.plane, frame)


class RoceEndpoint(PlanePorts):
    """Same environment interface as :class:`mrcnic.model.endpoint.Endpoint`."""

    def __init__(self, host: int, params: Params, info: FabricInfo, nic, seed: int = 1):
        self.host = host
        self.params = params
        self.info = info
        self.nic = nic
        self.qps: dict[int, RoceQp] = {}
        self.regions: dict[int, MemoryRegion] = {}
        self._rr: list[RoceQp] = []
        self._rr_pos = 0
        self.on_message_placed = None
        self.on_message_acked = None
        self.dropped = 0
        self.port_up = (1 << info.planes) - 1
        plane_rate = params.line_rate_bps // info.planes
        self.window_bytes = max(int(1.5 * plane_rate * params.base_rtt_ps / 8e12), 2 * params.mtu)

    def create_qp(self, qpn: int, peer_host: int, peer_qpn: int) -> RoceQp:
        qp = RoceQp(self, qpn, peer_host, peer_qpn)
        qp.window = self.window_bytes
        self.qps[qpn] = qp
        self._rr.append(qp)
        return qp

    def register(self, rkey: int, region: MemoryRegion) -> MemoryRegion:
        self.regions[rkey] = region
        return region

    def post_write(self, qpn, va, rkey, length, source, imm=None, wr_id=None, now=0):
        msg = self.qps[qpn].post(va, rkey, length, source, imm, wr_id, now)
        self.nic.wake()
        return msg

    def on_frame(self, frame, plane: int, now: int) -> None:
        qp = self.qps.get(frame.bth.dest_qp)
        if qp is None:
            self.dropped += 1
            return
        op = frame.bth.opcode
        if Opcode.WRITE_FIRST <= op <= Opcode.WRITE_ONLY_IMM:
            qp.on_data(frame, now)
        elif op == Opcode.ACK:
            qp.on_ack(frame, now)
        else:
            self.dropped += 1

    def next_data(self, now: int, plane_ok: int):
        plane_ok &= self.port_up
        rr = self._rr
        n = len(rr)
        for k in range(n):
            i = (self._rr_pos + k) % n
            out = rr[i].next_frame(now, plane_ok)
            if out is not None:
                self._rr_pos = (i + 1) % n
                return out
        return None
