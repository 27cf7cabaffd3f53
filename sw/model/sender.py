"""Requester side of one QP: segmentation, scoreboard, loss inference, selective retransmission, probes.

Scoreboard entry per PSN: EV, last send time, transmission count, acked, lost (waiting for retransmit).
Loss inference (RACK-like time rule): PSN p is lost when unacked and some packet sent >= delta later than
p's last transmission has been SACKed (delta = target_qdelay + 2 us); per-packet timeout RTO. Both are
checked on a send-ordered queue of (send time, psn, transmission number), so each check is O(1) amortised.
Retransmissions go first, never on the previous EV; a PSN may be declared lost (time rule or timeout)
``retry_budget`` times, the next loss puts the QP in the error state (trim NACKs prove the path alive and do
not count). New data needs ``psn <= una - 1 + window`` and ``inflight + pkt <= cwnd``.

Completions (docs/protocol.md §7.4): a message completes only on a transport ACK (AETH). An ACK for MSN m
completes every message up to m with ``Message.status`` "ok" (endpoint callback ``message_acked``). A NAK
for m completes the messages before m "ok", m with the status named by the syndrome ("invalid_request",
"remote_access", "remote_operation") and every later one "flushed" (callback ``message_failed``), and
puts the QP in error (``error`` set, nothing more sent). Retry exhaustion (a PSN lost once more than the
budget allows, or ``retry_budget`` unanswered requests for a missing AETH) completes the oldest outstanding
message "retry_exceeded" and the rest "flushed", the same way.
"""

from __future__ import annotations

from collections import deque

from ..wire import (
    AethSyndrome,
    CcState,
    Dscp,
    Ecn,
    NackReason,
    Neth,
    Opcode,
    Peth,
    SackVerdict,
    Seth,
    control_frame,
    data_frame,
)
from .ev import EvTable
from .nscc import Nscc
from .params import Params

__all__ = ["MESSAGE_STATUSES", "Message", "Sender", "TxEntry", "unwrap"]

PSN_MOD = 1 << 24

# Message.status once the message has completed (None before)
MESSAGE_STATUSES = ("ok", "invalid_request", "remote_access", "remote_operation", "flushed", "retry_exceeded")
_NAK_STATUS = {
    AethSyndrome.NAK_INVALID_REQUEST: "invalid_request",
    AethSyndrome.NAK_REMOTE_ACCESS: "remote_access",
    AethSyndrome.NAK_REMOTE_OPERATION: "remote_operation",
}


def unwrap(value: int, reference: int, bits: int = 24) -> int:
    """The full number closest to ``reference`` whose low ``bits`` bits are ``value`` (serial arithmetic)."""
    mod = 1 << bits
    diff = (value - reference) % mod
    if diff >= mod >> 1:
        diff -= mod
    return reference + diff


def ts128(now_ps: int) -> int:
    return (now_ps // 128_000) & 0xFFFF


class Message:
    """One posted WRITE. ``status`` is None until it completes, then one of :data:`MESSAGE_STATUSES`;
    ``done_at`` is the completion time."""

    __slots__ = (
        "done_at",
        "first_psn",
        "imm",
        "last_psn",
        "length",
        "msn",
        "posted_at",
        "rkey",
        "rqmsn",
        "source",
        "status",
        "va",
        "wr_id",
    )

    def __init__(self, msn, rqmsn, va, rkey, length, source, imm, wr_id, posted_at):
        self.msn = msn
        self.rqmsn = rqmsn
        self.va = va
        self.rkey = rkey
        self.length = length
        self.source = source
        self.imm = imm
        self.wr_id = wr_id
        self.posted_at = posted_at
        self.first_psn = -1
        self.last_psn = -1
        self.done_at = None
        self.status: str | None = None


class TxEntry:
    __slots__ = (
        "acked",
        "avoid",
        "ev",
        "losses",
        "innet",
        "length",
        "lost",
        "msg",
        "offset",
        "opcode",
        "psn",
        "sent",
        "txn",
    )

    def __init__(self, psn, msg, offset, length, opcode):
        self.psn = psn
        self.msg = msg
        self.offset = offset
        self.length = length
        self.opcode = opcode
        self.ev = -1
        self.sent = 0
        self.txn = -1  # transmissions so far - 1 (0 after the first one)
        self.acked = False
        self.lost = False
        self.innet = False
        self.avoid = None
        self.losses = 0  # times declared lost (time rule / timeout); trim NACKs do not count


class Sender:
    def __init__(self, qp, params: Params, evs: EvTable, cc: Nscc):
        self.qp = qp
        self.p = params
        self.evs = evs
        self.cc = cc
        self.pending: deque[Message] = deque()  # posted, not fully segmented
        self.unacked_msgs: deque[Message] = deque()  # segmented (or segmenting), waiting for the ACK
        self.seg_offset = 0
        self.next_psn = 0
        self.una = 0
        self.sb: dict[int, TxEntry] = {}
        self.retx: deque[int] = deque()
        self.order: deque[tuple[int, int, int]] = deque()
        self.inflight = 0
        self.rack = -(1 << 62)
        # The highest PSN the SACKs since ``rack`` last moved reported on (their windows' tops): the time
        # rule declares nothing above it, which none of them could show as received (§7.7).
        self.rack_top = -1
        self.next_msn = 0
        self.next_rqmsn = 0
        self.acked_msn = -1
        self.error: str | None = None
        self.timer_at: int | None = None
        self.ack_wait_since: int | None = None  # last progress (SACK releasing data, or an ACK)
        self.ack_timer_armed = False
        self.ack_probe: Message | None = None  # message whose last packet is resent to ask for the ACK
        self.ack_requests = 0  # ACK requests since the last transport ACK that advanced
        self.probes: dict[int, list] = {}  # ev -> [interval, successes, outstanding id, generation]
        self.probe_id = 0
        self.retire_log: list[tuple[int, int]] = []  # (time, EV) of every retirement
        self.completions: list[tuple[int, Message]] = []  # every completed message, any status
        # counters
        self.c = dict(
            tx_pkts=0,
            tx_bytes=0,
            retx_pkts=0,
            retx_bytes=0,
            lost_pkts=0,
            lost_bytes=0,
            timeouts=0,
            nack_trimmed=0,
            nack_lasthop=0,
            nack_other=0,
            spurious=0,
            probes_sent=0,
            probe_ok=0,
            probe_fail=0,
            sacks=0,
            acks=0,
            naks=0,
            ack_requests=0,
            bad_feedback=0,  # AETH msn beyond the last posted MSN (§7.5 row 13)
        )

    # -- API ---------------------------------------------------------------------------------------
    def post(self, va: int, rkey: int, length: int, source, imm: int | None, wr_id, now: int) -> Message:
        msg = Message(
            self.next_msn,
            self.next_rqmsn if imm is not None else 0,
            va,
            rkey,
            length,
            source,
            imm,
            wr_id,
            now,
        )
        self.next_msn += 1
        if imm is not None:
            self.next_rqmsn += 1
        self.pending.append(msg)
        return msg

    def has_work(self) -> bool:
        return self.error is None and bool(self.retx or self.pending or self.ack_probe)

    @property
    def idle(self) -> bool:
        return not self.pending and not self.unacked_msgs and self.una == self.next_psn

    # -- transmit ----------------------------------------------------------------------------------
    def next_frame(self, now: int, plane_ok: int):
        """(plane, frame) for one transmission opportunity, or None."""
        if self.error is not None:
            return None
        cwnd = self.cc.cwnd
        retx = self.retx
        while retx:
            e = self.sb.get(retx[0])
            if e is None or e.acked or not e.lost:
                retx.popleft()
                continue
            if self.inflight > 0 and self.inflight + e.length > cwnd:
                return None
            ev = self.evs.select(plane_ok, e.avoid)
            if ev is None:
                return None
            retx.popleft()
            if e.losses > self.p.retry_budget:
                self._fail("retry_exceeded", now, f"retry_exceeded: retry budget exhausted on PSN {e.psn}")
                return None
            e.lost = False
            self.c["retx_pkts"] += 1
            self.c["retx_bytes"] += e.length
            return self._transmit(e, ev, now)
        if self.ack_probe is not None:
            return self._ack_request(now, plane_ok)
        if not self.pending or self.next_psn >= self.una + self.p.window:
            return None
        msg = self.pending[0]
        length = min(self.p.mtu, msg.length - self.seg_offset)
        if self.inflight > 0 and self.inflight + length > cwnd:
            return None
        ev = self.evs.select(plane_ok)
        if ev is None:
            return None
        first = self.seg_offset == 0
        last = self.seg_offset + length >= msg.length
        imm = msg.imm is not None
        if first and last:
            opcode = Opcode.WRITE_ONLY_IMM if imm else Opcode.WRITE_ONLY
        elif first:
            opcode = Opcode.WRITE_FIRST
        elif last:
            opcode = Opcode.WRITE_LAST_IMM if imm else Opcode.WRITE_LAST
        else:
            opcode = Opcode.WRITE_MIDDLE
        e = TxEntry(self.next_psn, msg, self.seg_offset, length, opcode)
        if first:
            msg.first_psn = e.psn
            self.unacked_msgs.append(msg)
        self.sb[e.psn] = e
        self.next_psn += 1
        self.seg_offset += length
        if last:
            msg.last_psn = e.psn
            self.pending.popleft()
            self.seg_offset = 0
        return self._transmit(e, ev, now)

    def _ack_request(self, now: int, plane_ok: int):
        msg = self.ack_probe
        ev = self.evs.select(plane_ok)
        if ev is None:
            return None
        self.ack_probe = None
        if msg.done_at is not None:
            return None
        n = max(1, -(-msg.length // self.p.mtu))
        offset = (n - 1) * self.p.mtu
        opcode = (
            (Opcode.WRITE_ONLY if n == 1 else Opcode.WRITE_LAST)
            if msg.imm is None
            else (Opcode.WRITE_ONLY_IMM if n == 1 else Opcode.WRITE_LAST_IMM)
        )
        e = TxEntry(msg.last_psn, msg, offset, msg.length - offset, opcode)
        e.txn = 0
        self.c["retx_pkts"] += 1
        self.c["retx_bytes"] += e.length
        plane, frame = self._frame(e, ev, now, rtx=True)
        frame.bth.ack_req = True
        return plane, frame

    def _transmit(self, e: TxEntry, ev: int, now: int):
        e.txn += 1
        e.ev = ev
        e.sent = now
        e.innet = True
        self.inflight += e.length
        self.order.append((now, e.psn, e.txn))
        self.c["tx_pkts"] += 1
        self.c["tx_bytes"] += e.length
        out = self._frame(e, ev, now, e.txn > 0)
        self._arm_timer(now)
        return out

    def _frame(self, e: TxEntry, ev: int, now: int, rtx: bool):
        msg = e.msg
        p = self.p
        dscp = (Dscp.TRIMMABLE_RETX if rtx else Dscp.TRIMMABLE) if p.trimmable else Dscp.NO_TRIM
        frame = data_frame(
            self.qp.addressing(ev),
            ev=ev,
            opcode=e.opcode,
            dest_qp=self.qp.peer_qpn,
            psn=e.psn % PSN_MOD,
            msn=msg.msn & 0xFFFF,
            rqmsn=msg.rqmsn & 0xFFFF,
            va=msg.va + e.offset,
            rkey=msg.rkey,
            dma_length=msg.length,
            payload=msg.source.read(e.offset, e.length),
            imm=msg.imm if e.opcode in (Opcode.WRITE_LAST_IMM, Opcode.WRITE_ONLY_IMM) else None,
            timestamp=ts128(now),
            rtx=rtx,
            dscp=dscp,
        )
        return ev >> 29, frame

    # -- feedback ----------------------------------------------------------------------------------
    def _ack(self, e: TxEntry) -> int:
        e.acked = True
        if e.lost:
            self.c["spurious"] += 1
            e.lost = False
        if e.innet:
            e.innet = False
            self.inflight -= e.length
        if e.sent > self.rack:
            self.rack = e.sent
        return e.length

    def on_sack(self, frame, now: int) -> None:
        seth = frame[Seth]
        cc_state = frame[CcState]
        self.c["sacks"] += 1
        cack = unwrap(seth.cack_psn, self.una - 1)
        if seth.pr:
            self._probe_answer(seth.entropy, seth.ack_psn_offset & 0xFFFF, seth.m, now)
            rtt = None
        else:
            trig = self.sb.get(cack + seth.ack_psn_offset)
            rtt = None
            if trig is not None and trig.txn == 0:
                rtt = ((ts128(now) - cc_state.tx_timestamp) & 0xFFFF) * 128_000
        newly = 0
        sb = self.sb
        rack_before = self.rack
        if cack >= self.una:
            for psn in range(self.una, min(cack, self.next_psn - 1) + 1):
                e = sb.pop(psn, None)
                if e is not None and not e.acked:
                    newly += self._ack(e)
            self.una = min(cack, self.next_psn - 1) + 1
        base = cack + seth.sack_offset
        bits = seth.sack_bitmap
        if bits:
            start = max(base, self.una)
            for psn in range(start, min(base + 64, self.next_psn)):
                if (bits >> (psn - base)) & 1:
                    e = sb.get(psn)
                    if e is not None and not e.acked:
                        newly += self._ack(e)
        while self.una < self.next_psn and (e := sb.get(self.una)) is not None and e.acked:
            del sb[self.una]
            self.una += 1
        top = base + 63
        if self.rack > rack_before or top > self.rack_top:
            self.rack_top = top
        if not seth.pr:
            if seth.m == SackVerdict.SKIP_ONCE:
                self.evs.penalise(seth.entropy, self.p.skip_ecn)
            elif seth.m == SackVerdict.ALWAYS_SKIP:
                self._retire(seth.entropy, now)
        self.cc.on_acked(now, newly)
        self.cc.on_sack(now, newly, rtt, seth.m == SackVerdict.SKIP_ONCE)
        self.scan(now)
        if newly:
            self.ack_wait_since = now
        self._arm_ack_timer(now)

    def on_nack(self, frame, now: int) -> None:
        neth = frame[Neth]
        reason = neth.nack_reason
        psn = unwrap(neth.nack_psn, self.una)
        e = self.sb.get(psn)
        if reason == NackReason.TRIMMED:
            self.c["nack_trimmed"] += 1
            self.evs.penalise(neth.entropy, self.p.skip_trim)
            self.cc.on_trim(now, e.length if e else self.p.mtu)
        elif reason == NackReason.TRIMMED_LASTHOP:
            self.c["nack_lasthop"] += 1
            self.cc.on_trim(now, e.length if e else self.p.mtu)
        else:
            self.c["nack_other"] += 1
        # only a NACK of the PSN's latest transmission (same EV) triggers a retransmission
        if e is not None and not e.acked and not e.lost and e.txn >= 0:
            if neth.entropy == e.ev or reason == NackReason.PSN_OOR_WINDOW:
                self._mark_lost(e, neth.entropy)
                self.qp.wake()

    def on_ack(self, msn16: int, now: int, syndrome: int = AethSyndrome.ACK) -> None:
        """A transport ACK (AETH ``syndrome``, ``msn``; only its low 16 bits count, §7.4)."""
        if self.error is not None:
            return
        msn = unwrap(msn16 & 0xFFFF, self.acked_msn + 1, 16)
        if msn >= self.next_msn:  # beyond the last posted MSN
            self.c["bad_feedback"] += 1
            return
        if syndrome >> 5 == 0:  # ACK (IBTA syndrome type 000)
            self.c["acks"] += 1
            if msn <= self.acked_msn:
                return
            self.acked_msn = msn
            self.ack_requests = 0
            while self.unacked_msgs and self.unacked_msgs[0].msn <= msn:
                self._finish(self.unacked_msgs.popleft(), "ok", now)
            self.ack_wait_since = now
            return
        self.c["naks"] += 1
        if msn <= self.acked_msn:
            self.c["bad_feedback"] += 1  # a NAK for a message that already succeeded
            return
        while self.unacked_msgs and self.unacked_msgs[0].msn < msn:
            self._finish(self.unacked_msgs.popleft(), "ok", now)
        self.acked_msn = msn - 1
        status = _NAK_STATUS.get(syndrome, "remote_operation")
        self._fail(status, now, f"{status}: the responder NAKed MSN {msn} (AETH syndrome {syndrome:#04x})")

    def _finish(self, msg: Message, status: str, now: int) -> None:
        msg.status = status
        msg.done_at = now
        self.completions.append((now, msg))
        if status == "ok":
            self.qp.endpoint.message_acked(self.qp, msg, now)
        else:
            self.qp.endpoint.message_failed(self.qp, msg, now)

    def _fail(self, status: str, now: int, reason: str) -> None:
        """QP to ERROR: the oldest outstanding message completes with ``status``, the rest "flushed"."""
        if self.error is not None:
            return
        self.error = reason
        segmenting = {id(m) for m in self.unacked_msgs}  # pending[0] may be both
        msgs = list(self.unacked_msgs) + [m for m in self.pending if id(m) not in segmenting]
        self.unacked_msgs.clear()
        self.pending.clear()
        self.seg_offset = 0
        self.retx.clear()
        self.ack_probe = None
        for k, msg in enumerate(msgs):
            self._finish(msg, status if k == 0 else "flushed", now)

    def _mark_lost(self, e: TxEntry, avoid: int) -> None:
        e.lost = True
        e.avoid = avoid
        if e.innet:
            e.innet = False
            self.inflight -= e.length
        self.retx.append(e.psn)

    def _retire(self, ev: int, now: int) -> None:
        if self.evs.mark_bad(ev, plane_up=self.qp.endpoint.port_up):
            self.retire_log.append((now, ev))
            self.probes[ev] = [self.p.probe_first_ps, 0, None, 0]
            self.qp.schedule(now + self.p.probe_first_ps, self._probe_send, ev, 0)

    def scan(self, now: int) -> None:
        """Loss inference over the send-ordered queue (time rule and per-packet timeout)."""
        limit_rack = self.rack - self.p.loss_delta_ps
        limit_rto = now - self.p.rto_ps
        order = self.order
        sb = self.sb
        found = False
        unreported = []  # old enough for the time rule, but above every window reported since rack moved
        while order:
            t, psn, txn = order[0]
            e = sb.get(psn)
            if e is None or e.acked or e.txn != txn or e.lost:
                order.popleft()
                continue
            by_rule = t <= limit_rack and psn <= self.rack_top
            if not by_rule and t > limit_rto:
                if t > limit_rack:
                    break  # in send order: nothing later is lost either
                unreported.append(order.popleft())
                continue
            if not by_rule:
                self.c["timeouts"] += 1
            order.popleft()
            self.c["lost_pkts"] += 1
            self.c["lost_bytes"] += e.length
            e.losses += 1
            self._mark_lost(e, e.ev)
            self._retire(e.ev, now)
            found = True
        order.extendleft(reversed(unreported))
        self._arm_timer(now)
        if found:
            self.qp.wake()

    def _arm_timer(self, now: int) -> None:
        if self.order and self.timer_at is None:
            self.timer_at = max(self.order[0][0] + self.p.rto_ps, now + 1)
            self.qp.schedule(self.timer_at, self._timer)

    def _timer(self, now: int) -> None:
        self.timer_at = None
        self.scan(now)

    def _waiting_for_ack(self) -> bool:
        return bool(self.unacked_msgs) and self.una == self.next_psn and self.error is None

    def _arm_ack_timer(self, now: int) -> None:
        if not self.ack_timer_armed and self._waiting_for_ack():
            self.ack_timer_armed = True
            self.qp.schedule(
                max(self.ack_wait_since or now, now - self.p.rto_ps) + self.p.rto_ps, self._ack_timer
            )

    def _ack_timer(self, now: int) -> None:
        """Everything SACKed but a message still without its transport ACK for an RTO: resend the
        message's last packet with BTH.A set (the responder answers a duplicate with A set by an ACK)."""
        self.ack_timer_armed = False
        if not self._waiting_for_ack():
            return
        if now - (self.ack_wait_since or 0) >= self.p.rto_ps:
            if self.ack_requests >= self.p.retry_budget:
                msn = self.unacked_msgs[0].msn
                self._fail("retry_exceeded", now, f"retry_exceeded: no transport ACK for MSN {msn}")
                return
            self.ack_requests += 1
            self.c["ack_requests"] += 1
            self.ack_wait_since = now
            self.ack_probe = self.unacked_msgs[-1]
            self.qp.wake()
        self._arm_ack_timer(now)

    # -- probes ------------------------------------------------------------------------------------
    def _probe_send(self, now: int, ev: int, generation: int) -> None:
        state = self.probes.get(ev)
        if state is None or state[3] != generation or self.error is not None:
            return
        self.probe_id = (self.probe_id + 1) & 0xFFFF
        state[2] = self.probe_id
        state[3] += 1
        frame = control_frame(
            self.qp.addressing(ev),
            ev=ev,
            opcode=Opcode.PROBE,
            headers=[Peth(probe_id=self.probe_id, tx_timestamp=ts128(now))],
            dest_qp=self.qp.peer_qpn,
            dscp=Dscp.TRIMMABLE,
            ecn=Ecn.ECT0,
        )
        self.c["probes_sent"] += 1
        self.qp.send_control(ev >> 29, frame)
        self.qp.schedule(now + self.p.rto_ps, self._probe_timeout, ev, state[3])

    def _probe_timeout(self, now: int, ev: int, generation: int) -> None:
        state = self.probes.get(ev)
        if state is None or state[3] != generation:
            return
        self.c["probe_fail"] += 1
        state[1] = 0
        state[2] = None
        state[0] = min(state[0] * 2, self.p.probe_max_ps)
        self.qp.schedule(now + state[0], self._probe_send, ev, state[3])

    def _probe_answer(self, ev: int, probe_id: int, verdict: int, now: int) -> None:
        state = self.probes.get(ev)
        if state is None or state[2] != probe_id:
            return
        state[2] = None
        state[3] += 1
        if verdict != SackVerdict.NONE:
            state[1] = 0
            self.qp.schedule(now + self.p.probe_first_ps, self._probe_send, ev, state[3])
            return
        state[1] += 1
        self.c["probe_ok"] += 1
        if state[1] >= self.p.probe_successes:
            del self.probes[ev]
            self.evs.restore(ev)
            self.qp.wake()
        else:
            self._probe_send(now, ev, state[3])
