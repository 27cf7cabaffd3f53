"""Completion tracker: record-for-record comparison with a pure-Python reference of docs/protocol.md
§7.4-§7.6 (message completion in PSN order, ACK/NAK syndromes, WRITE_IMM receive completions, rows 9-12).

Random tests: several QPs interleaved, each a series of connections (configure, messages of 1..20 packets,
WRITE and WRITE_IMM mixed, MSN/RQMSN starting near 2^16 and PSN near 2^24 so they wrap), packets delivered
in a random order within the window with cack computed as the SACK tracker does, receive WRs posted at
random times, errors injected on random packets, RQMSN mismatches, connections abandoned mid-way and
reconfigured, queries of the current AETH, random stalls on every stream. The ``ack``,
``receive_completion`` and ``query_result`` streams, ``qp_error`` (at every query and at the end) and the
counters must match exactly. Seeds printed (rerun with ``COMPLETION_TRACKER_SEED=<seed>``).

Directed cases check hand-computed outcomes; one cocotb/Verilator smoke test checks the conversion.
"""

import os
import random

import cocotb
import pytest
from amaranth.back import verilog
from amaranth.hdl import Const
from amaranth.lib import data
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge

from mrcnic.hdl.rx.completion_tracker import (
    STATS,
    CompletionTracker,
    RxError,
    Syndrome,
    ack_layout,
    arrival_layout,
    configure_layout,
    post_layout,
    query_layout,
    query_result_layout,
    receive_completion_layout,
)

from support.cocotb_runner import dut_params, run_cocotb
from support.pysim import run, stream_put

M = 1 << 24
HALF = 1 << 23
ACK = Syndrome.ACK.value
NAK_INV = Syndrome.NAK_INVALID_REQUEST.value
NAK_ACC = Syndrome.NAK_REMOTE_ACCESS.value
NAK_OP = Syndrome.NAK_REMOTE_OPERATION.value
NONE, INV, ACC = RxError.NONE, RxError.INVALID_REQUEST, RxError.REMOTE_ACCESS
NAK_OF = {INV: NAK_INV, ACC: NAK_ACC}
REC_FIELDS = ("msn", "rqmsn", "ends_message", "has_imm", "imm", "dma_length", "error")


def new_seed() -> int:
    seed = int(os.environ.get("COMPLETION_TRACKER_SEED", random.randrange(1 << 30)))
    print(f"seed {seed}")
    return seed


# -- reference model ---------------------------------------------------------------------------------


class RefQP:
    def __init__(self, initial_psn: int = 1, initial_rqmsn: int = 0):
        self.walked = (initial_psn - 1) % M
        self.recs: dict[int, dict] = {}  # by exact PSN (the DUT indexes by PSN mod W)
        self.cur_err = NONE
        self.error = False
        self.next_rqmsn = initial_rqmsn
        self.posted = 0
        self.aeth = None  # (syndrome, msn) of the last ack record


class Ref:
    """§7.4-§7.6 from a sequence of operations, in acceptance order."""

    def __init__(self, qps: int, post_bits: int = 16):
        self.qps = qps
        self.post_max = (1 << post_bits) - 1
        self.q = [RefQP() for _ in range(qps)]
        self.acks: list[tuple] = []  # (qp, syndrome, msn)
        self.rcs: list[tuple] = []  # (qp, status, imm, byte_len, rqmsn)
        self.queries: list[tuple] = []  # (qp, valid, syndrome, msn)
        self.qp_errors: list[int] = []  # qp_error at each query
        self.stats = dict.fromkeys(STATS, 0)

    def qp_error(self) -> int:
        return sum(q.error << i for i, q in enumerate(self.q))

    def apply(self, op) -> None:
        kind, qp = op[0], op[1]
        if kind == "cfg":
            self.q[qp] = RefQP(op[2], op[3])
        elif kind == "post":
            q = self.q[qp]
            if q.posted == self.post_max:
                self.stats["post_refused"] += 1
            else:
                q.posted += 1
        elif kind == "query":
            a = self.q[qp].aeth
            self.queries.append((qp, 1, *a) if a else (qp, 0, 0, 0))
            self.qp_errors.append(self.qp_error())
        else:
            self.arrival(qp, op[2], op[3], op[4])

    def arrival(self, qp: int, psn: int, cack: int, rec: dict) -> None:
        q = self.q[qp]
        q.recs[psn] = rec
        d = (cack - q.walked) % M
        if 1 <= d < HALF:
            for k in range(1, d + 1):
                self.walk(qp, q, (q.walked + k) % M)
            q.walked = cack

    def walk(self, qp: int, q: RefQP, psn: int) -> None:
        r = q.recs.pop(psn)
        err = q.cur_err if q.cur_err != NONE else r["error"]
        if not r["ends_message"]:
            q.cur_err = err
            return
        q.cur_err = NONE
        if q.error:
            return
        m = r["msn"]
        if err != NONE:
            syndrome = NAK_OF[err]
        elif r["has_imm"] and q.posted == 0:
            syndrome = NAK_OP
            self.stats["no_receive_wr"] += 1
        elif r["has_imm"] and r["rqmsn"] != q.next_rqmsn:
            syndrome = NAK_INV
            self.stats["rqmsn_mismatch"] += 1
        else:
            syndrome = ACK
            if r["has_imm"]:
                q.posted -= 1
                q.next_rqmsn = (q.next_rqmsn + 1) % (1 << 16)
                self.rcs.append((qp, 0, r["imm"], r["dma_length"], r["rqmsn"]))
                self.stats["imm_completions"] += 1
        self.acks.append((qp, syndrome, m))
        q.aeth = (syndrome, m)
        if syndrome == ACK:
            self.stats["messages"] += 1
        else:
            self.stats["naks"] += 1
            q.error = True


# -- stimulus ----------------------------------------------------------------------------------------


def record(msn, rqmsn, ends, imm_flag, imm, length, error=NONE) -> dict:
    return dict(
        msn=msn,
        rqmsn=rqmsn,
        ends_message=int(ends),
        has_imm=int(imm_flag),
        imm=imm,
        dma_length=length,
        error=error,
    )


def message_records(rng, msn, rqmsn, npkts, has_imm, *, p_err, p_mismatch):
    """Records of one message's packets, in PSN order, with optional injected errors."""
    length = rng.randint(1, 1 << 31) if rng.random() < 0.3 else rng.randint(1, 20 * 4096)
    imm = rng.randrange(1 << 32)
    if has_imm and rng.random() < p_mismatch:
        rqmsn = (rqmsn + rng.choice([1, 2, -1, 0x8000])) % (1 << 16)
    errors = [NONE] * npkts
    while rng.random() < p_err:  # sometimes two errors in one message: the first (in PSN order) counts
        errors[rng.randrange(npkts)] = rng.choice([INV, ACC])
    return [
        record(msn, rqmsn, k == npkts - 1, has_imm and k == npkts - 1, imm, length, errors[k])
        for k in range(npkts)
    ]


def connection(rng, qp, window, *, p_err=0.015, p_mismatch=0.025):
    """Operations of one connection on ``qp``: configure, then posts and arrivals (random order within
    the window, cack as the SACK tracker computes it). May stop early (abandoned, reconfigured)."""
    psn0 = rng.choice([rng.randrange(M), M - rng.randrange(1, 80), rng.randrange(40)])
    rq0 = rng.choice([rng.randrange(1 << 16), (1 << 16) - rng.randrange(1, 6)])
    msn = rng.choice([rng.randrange(1 << 16), (1 << 16) - rng.randrange(1, 10)])
    yield ("cfg", qp, psn0, rq0)
    recs, rq, n_imm = [], rq0, 0
    for _ in range(rng.randint(3, 30)):
        npkts = rng.choice([1, 1, 2, 3, rng.randint(1, 20), rng.randint(1, 20)])
        has_imm = rng.random() < 0.5
        recs += message_records(rng, msn, rq, npkts, has_imm, p_err=p_err, p_mismatch=p_mismatch)
        msn = (msn + 1) % (1 << 16)
        if has_imm:
            rq = (rq + 1) % (1 << 16)
            n_imm += 1
    total = len(recs)
    spread = rng.choice([1, 3, 16, window, window])
    post_rate = n_imm / total * rng.choice([0.6, 1.3, 1.3, 2.0])
    for _ in range(rng.choice([0, 1, 2, 4])):
        yield ("post", qp)
    stop = total if rng.random() < 0.8 else rng.randrange(total)
    received, cack = set(), -1  # indices into recs
    for _ in range(stop):
        if rng.random() < post_rate:
            yield ("post", qp)
        hi = min(total - 1, cack + min(spread, window))
        k = cack + 1
        if rng.random() < 0.6:
            for _ in range(4):
                j = rng.randint(cack + 1, hi)
                if j not in received:
                    k = j
                    break
        received.add(k)
        while cack + 1 in received:
            cack += 1
        yield ("arr", qp, (psn0 + k) % M, (psn0 + cack) % M, recs[k])


def random_ops(rng, qps, window, arrivals, **kw):
    gens = [connection(rng, q, window, **kw) for q in range(qps)]
    ops, n_arr, connections = [], 0, qps
    while n_arr < arrivals:
        qp = rng.randrange(qps)
        if rng.random() < 0.02:
            ops.append(("query", qp))
            continue
        op = next(gens[qp], None)
        if op is None:
            gens[qp] = connection(rng, qp, window, **kw)
            connections += 1
            op = next(gens[qp])
        ops.append(op)
        n_arr += op[0] == "arr"
    for qp in range(qps):
        ops.append(("query", qp))
    return ops, connections


# -- simulation --------------------------------------------------------------------------------------


async def take(ctx, s, *, stall, rng, limit=20000):
    """One payload from stream ``s`` (random ready stalls); fails if nothing comes within ``limit``."""
    while stall and rng.random() < stall:
        await ctx.tick()
    ctx.set(s.ready, 1)
    for _ in range(limit):
        *_, payload, valid = await ctx.tick().sample(s.payload, s.valid)
        if valid:
            ctx.set(s.ready, 0)
            return payload
    raise AssertionError(f"no transfer on {s} within {limit} cycles")


def simulate(qps, window, ops, expected: Ref, *, rng, stall=0.3, post_bits=16):
    """Run ``ops``; collect ``ack``, ``receive_completion``, ``query_result``, qp_error at queries, stats."""
    dut = CompletionTracker(qps, window, post_bits=post_bits)
    got = {"acks": [], "rcs": [], "queries": [], "qp_errors": [], "stats": {}, "qp_error": None}
    done = []

    async def producer(ctx):
        for op in ops:
            kind, qp = op[0], op[1]
            if kind == "cfg":
                await stream_put(
                    ctx,
                    dut.configure,
                    {"qp": qp, "initial_psn": op[2], "initial_rqmsn": op[3]},
                    stall=stall,
                    rng=rng,
                )
            elif kind == "post":
                await stream_put(ctx, dut.post_receive, {"qp": qp}, stall=stall, rng=rng)
            elif kind == "query":
                await stream_put(ctx, dut.query, {"qp": qp}, stall=stall, rng=rng)
                got["qp_errors"].append(ctx.get(dut.qp_error))  # every earlier input fully processed
            else:
                payload = {"qp": qp, "psn": op[2], "cack": op[3], **op[4]}
                await stream_put(ctx, dut.arrival, payload, stall=stall, rng=rng)
        done.append("producer")

    def consumer(stream, key, fields, count):
        async def bench(ctx):
            for _ in range(count):
                v = await take(ctx, stream, stall=stall, rng=rng)
                got[key].append(tuple(int(getattr(v, f)) for f in fields))
            done.append(key)

        return bench

    async def finish(ctx):
        while len(done) < 4:
            await ctx.tick()
        await ctx.tick().repeat(window + 20)  # a walk still going would show up as extra records
        for s in (dut.ack, dut.receive_completion, dut.query_result):
            assert not ctx.get(s.valid), f"unexpected extra record on {s}"
        got["qp_error"] = ctx.get(dut.qp_error)
        got["stats"] = {s: ctx.get(getattr(dut, f"stat_{s}")) for s in STATS}

    run(
        dut,
        producer,
        consumer(dut.ack, "acks", ("qp", "syndrome", "msn"), len(expected.acks)),
        consumer(
            dut.receive_completion, "rcs", ("qp", "status", "imm", "byte_len", "rqmsn"), len(expected.rcs)
        ),
        consumer(dut.query_result, "queries", ("qp", "valid", "syndrome", "msn"), len(expected.queries)),
        finish,
        name="completion_tracker",
    )
    return got


def check(got, ref: Ref) -> None:
    for key in ("acks", "rcs", "queries", "qp_errors"):
        want = getattr(ref, key)
        assert len(got[key]) == len(want), key
        for i, (g, w) in enumerate(zip(got[key], want, strict=True)):
            assert g == w, f"{key}[{i}]: {g} != {w}"
    assert got["qp_error"] == ref.qp_error()
    assert got["stats"] == ref.stats


def reference(qps, ops, post_bits=16) -> Ref:
    ref = Ref(qps, post_bits)
    for op in ops:
        ref.apply(op)
    return ref


def run_ops(qps, window, ops, *, seed, post_bits=16, stall=0.3):
    ref = reference(qps, ops, post_bits)
    got = simulate(qps, window, ops, ref, rng=random.Random(seed), post_bits=post_bits, stall=stall)
    check(got, ref)
    return ref


# -- random ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("qps, window, arrivals", [(3, 64, 8000), (2, 256, 6000)])
def test_random_against_reference(qps, window, arrivals):
    seed = new_seed()
    rng = random.Random(seed)
    ops, connections = random_ops(rng, qps, window, arrivals)
    ref = run_ops(qps, window, ops, seed=seed + 1)
    syndromes = {a[1] for a in ref.acks}
    print(
        f"{connections} connections, {len(ops)} ops, {len(ref.acks)} acks, {len(ref.rcs)} receive"
        f" completions, {len(ref.queries)} queries, stats {ref.stats}"
    )
    # the stimulus reaches every outcome
    assert syndromes == {ACK, NAK_INV, NAK_ACC, NAK_OP}
    assert ref.stats["rqmsn_mismatch"] and ref.stats["no_receive_wr"] and ref.stats["imm_completions"] > 20
    assert any(q[1] == 0 for q in ref.queries) and any(q[1] and q[2] != ACK for q in ref.queries)
    psns = [op[2] for op in ops if op[0] == "arr"]
    assert min(psns) < 100 and max(psns) > M - 100  # PSN wrap-around
    assert {a[2] for a in ref.acks} & {0, 1} and max(a[2] for a in ref.acks) > 0xFFF0  # MSN wrap
    assert {r[4] for r in ref.rcs} & {0, 1} and max(r[4] for r in ref.rcs) > 0xFFF0  # RQMSN wrap


def test_random_no_stalls_full_window_jumps():
    """Deep reordering (spread = W) without stalls: long walks at one PSN per cycle."""
    seed = new_seed()
    rng = random.Random(seed)
    ops, _ = random_ops(rng, 2, 64, 1500, p_err=0.01, p_mismatch=0.005)
    run_ops(2, 64, ops, seed=seed + 1, stall=0.0)


# -- directed ----------------------------------------------------------------------------------------


def arr(qp, psn, cack, *rec):
    return ("arr", qp, psn % M, cack % M, record(*rec))


def test_in_order_write_and_write_imm():
    ops = [("cfg", 1, 1000, 7), ("post", 1), ("query", 1)]
    ops += [arr(1, 1000, 1000, 5, 7, 0, 0, 0, 9000), arr(1, 1001, 1001, 5, 7, 1, 0, 0, 9000)]  # WRITE, 2 pkts
    ops += [arr(1, 1002, 1002, 6, 7, 1, 1, 0xDEADBEEF, 100), ("query", 1)]  # WRITE_IMM Only
    ref = run_ops(2, 64, ops, seed=new_seed())
    assert ref.acks == [(1, ACK, 5), (1, ACK, 6)]
    assert ref.rcs == [(1, 0, 0xDEADBEEF, 100, 7)]
    assert ref.queries == [(1, 0, 0, 0), (1, 1, ACK, 6)]
    assert ref.stats == dict(ref.stats, messages=2, imm_completions=1, naks=0)


def test_out_of_order_message_completes_when_cack_passes_its_end():
    # message 3 = PSNs 10..12 (WRITE_IMM), message 4 = PSN 13; arrivals 13, 12, 11 then 10 moves cack to 13
    ops = [("cfg", 0, 10, 0xFFFF), ("post", 0), ("post", 0)]
    ops += [arr(0, 13, 9, 4, 0, 1, 0, 0, 50), arr(0, 12, 9, 3, 0xFFFF, 1, 1, 42, 9000)]
    ops += [arr(0, 11, 9, 3, 0xFFFF, 0, 0, 0, 9000), ("query", 0), arr(0, 10, 13, 3, 0xFFFF, 0, 0, 0, 9000)]
    ops += [arr(0, 14, 14, 5, 0, 1, 1, 43, 1)]  # RQMSN wrapped to 0
    ref = run_ops(1, 64, ops, seed=new_seed())
    assert ref.acks == [(0, ACK, 3), (0, ACK, 4), (0, ACK, 5)]
    assert ref.rcs == [(0, 0, 42, 9000, 0xFFFF), (0, 0, 43, 1, 0)]
    assert ref.queries == [(0, 0, 0, 0)]


def test_error_in_middle_packet_naks_and_stops_completions():
    # message 8 = PSNs M-2, M-1, 0 (wraps); PSN M-1 fails row 10; message 9 would succeed but is after the NAK
    ops = [("cfg", 1, M - 2, 0)]
    ops += [arr(1, M - 1, M - 3, 8, 0, 0, 0, 0, 9000, ACC), arr(1, 0, M - 3, 8, 0, 1, 0, 0, 9000)]
    ops += [arr(1, M - 2, 0, 8, 0, 0, 0, 0, 9000, INV), arr(1, 1, 1, 9, 0, 1, 0, 0, 1), ("query", 1)]
    ops += [("query", 0)]
    ref = run_ops(2, 64, ops, seed=new_seed())
    assert ref.acks == [(1, NAK_INV, 8)]  # the first error in PSN order decides
    assert ref.queries == [(1, 1, NAK_INV, 8), (0, 0, 0, 0)]
    assert ref.qp_errors == [0b10, 0b10] and ref.stats["naks"] == 1 and ref.stats["messages"] == 0


def test_no_receive_wr_then_reconfigure():
    ops = [("cfg", 0, 1, 0), arr(0, 1, 1, 0, 0, 1, 0, 0, 1), arr(0, 2, 2, 1, 0, 1, 1, 5, 1), ("query", 0)]
    ops += [("cfg", 0, 500, 3), ("query", 0), ("post", 0), arr(0, 500, 500, 0, 3, 1, 1, 6, 2), ("query", 0)]
    ref = run_ops(1, 64, ops, seed=new_seed())
    assert ref.acks == [(0, ACK, 0), (0, NAK_OP, 1), (0, ACK, 0)]
    assert ref.queries == [(0, 1, NAK_OP, 1), (0, 0, 0, 0), (0, 1, ACK, 0)]
    assert ref.rcs == [(0, 0, 6, 2, 3)] and ref.qp_errors == [1, 0, 0]
    assert ref.stats["no_receive_wr"] == 1


def test_rqmsn_mismatch():
    ops = [("cfg", 0, 1, 10), ("post", 0), ("post", 0), arr(0, 1, 1, 0, 10, 1, 1, 1, 1)]
    ops += [arr(0, 2, 2, 1, 12, 1, 1, 2, 1), ("query", 0)]
    ref = run_ops(1, 64, ops, seed=new_seed())
    assert ref.acks == [(0, ACK, 0), (0, NAK_INV, 1)] and len(ref.rcs) == 1
    assert ref.stats["rqmsn_mismatch"] == 1 and ref.qp_errors == [1]


def test_no_receive_wr_is_checked_before_rqmsn():
    # row 11 before row 12: no WR posted and a wrong RQMSN -> NAK_REMOTE_OPERATION
    ops = [("cfg", 0, 1, 10), arr(0, 1, 1, 0, 11, 1, 1, 1, 1), ("query", 0)]
    ref = run_ops(1, 64, ops, seed=new_seed())
    assert ref.acks == [(0, NAK_OP, 0)] and ref.queries == [(0, 1, NAK_OP, 0)]
    assert ref.stats["no_receive_wr"] == 1 and ref.stats["rqmsn_mismatch"] == 0


def test_cack_behind_walked_position_walks_nothing():
    # an arrival whose cack is not past the walked position (cack = walked, or serially behind) only
    # stores its record; the records below the walked position are not walked again
    ops = [("cfg", 0, 20, 0)] + [arr(0, 20 + k, 20 + k, k, 0, 1, 0, 0, 1) for k in range(4)]
    ops += [arr(0, 25, 23, 9, 0, 1, 0, 0, 1), arr(0, 26, 18, 9, 0, 1, 0, 0, 1), ("query", 0)]
    ref = run_ops(1, 64, ops, seed=new_seed())
    assert ref.acks == [(0, ACK, k) for k in range(4)] and ref.queries == [(0, 1, ACK, 3)]


def test_posted_counter_saturates():
    ops = [("cfg", 0, 1, 0)] + [("post", 0)] * 5  # post_bits = 2: 3 accepted, 2 refused
    ops += [arr(0, k + 1, k + 1, k, k, 1, 1, k, 1) for k in range(4)]
    ref = run_ops(1, 64, ops, seed=new_seed(), post_bits=2)
    assert ref.stats["post_refused"] == 2 and len(ref.rcs) == 3
    assert ref.acks[-1] == (0, NAK_OP, 3)


def test_full_window_walk_with_ack_backpressure():
    """PSNs 2..W arrive first, then PSN 1 moves cack by W: a W-PSN walk of one-packet messages while the
    ack consumer stalls often."""
    w = 64
    ops = [("cfg", 0, 100, 0)] + [arr(0, 100 + k, 99, k, 0, 1, 0, 0, 1) for k in range(1, w)]
    ops += [arr(0, 100, 99 + w, 0, 0, 1, 0, 0, 1)]
    ref = run_ops(1, w, ops, seed=new_seed(), stall=0.8)
    assert ref.acks == [(0, ACK, k) for k in range(w)]


def test_timing_in_order_and_full_window_walk():
    """The documented timing: 5 cycles per in-order arrival that moves cack by one, 2 per arrival that
    does not move cack, one cycle per walked PSN (outputs always ready, inputs back to back)."""
    w, n = 64, 40
    # QP 0 from reset (cack 0); every packet is a one-packet WRITE with msn = psn - 1
    ops = [arr(0, p, p, p - 1, 0, 1, 0, 0, 1) for p in range(1, n + 1)]  # in order: walks 1 PSN each
    ops += [arr(0, p, n, p - 1, 0, 1, 0, 0, 1) for p in range(n + 2, n + w + 1)]  # above the hole at n + 1
    ops += [arr(0, n + 1, n + w, n, 0, 1, 0, 0, 1)]  # fills it: cack + W, a W-PSN walk
    dut = CompletionTracker(1, w)
    ref = reference(1, ops)
    assert ref.acks == [(0, ACK, m) for m in range(n + w)]
    cycle, accepted, acked = [0], [], []

    async def clock(ctx):
        async for _ in ctx.tick():
            cycle[0] += 1

    async def producer(ctx):
        for op in ops:
            await stream_put(ctx, dut.arrival, {"qp": 0, "psn": op[2], "cack": op[3], **op[4]})
            accepted.append(cycle[0])

    async def consumer(ctx):
        ctx.set(dut.ack.ready, 1)
        while len(acked) < len(ref.acks):
            *_, valid = await ctx.tick().sample(dut.ack.valid)
            if valid:
                acked.append(cycle[0])

    run(dut, producer, consumer, processes=[clock], name="completion_tracker_timing")
    steps = [b - a for a, b in zip(accepted, accepted[1:], strict=False)]
    print(f"cycles between accepted arrivals: {steps}")
    print(f"the W-PSN walk ends {acked[-1] - accepted[-1]} cycles after its arrival is accepted")
    assert steps[: n - 1] == [5] * (n - 1)
    assert steps[n : n + w - 2] == [2] * (w - 2)
    # the walk emits one ACK per cycle (one PSN per cycle)
    assert [b - a for a, b in zip(acked[n:], acked[n + 1 :], strict=False)] == [1] * (w - 1)
    # CHECK, W reads, the last record processed, its ACK register transferred
    assert acked[-1] - accepted[-1] == w + 3


@pytest.mark.filterwarnings("ignore:.*created but never used")  # the rejected instances
def test_parameters_and_verilog():
    for kw in ({"window": 3}, {"window": 1 << 16}, {"qps": 0}, {"post_bits": 17}):
        with pytest.raises(ValueError):
            CompletionTracker(**{"qps": 2, **kw})
    text = verilog.convert(CompletionTracker(qps=3, window=64), name="completion_tracker", emit_src=False)
    for port in (
        "arrival__valid",
        "query_result__payload",
        "receive_completion__ready",
        "stat_naks",
        "qp_error",
    ):
        assert port in text


# -- cocotb / Verilator smoke test ----------------------------------------------------------------------


class Driver:
    """Stream transfers on the Verilog ports (inputs set after a rising edge, sampled at the falling edge)."""

    def __init__(self, dut, qps, rng, stall=0.3):
        self.dut, self.rng, self.stall = dut, rng, stall
        self.layouts = {
            "configure": configure_layout(qps),
            "post_receive": post_layout(qps),
            "arrival": arrival_layout(qps),
            "ack": ack_layout(qps),
            "receive_completion": receive_completion_layout(qps),
            "query": query_layout(qps),
            "query_result": query_result_layout(qps),
        }

    async def put(self, name, payload):
        while self.rng.random() < self.stall:
            await RisingEdge(self.dut.clk)
        getattr(self.dut, f"{name}__payload").value = Const.cast(self.layouts[name].const(payload)).value
        getattr(self.dut, f"{name}__valid").value = 1
        while True:
            await FallingEdge(self.dut.clk)
            taken = int(getattr(self.dut, f"{name}__ready").value)
            await RisingEdge(self.dut.clk)
            if taken:
                break
        getattr(self.dut, f"{name}__valid").value = 0

    async def collect(self, name, fields, count, out):
        for _ in range(count):
            while self.rng.random() < self.stall:
                await RisingEdge(self.dut.clk)
            getattr(self.dut, f"{name}__ready").value = 1
            while True:
                await FallingEdge(self.dut.clk)
                valid = int(getattr(self.dut, f"{name}__valid").value)
                raw = int(getattr(self.dut, f"{name}__payload").value)
                await RisingEdge(self.dut.clk)
                if valid:
                    break
            getattr(self.dut, f"{name}__ready").value = 0
            v = data.Const(self.layouts[name], raw)
            out.append(tuple(int(getattr(v, f)) for f in fields))


@cocotb.test()
async def smoke(dut):
    params = dut_params()
    qps, window = params["qps"], params["window"]
    rng = random.Random(cocotb.RANDOM_SEED)
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    for name in ("configure", "post_receive", "arrival", "query"):
        getattr(dut, f"{name}__valid").value = 0
    for name in ("ack", "receive_completion", "query_result"):
        getattr(dut, f"{name}__ready").value = 0
    dut.rst.value = 1
    await RisingEdge(dut.clk)
    await RisingEdge(dut.clk)
    dut.rst.value = 0

    ops, _ = random_ops(rng, qps, window, params["arrivals"])
    ref = reference(qps, ops)
    d = Driver(dut, qps, rng)
    acks, rcs, queries = [], [], []
    a = cocotb.start_soon(d.collect("ack", ("qp", "syndrome", "msn"), len(ref.acks), acks))
    r = cocotb.start_soon(
        d.collect("receive_completion", ("qp", "status", "imm", "byte_len", "rqmsn"), len(ref.rcs), rcs)
    )
    q = cocotb.start_soon(
        d.collect("query_result", ("qp", "valid", "syndrome", "msn"), len(ref.queries), queries)
    )
    names = {"cfg": "configure", "post": "post_receive", "arr": "arrival", "query": "query"}
    for op in ops:
        if op[0] == "cfg":
            payload = {"qp": op[1], "initial_psn": op[2], "initial_rqmsn": op[3]}
        elif op[0] in ("post", "query"):
            payload = {"qp": op[1]}
        else:
            payload = {"qp": op[1], "psn": op[2], "cack": op[3], **op[4]}
        await d.put(names[op[0]], payload)
    await a
    await r
    await q
    for _ in range(window + 20):
        await RisingEdge(dut.clk)
    assert acks == ref.acks and rcs == ref.rcs and queries == ref.queries
    assert int(dut.qp_error.value) == ref.qp_error()
    assert {s: int(getattr(dut, f"stat_{s}").value) for s in STATS} == ref.stats
    dut._log.info(
        "%d acks, %d receive completions, %d queries, stats %s", len(acks), len(rcs), len(queries), ref.stats
    )


def test_completion_tracker_cocotb():
    run_cocotb(
        lambda: CompletionTracker(qps=3, window=64),
        name="completion_tracker",
        module=__name__,
        params={"qps": 3, "window": 64},
        run_params={"qps": 3, "window": 64, "arrivals": 1500},
    )
