"""Receiver: SACK content and triggers, coalescing, NACK on trims, duplicates, ACKs, RQMSN completions."""

from mrcnic.model.params import US
from mrcnic.model.receiver import sack_base
from mrcnic.wire import Aeth, CcState, Dscp, Ecn, NackReason, Neth, Opcode, SackVerdict, Seth, Tseth, decode


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
