"""Validator and feedback decoder (Amaranth simulator), behind the real header parser: every check of
docs/protocol.md §7.5 rows 1-5, 9 and 10 gives its own verdict, each on a frame that passes every other
check; SACK, NACK and ACK frames become feedback records equal to the codec's field values.

Random stalls on the streams; the seed is printed (``VALIDATOR_SEED=<seed>`` reruns one).
"""

import os
import random

import pytest
from amaranth import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from mrcnic import wire
from mrcnic.hdl.rx.feedback_decoder import FeedbackDecoder, FeedbackKind, feedback_packet_layout
from mrcnic.hdl.rx.parser import HeaderParser
from mrcnic.hdl.rx.validator import Action, Drop, RxError, Validator, verdict_layout
from mrcnic.hdl.stream import PacketStream
from mrcnic.hdl.tx.layouts import FeedbackEvent

from support.pysim import run, stream_get, stream_put

W = 8
QPS, MRS, DESTS, PLANES = 4, 8, 4, 2
LOCATOR = 0xFCBBBB00
GID_A, GID_B = wire.ip6("fd00::1"), wire.ip6("fd00::6")
HOST_B = 5
PD = 2
QPN = {q: 0x300 + q for q in range(QPS)}
PMTU_LOG2 = 8
PMTU = 1 << PMTU_LOG2
# memory regions: (index, rkey, pd, remote_write, base, length)
REGIONS = [
    (0, 0x1000, PD, 1, 0x10000, 0x8000),
    (1, 0x2001, PD, 1, (1 << 64) - 0x1000, 0x1000),  # reaches the top of the address space
    (2, 0x3002, PD + 1, 1, 0x40000, 0x1000),  # another protection domain
    (3, 0x4003, PD, 0, 0x50000, 0x1000),  # no remote write
    (4, 0x5004, PD, 1, 1 << 32, 1 << 40),  # room past 2^16 bytes from most VAs
    (5, 0x6005, PD, 1, (1 << 20) - 0x1000, 0x1000),  # ends exactly at 2^20
    (6, 0x7006, PD, 1, (1 << 20) - 0x1000, 0x1001),  # one byte past 2^20
]
NARROW = 20  # the address width of the narrow build (test_validator_verdicts_and_feedback_records)


def new_seed() -> int:
    seed = int(os.environ.get("VALIDATOR_SEED", random.randrange(1 << 30)))
    print(f"seed {seed}")
    return seed


class Chain(wiring.Component):
    """Parser -> validator (ICRC and oversize flags from the test) -> verdicts; feedback decoder."""

    def __init__(self, dests=DESTS, addr_width=64):
        super().__init__(
            {
                "i": In(PacketStream(W)),
                "flags": In(2),  # {icrc_ok, oversize} of the frame whose record is next
                "verdict": Out(stream.Signature(verdict_layout(QPS, dests))),
                "feedback_in": In(stream.Signature(verdict_layout(QPS, dests))),
                "feedback": Out(stream.Signature(feedback_packet_layout(QPS))),
            }
        )
        self.parser = HeaderParser(data_width=W, planes=PLANES, port_addresses=dests > 0)
        self.validator = Validator(qps=QPS, mrs=MRS, destinations=dests, addr_width=addr_width)
        self.decoder = FeedbackDecoder(qps=QPS, destinations=dests)

    def elaborate(self, platform):
        m = Module()
        m.submodules.parser = parser = self.parser
        m.submodules.validator = v = self.validator
        m.submodules.decoder = d = self.decoder
        wiring.connect(m, wiring.flipped(self.i), parser.i)
        m.d.comb += [
            v.i.payload.header.eq(parser.header.payload),
            v.i.payload.icrc_ok.eq(self.flags[0]),
            v.i.payload.oversize.eq(self.flags[1]),
            v.i.valid.eq(parser.header.valid),
            parser.header.ready.eq(v.i.ready),
        ]
        wiring.connect(m, v.o, wiring.flipped(self.verdict))
        wiring.connect(m, wiring.flipped(self.feedback_in), d.i)
        wiring.connect(m, d.o, wiring.flipped(self.feedback))
        return m


def forward(plane, *, srv6=True, src=GID_A, dst=GID_B, outer_dst=None):
    return wire.Addressing(
        src_mac=0x020000000001,
        dst_mac=0x020000000002,
        src_gid=src,
        dst_gid=dst,
        outer_src=wire.port_address(LOCATOR, plane, 0) if srv6 else None,
        outer_dst=(outer_dst or wire.port_address(LOCATOR, plane, HOST_B)) if srv6 else None,
    )


def write(q=1, *, op=wire.Opcode.WRITE_ONLY, length=100, dma=None, va=0x10010, rkey=0x1000, plane=1, **kw):
    addr = kw.pop("addressing", forward(plane))
    return wire.data_frame(
        addr,
        ev=wire.make_ev(plane, 3, 77),
        opcode=op,
        dest_qp=kw.pop("dest_qp", QPN[q]),
        psn=5,
        msn=1,
        rqmsn=0,
        va=va,
        rkey=rkey,
        dma_length=length if dma is None else dma,
        payload=bytes(length),
        imm=7 if op.has_immediate else None,
        **kw,
    ).encode()


def control(opcode, headers, *, q=1, plane=0):
    return wire.control_frame(
        forward(plane), ev=wire.make_ev(plane, 1, 2), opcode=opcode, headers=headers, dest_qp=QPN[q]
    ).encode()


def cases(addr_width=64):
    """(name, frame bytes, flags, qp_error, expected (action, drop, error)) for a validator built with
    ``addr_width``: a region that does not lie below 2^addr_width is refused (every access to it fails)."""
    ok = (Action.WRITE, Drop.NONE, RxError.NONE)
    inval = (Action.WRITE, Drop.NONE, RxError.INVALID_REQUEST)
    access = (Action.WRITE, Drop.NONE, RxError.REMOTE_ACCESS)
    reach = 1 << addr_width

    def ok_if_below_reach(index):
        _, _, _, _, base, length = REGIONS[index]
        return ok if base + length <= reach else access

    OP = wire.Opcode
    yield "good only", write(), 1, 0, ok
    yield "good first", write(op=OP.WRITE_FIRST, length=PMTU, dma=3 * PMTU), 1, 0, ok
    yield "good middle", write(op=OP.WRITE_MIDDLE, length=PMTU, dma=2 * PMTU + 1), 1, 0, ok
    yield "good last", write(op=OP.WRITE_LAST_IMM, length=1, dma=2 * PMTU + 1), 1, 0, ok
    # DMA lengths whose low bits alone would look short: the high bits take part in every length rule
    yield "good first, dma 2^13 + 100", write(op=OP.WRITE_FIRST, length=PMTU, dma=(1 << 13) + 100), 1, 0, ok
    yield "good middle, dma 2^16 + 100", write(op=OP.WRITE_MIDDLE, length=PMTU, dma=(1 << 16) + 100), 1, 0, ok
    yield "good last, dma 2^16 + 5", write(op=OP.WRITE_LAST, length=5, dma=(1 << 16) + 5), 1, 0, ok
    yield "Last wrong, dma 2^16 + 5", write(op=OP.WRITE_LAST, length=6, dma=(1 << 16) + 5), 1, 0, inval
    yield "good single IPv6", write(addressing=forward(1, srv6=False)), 1, 0, ok
    yield "region end exactly", write(va=0x10000 + 0x8000 - 100), 1, 0, ok
    yield "top of memory", write(rkey=0x2001, va=(1 << 64) - 100), 1, 0, ok_if_below_reach(1)
    yield "bad ICRC", write(), 0, 0, (Action.DROP, Drop.BAD_ICRC, RxError.NONE)
    yield "oversize", write(), 1 | 2, 0, (Action.DROP, Drop.MALFORMED, RxError.NONE)
    yield "malformed", write()[:-1], 1, 0, (Action.DROP, Drop.MALFORMED, RxError.NONE)
    other = wire.port_address(LOCATOR, 1, HOST_B + 1)
    yield "outer DA", write(addressing=forward(1, outer_dst=other)), 1, 0, (Action.DROP, Drop.NOT_FOR_US, 0)
    yield "outer DA = GID", write(addressing=forward(1, outer_dst=GID_B)), 1, 0, ok
    yield "inner DA", write(addressing=forward(1, dst=GID_A)), 1, 0, (Action.DROP, Drop.NOT_FOR_US, 0)
    yield "unknown QP", write(dest_qp=0x999), 1, 0, (Action.DROP, Drop.UNKNOWN_QP, 0)
    yield "QP in ERROR", write(), 1, 0b10, (Action.DROP, Drop.QP_NOT_READY, 0)
    probe = control(OP.PROBE, [wire.Peth(probe_id=9, tx_timestamp=3)])
    yield "probe on QP in ERROR", probe, 1, 0b10, (Action.PROBE, Drop.NONE, 0)
    yield "wrong source", write(addressing=forward(1, src=GID_B)), 1, 0, (Action.DROP, Drop.BAD_SOURCE, 0)
    yield "First not PMTU", write(op=OP.WRITE_FIRST, length=PMTU - 1, dma=3 * PMTU), 1, 0, inval
    yield "Middle not PMTU", write(op=OP.WRITE_MIDDLE, length=PMTU + 1, dma=3 * PMTU), 1, 0, inval
    yield "First, dma <= PMTU", write(op=OP.WRITE_FIRST, length=PMTU, dma=PMTU), 1, 0, inval
    yield "Last wrong", write(op=OP.WRITE_LAST, length=2, dma=2 * PMTU + 1), 1, 0, inval
    yield "Only != dma", write(length=100, dma=101), 1, 0, inval
    yield "dma 0", write(length=0, dma=0), 1, 0, inval
    yield "dma > 2^31", write(length=10, dma=(1 << 31) + 1), 1, 0, inval
    yield "R_Key tag", write(rkey=0x1100), 1, 0, access
    yield "R_Key unknown", write(rkey=0x0007), 1, 0, access
    yield "other PD", write(rkey=0x3002, va=0x40000), 1, 0, access
    yield "no remote write", write(rkey=0x4003, va=0x50000), 1, 0, access
    yield "VA below", write(va=0xFFFF), 1, 0, access
    yield "VA past end", write(va=0x10000 + 0x8000 - 99), 1, 0, access
    yield "2^64 overflow", write(rkey=0x2001, va=(1 << 64) - 99), 1, 0, access
    yield "large region", write(rkey=0x5004, va=(1 << 32) + (1 << 39)), 1, 0, ok_if_below_reach(4)
    yield (
        "large region, end exactly",
        write(rkey=0x5004, va=(1 << 32) + (1 << 40) - 100),
        1,
        0,
        ok_if_below_reach(4),
    )
    yield "region ending at 2^20", write(rkey=0x6005, va=(1 << 20) - 100), 1, 0, ok
    yield "region past 2^20", write(rkey=0x7006, va=(1 << 20) - 0x1000), 1, 0, ok_if_below_reach(6)
    yield "VA above the region, same low bits", write(va=(1 << 32) + 0x10010), 1, 0, access
    yield "large region, past end", write(rkey=0x5004, va=(1 << 32) + (1 << 40) - 99), 1, 0, access
    yield "large region, VA below", write(rkey=0x5004, va=(1 << 32) - 1), 1, 0, access
    trimmed = write(dscp=wire.Dscp.TRIMMED)
    yield "trimmed, no ICRC check", trimmed[: len(trimmed) - 104], 0, 0, ok
    endpoint = wire.control_frame(
        forward(0),
        ev=1,
        opcode=OP.ENDPOINT_REQUEST,
        headers=[wire.Erth(op=0, port_status_mask=3, tx_timestamp=1)],
    ).encode()
    yield "endpoint op", endpoint, 1, 0, (Action.DROP, Drop.ENDPOINT, 0)


def feedback_frames():
    seth = wire.Seth(
        m=wire.SackVerdict.SKIP_ONCE,
        ack_psn_offset=-3,
        entropy=0x2345678,
        spdcid=1,
        dpdcid=2,
        cack_psn=0xFFFFFE,
        sack_offset=-6,
        sack_bitmap=0xF0F0,
    )
    cc = wire.CcState(tx_timestamp=0x1234, ooo_count=5, rcvd_bytes=0xABCDEF)
    probe_answer = wire.Seth(pr=1, ack_psn_offset=-2, entropy=0x9, cack_psn=10, sack_offset=-2, sack_bitmap=1)
    always = wire.Seth(m=wire.SackVerdict.ALWAYS_SKIP, ack_psn_offset=-32768, entropy=0x7, cack_psn=4)
    return [
        (control(wire.Opcode.SACK, [seth, cc]), ("sack", seth, cc)),
        (control(wire.Opcode.SACK, [probe_answer, wire.CcState()]), ("sack", probe_answer, wire.CcState())),
        (control(wire.Opcode.SACK, [always, wire.CcState()]), ("sack", always, wire.CcState())),
        *(
            (
                control(
                    wire.Opcode.NACK,
                    [neth := wire.Neth(nack_reason=r, entropy=0x55, nack_psn=77, tx_timestamp=8)],
                ),
                ("nack", neth),
            )
            for r in (1, 2, 0x0B, 0x19, 0x33)
        ),
        (control(wire.Opcode.ACK, [aeth := wire.Aeth(syndrome=0x1F, msn=0x12345)]), ("ack", aeth)),
        (control(wire.Opcode.ACK, [nak := wire.Aeth(syndrome=0x62, msn=9)]), ("ack", nak)),
    ]


def _beats(raw, rng):
    for i in range(0, max(len(raw), 1), W):
        chunk = raw[i : i + W]
        yield {
            "data": int.from_bytes(chunk + rng.randbytes(W - len(chunk)), "little"),
            "keep": (1 << len(chunk)) - 1,
            "last": int(i + W >= len(raw)),
        }


@pytest.mark.parametrize("addr_width", [64, NARROW])
def test_validator_verdicts_and_feedback_records(addr_width):
    rng = random.Random(new_seed())
    dut = Chain(addr_width=addr_width)
    items = list(cases(addr_width))
    fb = feedback_frames()
    frames = [(raw, flags, qp_error) for _, raw, flags, qp_error, _ in items] + [(raw, 1, 0) for raw, _ in fb]
    verdicts, records = [], []

    async def configure(ctx):
        v = dut.validator
        for q in range(QPS):
            entry = {
                "connected": int(q != 3),
                "qpn": QPN[q],
                "peer_qpn": 0x100 + q,
                "peer_gid": GID_A,
                "dest": q,
                "pd": PD,
                "pmtu_log2": PMTU_LOG2,
            }
            await stream_put(ctx, v.qp_configure, {"qp": q, "entry": entry})
        for index, rkey, pd, rw, base, length in REGIONS:
            entry = {"valid": 1, "rkey": rkey, "pd": pd, "remote_write": rw, "base": base, "length": length}
            await stream_put(ctx, v.mr_configure, {"index": index, "entry": entry})
        ctx.set(dut.parser.gid, GID_B)
        ctx.set(dut.parser.port_address, [wire.port_address(LOCATOR, p, HOST_B) for p in range(PLANES)])

    async def sender(ctx):
        await configure(ctx)
        for n, (raw, flags, qp_error) in enumerate(frames):
            ctx.set(dut.flags, flags)
            ctx.set(dut.validator.qp_error, qp_error)
            for beat in _beats(raw, rng):
                await stream_put(ctx, dut.i, beat, stall=0.2, rng=rng)
            while len(verdicts) <= n:  # the flags belong to this frame until its verdict is out
                await ctx.tick()

    async def receiver(ctx):
        local = random.Random(rng.random())
        for _ in frames:
            v = await stream_get(ctx, dut.verdict, stall=0.2, rng=local)
            verdicts.append(v)
            if v.action == Action.FEEDBACK:
                await stream_put(ctx, dut.feedback_in, v)
                records.append(await stream_get(ctx, dut.feedback))

    run(dut, sender, receiver, name="validator")

    for (name, raw, _, _, (action, drop, error)), v in zip(items, verdicts, strict=False):
        got = (Action(v.action), Drop(v.drop), RxError(v.error) if v.action == Action.WRITE else 0)
        assert got == (action, drop, error if action == Action.WRITE else 0), name
        if action == Action.WRITE:
            frame = wire.decode(raw, trimmed_dscp=(wire.Dscp.TRIMMED,))
            assert v.qp == 1 and v.ev == frame.ev, name
            assert v.ends_message == frame.opcode.ends_message, name
            assert v.has_imm == frame.opcode.has_immediate, name
    tail = verdicts[len(items) :]
    assert all(v.action == Action.FEEDBACK for v in tail)
    assert len(records) == len(fb)
    for rec, (_, want) in zip(records, fb, strict=True):
        assert rec.qp == 1
        if want[0] == "sack":
            _, seth, cc = want
            assert rec.kind == FeedbackKind.SACK and rec.ev == seth.entropy
            assert rec.cack_psn == seth.cack_psn and rec.sack_bitmap == seth.sack_bitmap
            assert rec.sack_base == (seth.cack_psn + seth.sack_offset) % (1 << 24)
            assert rec.probe_answer == seth.pr
            if seth.pr:
                assert rec.probe_id == seth.ack_psn_offset % (1 << 16) and not rec.trigger_valid
            elif seth.ack_psn_offset == -32768:
                assert not rec.trigger_valid
            else:
                assert rec.trigger_valid and rec.trigger_psn == (seth.cack_psn + seth.ack_psn_offset) % (
                    1 << 24
                )
            assert (rec.tx_timestamp, rec.ooo_count, rec.rcvd_bytes) == (
                cc.tx_timestamp,
                cc.ooo_count,
                cc.rcvd_bytes,
            )
            event = {
                wire.SackVerdict.SKIP_ONCE: FeedbackEvent.ECN,
                wire.SackVerdict.ALWAYS_SKIP: FeedbackEvent.LOSS,
            }
            assert rec.has_path_event == (seth.m in event)
            if seth.m in event:
                assert rec.path_event == event[seth.m]
        elif want[0] == "nack":
            neth = want[1]
            assert rec.kind == FeedbackKind.NACK and rec.ev == neth.entropy and rec.nack_psn == neth.nack_psn
            assert rec.nack_reason == neth.nack_reason and rec.tx_timestamp == neth.tx_timestamp
            assert rec.retryable == (neth.nack_reason != 0x19)
            assert rec.retransmit_now == (neth.nack_reason in (1, 2))
            assert rec.unknown_reason == (neth.nack_reason == 0x33)
            assert rec.has_path_event == (neth.nack_reason == 1)
        else:
            aeth = want[1]
            assert rec.kind == FeedbackKind.ACK and rec.msn == aeth.msn & 0xFFFF
            assert rec.nak == (aeth.syndrome != 0x1F) and rec.syndrome == aeth.syndrome


def test_without_srv6_an_outer_destination_must_be_the_gid():
    """A NIC built without SRv6 (destinations = 0) has no port addresses: an SRv6 packet is for it only
    when its outer DA is the GID, even with the port-address registers set; single-IPv6 packets as usual."""
    rng = random.Random(new_seed())
    dut = Chain(dests=0)
    ok = (Action.WRITE, Drop.NONE)
    items = [
        ("single IPv6", write(addressing=forward(1, srv6=False)), ok),
        ("outer DA = port address", write(), (Action.DROP, Drop.NOT_FOR_US)),
        ("outer DA = GID", write(addressing=forward(1, outer_dst=GID_B)), ok),
    ]
    verdicts = []

    async def sender(ctx):
        v = dut.validator
        entry = {"connected": 1, "qpn": QPN[1], "peer_qpn": 0x101, "peer_gid": GID_A, "dest": 0}
        await stream_put(ctx, v.qp_configure, {"qp": 1, "entry": {**entry, "pd": PD, "pmtu_log2": PMTU_LOG2}})
        for index, rkey, pd, rw, base, length in REGIONS:
            mr = {"valid": 1, "rkey": rkey, "pd": pd, "remote_write": rw, "base": base, "length": length}
            await stream_put(ctx, v.mr_configure, {"index": index, "entry": mr})
        ctx.set(dut.parser.gid, GID_B)
        ctx.set(dut.parser.port_address, [wire.port_address(LOCATOR, p, HOST_B) for p in range(PLANES)])
        ctx.set(dut.flags, 1)
        for _, raw, _ in items:
            for beat in _beats(raw, rng):
                await stream_put(ctx, dut.i, beat, stall=0.2, rng=rng)

    async def receiver(ctx):
        for _ in items:
            verdicts.append(await stream_get(ctx, dut.verdict, stall=0.2, rng=rng))

    run(dut, sender, receiver, name="validator_without_srv6")
    for (name, _, want), v in zip(items, verdicts, strict=True):
        assert (Action(v.action), Drop(v.drop)) == want, name
