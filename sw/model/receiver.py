"""Responder side of one QP: placement, SACK tracker, SACK/NACK/ACK generation, completions.

SACK rules: window of 256 PSNs above ``cack`` (highest PSN with all earlier received). Immediate SACK on a
CE arrival, BTH.A, a message-ending packet, a duplicate, an arrival that opens a new hole, an arrival that
moves cack past an out-of-order run, or a reliability probe; otherwise after ``sack_bytes`` of new payload
or ``sack_delay`` after the first un-SACKed arrival. Content: entropy = trigger EV; m = SKIP_ONCE iff the
trigger arrived CE; ack_psn_offset = trigger - cack; base = align8_down(max(trigger - 56, cack + 1)); bit i
of the bitmap = PSN base + i received (bits <= cack set); CC_STATE echoes the trigger's timestamp.
Trimmed data -> NACK TRIMMED / TRIMMED_LASTHOP (echo EV, PSN, timestamp); nothing placed.
Transport ACK (AETH msn = highest MSN with every message up to it complete), at most one per
``ack_coalesce``. WRITE-with-immediate completions are released in RQMSN order.
"""

from __future__ import annotations

from ..wire import (
    Aeth,
    CcState,
    Dscp,
    Ecn,
    ImmDt,
    Meth,
    NackReason,
    Neth,
    Opcode,
    Peth,
    Reth,
    SackVerdict,
    Seth,
    Tseth,
    control_frame,
)
from .params import Params
from .sender import PSN_MOD, unwrap

__all__ = ["Receiver", "sack_base"]


def sack_base(trigger: int, cack: int) -> int:
    return max(trigger - 56, cack + 1) & ~7


class Receiver:
    def __init__(self, qp, params: Params):
        self.qp = qp
        self.p = params
        self.cack = -1
        self.highest = -1
        self.ooo: set[int] = set()
        self.rcvd_bytes = 0
        self.unsacked_bytes = 0
        self.unsacked = False
        self.sack_gen = 0
        self.trigger = None  # (psn, ev, timestamp, ce)
        self.msg_bytes: dict[int, int] = {}
        self.msg_imm: dict[int, ImmDt] = {}
        self.complete: set[int] = set()
        self.ack_msn = -1
        self.last_ack_at = -(1 << 62)
        self.ack_scheduled = False
        self.ack_dirty = False
        self.next_rqmsn = 0
        self.imm_ready: dict[int, tuple[int, int]] = {}
        self.last_oor_nack = -(1 << 62)
        # (time, kind, msn / rqmsn, imm, message bytes)
        self.completions: list[tuple[int, str, int, int | None, int]] = []
        self.c = dict(
            rx_pkts=0,
            rx_bytes=0,
            dups=0,
            trimmed=0,
            oor=0,
            sacks=0,
            nacks=0,
            acks=0,
            ce=0,
            bad_access=0,
            probes=0,
        )

    # -- data ------------------------------------------------------------------------------------
    def on_data(self, frame, now: int) -> None:
        bth = frame.bth
        psn = unwrap(bth.psn, self.cack + 1)
        net = frame.network
        dscp = net.dscp
        if frame.trimmed or dscp in (Dscp.TRIMMED, Dscp.TRIMMED_LASTHOP):
            self.c["trimmed"] += 1
            reason = NackReason.TRIMMED_LASTHOP if dscp == Dscp.TRIMMED_LASTHOP else NackReason.TRIMMED
            ts = frame.get(Tseth)
            self._nack(reason, frame.ev, psn, ts.tx_timestamp if ts else 0)
            return
        if psn > self.cack + self.p.window:
            self.c["oor"] += 1
            if now - self.last_oor_nack >= self.p.base_rtt_ps:
                self.last_oor_nack = now
                ts = frame.get(Tseth)
                self._nack(NackReason.PSN_OOR_WINDOW, frame.ev, psn, ts.tx_timestamp if ts else 0)
            return
        ce = net.ecn == Ecn.CE or frame.ip.ecn == Ecn.CE
        if ce:
            self.c["ce"] += 1
        ts = frame.get(Tseth)
        self.trigger = (psn, frame.ev, ts.tx_timestamp if ts else 0, ce)
        if psn <= self.cack or psn in self.ooo:
            self.c["dups"] += 1
            self._sack(now)
            if bth.ack_req and self.ack_msn >= 0:
                self._send_ack(now)  # the requester lost our transport ACK and asks again
            return
        reth = frame[Reth]
        payload = frame.payload
        region = self.qp.endpoint.regions.get(reth.rkey)
        if region is None or not region.contains(reth.va, len(payload)):
            self.c["bad_access"] += 1
            return
        region.write(reth.va, payload)
        self.c["rx_pkts"] += 1
        self.c["rx_bytes"] += len(payload)
        self.rcvd_bytes += len(payload)
        immediate = ce or bth.ack_req
        if psn > max(self.highest, self.cack) + 1:
            immediate = True  # a new hole
        if psn > self.highest:
            self.highest = psn
        if psn == self.cack + 1:
            cack = psn
            ooo = self.ooo
            while cack + 1 in ooo:
                cack += 1
                ooo.discard(cack)
            if cack > psn:
                immediate = True  # moved past an out-of-order run
            self.cack = cack
        else:
            self.ooo.add(psn)
        # message accounting
        meth = frame[Meth]
        msn = unwrap(meth.msn, self.ack_msn + 1, 16)
        got = self.msg_bytes.get(msn, 0) + len(payload)
        opcode = Opcode(bth.opcode)
        if opcode.ends_message:
            immediate = True
        imm = frame.get(ImmDt)
        if imm is not None:  # the immediate rides on the last packet, which need not arrive last
            self.msg_imm[msn] = imm
        if got >= reth.dma_length:
            self.msg_bytes.pop(msn, None)
            self._message_done(msn, meth.rqmsn, self.msg_imm.pop(msn, None), now, reth.dma_length)
        else:
            self.msg_bytes[msn] = got
        self.unsacked_bytes += len(payload)
        if self.unsacked_bytes >= self.p.sack_bytes:
            immediate = True
        if immediate:
            self._sack(now)
        elif not self.unsacked:
            self.unsacked = True
            self.qp.schedule(now + self.p.sack_delay_ps, self._sack_timer, self.sack_gen)

    def _sack_timer(self, now: int, generation: int) -> None:
        if generation == self.sack_gen and self.unsacked:
            self._sack(now)

    def on_probe(self, frame, now: int) -> None:
        self.c["probes"] += 1
        peth = frame[Peth]
        ce = frame.network.ecn == Ecn.CE
        self._send_sack(frame.ev, peth.probe_id, peth.tx_timestamp, ce, probe=True)

    # -- control out -----------------------------------------------------------------------------
    def sack_fields(self, trigger: int) -> tuple[int, int]:
        """(base, bitmap) for a SACK triggered by PSN ``trigger``."""
        cack = self.cack
        base = sack_base(trigger, cack)
        bits = 0
        if base <= cack:
            bits = (1 << min(cack - base + 1, 64)) - 1
        end = base + 64
        for p in self.ooo:
            if base <= p < end:
                bits |= 1 << (p - base)
        return base, bits

    def _sack(self, now: int) -> None:
        psn, ev, ts, ce = self.trigger
        self.unsacked = False
        self.unsacked_bytes = 0
        self.sack_gen += 1
        self._send_sack(ev, psn - self.cack, ts, ce, trigger_psn=psn)

    def _send_sack(self, ev, offset, ts, ce, probe=False, trigger_psn=None) -> None:
        cack = self.cack
        if probe:
            base, bits = self.sack_fields(cack + 1)
        else:
            base, bits = self.sack_fields(trigger_psn)
        seth = Seth(
            m=SackVerdict.SKIP_ONCE if ce else SackVerdict.NONE,
            pr=1 if probe else 0,
            ack_psn_offset=offset if probe else max(min(offset, 32767), -32768),
            entropy=ev,
            spdcid=self.qp.qpn & 0xFFFF,
            dpdcid=self.qp.peer_qpn & 0xFFFF,
            cack_psn=cack % PSN_MOD,
            sack_offset=base - cack,
            sack_bitmap=bits,
        )
        if probe and offset >= 0x8000:
            seth.ack_psn_offset = offset - 0x10000
        cc = CcState(
            tx_timestamp=ts, ooo_count=min(len(self.ooo), 0x7FFF), rcvd_bytes=(self.rcvd_bytes >> 8) % PSN_MOD
        )
        self.c["sacks"] += 1
        self._control(ev, Opcode.SACK, [seth, cc])

    def _nack(self, reason: int, ev: int, psn: int, ts: int) -> None:
        self.c["nacks"] += 1
        neth = Neth(
            nack_reason=reason,
            entropy=ev,
            spdcid=self.qp.qpn & 0xFFFF,
            dpdcid=self.qp.peer_qpn & 0xFFFF,
            nack_psn=psn % PSN_MOD,
            tx_timestamp=ts,
        )
        self._control(ev, Opcode.NACK, [neth])

    def _control(self, ev: int, opcode: Opcode, headers) -> None:
        frame = control_frame(
            self.qp.reverse_addressing(ev), ev=ev, opcode=opcode, headers=headers, dest_qp=self.qp.peer_qpn
        )
        self.qp.send_control(ev >> 29, frame)

    # -- messages --------------------------------------------------------------------------------
    def _message_done(self, msn: int, rqmsn16: int, imm, now: int, length: int = 0) -> None:
        self.complete.add(msn)
        self.qp.endpoint.message_placed(self.qp, msn, now)
        self.completions.append((now, "write", msn, None, length))
        if imm is not None:
            rqmsn = unwrap(rqmsn16, self.next_rqmsn, 16)
            self.imm_ready[rqmsn] = (msn, imm.imm, length)
            while self.next_rqmsn in self.imm_ready:
                msn_i, value, size = self.imm_ready.pop(self.next_rqmsn)
                self.completions.append((now, "recv_imm", self.next_rqmsn, value, size))
                self.next_rqmsn += 1
        advanced = False
        while self.ack_msn + 1 in self.complete:
            self.ack_msn += 1
            self.complete.discard(self.ack_msn)
            advanced = True
        if advanced:
            self.ack_dirty = True
            if now - self.last_ack_at >= self.p.ack_coalesce_ps:
                self._send_ack(now)
            elif not self.ack_scheduled:
                self.ack_scheduled = True
                self.qp.schedule(self.last_ack_at + self.p.ack_coalesce_ps, self._ack_timer)

    def _ack_timer(self, now: int) -> None:
        self.ack_scheduled = False
        if self.ack_dirty:
            self._send_ack(now)

    def _send_ack(self, now: int) -> None:
        self.last_ack_at = now
        self.ack_dirty = False
        self.c["acks"] += 1
        ev = self.trigger[1] if self.trigger else 0
        frame = control_frame(
            self.qp.reverse_addressing(ev),
            ev=ev,
            opcode=Opcode.ACK,
            headers=[Aeth(msn=self.ack_msn % PSN_MOD)],
            dest_qp=self.qp.peer_qpn,
        )
        self.qp.send_control(ev >> 29, frame)
