"""Segmenter, QP scheduler and retransmitter (Amaranth simulator), wired as in the TX pipeline:
segmentation rules, sequence numbers, window gate, retransmissions first, round-robin fairness, every
descriptor read back from the retransmitter's table. Random stalls on every stream; seeds printed."""

import random

import pytest
from amaranth import Module
from amaranth.lib import wiring

from mrcnic.hdl.tx.layouts import WriteKind
from mrcnic.hdl.tx.retransmitter import Retransmitter
from mrcnic.hdl.tx.scheduler import QpScheduler
from mrcnic.hdl.tx.segmenter import Segmenter
from mrcnic.wire import Opcode

from support.pysim import run, stream_get, stream_put


class SegmenterAndScheduler(wiring.Component):
    """``descriptor``: the retransmitter's output; ``retransmit``: its requests."""

    def __init__(self, qps, window=256):
        self.segmenter = Segmenter(qps=qps)
        self.scheduler = QpScheduler(qps=qps)
        self.retransmitter = Retransmitter(qps=qps, window=window, ev_slots=16)
        self.descriptor = self.retransmitter.descriptor
        self.retransmit = self.retransmitter.request
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.segmenter = seg = self.segmenter
        m.submodules.scheduler = sch = self.scheduler
        m.submodules.retransmitter = rtx = self.retransmitter
        wiring.connect(m, sch.next_packet, seg.next_packet)
        wiring.connect(m, seg.descriptor, rtx.store)
        out = rtx.descriptor
        m.d.comb += [
            sch.has_data.eq(seg.has_data),
            sch.next_psn.eq(seg.next_psn),
            sch.retransmit_waiting.eq(rtx.request.valid),
            sch.new_packet_taken.eq(out.valid & out.ready & ~out.payload.rtx),
        ]
        return m


def expected_packets(wr, pmtu):
    """(opcode, offset, length) of every packet of a work request, from docs/protocol.md §3.2."""
    length, imm = wr["length"], wr["kind"] == WriteKind.WRITE_IMM
    n = -(-length // pmtu)
    out = []
    for k in range(n):
        size = min(pmtu, length - k * pmtu)
        if n == 1:
            op = Opcode.WRITE_ONLY_IMM if imm else Opcode.WRITE_ONLY
        elif k == 0:
            op = Opcode.WRITE_FIRST
        elif k == n - 1:
            op = Opcode.WRITE_LAST_IMM if imm else Opcode.WRITE_LAST
        else:
            op = Opcode.WRITE_MIDDLE
        out.append((op, k * pmtu, size))
    return out


@pytest.mark.parametrize("pmtu_log2", [8, 12])
def test_segmentation_and_sequence_numbers(pmtu_log2):
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    qps = 4
    pmtu = 1 << pmtu_log2
    dut = SegmenterAndScheduler(qps)
    seg, sch = dut.segmenter, dut.scheduler
    start_psn = {q: rng.randrange(1 << 24) for q in range(qps)}
    start_msn = {q: rng.randrange(1 << 16) for q in range(qps)}
    wrs = {q: [] for q in range(qps)}
    for q in range(qps):
        for _ in range(rng.randint(2, 6)):
            length = rng.choice([1, pmtu - 1, pmtu, pmtu + 1, 3 * pmtu, rng.randint(1, 5 * pmtu)])
            wrs[q].append(
                {
                    "qp": q,
                    "kind": rng.choice([WriteKind.WRITE, WriteKind.WRITE_IMM]),
                    "local_addr": rng.randrange(1 << 48),
                    "remote_va": rng.randrange(1 << 48),
                    "rkey": rng.randrange(1 << 32),
                    "length": length,
                    "imm": rng.randrange(1 << 32),
                }
            )
    total = sum(len(expected_packets(w, pmtu)) for ws in wrs.values() for w in ws)
    got = []

    async def setup_and_feed(ctx):
        ctx.set(seg.pmtu_log2, pmtu_log2)
        ctx.set(sch.cwnd_open, (1 << qps) - 1)
        for q in range(qps):
            ctx.set(sch.psn_limit[q], (start_psn[q] - 1) & 0xFFFFFF)  # closed until configured
            await stream_put(
                ctx, seg.configure, {"qp": q, "psn": start_psn[q], "msn": start_msn[q], "rqmsn": 0}
            )
        for q in range(qps):
            ctx.set(sch.psn_limit[q], (start_psn[q] + 100000) & 0xFFFFFF)
        queues = {q: list(ws) for q, ws in wrs.items()}
        while any(queues.values()):
            q = rng.choice([q for q in queues if queues[q]])
            await stream_put(ctx, seg.work_request, queues[q].pop(0), stall=0.2, rng=rng)
        # Zero-length work requests are refused and counted.
        await stream_put(ctx, seg.work_request, dict(wrs[0][0], length=0))
        await ctx.tick().repeat(5)
        assert ctx.get(seg.stat_rejected) == 1

    async def collect(ctx):
        for _ in range(total):
            got.append(await stream_get(ctx, dut.descriptor, stall=0.3, rng=rng))

    run(dut, setup_and_feed, collect, name="segmenter", deadline=1e-3)

    per_qp = {q: [d for d in got if d.qp == q] for q in range(qps)}
    for q in range(qps):
        packets = per_qp[q]
        expect = [
            (w, i, op, off, size) for i, w in enumerate(wrs[q]) for op, off, size in expected_packets(w, pmtu)
        ]
        assert len(packets) == len(expect)
        for n, (d, (w, i, op, off, size)) in enumerate(zip(packets, expect, strict=True)):
            assert d.psn == (start_psn[q] + n) & 0xFFFFFF, "PSNs contiguous per QP"
            assert d.opcode == op and d.length == size
            assert d.va == w["remote_va"] + off and d.local_addr == w["local_addr"] + off
            assert d.rkey == w["rkey"] and d.dma_length == w["length"] and d.imm == w["imm"]
            assert d.msn == (start_msn[q] + i) & 0xFFFF
            imms_before = sum(1 for x in wrs[q][:i] if x["kind"] == WriteKind.WRITE_IMM)
            assert d.rqmsn == imms_before, "RQMSN counts earlier WRITE_IMM messages"
            assert d.rtx == 0


def test_window_gate_retransmissions_first_and_round_robin():
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    qps = 3
    dut = SegmenterAndScheduler(qps)
    seg, sch = dut.segmenter, dut.scheduler
    got = []
    fed = []

    async def feeder(ctx):
        ctx.set(seg.pmtu_log2, 8)
        for q in range(qps):
            await stream_put(ctx, seg.configure, {"qp": q, "psn": 10, "msn": 0, "rqmsn": 0})
        for q in range(qps):
            wr = {
                "qp": q,
                "kind": WriteKind.WRITE,
                "local_addr": 0,
                "remote_va": 0,
                "rkey": 1,
                "length": 2560,
                "imm": 0,
            }
            await stream_put(ctx, seg.work_request, wr)
        fed.append(True)

    async def bench(ctx):
        ctx.set(sch.cwnd_open, 0b111)
        for q in range(qps):
            ctx.set(sch.psn_limit[q], 9)  # closed
        await ctx.tick().until(seg.has_data == 0b111)
        for q in range(qps):
            ctx.set(sch.psn_limit[q], 12)  # PSNs 10, 11, 12 allowed
        for _ in range(9):
            got.append(await stream_get(ctx, dut.descriptor))
        # Window full everywhere: nothing more comes out.
        ctx.set(dut.descriptor.ready, 1)
        for _ in range(50):
            await ctx.tick()
            assert not ctx.get(dut.descriptor.valid)
        ctx.set(dut.descriptor.ready, 0)
        # A retransmission goes out although the windows are closed (it is below the limit): the
        # descriptor stored for QP 1's PSN 11, with the request's fields.
        await stream_put(ctx, dut.retransmit, {"qp": 1, "psn": 11, "avoid_slot": 5, "ack_req": 0})
        d = await stream_get(ctx, dut.descriptor)
        assert (d.rtx, d.psn, d.qp, d.avoid_slot, d.ack_req) == (1, 11, 1, 5, 0)
        (first,) = [x for x in got if (x.qp, x.psn) == (1, 11)]
        for name in ("opcode", "msn", "rqmsn", "local_addr", "va", "rkey", "dma_length", "length", "imm"):
            assert getattr(d, name) == getattr(first, name), name
        # A request for a PSN whose entry holds another is dropped and counted.
        await stream_put(ctx, dut.retransmit, {"qp": 1, "psn": 11 + 256, "avoid_slot": 0, "ack_req": 1})
        await ctx.tick().repeat(5)
        assert not ctx.get(dut.descriptor.valid) and ctx.get(dut.retransmitter.stat_stale) == 1
        # Closing QP 2's congestion window keeps it out while QP 0 continues.
        ctx.set(sch.cwnd_open, 0b001)
        for q in range(qps):
            ctx.set(sch.psn_limit[q], 1000)
        for _ in range(4):
            d = await stream_get(ctx, dut.descriptor, stall=0.2, rng=rng)
            assert d.qp == 0
        finished.append(True)

    finished = []
    run(dut, feeder, bench, name="scheduler", deadline=1e-3)
    assert finished, "the bench did not finish in 1 ms of simulated time"
    # Round robin while all were eligible: each group of three serves every QP once.
    for i in range(0, 9, 3):
        assert sorted(d.qp for d in got[i : i + 3]) == [0, 1, 2]
    for q in range(qps):
        assert [d.psn for d in got if d.qp == q] == [10, 11, 12]


def test_qp_in_error_sends_nothing_more():
    """§7.4: a QP going to ERROR abandons its message in progress (at most the packet already asked for
    still leaves) and work requests handed over meanwhile produce no packet; both are counted in
    ``stat_flushed``; the other QP is not disturbed; after the error clears and the QP is connected again,
    it sends from its new sequence numbers."""
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    dut = SegmenterAndScheduler(2)
    seg, sch = dut.segmenter, dut.scheduler
    got = []

    def wr(qp, length):
        return {
            "qp": qp,
            "kind": WriteKind.WRITE,
            "local_addr": 0,
            "remote_va": 0,
            "rkey": 1,
            "length": length,
        }

    async def bench(ctx):
        ctx.set(seg.pmtu_log2, 8)
        ctx.set(sch.cwnd_open, 0b11)
        for q in range(2):
            ctx.set(sch.psn_limit[q], 100_000)
            await stream_put(ctx, seg.configure, {"qp": q, "psn": 0, "msn": 0, "rqmsn": 0})
        await stream_put(ctx, seg.work_request, wr(0, 40 * 256))
        await stream_put(ctx, seg.work_request, wr(1, 8 * 256))
        for _ in range(6):
            got.append(await stream_get(ctx, dut.descriptor, stall=0.3, rng=rng))
        ctx.set(seg.halt, 0b01)  # QP 0 goes to ERROR in the middle of its 40-packet message
        after_halt = []
        while len([d for d in got + after_halt if d.qp == 1]) < 8:
            after_halt.append(await stream_get(ctx, dut.descriptor, stall=0.3, rng=rng))
        ctx.set(dut.descriptor.ready, 1)
        for _ in range(30):
            *_, valid = await ctx.tick().sample(dut.descriptor.valid)
            assert not valid, "nothing more after QP 1's last packet"
        ctx.set(dut.descriptor.ready, 0)
        zero = [d for d in after_halt if d.qp == 0]
        assert len(zero) <= 1, zero  # the one already asked for
        # Work requests for QP 0 are taken and dropped while it is in ERROR.
        for _ in range(3):
            await stream_put(ctx, seg.work_request, wr(0, 512), stall=0.3, rng=rng)
        await ctx.tick().repeat(20)
        assert not ctx.get(dut.descriptor.valid) and ctx.get(seg.has_data) == 0
        assert ctx.get(seg.stat_flushed) == 1 + 3 and ctx.get(seg.stat_rejected) == 0
        # Connected again: it sends the next message from the new PSN and MSN.
        ctx.set(seg.halt, 0)
        await stream_put(ctx, seg.configure, {"qp": 0, "psn": 500, "msn": 7, "rqmsn": 0})
        await stream_put(ctx, seg.work_request, wr(0, 512))
        again = [await stream_get(ctx, dut.descriptor, stall=0.3, rng=rng) for _ in range(2)]
        assert [(d.qp, d.psn, d.msn) for d in again] == [(0, 500, 7), (0, 501, 7)]
        finished.append(True)

    finished = []
    run(dut, bench, name="segmenter_halt", deadline=1e-3)
    assert finished, "the bench did not finish in 1 ms of simulated time"
