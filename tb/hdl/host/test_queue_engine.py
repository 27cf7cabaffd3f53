"""Queue engine (hdl/host/queue_engine.py), Amaranth simulator.

Around the engine: a Python AXI4 memory on ``m_axi`` (random AR/AW/W ready, random R/B gaps and latency,
an SLVERR on a chosen WQE read or a chosen CQE write), a host that writes WQEs with ``Wqe(...).encode()``,
rings doorbells through ``sq_producer`` and polls the CQ by phase bit (``cqe_phase``), a core that takes
``work_request`` (random stalls, each one checked against its WQE) and ``post_receive``, and answers with
``ack`` (cumulative), NAKs, ``send_error`` and ``receive_completion`` records. Every CQE is compared byte
for byte (``Cqe(...).encode()``, phase from its ring position) in per-QP order, the CQ is checked never to
be overwritten while unconsumed, ``cq_producer`` never to pass the B responses, and the status outputs and
counters are checked at the end. Seeds printed (``QUEUE_ENGINE_SEED=<seed>`` reruns one).
"""

from __future__ import annotations

import collections
import os
import random
from dataclasses import dataclass, field

import pytest
from amaranth import Value
from amaranth.back import verilog

from mrcnic.hdl.dma.axi import Axi4Signature, AxiResp
from mrcnic.hdl.host.queue_engine import CompletionStatus, QueueEngine
from mrcnic.hdl.nic import connect_layout, core_signature
from mrcnic.hdl.rx.completion_tracker import receive_completion_layout
from mrcnic.hdl.tx.layouts import work_request_layout
from mrcnic.hdl.tx.tracker import ack_out_layout
from mrcnic.regmap import HOST_COUNTERS, Capabilities, Cqe, CqeKind, CqeStatus, Wqe, WqeOpcode, cqe_phase
from mrcnic.regmap.nic import _queue_blocks
from mrcnic.regmap.queues import CQE_BYTES, WQE_BYTES
from mrcnic.wire import AethSyndrome

from support.pysim import run, stream_put

S = CqeStatus
SEND, RECV = CqeKind.SEND, CqeKind.RECV_IMM
ACK = AethSyndrome.ACK
COUNTERS = [name for name, _ in HOST_COUNTERS]


def new_seed() -> int:
    seed = int(os.environ.get("QUEUE_ENGINE_SEED", random.randrange(1 << 30)))
    print(f"seed {seed}")
    return seed


# -- host memory -------------------------------------------------------------------------------------


class AxiMemory:
    """A sparse AXI4 memory for ``m_axi``: AR -> R beats ``latency`` cycles later, AW + W -> memory, then B.

    ``pause``: chance of holding a ready low or skipping an R / B cycle. ``bad_reads``: addresses whose
    next read answers SLVERR on every beat of that burst (once). ``fail_writes``: ordinals of AW bursts that
    answer SLVERR and write nothing. ``on_aw(addr, beats, failed)`` is called for every accepted AW.
    """

    def __init__(self, axi, width, rng, *, pause=0.3, latency=(1, 6)):
        self.axi, self.width, self.rng, self.pause, self.latency = axi, width, rng, pause, latency
        self.bytes: dict[int, int] = {}
        self.bad_reads: set[int] = set()
        self.fail_writes: set[int] = set()
        self.on_aw = None
        self.aw_count = 0
        self.b_count = 0  # B responses taken by the engine
        self.read_bursts: list[tuple[int, int]] = []

    def load(self, addr: int, n: int) -> bytes:
        return bytes(self.bytes.get(addr + k, 0) for k in range(n))

    def store(self, addr: int, raw: bytes) -> None:
        for k, b in enumerate(raw):
            self.bytes[addr + k] = b

    def _wait(self) -> int:
        return self.rng.randint(*self.latency)

    async def process(self, ctx):
        axi, width, rng = self.axi, self.width, self.rng
        reads = collections.deque()  # [due cycle, addr, beats left, failed]
        aws = collections.deque()  # [addr, beats, beats taken, failed]
        w_beats = collections.deque()
        bresps = collections.deque()  # [due cycle, resp]
        r_busy = b_busy = False
        cycle = 0
        for name in ("arready", "rvalid", "awready", "wready", "bvalid"):
            ctx.set(getattr(axi, name), 0)
        sampled = (
            axi.arvalid, axi.arready, axi.araddr, axi.arlen, axi.arsize, axi.rvalid, axi.rready,
            axi.awvalid, axi.awready, axi.awaddr, axi.awlen, axi.awsize,
            axi.wvalid, axi.wready, axi.wdata, axi.wstrb, axi.wlast, axi.bvalid, axi.bready,
        )  # fmt: skip
        async for _, _, *values in ctx.tick().sample(*sampled):
            (arvalid, arready, araddr, arlen, arsize, rvalid, rready, awvalid, awready, awaddr, awlen, awsize,
             wvalid, wready, wdata, wstrb, wlast, bvalid, bready) = values  # fmt: skip
            cycle += 1
            if arvalid and arready:
                assert 1 << arsize == width and araddr % width == 0, (arsize, hex(araddr))
                beats = arlen + 1
                span = range(araddr, araddr + beats * width)
                failed = any(a in span for a in self.bad_reads)
                self.bad_reads -= set(a for a in self.bad_reads if a in span)
                reads.append([cycle + self._wait(), araddr, beats, failed])
                self.read_bursts.append((araddr, beats))
            if rvalid and rready:
                r_busy = False
            if awvalid and awready:
                assert 1 << awsize == width and awaddr % width == 0, (awsize, hex(awaddr))
                failed = self.aw_count in self.fail_writes
                aws.append([awaddr, awlen + 1, 0, failed])
                if self.on_aw:
                    self.on_aw(awaddr, awlen + 1, failed)
                self.aw_count += 1
            if wvalid and wready:
                w_beats.append((wdata, wstrb, wlast))
            while aws and w_beats:
                burst = aws[0]
                data, strb, last = w_beats.popleft()
                assert last == (burst[2] == burst[1] - 1), "WLAST"
                if not burst[3]:
                    word = burst[0] + burst[2] * width
                    for lane in range(width):
                        if strb >> lane & 1:
                            self.bytes[word + lane] = data >> 8 * lane & 0xFF
                burst[2] += 1
                if last:
                    aws.popleft()
                    bresps.append([cycle + self._wait(), AxiResp.SLVERR if burst[3] else AxiResp.OKAY])
            if bvalid and bready:
                b_busy = False
                self.b_count += 1
            # -- outputs for the next cycle
            ctx.set(axi.arready, rng.random() >= self.pause)
            ctx.set(axi.awready, rng.random() >= self.pause)
            ctx.set(axi.wready, rng.random() >= self.pause)
            if not r_busy:
                if reads and reads[0][0] <= cycle and rng.random() >= self.pause:
                    burst = reads[0]
                    ctx.set(axi.rdata, int.from_bytes(self.load(burst[1], width), "little"))
                    ctx.set(axi.rresp, AxiResp.SLVERR if burst[3] else AxiResp.OKAY)
                    ctx.set(axi.rlast, burst[2] == 1)
                    ctx.set(axi.rid, 0)
                    ctx.set(axi.rvalid, 1)
                    r_busy = True
                    burst[1] += width
                    burst[2] -= 1
                    if burst[2] == 0:
                        reads.popleft()
                else:
                    ctx.set(axi.rvalid, 0)
            if not b_busy:
                if bresps and bresps[0][0] <= cycle and rng.random() >= self.pause:
                    ctx.set(axi.bresp, bresps.popleft()[1])
                    ctx.set(axi.bid, 0)
                    ctx.set(axi.bvalid, 1)
                    b_busy = True
                else:
                    ctx.set(axi.bvalid, 0)


# -- host and core models ----------------------------------------------------------------------------


@dataclass
class QpModel:
    base: int = 0
    log2: int = 0
    producer: int = 0  # WQEs posted (not wrapped)
    next_msn: int = 0  # the MSN the next WQE sent will get
    want_wr: collections.deque = field(default_factory=collections.deque)  # (sq index, Wqe, msn) to be sent
    inflight: list = field(default_factory=list)  # (sq index, msn) the core took, not yet answered
    sent: int = 0  # work requests the core took
    expect: list = field(default_factory=list)  # Cqe (SEND) in order
    expect_recv: list = field(default_factory=list)  # Cqe (RECV_IMM) in order
    rq_producer: int = 0
    rq_index: int = 0  # RECV_IMM CQEs asked for so far
    posts: int = 0  # post_receive records seen


def valid_wqe(rng, *, length=None, opcode=None, local_addr=None) -> Wqe:
    return Wqe(
        opcode=rng.choice(list(WqeOpcode)) if opcode is None else opcode,
        length=rng.randint(1, 1 << 31) if length is None else length,
        local_addr=rng.getrandbits(64) if local_addr is None else local_addr,
        remote_va=rng.getrandbits(64),
        rkey=rng.getrandbits(32),
        imm=rng.getrandbits(32),
        wr_id=rng.getrandbits(64),
    )


class Bench:
    """The engine, its memory, the host's CQ poller and the core's ``work_request`` / ``post_receive``
    takers; a scenario (one testbench) drives the rest through the helpers below."""

    def __init__(
        self, seed, *, qps=4, data_width=8, cq_log2=3, pause=0.3, wr_stall=0.3, poll_stall=0.3, addr_width=64
    ):
        self.rng = random.Random(seed)
        self.qps = qps
        self.dut = QueueEngine(qps=qps, data_width=data_width, addr_width=addr_width)
        self.mem = AxiMemory(self.dut.m_axi, data_width, self.rng, pause=pause)
        self.mem.on_aw = self._on_aw
        self.cq_base = 0x7F00_0000_0000 + self.rng.randrange(1 << 16) * CQE_BYTES
        self.cq_log2 = cq_log2
        self.consumer = 0  # CQEs the host consumed (not wrapped)
        self.observed: list[tuple[int, bytes | None]] = []  # (ring position, raw CQE or None if lost)
        self.cq_writes = 0  # CQE write bursts seen (their ring positions, in order)
        self.lost: set[int] = set()  # ring positions whose write failed
        self.unreachable: set[int] = set()  # ring positions past the address width: no write at all
        self.poll_pause = False
        self.poll_stall, self.wr_stall = poll_stall, wr_stall
        self.qp = [QpModel() for _ in range(qps)]
        self.wr_order: list[int] = []  # qp of every work request, in order
        self.held = None  # a work_request offered and not taken: it must not change
        self.cycles, self.max_cycles = 0, 40_000

    # -- background processes
    def _on_aw(self, addr, beats, failed):
        size = 1 << self.cq_log2
        if not self.cq_base // self.mem.width * self.mem.width <= addr < self.cq_base + size * CQE_BYTES:
            raise AssertionError(f"write at {addr:#x} outside the CQ")
        while self.cq_writes in self.unreachable:
            self.cq_writes += 1
        n = self.cq_writes
        want = self.cq_base + (n % size) * CQE_BYTES
        assert addr == want // self.mem.width * self.mem.width, f"CQE {n} written at {addr:#x}"
        assert n - self.consumer < size, f"CQE {n} overwrites an unconsumed one (consumer {self.consumer})"
        if failed:
            self.lost.add(n)
        self.cq_writes += 1

    async def poller(self, ctx):
        dut = self.dut
        async for _, _, producer in ctx.tick().sample(dut.cq_producer):
            skipped = sum(1 for pos in self.unreachable if pos < producer)  # advanced without a write
            assert producer <= self.mem.b_count + skipped, "cq_producer ahead of the B responses"
            if self.poll_pause or self.rng.random() < self.poll_stall:
                continue
            pos = self.consumer
            if pos in self.lost:
                if producer <= pos:
                    continue
                self.observed.append((pos, None))
            else:
                addr = self.cq_base + (pos % (1 << self.cq_log2)) * CQE_BYTES
                raw = self.mem.load(addr, CQE_BYTES)
                if raw[31] & 1 != cqe_phase(pos, self.cq_log2):
                    continue
                self.observed.append((pos, raw))
            self.consumer += 1
            ctx.set(dut.cq_consumer, self.consumer & 0xFFFF)

    async def wr_taker(self, ctx):
        wr = self.dut.work_request
        ctx.set(wr.ready, 0)
        async for _, _, valid, ready, p in ctx.tick().sample(wr.valid, wr.ready, wr.payload):
            if self.held is not None:
                assert valid and p == self.held, "work_request changed before it was taken"
            self.held = p if valid and not ready else None
            if valid and ready:
                q = p.qp
                model = self.qp[q]
                assert model.want_wr, f"QP {q}: unexpected work request"
                index, wqe, msn = model.want_wr.popleft()
                got = (p.kind.value, p.local_addr, p.remote_va, p.rkey, p.length, p.imm)
                assert got == (wqe.opcode, wqe.local_addr, wqe.remote_va, wqe.rkey, wqe.length, wqe.imm), (
                    f"QP {q} WQE {index}: {got}"
                )
                model.inflight.append((index, msn))
                model.sent += 1
                self.wr_order.append(q)
            ctx.set(wr.ready, self.rng.random() >= self.wr_stall)

    async def post_taker(self, ctx):
        post = self.dut.post_receive
        async for _, _, valid, ready, p in ctx.tick().sample(post.valid, post.ready, post.payload):
            if valid and ready:
                self.qp[p.qp].posts += 1
            ctx.set(post.ready, self.rng.random() >= 0.3)

    async def watchdog(self, ctx):
        """A scenario stuck (a stream never taken, a CQE never seen) fails instead of hanging."""
        async for _ in ctx.tick():
            self.cycles += 1
            assert self.cycles < self.max_cycles, f"still running after {self.cycles} cycles: a hang?"

    def run(self, scenario, name):
        run(
            self.dut,
            scenario,
            processes=[self.mem.process, self.poller, self.wr_taker, self.post_taker, self.watchdog],
            name=name,
        )

    # -- scenario helpers (testbench side)
    async def wait_until(self, ctx, cond, what="", limit=30000):
        for _ in range(limit):
            if cond():
                return
            await ctx.tick()
        raise AssertionError(f"timeout waiting for {what}")

    async def idle(self, ctx, cycles):
        if cycles:
            await ctx.tick().repeat(cycles)

    async def setup_cq(self, ctx):
        ctx.set(self.dut.cq_base, self.cq_base)
        ctx.set(self.dut.cq_size_log2, self.cq_log2)

    async def setup_sq(self, ctx, q, log2, base=None):
        """As the driver does: SQ off, base, producer = consumer, SQ on."""
        model, dut = self.qp[q], self.dut
        model.base = (
            0x1_0000_0000 * (q + 1) + self.rng.randrange(1 << 12) * WQE_BYTES if base is None else base
        )
        model.log2 = log2
        ctx.set(dut.sq_size_log2[q], 0)
        await ctx.tick()
        ctx.set(dut.sq_base[q], model.base)
        model.producer = ctx.get(dut.sq_consumer[q])
        ctx.set(dut.sq_producer[q], model.producer & 0xFFFF)
        ctx.set(dut.sq_size_log2[q], log2)

    async def connect(self, ctx, q, msn):
        self.qp[q].next_msn = msn
        await stream_put(ctx, self.dut.connect, {"qp": q, "psn": self.rng.getrandbits(24), "msn": msn,
                                                  "rqmsn": self.rng.getrandbits(16)})  # fmt: skip

    def write_wqes(self, q, wqes, *, send=True, bad=()):
        """Write ``wqes`` at the producer of QP q (no doorbell yet); returns their SQ indices. ``send``:
        each is expected on ``work_request`` with the next MSN. ``bad``: positions whose read fails."""
        model = self.qp[q]
        indices = []
        for k, wqe in enumerate(wqes):
            index = model.producer
            addr = model.base + (index % (1 << model.log2)) * WQE_BYTES
            self.mem.store(addr, wqe.encode())
            if k in bad:
                self.mem.bad_reads.add(addr)
            if send:
                model.want_wr.append((index & 0xFFFF, wqe, model.next_msn))
                model.next_msn = (model.next_msn + 1) & 0xFFFF
            model.producer += 1
            indices.append(index & 0xFFFF)
        return indices

    def doorbell(self, ctx, q):
        ctx.set(self.dut.sq_producer[q], self.qp[q].producer & 0xFFFF)

    async def post(self, ctx, q, wqes, **kw):
        indices = self.write_wqes(q, wqes, **kw)
        self.doorbell(ctx, q)
        return indices

    def expect(self, q, index, status, msn=0):
        self.qp[q].expect.append(Cqe(index & 0xFFFF, SEND, status, q, msn=msn & 0xFFFF))

    async def ack(self, ctx, q, count, *, stall=0.3):
        """ACK the ``count`` oldest messages the core took (cumulative: the msn of the last one)."""
        model = self.qp[q]
        done, model.inflight = model.inflight[:count], model.inflight[count:]
        for index, msn in done:
            self.expect(q, index, S.SUCCESS, msn)
        payload = {"qp": q, "msn": done[-1][1], "nak": 0, "syndrome": ACK}
        await stream_put(ctx, self.dut.ack, payload, stall=stall, rng=self.rng)

    async def nak(self, ctx, q, msn, syndrome, status):
        """NAK for ``msn``: earlier in-flight SUCCESS, that one ``status``, the rest FLUSHED."""
        model = self.qp[q]
        for index, m in model.inflight:
            d = (m - msn) & 0xFFFF
            if d and d < 0x8000:
                self.expect(q, index, S.FLUSHED, m)
            elif d == 0:
                self.expect(q, index, status, m)
            else:
                self.expect(q, index, S.SUCCESS, m)
        model.inflight = []
        payload = {"qp": q, "msn": msn, "nak": 1, "syndrome": syndrome}
        await stream_put(ctx, self.dut.ack, payload, stall=0.3, rng=self.rng)

    async def send_error(self, ctx, q):
        model = self.qp[q]
        for k, (index, m) in enumerate(model.inflight):
            self.expect(q, index, S.RETRY_EXCEEDED if k == 0 else S.FLUSHED, m)
        model.inflight = []
        await stream_put(ctx, self.dut.send_error, {"qp": q, "psn": self.rng.getrandbits(24)}, stall=0.3,
                         rng=self.rng)  # fmt: skip

    async def receive(self, ctx, q, *, status=0):
        model = self.qp[q]
        imm, size, rqmsn = self.rng.getrandbits(32), self.rng.getrandbits(32), self.rng.getrandbits(16)
        want = S.SUCCESS if status == 0 else S.REMOTE_OPERATION_ERROR
        model.expect_recv.append(
            Cqe(model.rq_index & 0xFFFF, RECV, want, q, msn=rqmsn, byte_len=size, imm=imm)
        )
        model.rq_index += 1
        payload = {"qp": q, "status": status, "imm": imm, "byte_len": size, "rqmsn": rqmsn}
        await stream_put(ctx, self.dut.receive_completion, payload, stall=0.3, rng=self.rng)

    def expected_total(self):
        return sum(len(m.expect) + len(m.expect_recv) for m in self.qp)

    async def drain(self, ctx, what="CQEs"):
        await self.wait_until(ctx, lambda: len(self.observed) >= self.expected_total(), what)
        await self.idle(ctx, 40)
        assert len(self.observed) == self.expected_total(), "more CQEs than expected"

    def check_cqes(self, lost_owner=None):
        """Every observed CQE against the expected ones of its QP and kind, in order, byte for byte."""
        queues = {}
        for q, model in enumerate(self.qp):
            queues[(q, SEND)] = collections.deque(model.expect)
            queues[(q, RECV)] = collections.deque(model.expect_recv)
        for pos, raw in self.observed:
            if raw is None:
                queues[lost_owner].popleft()
                continue
            got = Cqe.decode(raw)
            want = queues[(got.qp, got.kind)].popleft()
            want.phase = cqe_phase(pos, self.cq_log2)
            assert raw == want.encode(), f"CQE {pos}: got {got}, want {want}"
        assert all(not queue for queue in queues.values()), "CQEs missing"

    def counters(self, ctx):
        return {name: ctx.get(getattr(self.dut, f"stat_host_{name}")) for name in COUNTERS}


# -- tests -------------------------------------------------------------------------------------------


def test_interface_and_conversion():
    dut = QueueEngine(qps=4, data_width=8)
    dut._MustUse__silence = True  # only its ports are looked at
    members = dut.signature.members
    assert dut.work_request.payload.shape() == work_request_layout(4)
    assert dut.connect.payload.shape() == connect_layout(4)
    assert dut.ack.payload.shape() == ack_out_layout(4)
    assert dut.receive_completion.payload.shape() == receive_completion_layout(4)
    assert dut.m_axi.signature == Axi4Signature(addr_width=64, data_width_bytes=8, id_width=4)
    # The core's streams, each facing the other way (connect: the same way, a copy of the core's input).
    core = core_signature(qps=4).members
    for name in ("work_request", "post_receive", "ack", "send_error", "receive_completion", "connect"):
        payload = lambda member: member.signature.members["payload"].shape  # noqa: E731
        assert payload(members[name]) == payload(core[name]), name
        assert (members[name].flow == core[name].flow) == (name == "connect"), name
    assert {name: len(getattr(dut, f"stat_host_{name}")) for name in COUNTERS} == dict.fromkeys(COUNTERS, 32)
    # Every binding of the queue register blocks names a port of the right width and direction.
    for block in _queue_blocks(Capabilities(qps=4)):
        for register in block.registers:
            port = register.binding.split("[")[0]
            assert port in members, register.binding
            value = getattr(dut, port)
            if "[" in register.binding:
                value = value[int(register.binding.split("[")[1][:-1])]
            assert len(Value.cast(value)) == register.width, port
            assert (members[port].flow.name == "In") == (register.access.name == "RW"), port
    assert {s.name: s.value for s in CompletionStatus} == {s.name: s.value for s in CqeStatus}
    text = verilog.convert(QueueEngine(qps=4, data_width=8), name="queue_engine")
    for port in ("m_axi__araddr", "m_axi__wdata", "work_request__payload", "stat_host_cq_full_stalls"):
        assert port in text, port
    with pytest.raises(ValueError):
        QueueEngine(data_width=3)


@pytest.mark.parametrize("data_width", [8, 64])
def test_acks_cq_wraps_and_full_stalls(data_width):
    """One QP: random batches, cumulative ACKs over random prefixes (MSN wrapping through 0), a 4-entry
    CQ wrapping many times, host pauses that fill it (stalls counted, nothing overwritten), an ACK that
    completes nothing (ignored)."""
    bench = Bench(new_seed(), qps=2, data_width=data_width, cq_log2=2)
    rng, dut = bench.rng, bench.dut
    q, total = 1, 60

    async def scenario(ctx):
        await bench.setup_cq(ctx)
        await bench.setup_sq(ctx, q, 3)
        await bench.connect(ctx, q, 0xFFF0)
        model = bench.qp[q]
        # The host does not consume: 4 CQEs fill the ring, the other 4 wait (stalls) until it does.
        bench.poll_pause = True
        await bench.post(ctx, q, [valid_wqe(rng) for _ in range(8)])
        await bench.wait_until(ctx, lambda: model.sent == 8, "WRs")
        await bench.ack(ctx, q, 8)
        await bench.wait_until(ctx, lambda: ctx.get(dut.cq_producer) == 4, "a full CQ")
        await bench.idle(ctx, 100)
        assert ctx.get(dut.cq_producer) == 4 and ctx.get(dut.sq_completed[q]) == 4
        stalls_seen = ctx.get(dut.stat_host_cq_full_stalls)
        assert (
            stalls_seen >= 95
        )  # every cycle of the wait (the first CQE waiting arrives a cycle or two late)
        bench.poll_pause = False
        posted = 8
        while posted < total or model.want_wr or model.inflight:
            completed = ctx.get(dut.sq_completed[q])
            room = 8 - ((model.producer - completed) & 0xFFFF)  # the host reuses a slot once completed
            if posted < total and room > 0 and rng.random() < 0.5:
                n = min(rng.randint(1, room), total - posted)
                await bench.post(ctx, q, [valid_wqe(rng) for _ in range(n)])
                posted += n
            if model.inflight and rng.random() < 0.4:
                await bench.ack(ctx, q, rng.randint(1, len(model.inflight)))
            if rng.random() < 0.1:  # the host stops consuming for a while: the CQ fills
                bench.poll_pause = True
                await bench.idle(ctx, rng.randint(50, 200))
                bench.poll_pause = False
            await bench.idle(ctx, rng.randint(0, 20))
        await bench.drain(ctx)
        # An old ACK completes nothing: ignored.
        last_msn = (0xFFF0 + total - 1) & 0xFFFF
        await stream_put(ctx, dut.ack, {"qp": q, "msn": (last_msn - 3) & 0xFFFF, "nak": 0, "syndrome": ACK})
        await stream_put(ctx, dut.ack, {"qp": q, "msn": last_msn, "nak": 0, "syndrome": ACK})
        await bench.idle(ctx, 50)
        assert len(bench.observed) == total
        assert ctx.get(dut.sq_consumer[q]) == ctx.get(dut.sq_completed[q]) == total
        assert ctx.get(dut.cq_producer) == total and ctx.get(dut.qp_status[q]) == 0
        assert ctx.get(dut.sq_consumer[0]) == 0 and ctx.get(dut.rq_consumer[q]) == 0
        counts = bench.counters(ctx)
        assert counts["cq_full_stalls"] >= stalls_seen
        assert counts == {**dict.fromkeys(COUNTERS, 0), "wqes_fetched": total, "cqes_written": total,
                          "cq_full_stalls": counts["cq_full_stalls"]}  # fmt: skip

    bench.run(scenario, f"queue_engine_acks_{data_width}")
    bench.check_cqes()  # phases by ring position: the 4-entry ring went round 15 times


def test_nak_send_error_invalid_dma_error():
    """Directed outcomes on one QP: NAK (SUCCESS before, the syndrome's status, FLUSHED after, ERROR),
    WQEs posted on the QP in ERROR flushed and not sent; send_error (RETRY_EXCEEDED then FLUSHED, also
    with nothing in flight); an invalid WQE behind WQEs in flight waits for them; bad lengths; a failed
    WQE read (LOCAL_DMA_ERROR); NAK syndromes 0x61 / 0x63 / other; a NAK for a message no longer in
    flight; a failed CQE write (lost, counted, indices still advance)."""
    bench = Bench(new_seed(), qps=4, cq_log2=3)
    rng, dut = bench.rng, bench.dut
    q = 2
    status = lambda ctx: ctx.get(dut.qp_status[q])  # noqa: E731

    async def settle(ctx, what):
        await bench.drain(ctx, what)

    async def scenario(ctx):
        await bench.setup_cq(ctx)
        await bench.setup_sq(ctx, q, 4)
        model = bench.qp[q]

        # NAK 0x62 on the third of four.
        await bench.connect(ctx, q, 100)
        await bench.post(ctx, q, [valid_wqe(rng) for _ in range(4)])
        await bench.wait_until(ctx, lambda: model.sent == 4, "4 WRs")
        await bench.nak(ctx, q, 102, AethSyndrome.NAK_REMOTE_ACCESS, S.REMOTE_ACCESS_ERROR)
        await settle(ctx, "NAK completions")
        assert status(ctx) == 1
        for index in await bench.post(ctx, q, [valid_wqe(rng) for _ in range(2)], send=False):
            bench.expect(q, index, S.FLUSHED)
        await settle(ctx, "flushed after NAK")

        # Reconnect: send_error with three in flight after one was ACKed.
        await bench.connect(ctx, q, 7)
        assert status(ctx) == 0
        await bench.post(ctx, q, [valid_wqe(rng) for _ in range(4)])
        await bench.wait_until(ctx, lambda: model.sent == 8, "WRs")
        await bench.ack(ctx, q, 1)
        await bench.send_error(ctx, q)
        await settle(ctx, "send_error completions")
        assert status(ctx) == 1
        for index in await bench.post(ctx, q, [valid_wqe(rng)], send=False):
            bench.expect(q, index, S.FLUSHED)
        await settle(ctx, "flushed after send_error")

        # An invalid opcode behind two WQEs in flight: it waits for them; the one after it is flushed.
        await bench.connect(ctx, q, 0x7FFF)
        bench.write_wqes(q, [valid_wqe(rng) for _ in range(2)])
        [bad] = bench.write_wqes(q, [valid_wqe(rng, opcode=2 + rng.randrange(254))], send=False)
        [after] = bench.write_wqes(q, [valid_wqe(rng)], send=False)
        bench.doorbell(ctx, q)
        await bench.wait_until(ctx, lambda: model.sent == 10, "WRs")
        await bench.wait_until(ctx, lambda: status(ctx) == 1, "ERROR after the invalid WQE")
        await bench.idle(ctx, 200)
        assert ctx.get(dut.sq_consumer[q]) == model.producer - 1, "the QP is not fetched while one is parked"
        assert len(bench.observed) == bench.expected_total(), "the invalid WQE overtook WQEs in flight"
        await bench.ack(ctx, q, 2)
        bench.expect(q, bad, S.INVALID_WQE)
        bench.expect(q, after, S.FLUSHED)
        await settle(ctx, "invalid WQE")
        assert model.sent == 10

        # Lengths: 0 and 2^31 + 1 are invalid (nothing in flight: at once), 2^31 is valid.
        for length in (0, (1 << 31) + 1, 0xFFFFFFFF):
            await bench.connect(ctx, q, rng.getrandbits(16))
            [index] = await bench.post(ctx, q, [valid_wqe(rng, length=length)], send=False)
            bench.expect(q, index, S.INVALID_WQE)
            await settle(ctx, f"length {length}")
            assert status(ctx) == 1
        await bench.connect(ctx, q, 0xFFFF)
        await bench.post(ctx, q, [valid_wqe(rng, length=1 << 31), valid_wqe(rng, length=1)])
        await bench.wait_until(ctx, lambda: model.sent == 12, "WRs")
        await bench.ack(ctx, q, 2)  # msn 0xFFFF and 0: across the wrap
        await settle(ctx, "2^31")

        # A failed WQE read: LOCAL_DMA_ERROR, ERROR; the next one FLUSHED.
        [index, after] = bench.write_wqes(q, [valid_wqe(rng), valid_wqe(rng)], send=False, bad=(0,))
        bench.doorbell(ctx, q)
        bench.expect(q, index, S.LOCAL_DMA_ERROR)
        bench.expect(q, after, S.FLUSHED)
        await settle(ctx, "DMA error")
        assert status(ctx) == 1

        # NAK syndromes: 0x61 on the oldest, 0x63 on the last, 0x65 (other) -> REMOTE_OPERATION_ERROR.
        for syndrome, want, pick in (
            (AethSyndrome.NAK_INVALID_REQUEST, S.REMOTE_INVALID_REQUEST, 0),
            (AethSyndrome.NAK_REMOTE_OPERATION, S.REMOTE_OPERATION_ERROR, 2),
            (0x65, S.REMOTE_OPERATION_ERROR, 1),
        ):
            await bench.connect(ctx, q, rng.getrandbits(16))
            await bench.post(ctx, q, [valid_wqe(rng) for _ in range(3)])
            await bench.wait_until(ctx, lambda: not model.want_wr, "WRs")
            await bench.nak(ctx, q, model.inflight[pick][1], syndrome, want)
            await settle(ctx, f"NAK {syndrome:#x}")
            assert status(ctx) == 1

        # A NAK for a message already completed (behind the oldest in flight): all in flight FLUSHED.
        await bench.connect(ctx, q, 500)
        await bench.post(ctx, q, [valid_wqe(rng) for _ in range(3)])
        await bench.wait_until(ctx, lambda: not model.want_wr, "WRs")
        await bench.ack(ctx, q, 1)  # msn 500
        await bench.nak(ctx, q, 500, AethSyndrome.NAK_REMOTE_ACCESS, S.REMOTE_ACCESS_ERROR)
        await settle(ctx, "stale NAK")
        assert status(ctx) == 1

        # send_error with nothing in flight: ERROR, no CQE.
        await bench.connect(ctx, q, 9)
        assert status(ctx) == 0
        await bench.send_error(ctx, q)
        await bench.wait_until(ctx, lambda: status(ctx) == 1, "ERROR after send_error")

        # A failed CQE write: the CQE is lost, counted, the indices still advance.
        await bench.connect(ctx, q, 20)
        bench.mem.fail_writes.add(bench.mem.aw_count + 1)
        await bench.post(ctx, q, [valid_wqe(rng) for _ in range(3)])
        await bench.wait_until(ctx, lambda: not model.want_wr, "WRs")
        await bench.ack(ctx, q, 3)
        await settle(ctx, "lost CQE")
        assert len(bench.lost) == 1

        total = model.producer
        assert ctx.get(dut.sq_consumer[q]) == ctx.get(dut.sq_completed[q]) == total
        assert ctx.get(dut.cq_producer) == total
        counts = bench.counters(ctx)
        flushed = sum(1 for c in model.expect if c.status == S.FLUSHED)
        assert counts == {
            "wqes_fetched": total,
            "cqes_written": total - 1,
            "doorbell_overruns": 0,
            "invalid_wqes": 4,
            "flushed": flushed,
            "cq_full_stalls": counts["cq_full_stalls"],
            "dma_errors": 2,
        }
        assert flushed == 13 and model.sent == 27

    bench.run(scenario, "queue_engine_errors")
    bench.check_cqes(lost_owner=(q, SEND))


def test_addresses_beyond_the_reach_fail_without_an_access():
    """An engine built with ``addr_width`` = 20 (a board's on-chip host memory): a payload buffer that ends
    exactly at 2^20 is sent (its address in 20 bits); one at or past 2^20, or crossing it, completes
    LOCAL_DMA_ERROR without a work request; an SQ slot past 2^20 completes LOCAL_DMA_ERROR without a read;
    a CQE whose slot is past 2^20 is not written (lost, counted). No address is ever cut short: every read
    and write is one the test expects."""
    aw = 20
    reach = 1 << aw
    bench = Bench(new_seed(), qps=2, cq_log2=3, addr_width=aw)
    rng, dut = bench.rng, bench.dut
    bench.cq_base = reach - 7 * CQE_BYTES  # slot 7 of the ring lies past 2^20
    bench.unreachable = bench.lost = {pos for pos in range(64) if pos % 8 == 7}

    async def scenario(ctx):
        await bench.setup_cq(ctx)

        # QP 1: an SQ whose base has bits above 2^20: its WQE is not read. CQE position 0.
        await bench.setup_sq(ctx, 1, 2, base=(1 << 32) + 0x8000)
        await bench.connect(ctx, 1, 5)
        [index] = await bench.post(ctx, 1, [valid_wqe(rng)], send=False)
        bench.expect(1, index, S.LOCAL_DMA_ERROR)
        await bench.drain(ctx, "QP 1")
        assert ctx.get(dut.qp_status[1]) == 1 and not bench.mem.read_bursts

        # QP 0: payloads at the edge of the reach. CQE positions 1-7 (7 lies past 2^20: lost).
        await bench.setup_sq(ctx, 0, 3, base=0x4_0000)
        model = bench.qp[0]
        await bench.connect(ctx, 0, 1)
        await bench.post(ctx, 0, [valid_wqe(rng, local_addr=reach - 0x100, length=0x100)])
        await bench.wait_until(ctx, lambda: model.sent == 1, "the WQE ending at 2^20")
        await bench.ack(ctx, 0, 1)
        edges = (
            (reach, 1),
            (reach - 0x100, 0x101),
            (reach - 1, 2),
            (3 * reach, 8),
            (1 << 40, 16),
            ((1 << 64) - 16, 16),
        )
        for local_addr, length in edges:
            await bench.connect(ctx, 0, rng.getrandbits(16))
            [index] = await bench.post(
                ctx, 0, [valid_wqe(rng, local_addr=local_addr, length=length)], send=False
            )
            bench.expect(0, index, S.LOCAL_DMA_ERROR)
            await bench.wait_until(ctx, lambda: ctx.get(dut.qp_status[0]) == 1, f"ERROR ({local_addr:#x})")
        await bench.drain(ctx, "QP 0")
        assert model.sent == 1
        assert [addr for addr, _ in bench.mem.read_bursts] == [0x4_0000 + k * WQE_BYTES for k in range(7)]

        assert ctx.get(dut.cq_producer) == 8 and bench.mem.aw_count == 7
        assert bench.counters(ctx) == {
            "wqes_fetched": 8,
            "cqes_written": 7,
            "doorbell_overruns": 0,
            "invalid_wqes": 0,
            "flushed": 0,
            "cq_full_stalls": 0,
            "dma_errors": 6 + 1 + 1,
        }

    bench.run(scenario, "queue_engine_reach")
    bench.check_cqes(lost_owner=(0, SEND))


def test_not_connected_overrun_restart_and_reconnect():
    """A QP never connected: WQEs FLUSHED, nothing sent; the CQ off (size 0) holds them back. A doorbell
    one beyond the ring stops the SQ (counted once, nothing fetched); a full ring is not an overrun; SQ off
    clears the stop. A connect while WQEs are in flight flushes them (an ACK offered meanwhile is taken
    after them and completes nothing), the new connection's MSNs follow."""
    bench = Bench(new_seed(), qps=4, cq_log2=4)
    rng, dut = bench.rng, bench.dut

    async def scenario(ctx):
        # QP 0 not connected; the CQ still off (size 0): the first WQE's completion waits in the CQE
        # register, the second one parked, the third is not fetched; no stall is counted.
        await bench.setup_sq(ctx, 0, 2)
        for index in await bench.post(ctx, 0, [valid_wqe(rng) for _ in range(3)], send=False):
            bench.expect(0, index, S.FLUSHED)
        await bench.idle(ctx, 300)
        assert ctx.get(dut.sq_consumer[0]) == 2 and ctx.get(dut.cq_producer) == 0
        assert ctx.get(dut.stat_host_cq_full_stalls) == 0 and bench.mem.aw_count == 0
        await bench.setup_cq(ctx)
        await bench.drain(ctx, "not connected")
        assert ctx.get(dut.qp_status[0]) == 0 and bench.qp[0].sent == 0

        # QP 3: ring of 4; producer 5 ahead: overrun.
        q, model = 3, bench.qp[3]
        await bench.setup_sq(ctx, q, 2)
        await bench.connect(ctx, q, 40)
        start = ctx.get(dut.sq_consumer[q])
        bench.write_wqes(q, [valid_wqe(rng) for _ in range(5)], send=False)
        bench.doorbell(ctx, q)
        await bench.wait_until(ctx, lambda: ctx.get(dut.qp_status[q]) == 2, "SQ stopped")
        await bench.idle(ctx, 100)
        assert ctx.get(dut.stat_host_doorbell_overruns) == 1 and ctx.get(dut.sq_consumer[q]) == start
        # Off and on again (the driver's way): the stop clears; a full ring (4 ahead) is served.
        ctx.set(dut.sq_size_log2[q], 0)
        await ctx.tick()
        assert ctx.get(dut.qp_status[q]) == 0
        model.producer = start
        ctx.set(dut.sq_producer[q], start)
        ctx.set(dut.sq_size_log2[q], 2)
        await bench.post(ctx, q, [valid_wqe(rng) for _ in range(4)])
        await bench.wait_until(ctx, lambda: model.sent == 4, "WRs")
        await bench.ack(ctx, q, 2)
        await bench.drain(ctx, "after restart")
        assert ctx.get(dut.stat_host_doorbell_overruns) == 1 and ctx.get(dut.qp_status[q]) == 0

        # Reconnect with two in flight: they complete FLUSHED; an ACK meanwhile is ignored.
        for index, msn in model.inflight:
            bench.expect(q, index, S.FLUSHED, msn)
        model.inflight = []
        await bench.connect(ctx, q, 1000)
        # Taken once the stale WQEs are flushed: nothing of the new connection is in flight, it is ignored.
        await stream_put(ctx, dut.ack, {"qp": q, "msn": 1000, "nak": 0, "syndrome": ACK})
        await bench.drain(ctx, "stale flush")
        await bench.post(ctx, q, [valid_wqe(rng) for _ in range(3)])
        await bench.wait_until(ctx, lambda: model.sent == 7, "WRs")
        await bench.ack(ctx, q, 3)
        await bench.drain(ctx, "new connection")
        counts = bench.counters(ctx)
        assert counts["flushed"] == 5 and counts["wqes_fetched"] == 10 and counts["cqes_written"] == 10
        assert ctx.get(dut.sq_completed[q]) == 7 and ctx.get(dut.sq_completed[0]) == 3

    bench.run(scenario, "queue_engine_restart")
    bench.check_cqes()


@pytest.mark.parametrize("qps, data_width", [(4, 8), (3, 32)])
def test_multi_qp_round_robin_receives_and_posts(qps, data_width):
    """Three or four QPs: doorbells rung together are served round-robin; then random traffic on every
    QP (posts, cumulative ACKs over random prefixes, RECV_IMM completions, some with an error status,
    receives posted by raising rq_producer) with random stalls everywhere; every CQE in per-QP order, the
    post_receive records counted per QP, every index and counter at the end."""
    bench = Bench(new_seed(), qps=qps, data_width=data_width, cq_log2=3, wr_stall=0.0)
    rng, dut = bench.rng, bench.dut
    Q = qps

    async def scenario(ctx):
        await bench.setup_cq(ctx)
        for q in range(Q):
            await bench.setup_sq(ctx, q, rng.randint(2, 4))
            await bench.connect(ctx, q, rng.getrandbits(16))
        for q in range(Q):  # all four doorbells in the same cycle
            bench.write_wqes(q, [valid_wqe(rng) for _ in range(3)])
        for q in range(Q):
            bench.doorbell(ctx, q)
        await bench.wait_until(ctx, lambda: len(bench.wr_order) == 3 * Q, "WRs")
        first = bench.wr_order
        assert all(first[k + 1] == (first[k] + 1) % Q for k in range(len(first) - 1)), first
        bench.wr_stall = 0.3

        posts = [0] * Q
        for _ in range(250):
            q = rng.randrange(Q)
            model = bench.qp[q]
            action = rng.random()
            if action < 0.35:
                room = (1 << model.log2) - ((model.producer - ctx.get(dut.sq_completed[q])) & 0xFFFF)
                if room > 0:
                    await bench.post(ctx, q, [valid_wqe(rng) for _ in range(rng.randint(1, room))])
            elif action < 0.65:
                if model.inflight:
                    await bench.ack(ctx, q, rng.randint(1, len(model.inflight)))
            elif action < 0.85:
                await bench.receive(ctx, q, status=0 if rng.random() < 0.8 else rng.randint(1, 255))
            else:
                n = rng.randint(1, 5)
                posts[q] += n
                ctx.set(dut.rq_producer[q], posts[q] & 0xFFFF)
            await bench.idle(ctx, rng.randint(0, 8))
        for q in range(Q):  # answer everything left
            model = bench.qp[q]
            await bench.wait_until(ctx, lambda model=model: not model.want_wr, "WRs")
            if model.inflight:
                await bench.ack(ctx, q, len(model.inflight))
        await bench.drain(ctx)
        await bench.wait_until(ctx, lambda: [m.posts for m in bench.qp] == posts, "post_receive records")
        await bench.idle(ctx, 30)
        assert [m.posts for m in bench.qp] == posts
        total = 0
        for q, model in enumerate(bench.qp):
            assert ctx.get(dut.sq_consumer[q]) == ctx.get(dut.sq_completed[q]) == model.producer & 0xFFFF
            assert ctx.get(dut.rq_consumer[q]) == model.rq_index
            assert ctx.get(dut.qp_status[q]) == 0
            total += len(model.expect) + len(model.expect_recv)
        wqes = sum(m.producer for m in bench.qp)
        assert ctx.get(dut.cq_producer) == total
        counts = bench.counters(ctx)
        assert counts == {**dict.fromkeys(COUNTERS, 0), "wqes_fetched": wqes, "cqes_written": total,
                          "cq_full_stalls": counts["cq_full_stalls"]}  # fmt: skip

    bench.run(scenario, f"queue_engine_multi_qp_{qps}_{data_width}")
    bench.check_cqes()
    assert sum(1 for _, raw in bench.observed if raw[2] == RECV) >= 10
