"""Receiver: SACK content and triggers, coalescing, NACK on trims, duplicates, ACKs, RQMSN completions,
receive validation (rows 9-12) with AETH NAKs, posted receives."""

from types import SimpleNamespace

from mrcnic.model.params import US
from mrcnic.model.receiver import Receiver, sack_base
from mrcnic.wire import (
    Aeth,
    AethSyndrome,
    CcState,
    Dscp,
    Ecn,
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
    decode,
)


def sacks(frames):
    return [f for _, f in frames if f.opcode == Opcode.SACK]


def test_sack_base_alignment():
    assert sack_base(3, 1) == 0
    assert sack_base(100, 10) == 40  # 100 - 56 = 44 -> 40
    assert sack_base(12, 3) == 0
    assert sack_base(20, 17) == 16


def test_coalescing_by_bytes_and_timer(pair):
    pair.post()
    frames = pair.send_all(0)
    assert len(frames) == 16
    rx = pair.b
    for f in frames[:3]:
        rx.on_frame(f, 0, 100)
    assert pair.nb.take() == []  # 12 KiB: not yet
    rx.on_frame(frames[3], 0, 200)
    (s,) = sacks(pair.nb.take())  # 16 KiB: one SACK
    assert s[Seth].cack_psn == 3 and s[Seth].ack_psn_offset == 0
    rx.on_frame(frames[4], 0, 300)
    assert pair.nb.take() == []
    pair.nb.advance(300 + 2 * US - 1)
    assert pair.nb.take() == []
    pair.nb.advance(300 + 2 * US)
    (s,) = sacks(pair.nb.take())  # the 2 us timer
    assert s[Seth].cack_psn == 4


def test_hole_content_and_run(pair):
    pair.post()
    f = pair.send_all(0)
    rx = pair.b
    rx.on_frame(f[0], 0, 10)
    rx.on_frame(f[1], 0, 20)
    assert pair.nb.take() == []
    rx.on_frame(f[3], 0, 30)  # opens a hole at 2
    (s,) = sacks(pair.nb.take())
    seth = s[Seth]
    assert seth.cack_psn == 1 and seth.ack_psn_offset == 2
    assert seth.sack_offset == -1 and seth.sack_bitmap == 0b1011
    assert seth.entropy == f[3].ev and seth.m == SackVerdict.NONE
    assert s[CcState].tx_timestamp == f[3][Tseth].tx_timestamp and s[CcState].ooo_count == 1
    assert s.bth.dest_qp == 16 and s.ev == f[3].ev  # travels back on the echoed EV
    rx.on_frame(f[4], 0, 40)  # extends the run: no new hole
    assert pair.nb.take() == []
    rx.on_frame(f[2], 0, 50)  # fills the hole: cack moves past the run
    (s,) = sacks(pair.nb.take())
    assert s[Seth].cack_psn == 4 and s[CcState].ooo_count == 0
    s.encode()  # a valid frame
    assert decode(s.encode(), check_icrc=True)[Seth] == s[Seth]


def test_ce_duplicate_and_message_end(pair):
    pair.post(length=3 * 4096)
    f = pair.send_all(0)
    rx = pair.b
    f[0].network.ecn = Ecn.CE
    rx.on_frame(f[0], 0, 10)
    (s,) = sacks(pair.nb.take())
    assert s[Seth].m == SackVerdict.SKIP_ONCE
    f[0].network.ecn = Ecn.ECT0
    rx.on_frame(f[0], 0, 20)  # duplicate: SACKed, not placed
    (s,) = sacks(pair.nb.take())
    assert s[Seth].m == SackVerdict.NONE and rx.qps[16].receiver.c["dups"] == 1
    assert pair.region.placed_bytes == 4096
    rx.on_frame(f[1], 0, 30)
    assert pair.nb.take() == []
    rx.on_frame(f[2], 0, 40)  # message end: immediate SACK and the transport ACK
    out = pair.nb.take()
    assert [x.opcode for _, x in out] == [Opcode.ACK, Opcode.SACK]
    assert out[0][1][Aeth].msn == 0
    assert bytes(pair.region.buffer[: 3 * 4096]) == pair.data[: 3 * 4096]


def test_trimmed_nack(pair):
    pair.post()
    f = pair.send_all(0)
    rx = pair.b
    for frame, dscp, reason in (
        (f[0], Dscp.TRIMMED, NackReason.TRIMMED),
        (f[1], Dscp.TRIMMED_LASTHOP, NackReason.TRIMMED_LASTHOP),
    ):
        frame.payload = b""
        frame.trimmed = True
        frame.network.dscp = dscp
        rx.on_frame(frame, 0, 10)
        ((_, n),) = pair.nb.take()
        assert n.opcode == Opcode.NACK
        neth = n[Neth]
        assert neth.nack_reason == reason and neth.nack_psn == frame.bth.psn and neth.entropy == frame.ev
        assert neth.tx_timestamp == frame[Tseth].tx_timestamp
    assert pair.region.placed_bytes == 0


def test_out_of_window_nack(pair):
    pair.post()
    f = pair.send_all(0)[0]
    f.bth.psn = 300
    pair.b.on_frame(f, 0, 10)
    pair.b.on_frame(f, 0, 20)  # at most one per base RTT
    out = pair.nb.take()
    assert len(out) == 1 and out[0][1][Neth].nack_reason == NackReason.PSN_OOR_WINDOW


def test_imm_completions_in_rqmsn_order(pair):
    pair.post(length=8192, imm=0x11, offset=0)
    pair.post(length=4096, imm=0x22, offset=8192)
    f = pair.send_all(0)
    assert [x.opcode for x in f] == [Opcode.WRITE_FIRST, Opcode.WRITE_LAST_IMM, Opcode.WRITE_ONLY_IMM]
    r = pair.b.qps[16].receiver
    pair.b.on_frame(f[2], 0, 10)  # message 1 complete first
    assert [c for c in r.completions if c[1] == "recv_imm"] == []
    pair.b.on_frame(f[0], 0, 20)
    pair.b.on_frame(f[1], 0, 30)
    imms = [(c[2], c[3]) for c in r.completions if c[1] == "recv_imm"]
    assert imms == [(0, 0x11), (1, 0x22)]
    acks = [x for _, x in pair.nb.take() if x.opcode == Opcode.ACK]
    assert acks and acks[-1][Aeth].msn in (0, 1)
    pair.nb.advance(10 * US)
    acks = [x for _, x in pair.nb.take() if x.opcode == Opcode.ACK]
    assert acks[-1][Aeth].msn == 1 if acks else r.ack_msn == 1


def aeths(frames):
    return [(f[Aeth].syndrome, f[Aeth].msn) for _, f in frames if f.opcode == Opcode.ACK]


def probe(pair, ev, probe_id=7):
    return control_frame(
        pair.qa.addressing(ev),
        ev=ev,
        opcode=Opcode.PROBE,
        headers=[Peth(probe_id=probe_id, tx_timestamp=5)],
        dest_qp=16,
        dscp=Dscp.TRIMMABLE,
        ecn=Ecn.ECT0,
    )


def test_access_error_mid_message_naks_at_completion(pair):
    """Wrong R_Key on the first packet of message 1 of 3 (two packets each): the packet is marked
    received and SACKed but not placed; message 1 completes with NAK_REMOTE_ACCESS at once (inside the
    ACK interval); afterwards WRITEs are dropped, probes get the SACK and the NAK again."""
    for k in range(3):
        pair.post(length=2 * 4096, offset=k * 8192)
    f = pair.send_all(0)
    assert len(f) == 6
    f[2][Reth].rkey = 99  # no region: R_Key unknown
    rx, r = pair.b, pair.qb.receiver
    rx.on_frame(f[0], 0, 10)
    rx.on_frame(f[1], 0, 20)
    assert aeths(pair.nb.take()) == [(AethSyndrome.ACK, 0)]
    rx.on_frame(f[2], 0, 30)  # message 1 not complete yet: SACK only
    out = pair.nb.take()
    assert aeths(out) == [] and r.c["bad_access"] == 1 and r.c["rx_pkts"] == 2
    assert r.cack == 2 and r.rcvd_bytes == 3 * 4096  # counted and cack moved like a placed packet
    rx.on_frame(f[3], 0, 40)  # message 1 ends: NAK now (an ACK would wait for the 1 us interval)
    out = pair.nb.take()
    assert [x.opcode for _, x in out] == [Opcode.ACK, Opcode.SACK]
    assert aeths(out) == [(AethSyndrome.NAK_REMOTE_ACCESS, 1)]
    assert out[1][1][Seth].cack_psn == 3
    assert r.nak == (1, AethSyndrome.NAK_REMOTE_ACCESS) and r.c["naks"] == 1
    assert (40, "remote_access", 1, None, 8192) in r.completions
    assert [c[2] for c in r.completions if c[1] == "write"] == [0]
    assert pair.region.placed_bytes == 3 * 4096  # message 0 and the good packet of message 1
    assert bytes(pair.region.buffer[8192:12288]) == bytes(4096)
    for frame in f[4:]:  # message 2: dropped, not SACKed
        rx.on_frame(frame, 0, 50)
    f[3].bth.ack_req = True
    rx.on_frame(f[3], 0, 60)  # even a duplicate asking for the AETH
    assert pair.nb.take() == [] and r.c["qp_not_ready"] == 3 and r.cack == 3
    assert pair.region.placed_bytes == 3 * 4096
    rx.on_frame(probe(pair, f[0].ev), 0, 70)
    out = pair.nb.take()
    assert [x.opcode for _, x in out] == [Opcode.SACK, Opcode.ACK]
    assert out[0][1][Seth].pr == 1 and aeths(out) == [(AethSyndrome.NAK_REMOTE_ACCESS, 1)]
    assert out[1][1].ev == f[0].ev  # on the probed path
    pair.nb.advance(10 * US)
    assert pair.nb.take() == []  # no late ACK


def test_out_of_bounds_after_earlier_arrival_of_later_packets(pair):
    """The error is found on a packet that arrives last (filling a hole): the NAK still names its
    message, and messages before it are ACKed first in the same walk (one AETH: the NAK)."""
    pair.post(length=4096, offset=0)
    pair.post(length=2 * 4096, offset=4096)
    f = pair.send_all(0)
    f[1][Reth].va = 0x2000 + len(pair.data) + 4096 - 100  # past the end of the region
    rx, r = pair.b, pair.qb.receiver
    rx.on_frame(f[2], 0, 10)
    rx.on_frame(f[0], 0, 20)
    assert aeths(pair.nb.take()) == [(AethSyndrome.ACK, 0)]
    rx.on_frame(f[1], 0, 30)
    assert aeths(pair.nb.take()) == [(AethSyndrome.NAK_REMOTE_ACCESS, 1)]
    assert r.c["bad_access"] == 1 and r.cack == 2


def test_invalid_request_lengths(pair):
    """Row 9: payload longer than the DMA length, DMA length 0, a First packet shorter than the PMTU."""
    for change, counter in (
        (lambda fr: setattr(fr[Reth], "dma_length", 100), "invalid_request"),
        (lambda fr: setattr(fr[Reth], "dma_length", 0), "invalid_request"),
        (lambda fr: setattr(fr, "payload", fr.payload[:100]), "invalid_request"),
    ):
        p = type(pair)()
        p.post(length=2 * 4096)
        f = p.send_all(0)
        change(f[0])
        p.b.on_frame(f[0], 0, 10)
        p.b.on_frame(f[1], 0, 20)
        r = p.qb.receiver
        assert aeths(p.nb.take()) == [(AethSyndrome.NAK_INVALID_REQUEST, 0)]
        assert r.c[counter] == 1 and r.c["bad_access"] == 0 and r.cack == 1
        assert p.region.placed_bytes == 4096
    pair.post(length=4096)  # an Only packet longer than the PMTU (its DMA length agrees)
    (f,) = pair.send_all(0)
    f.payload = bytes(5000)
    f[Reth].dma_length = 5000
    pair.b.on_frame(f, 0, 10)
    assert aeths(pair.nb.take()) == [(AethSyndrome.NAK_INVALID_REQUEST, 0)]
    assert pair.qb.receiver.c["invalid_request"] == 1 and pair.region.placed_bytes == 0


def test_pmtu_rules_need_the_pmtu(pair):
    """A standalone Receiver without ``pmtu`` keeps only the rules that need no PMTU."""
    pair.post(length=2 * 4096)
    f = pair.send_all(0)
    f[0].payload = f[0].payload[:1000]  # First shorter than the PMTU: consistent without knowing it
    qp = SimpleNamespace(
        qpn=16,
        peer_qpn=16,
        endpoint=pair.b,
        schedule=pair.nb.schedule,
        reverse_addressing=pair.qb.reverse_addressing,
        send_control=pair.nb.send_control,
    )
    r = Receiver(qp, pair.params)
    r.on_data(f[0], 10)
    assert r.c["invalid_request"] == 0 and r.c["rx_pkts"] == 1
    pair.qb.receiver.on_data(f[0], 10)
    assert pair.qb.receiver.c["invalid_request"] == 1


def test_write_imm_needs_a_posted_receive(pair):
    """Row 11: once receives are counted, a WRITE_IMM consumes one; with none left it is NAKed
    NAK_REMOTE_OPERATION and makes no receive completion."""
    r = pair.qb.receiver
    assert r.credits is None
    pair.b.post_receive(16)
    assert r.credits == 1
    pair.post(length=4096, imm=0x11, offset=0)
    pair.post(length=4096, imm=0x22, offset=4096)
    f = pair.send_all(0)
    pair.b.on_frame(f[0], 0, 10)
    assert [(c[1], c[2], c[3], c[4]) for c in r.completions] == [
        ("write", 0, None, 4096),
        ("recv_imm", 0, 0x11, 4096),
    ]
    assert r.credits == 0
    pair.b.on_frame(f[1], 0, 20)
    assert aeths(pair.nb.take()) == [(AethSyndrome.ACK, 0), (AethSyndrome.NAK_REMOTE_OPERATION, 1)]
    assert r.c["no_receive_wr"] == 1 and r.credits == 0
    assert [c[1] for c in r.completions] == ["write", "recv_imm", "remote_operation"]
    assert pair.region.placed_bytes == 2 * 4096  # the data was placed; the message still fails


def test_write_imm_unchecked_credits(pair):
    """Receives never posted: WRITE_IMMs complete as before (no row 11)."""
    for k in range(3):
        pair.post(length=4096, imm=k, offset=k * 4096)
    for frame in pair.send_all(0):
        pair.b.on_frame(frame, 0, 10)
    r = pair.qb.receiver
    assert r.credits is None and r.nak is None
    assert [(c[2], c[3]) for c in r.completions if c[1] == "recv_imm"] == [(0, 0), (1, 1), (2, 2)]


def test_rqmsn_out_of_order_naks(pair):
    """Row 12: a WRITE_IMM whose RQMSN is not the next expected one."""
    pair.post(length=4096, imm=1, offset=0)
    pair.post(length=4096, imm=2, offset=4096)
    f = pair.send_all(0)
    f[1][Meth].rqmsn = 5
    pair.b.on_frame(f[0], 0, 10)
    pair.b.on_frame(f[1], 0, 20)
    r = pair.qb.receiver
    assert aeths(pair.nb.take()) == [(AethSyndrome.ACK, 0), (AethSyndrome.NAK_INVALID_REQUEST, 1)]
    assert r.c["rqmsn_mismatch"] == 1 and [c[1] for c in r.completions][-1] == "invalid_request"
