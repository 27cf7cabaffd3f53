"""Sender: scoreboard release, loss inference (time rule, timeout), selective retransmission on another EV,
NACK handling, probes restoring an EV, retry budget, window and cwnd gates, AETH NAKs and completion
statuses."""

from mrcnic.model.ev import EvState
from mrcnic.model.params import US, Params
from mrcnic.model.receiver import sack_base
from mrcnic.model.sender import PSN_MOD
from mrcnic.wire import (
    Aeth,
    AethSyndrome,
    CcState,
    Dscp,
    NackReason,
    Opcode,
    Reth,
    SackVerdict,
    Seth,
    control_frame,
)


def deliver(pair, frames, now):
    """Hand frames to B, return B's control frames (fed back to A at ``now``)."""
    for f in frames:
        pair.b.on_frame(f, f.ev >> 29, now)
    out = [f for _, f in pair.nb.take()]
    for f in out:
        pair.a.on_frame(f, f.ev >> 29, now)
    return out


def test_release_on_cack_and_bitmap(pair):
    pair.post()
    f = pair.send_all(0)
    s = pair.qa.sender
    assert s.inflight == 16 * 4096
    deliver(pair, [f[0], f[1], f[3]], 1 * US)
    assert s.una == 2 and s.sb[3].acked and not s.sb[2].acked
    assert s.inflight == 13 * 4096
    deliver(pair, f[2:], 2 * US)
    assert s.una == 16 and not s.sb and s.inflight == 0
    pair.nb.advance(3 * US)
    for _, ack in pair.nb.take():
        pair.a.on_frame(ack, 0, 3 * US)
    assert s.idle and len(s.completions) == 1
    assert bytes(pair.region.buffer[: len(pair.data)]) == pair.data


def test_time_rule_loss_and_selective_retransmit(pair):
    pair.post(length=8 * 4096)
    s = pair.qa.sender
    first = pair.send(0)
    rest = pair.send_all(10 * US)
    assert s.p.loss_delta_ps == 8 * US
    deliver(pair, rest, 11 * US)  # PSN 0 never arrives; PSN 1..7 sent 10 us later are SACKed
    assert s.c["lost_pkts"] == 1 and s.c["timeouts"] == 0 and list(s.retx) == [0]
    assert pair.qa.evs.slot_of(first.ev) is None or pair.qa.evs.slot_of(first.ev).state == EvState.ASSUMED_BAD
    assert first.ev in pair.qa.evs.probe_list
    rtx = pair.send(11 * US)
    assert rtx.bth.psn == 0 and rtx.bth.rtx and rtx.network.dscp == Dscp.TRIMMABLE_RETX and rtx.ev != first.ev
    assert s.c["retx_pkts"] == 1 and s.sb[0].txn == 1
    deliver(pair, [rtx], 12 * US)
    assert s.una == 8


def test_no_loss_within_delta(pair):
    pair.post(length=8 * 4096)
    s = pair.qa.sender
    pair.send(0)
    rest = pair.send_all(5 * US)  # only 5 us later: < delta (8 us)
    deliver(pair, rest, 6 * US)
    assert s.c["lost_pkts"] == 0 and not s.retx


def test_timeout(pair):
    pair.post(length=4096)
    s = pair.qa.sender
    f = pair.send(0)
    pair.na.advance(s.p.rto_ps - 1)
    assert s.c["lost_pkts"] == 0
    pair.na.advance(s.p.rto_ps)
    assert s.c["timeouts"] == 1 and s.c["lost_pkts"] == 1 and s.retx
    rtx = pair.send(s.p.rto_ps)
    assert rtx.ev != f.ev and rtx.bth.rtx


def test_trim_nack_retransmits_on_other_ev(pair):
    pair.post(length=4 * 4096)
    s = pair.qa.sender
    f = pair.send_all(0)
    victim = f[1]
    victim.payload = b""
    victim.trimmed = True
    victim.network.dscp = Dscp.TRIMMED
    cwnd = s.cc.cwnd
    out = deliver(pair, [victim], 1 * US)
    assert out[0].opcode == Opcode.NACK
    assert s.c["nack_trimmed"] == 1 and list(s.retx) == [1]
    slot = pair.qa.evs.slot_of(victim.ev)
    assert slot.skip == 4 and slot.state == EvState.SKIP
    assert s.cc.cwnd == 4096 < cwnd  # quick adapt: nothing acked in the last base RTT -> one MTU
    assert pair.send(2 * US) is None  # inflight 3 packets > cwnd
    deliver(pair, [f[0], f[2], f[3]], 2 * US)
    rtx = pair.send(2 * US)
    assert rtx.bth.psn == 1 and rtx.ev != victim.ev
    deliver(pair, [rtx], 3 * US)
    assert s.una == 4 and s.c["lost_pkts"] == 0 and s.c["timeouts"] == 0


def test_lasthop_trim_no_ev_penalty(pair):
    pair.post(length=2 * 4096)
    f = pair.send_all(0)
    f[0].payload = b""
    f[0].trimmed = True
    f[0].network.dscp = Dscp.TRIMMED_LASTHOP
    out = deliver(pair, [f[0]], 1 * US)
    assert out[0][type(out[0].ext[0])].nack_reason == NackReason.TRIMMED_LASTHOP
    assert pair.qa.evs.slot_of(f[0].ev).skip == 0 and list(pair.qa.sender.retx) == [0]


def test_ecn_echo_skips_ev(pair):
    pair.post(length=4096)
    f = pair.send(0)
    f.network.ecn = 0b11
    out = deliver(pair, [f], 1 * US)
    (sack,) = [x for x in out if x.opcode == Opcode.SACK]
    assert sack[Seth].m == 1
    assert pair.qa.evs.slot_of(f.ev).skip == 1


def test_probes_restore_after_three(pair):
    pair.post(length=8 * 4096)
    s = pair.qa.sender
    first = pair.send(0)
    deliver(pair, pair.send_all(10 * US), 11 * US)
    bad = first.ev
    assert bad in pair.qa.evs.probe_list
    t = 11 * US + s.p.probe_first_ps
    pair.na.advance(t - 1)
    assert pair.na.take() == []
    for _ in range(3):
        pair.na.advance(t)
        ((plane, probe),) = pair.na.take()
        assert probe.opcode == Opcode.PROBE and probe.ev == bad and plane == bad >> 29
        out = deliver(pair, [probe], t + US)
        assert out[0][Seth].pr == 1
        t += US
    assert bad not in pair.qa.evs.probe_list and pair.qa.evs.restored == 1 and s.c["probe_ok"] == 3


def test_probe_failure_backs_off(pair):
    pair.post(length=8 * 4096)
    s = pair.qa.sender
    pair.send(0)
    deliver(pair, pair.send_all(10 * US), 11 * US)
    t = 11 * US + s.p.probe_first_ps
    pair.na.advance(t)
    assert len(pair.na.take()) == 1
    pair.na.advance(t + s.p.rto_ps)  # unanswered: failure, next probe after 40 us
    assert s.c["probe_fail"] == 1
    pair.na.advance(t + s.p.rto_ps + 40 * US - 1)
    assert pair.na.take() == []
    pair.na.advance(t + s.p.rto_ps + 40 * US)
    assert len(pair.na.take()) == 1


def record(pair):
    """Requester completions through the endpoint callbacks: [(kind, msn, status)]."""
    seen = []
    pair.a.on_message_acked = lambda qp, msg, now: seen.append(("acked", msg.msn, msg.status))
    pair.a.on_message_failed = lambda qp, msg, now: seen.append(("failed", msg.msn, msg.status))
    return seen


def test_retry_budget_error(pair):
    seen = record(pair)
    pair.post(length=4096)
    pair.post(length=4096, offset=4096)
    s = pair.qa.sender
    t = 0
    assert pair.send(t).bth.psn == 0
    for _ in range(s.p.retry_budget):
        t += s.p.rto_ps
        pair.na.advance(t)
        assert pair.send(t).bth.psn == 0  # one opportunity each time: the retransmission goes first
    t += s.p.rto_ps
    pair.na.advance(t)
    assert pair.send(t) is None and s.error.startswith("retry_exceeded")
    assert seen == [("failed", 0, "retry_exceeded"), ("failed", 1, "flushed")]
    assert not s.has_work() and not s.pending and not s.unacked_msgs


def test_nak_completes_earlier_fails_one_flushes_later(pair):
    """Wrong R_Key on message 1 of 3: the responder NAKs MSN 1 (NAK_REMOTE_ACCESS); at the requester
    message 0 completes ok, 1 remote_access, 2 flushed, and the QP is in error."""
    seen = record(pair)
    msgs = [pair.post(length=2 * 4096, offset=k * 8192) for k in range(3)]
    s = pair.qa.sender
    f = pair.send_all(0)
    f[2][Reth].rkey = 99
    out = deliver(pair, f[:4], 1 * US)
    acks = [(x[Aeth].syndrome, x[Aeth].msn) for x in out if x.opcode == Opcode.ACK]
    assert acks == [(AethSyndrome.ACK, 0), (AethSyndrome.NAK_REMOTE_ACCESS, 1)]
    assert seen == [("acked", 0, "ok"), ("failed", 1, "remote_access"), ("failed", 2, "flushed")]
    assert [m.status for m in msgs] == ["ok", "remote_access", "flushed"]
    assert all(m.done_at == 1 * US for m in msgs)
    assert s.error is not None and "MSN 1" in s.error and s.c["naks"] == 1
    assert [m.status for _, m in s.completions] == ["ok", "remote_access", "flushed"]
    out = deliver(pair, f[4:], 2 * US)  # the responder drops message 2's packets
    assert out == [] and pair.qb.receiver.c["qp_not_ready"] == 2
    pair.post(length=4096)
    assert pair.send(3 * US) is None and not s.has_work()  # nothing more sent
    pair.na.advance(200 * US)
    assert pair.na.take() == []  # no probes, no ACK requests
    assert len(seen) == 3


def test_nak_with_later_messages_not_yet_sent(pair):
    """A NAK flushes messages still waiting to be segmented too."""
    seen = record(pair)
    pair.qa.cc.cwnd = 4096
    pair.post(length=4096)
    pair.post(length=4096, offset=4096)
    f = pair.send_all(0)
    assert len(f) == 1
    f[0][Reth].dma_length = 0
    deliver(pair, f, 1 * US)
    assert seen == [("failed", 0, "invalid_request"), ("failed", 1, "flushed")]


def test_on_ack_ignores_msn_beyond_posted(pair):
    pair.post(length=4096)
    s = pair.qa.sender
    pair.send(0)
    s.on_ack(5, 1 * US)
    s.on_ack(3, 1 * US, AethSyndrome.NAK_REMOTE_ACCESS)
    assert s.c["bad_feedback"] == 2 and s.error is None and s.unacked_msgs
    s.on_ack(0, 2 * US)
    assert not s.unacked_msgs and s.completions[0][1].status == "ok"


def test_lost_acks_exhaust_the_retry_budget(pair):
    """Every transport ACK lost: the requester asks again (last packet, BTH.A) every RTO, up to the retry
    budget, then the message completes retry_exceeded."""
    seen = record(pair)
    s = pair.qa.sender
    pair.post(length=4096)
    t = 1 * US
    frames = pair.send_all(0)
    for _ in range(s.p.retry_budget + 1):
        for f in frames:
            pair.b.on_frame(f, f.ev >> 29, t)
        for _, f in pair.nb.take():
            if f.opcode != Opcode.ACK:  # the ACKs are lost
                pair.a.on_frame(f, f.ev >> 29, t)
        t += s.p.rto_ps
        pair.na.advance(t)
        frames = pair.send_all(t)
        if s.error is None:
            (request,) = frames
            assert request.bth.ack_req and request.bth.rtx and request.bth.psn == 0
    assert s.c["ack_requests"] == s.p.retry_budget
    assert s.error.startswith("retry_exceeded") and seen == [("failed", 0, "retry_exceeded")]


def test_window_and_cwnd_gates(pair):
    pair.params.window = 4
    pair.post()
    assert len(pair.send_all(0)) == 4
    pair2 = type(pair)()
    pair2.qa.cc.cwnd = 2 * 4096
    pair2.post()
    assert len(pair2.send_all(0)) == 2


def test_port_down_stops_its_evs(pair):
    pair.post()
    pair.a.set_port(1, False)
    assert all(f.ev >> 29 == 0 for f in pair.send_all(0))


def test_trim_nacks_do_not_use_the_retry_budget(pair):
    pair.post(length=4096)
    s = pair.qa.sender
    t = 0
    f = pair.send(t)
    for _ in range(s.p.retry_budget + 3):
        f.payload = b""
        f.trimmed = True
        f.network.dscp = Dscp.TRIMMED_LASTHOP
        t += 1 * US
        deliver(pair, [f], t)
        f = pair.send(t)
        assert f is not None and f.bth.psn == 0
    assert s.error is None and s.c["nack_lasthop"] == s.p.retry_budget + 3


def _sack(pair, frames, trigger, received, now, cack=-1):
    """A §7.2 SACK from B for ``trigger`` (its frame in ``frames``), B having ``received`` above ``cack``,
    handed straight to A: the test chooses which SACKs B's coalescing would have sent."""
    base = sack_base(trigger, cack)
    bits = sum(1 << (p - base) for p in range(base, base + 64) if p <= cack or p in received)
    ev = frames[trigger].ev
    seth = Seth(
        m=SackVerdict.NONE, pr=0, ack_psn_offset=trigger - cack, entropy=ev, spdcid=16, dpdcid=16,
        cack_psn=cack % PSN_MOD, sack_offset=base - cack, sack_bitmap=bits,
    )  # fmt: skip
    headers = [seth, CcState(tx_timestamp=0, ooo_count=0, rcvd_bytes=0)]
    frame = control_frame(
        pair.qb.reverse_addressing(ev), ev=ev, opcode=Opcode.SACK, headers=headers, dest_qp=16
    )
    pair.a.on_frame(frame, ev >> 29, now)


def test_time_rule_only_below_reported_windows(make_pair):
    """§7.7: a SACK triggered by a retransmission of an old PSN shows a window below packets sent before
    that retransmission; it says nothing about them, so they are not declared lost (they were, and resent
    though B had them: whole_plane_fails, SEED=1845383631) until a SACK whose window covers them shows
    one missing. The gateware's tracker has the same rule (tb/hdl/tx/test_tracker.py)."""
    params = Params(
        mtu=1024, base_rtt_ps=8 * US, line_rate_bps=200_000_000_000, n_evs=8, backup_evs=1,
        ev_min_active=2, rto_factor=100,
    )  # fmt: skip
    pair = make_pair(params, length=100 * 1024)
    pair.post()
    s = pair.qa.sender
    frames = [pair.send(k * US) for k in range(100)]  # PSN k sent at k us
    assert [f.bth.psn for f in frames] == list(range(100)) and s.p.loss_delta_ps == 8 * US
    got = set(range(1, 71)) - {5}
    _sack(pair, frames, 30, got & set(range(31)), 100 * US)  # window [0, 63]: 0 and 5 are lost
    assert s.c["lost_pkts"] == 2 and sorted(s.retx) == [0, 5]
    _sack(pair, frames, 70, got, 100 * US)  # window [8, 71]: nothing new missing
    assert s.c["lost_pkts"] == 2
    resent = {f.bth.psn: f for f in (pair.send(101 * US), pair.send(101 * US))}
    assert sorted(resent) == [0, 5]
    frames[5] = resent[5]
    # 5's retransmission arrives (0's does not), and everything else but 80 has: the SACK 5 triggers
    # shows [0, 63] only, though 71..99 were sent more than delta before 5's retransmission.
    got |= set(range(71, 100)) - {80} | {5}
    _sack(pair, frames, 5, got, 102 * US)
    assert s.c["lost_pkts"] == 2 and s.rack_top == 63
    # A later SACK (trigger 99, sent before 5's retransmission) shows [40, 103]: 80 is missing, and lost.
    _sack(pair, frames, 99, got, 103 * US)
    assert s.c["lost_pkts"] == 3 and 80 in s.retx and s.c["timeouts"] == 0
    assert not any(s.sb[p].lost for p in range(71, 100) if p != 80)
