"""Responder side of one QP: placement, SACK tracker, SACK/NACK/ACK generation, completions.

SACK rules: window of 256 PSNs above ``cack`` (highest PSN with all earlier received). Immediate SACK on a
CE arrival, BTH.A, a message-ending packet, a duplicate, an arrival that opens a new hole, an arrival that
moves cack past an out-of-order run, or a reliability probe; otherwise after ``sack_bytes`` of new payload
or ``sack_delay`` after the first un-SACKed arrival. Content: entropy = trigger EV; m = SKIP_ONCE iff the
trigger arrived CE; ack_psn_offset = trigger - cack; base = align8_down(max(trigger - 56, cack + 1)); bit i
of the bitmap = PSN base + i received (bits <= cack set); CC_STATE echoes the trigger's timestamp.
Trimmed data -> NACK TRIMMED / TRIMMED_LASTHOP (echo EV, PSN, timestamp); nothing placed.

Receive validation (docs/protocol.md §7.5 rows 9-12): a new WRITE whose lengths are inconsistent (row 9,
counter ``invalid_request``) or whose R_Key / bounds fail (row 10, ``bad_access``) is marked received and
SACKed like a placed packet but not placed; the error is kept with the message being completed. Messages
complete in PSN order when cack passes their ending packet (§7.6; records of message ends and errors are
kept per PSN above cack, like the gateware's completion tracker). A message with an error, a WRITE_IMM
with no receive credit (row 11, only once ``post_receive`` was called: ``credits`` None means "not
checked"), or a WRITE_IMM whose RQMSN is not the next expected one (row 12) completes with an AETH NAK
(msn = that message) sent at once; the QP is then in error (``nak`` set): WRITEs are dropped and counted
(``qp_not_ready``), probes are still answered with the SACK and the current AETH (§7.4).
Transport ACK (AETH msn = highest MSN with every message up to it complete), at most one per
``ack_coalesce``; AETH msn is 16 bits. Receive completions (``completions``) come in MSN order, so
WRITE-with-immediate completions in RQMSN order. A reliability probe is answered with the PR = 1 SACK and,
once a message has completed (or failed), the current AETH (§7.9).
"""

from __future__ import annotations

from ..wire import (
    Aeth,
    AethSyndrome,
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

__all__ = ["NAK_STATUS", "Receiver", "sack_base"]

MAX_DMA_LENGTH = 1 << 31

# AETH NAK syndrome -> the completion status it stands for (receive completions here, the requester's
# Message.status)
NAK_STATUS = {
    AethSyndrome.NAK_INVALID_REQUEST: "invalid_request",
    AethSyndrome.NAK_REMOTE_ACCESS: "remote_access",
    AethSyndrome.NAK_REMOTE_OPERATION: "remote_operation",
}


def sack_base(trigger: int, cack: int) -> int:
    return max(trigger - 56, cack + 1) & ~7


class Receiver:
    """``pmtu``: the QP's PMTU for the PMTU-dependent length rules of §7.5 row 9 (First/Middle payload =
    PMTU, DMA length > PMTU for a multi-packet message, Last payload, Only payload <= PMTU); None skips
    those rules and keeps the ones that need no PMTU (DMA length 0 or > 2^31, payload > DMA length, Only
    payload = DMA length). ``Endpoint`` passes ``params.mtu``."""

    def __init__(self, qp, params: Params, pmtu: int | None = None):
        self.qp = qp
        self.p = params
        self.pmtu = pmtu
        self.cack = -1
        self.highest = -1
        self.ooo: set[int] = set()
        self.rcvd_bytes = 0
        self.unsacked_bytes = 0
        self.unsacked = False
        self.sack_gen = 0
        self.trigger = None  # (psn, ev, timestamp, ce)
        # per PSN above cack that ends a message or failed validation:
        # (msn16, ends_message, rqmsn16, imm or None, dma_length, NAK syndrome or None)
        self.records: dict[int, tuple] = {}
        self.cur_err: int | None = None  # first error in the message being completed (PSN order)
        self.ack_msn = -1
        self.syndrome = AethSyndrome.ACK  # of the current AETH
        self.nak: tuple[int, int] | None = None  # (msn, syndrome) once a NAK was sent: QP in error
        self.credits: int | None = None  # posted receives not yet consumed; None: not checked (row 11)
        self.last_ack_at = -(1 << 62)
        self.ack_scheduled = False
        self.ack_dirty = False
        self.next_rqmsn = 0
        self.last_oor_nack = -(1 << 62)
        # (time, kind, msn / rqmsn, imm, message bytes); kind "write" (msn, every message that completed
        # without error), "recv_imm" (rqmsn, imm: a WRITE_IMM that consumed a receive), or the status of a
        # failed message ("invalid_request", "remote_access", "remote_operation"; msn, imm None)
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
            bad_access=0,  # row 10: R_Key unknown or [va, va + payload) outside the region
            invalid_request=0,  # row 9: lengths inconsistent (row 12 is counted in rqmsn_mismatch)
            qp_not_ready=0,  # WRITEs dropped after a NAK
            no_receive_wr=0,  # row 11
            rqmsn_mismatch=0,  # row 12
            naks=0,
            probes=0,
        )

    def post_receive(self, count: int = 1) -> None:
        """``count`` receive WRs posted (§7.6): from now on a WRITE_IMM needs one (row 11)."""
        self.credits = (self.credits or 0) + count

    # -- data ------------------------------------------------------------------------------------
    def on_data(self, frame, now: int) -> None:
        if self.nak is not None:  # §7.4 "Responder after a NAK", §7.5 row 4
            self.c["qp_not_ready"] += 1
            return
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
        opcode = Opcode(bth.opcode)
        if psn <= self.cack or psn in self.ooo:
            self.c["dups"] += 1
            self._sack(now)
            if bth.ack_req and opcode.ends_message and self.ack_msn >= 0:
                self._send_ack(now)  # the requester lost our transport ACK and asks again
            return
        reth = frame[Reth]
        payload = frame.payload
        size = len(payload)
        error = self._validate(opcode, reth, size)
        if error is None:
            self.qp.endpoint.regions[reth.rkey].write(reth.va, payload)
            self.c["rx_pkts"] += 1
            self.c["rx_bytes"] += size
        self.rcvd_bytes += size  # placed or rejected (§7.2 rcvd_bytes)
        immediate = ce or bth.ack_req or opcode.ends_message
        if psn > max(self.highest, self.cack) + 1:
            immediate = True  # a new hole
        if psn > self.highest:
            self.highest = psn
        meth = frame[Meth]
        if opcode.ends_message or error is not None:
            imm = frame.get(ImmDt)
            self.records[psn] = (
                meth.msn,
                opcode.ends_message,
                meth.rqmsn,
                imm.imm if imm is not None else None,
                reth.dma_length,
                error,
            )
        if psn == self.cack + 1:
            cack = psn
            ooo = self.ooo
            while cack + 1 in ooo:
                cack += 1
                ooo.discard(cack)
            if cack > psn:
                immediate = True  # moved past an out-of-order run
            old = self.cack
            self.cack = cack
            self._complete(old, cack, now)
        else:
            self.ooo.add(psn)
        self.unsacked_bytes += size
        if self.unsacked_bytes >= self.p.sack_bytes:
            immediate = True
        if immediate:
            self._sack(now)
        elif not self.unsacked:
            self.unsacked = True
            self.qp.schedule(now + self.p.sack_delay_ps, self._sack_timer, self.sack_gen)

    def _validate(self, opcode: Opcode, reth, size: int) -> int | None:
        """§7.5 rows 9 and 10 for a new, untrimmed WRITE: None, or the NAK syndrome of its message."""
        dma = reth.dma_length
        only = opcode in (Opcode.WRITE_ONLY, Opcode.WRITE_ONLY_IMM)
        bad = dma == 0 or dma > MAX_DMA_LENGTH or size > dma or (only and size != dma)
        pmtu = self.pmtu
        if not bad and pmtu is not None:
            if only:
                bad = size > pmtu
            elif opcode in (Opcode.WRITE_FIRST, Opcode.WRITE_MIDDLE):
                bad = size != pmtu or dma <= pmtu
            else:  # Last, Last_IMM
                bad = dma <= pmtu or size != (dma - 1) % pmtu + 1
        if bad:
            self.c["invalid_request"] += 1
            return AethSyndrome.NAK_INVALID_REQUEST
        region = self.qp.endpoint.regions.get(reth.rkey)
        if region is None or not region.contains(reth.va, size):
            self.c["bad_access"] += 1
            return AethSyndrome.NAK_REMOTE_ACCESS
        return None

    def _sack_timer(self, now: int, generation: int) -> None:
        if generation == self.sack_gen and self.unsacked:
            self._sack(now)

    def on_probe(self, frame, now: int) -> None:
        self.c["probes"] += 1
        peth = frame[Peth]
        ce = frame.network.ecn == Ecn.CE
        self._send_sack(frame.ev, peth.probe_id, peth.tx_timestamp, ce, probe=True)
        if self.ack_msn >= 0:  # and the current AETH: a lost ACK or NAK is repeated (§7.4, §7.9)
            self._aeth(frame.ev)

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
    def _complete(self, old: int, cack: int, now: int) -> None:
        """cack moved from ``old`` to ``cack``: complete, in PSN order, every message whose ending packet
        is now covered (§7.6); the first error among a message's packets decides its outcome."""
        records = self.records
        if not records:
            return
        advanced = False
        for psn in range(old + 1, cack + 1):
            rec = records.pop(psn, None)
            if rec is None:
                continue
            msn16, ends, rqmsn16, imm, length, error = rec
            if self.cur_err is not None:
                error = self.cur_err
            if not ends:
                self.cur_err = error
                continue
            self.cur_err = None
            msn = unwrap(msn16, self.ack_msn + 1, 16)
            if error is None and imm is not None:
                if self.credits is not None and self.credits <= 0:
                    self.c["no_receive_wr"] += 1
                    error = AethSyndrome.NAK_REMOTE_OPERATION  # row 11
                elif rqmsn16 != self.next_rqmsn & 0xFFFF:
                    self.c["rqmsn_mismatch"] += 1
                    error = AethSyndrome.NAK_INVALID_REQUEST  # row 12
            self.ack_msn = msn
            if error is not None:
                self.nak = (msn, error)
                self.syndrome = error
                self.completions.append((now, NAK_STATUS[error], msn, None, length))
                self.records.clear()
                self._send_ack(now)  # NAKs are not delayed (§7.4)
                return
            advanced = True
            self.qp.endpoint.message_placed(self.qp, msn, now)
            self.completions.append((now, "write", msn, None, length))
            if imm is not None:
                if self.credits is not None:
                    self.credits -= 1
                self.completions.append((now, "recv_imm", self.next_rqmsn, imm, length))
                self.next_rqmsn += 1
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
        """The current AETH (ACK, or the NAK once one was sent) on the latest arrival's EV."""
        self.last_ack_at = now
        self.ack_dirty = False
        self._aeth(self.trigger[1] if self.trigger else 0)

    def _aeth(self, ev: int) -> None:
        self.c["naks" if self.nak is not None else "acks"] += 1
        self._control(ev, Opcode.ACK, [Aeth(syndrome=self.syndrome, msn=self.ack_msn & 0xFFFF)])
