"""AXI4 arbiter (hdl/dma/axi_arbiter.py), Amaranth simulator.

* a Python AXI4 memory on ``s`` (64 KiB): checks every AR/AW against the AXI rules, ``ready`` stalls,
  answers each burst after a random latency, keeps one queue per ID and picks a random ready ID for
  every R beat and every B, so responses of different IDs interleave and overtake each other;
* random AXI4 managers on ``m[i]``: INCR bursts of 1..16 beats at random addresses, random IDs, data and
  strobes, random gaps and ``rready``/``bready`` stalls; each checks that it gets exactly its own
  responses, in order per ID, with its own ID values, and that read bytes are ones memory held while the
  read was in flight (writes go to pages of their own manager; reads go anywhere);
* a monitor on every port: each AR/AW leaves on ``s`` in grant order with the manager index above its
  ID, every W beat on ``s`` is exactly one manager's beat and a W burst never mixes managers, every
  R/B beat reaches exactly the manager its ID names;
* round-robin fairness with every manager saturating AR and AW; full rate for one manager alone;
  Verilog conversion.

Seeds are printed; ``AXI_ARBITER_SEED=<n>`` replays a run.
"""

from __future__ import annotations

import collections
import os
import random

import pytest
from amaranth.back import verilog
from amaranth.hdl import Fragment

from mrcnic.hdl.dma.axi import AxiBurst, AxiResp
from mrcnic.hdl.dma.axi_arbiter import AxiArbiter

from support.pysim import run

MEMORY_SIZE = 1 << 16
PAGE = 4096
PAGES = MEMORY_SIZE // PAGE


def make_rng(label: str) -> random.Random:
    """A generator for one test, from ``AXI_ARBITER_SEED`` or a fresh seed (printed either way)."""
    seed = os.environ.get("AXI_ARBITER_SEED")
    seed = int(seed) if seed else random.randrange(1 << 30)
    print(f"AXI_ARBITER_SEED={seed} ({label})")
    return random.Random(f"{seed}:{label}")


# -- reference: what each byte may hold at a given time ------------------------------------------------


class History:
    """Every write of every byte, with the cycle its AW was first offered and the cycle its B arrived.

    A read offered at cycle ``t0`` whose beat arrives at cycle ``t1`` may see, for each byte, the value
    of the newest write whose B came by ``t0`` (or the initial value) or of any later write offered
    before ``t1``: nothing else. Writes of one byte come from one manager, which the arbiter keeps in
    order, so they land in the order they are listed here.
    """

    def __init__(self, initial: bytes):
        self.initial = initial
        self.versions = {}  # addr -> [[issue cycle, B cycle or None, value], ...] in write order

    def add(self, addr: int, value: int, issue: int) -> list:
        entry = [issue, None, value]
        self.versions.setdefault(addr, []).append(entry)
        return entry

    def allowed(self, addr: int, t0: int, t1: int) -> list:
        values = [self.initial[addr]]
        versions = self.versions.get(addr, ())
        first = 0
        for k, (issue, done, value) in enumerate(versions, 1):
            if issue >= t1:
                break
            values.append(value)
            if done is not None and done <= t0:
                first = k
        return values[first:]


class ReadTxn:
    __slots__ = ("addr", "beat", "beats", "id", "issue")

    def __init__(self, addr, beats, id_):
        self.addr, self.beats, self.id = addr, beats, id_
        self.beat = 0
        self.issue = None


class WriteTxn:
    __slots__ = ("addr", "beats", "data", "entries", "id", "issue", "strb")

    def __init__(self, addr, beats, id_, data, strb):
        self.addr, self.beats, self.id, self.data, self.strb = addr, beats, id_, data, strb
        self.entries = []
        self.issue = None


def random_burst(rng, width: int, pages) -> tuple[int, int]:
    """An INCR burst of 1..16 full-width beats in one of ``pages`` (never across 4 KiB)."""
    beats = rng.randint(1, 16)
    words = PAGE // width
    start = rng.choice([rng.randrange(words - beats + 1), words - beats, 0])
    return rng.choice(pages) * PAGE + start * width, beats


def random_strobe(rng, width: int) -> int:
    kind = rng.random()
    if kind < 0.5:
        return (1 << width) - 1
    if kind < 0.9:
        return rng.randrange(1 << width)
    return 0


# -- the memory on `s` ---------------------------------------------------------------------------------


class Memory:
    """AXI4 subordinate with a byte array behind it.

    ``pause``: chance of holding a ready low or skipping a response cycle; ``latency``: (min, max) cycles
    from an accepted AR (or from a write burst's last W beat) to its response; ``w_waits_for_aw``: raise
    ``wready`` only while an accepted AW waits for beats (else W may arrive before its AW, as AXI allows).
    Reads take their data when the AR is accepted, after the writes completed at the same edge.
    """

    def __init__(self, s, width, rng, image, *, pause=0.3, latency=(0, 20), w_waits_for_aw=False):
        self.s, self.width, self.rng, self.image = s, width, rng, image
        self.pause, self.latency, self.w_waits_for_aw = pause, latency, w_waits_for_aw
        self.interleaved = 0  # R beats whose ID differs from the previous beat's while that burst was open
        self.overtaken = 0  # responses that left before an older response of another ID

    def check_burst(self, addr, length, size, burst):
        count = length + 1
        assert burst == AxiBurst.INCR.value and 1 << size == self.width, (burst, size)
        assert addr % self.width == 0, hex(addr)
        assert addr // PAGE == (addr + count * self.width - 1) // PAGE, f"{addr:#x}+{count} crosses 4K"
        assert addr + count * self.width <= MEMORY_SIZE, hex(addr)
        return count

    def pick(self, queues, cycle):
        """A random ID whose oldest response is due; counts it when an older response of another ID
        (by the arrival counter ``order`` of each queued response) still waits."""
        ids = [i for i, q in queues.items() if q and q[0][0] <= cycle]
        if not ids or self.rng.random() < self.pause:
            return None
        chosen = self.rng.choice(ids)
        if any(q and q[0][1] < queues[chosen][0][1] for q in queues.values()):
            self.overtaken += 1
        return chosen

    async def process(self, ctx):
        s, width, rng, image = self.s, self.width, self.rng, self.image
        self.reads = reads = collections.defaultdict(collections.deque)  # id -> [due, order, data, last]
        self.responses = responses = collections.defaultdict(collections.deque)  # id -> [due, order]
        self.aws = aws = collections.deque()  # (addr, beats, id) accepted, waiting for their W burst
        self.w_bursts = w_bursts = collections.deque()  # complete W bursts waiting for their AW
        w_beats = []  # beats of the W burst in progress
        r_current = b_current = None
        r_open = None  # ID of the R burst in progress (not yet at rlast)
        order = 0
        cycle = 0
        while True:
            ctx.set(s.arready, int(rng.random() >= self.pause))
            ctx.set(s.awready, int(rng.random() >= self.pause))
            w_ok = aws or not self.w_waits_for_aw
            ctx.set(s.wready, int(bool(w_ok) and rng.random() >= self.pause))
            if r_current is None:
                rid = self.pick(reads, cycle)
                if rid is not None:
                    _, _, data, last = reads[rid].popleft()
                    r_current = rid
                    if r_open is not None and r_open != rid:
                        self.interleaved += 1
                    r_open = None if last else rid
                    ctx.set(s.rid, rid)
                    ctx.set(s.rdata, data)
                    ctx.set(s.rlast, last)
                    ctx.set(s.rresp, AxiResp.OKAY)
                ctx.set(s.rvalid, int(r_current is not None))
            if b_current is None:
                bid = self.pick(responses, cycle)
                if bid is not None:
                    responses[bid].popleft()
                    b_current = bid
                    ctx.set(s.bid, bid)
                    ctx.set(s.bresp, AxiResp.OKAY)
                ctx.set(s.bvalid, int(b_current is not None))
            sampled = await ctx.tick().sample(
                s.arvalid, s.arready, s.araddr, s.arlen, s.arsize, s.arburst, s.arid,
                s.awvalid, s.awready, s.awaddr, s.awlen, s.awsize, s.awburst, s.awid,
                s.wvalid, s.wready, s.wdata, s.wstrb, s.wlast, s.rready, s.bready,
            )  # fmt: skip
            (_, _, arvalid, arready, araddr, arlen, arsize, arburst, arid,
             awvalid, awready, awaddr, awlen, awsize, awburst, awid,
             wvalid, wready, wdata, wstrb, wlast, rready, bready) = sampled  # fmt: skip
            cycle += 1
            if r_current is not None and rready:
                r_current = None
            if b_current is not None and bready:
                b_current = None
            # Writes first, so a read accepted at the same edge sees them.
            if awvalid and awready:
                aws.append((awaddr, self.check_burst(awaddr, awlen, awsize, awburst), awid))
            if wvalid and wready:
                w_beats.append((wdata, wstrb))
                if wlast:
                    w_bursts.append(w_beats)
                    w_beats = []
            while aws and w_bursts:
                addr, count, wid = aws.popleft()
                beats = w_bursts.popleft()
                assert len(beats) == count, f"W burst of {len(beats)} beats for AW {addr:#x}+{count}"
                for k, (data, strb) in enumerate(beats):
                    for lane in range(width):
                        if strb >> lane & 1:
                            image[addr + k * width + lane] = data >> 8 * lane & 0xFF
                responses[wid].append([cycle + rng.randint(*self.latency), order])
                order += 1
            if arvalid and arready:
                count = self.check_burst(araddr, arlen, arsize, arburst)
                due = cycle + rng.randint(*self.latency)
                for k in range(count):
                    word = araddr + k * width
                    data = int.from_bytes(image[word : word + width], "little")
                    reads[arid].append([due, order, data, int(k == count - 1)])
                order += 1


# -- the managers on `m[i]` ----------------------------------------------------------------------------


class Manager:
    """One AXI4 manager: issues ``reads`` and ``writes`` (AR and AW independently), offers a burst's W
    beats as soon as its AW is offered, and checks every response it gets."""

    def __init__(self, index, port, width, rng, history, reads, writes, *,
                 gap=0.3, stall=0.3, max_reads=4, max_writes=4):  # fmt: skip
        self.index, self.port, self.width, self.rng, self.history = index, port, width, rng, history
        self.reads = collections.deque(reads)
        self.writes = collections.deque(writes)
        self.read_count, self.write_count = len(reads), len(writes)
        self.gap, self.stall, self.max_reads, self.max_writes = gap, stall, max_reads, max_writes
        self.written = []  # WriteTxn in AW order
        self.reads_done = self.writes_done = 0
        self.fresh_bytes = 0  # read bytes that held written data, not the initial contents
        self.finished = False

    def check_read_beat(self, txn, data, last, cycle):
        width = self.width
        word = txn.addr + txn.beat * width
        assert last == (txn.beat == txn.beats - 1), f"m{self.index}: rlast {last} on beat {txn.beat}"
        for lane in range(width):
            value = data >> 8 * lane & 0xFF
            allowed = self.history.allowed(word + lane, txn.issue, cycle)
            assert value in allowed, (
                f"m{self.index} read id {txn.id} {txn.addr:#x}+{txn.beats}: byte {word + lane:#x} "
                f"is {value:#04x}, expected one of {[hex(v) for v in allowed]}"
            )
            self.fresh_bytes += value != self.history.initial[word + lane]
        txn.beat += 1
        return last

    async def process(self, ctx):
        port, rng, width = self.port, self.rng, self.width
        ar = aw = w = None
        w_queue = collections.deque()  # (data, strb, last) of bursts whose AW was offered
        reads_out = collections.defaultdict(collections.deque)  # id -> ReadTxn accepted, in order
        writes_out = collections.defaultdict(collections.deque)  # id -> WriteTxn accepted, in order
        reads_open = writes_open = 0  # accepted or offered, not yet answered
        size = width.bit_length() - 1
        for prefix in ("ar", "aw"):
            ctx.set(getattr(port, prefix + "size"), size)
            ctx.set(getattr(port, prefix + "burst"), AxiBurst.INCR)
        cycle = 0
        while self.reads or self.writes or ar or aw or w or w_queue or reads_open or writes_open:
            if ar is None and self.reads and reads_open < self.max_reads and rng.random() >= self.gap:
                ar = self.reads.popleft()
                ar.issue = cycle
                reads_open += 1
                ctx.set(port.araddr, ar.addr)
                ctx.set(port.arlen, ar.beats - 1)
                ctx.set(port.arid, ar.id)
            ctx.set(port.arvalid, int(ar is not None))
            if aw is None and self.writes and writes_open < self.max_writes and rng.random() >= self.gap:
                aw = self.writes.popleft()
                aw.issue = cycle
                writes_open += 1
                for k in range(aw.beats):
                    word = aw.addr + k * width
                    for lane in range(width):
                        if aw.strb[k] >> lane & 1:
                            aw.entries.append(
                                self.history.add(word + lane, aw.data[k] >> 8 * lane & 0xFF, cycle)
                            )
                    w_queue.append((aw.data[k], aw.strb[k], int(k == aw.beats - 1)))
                self.written.append(aw)
                ctx.set(port.awaddr, aw.addr)
                ctx.set(port.awlen, aw.beats - 1)
                ctx.set(port.awid, aw.id)
            ctx.set(port.awvalid, int(aw is not None))
            if w is None and w_queue and rng.random() >= self.stall:
                w = w_queue.popleft()
                ctx.set(port.wdata, w[0])
                ctx.set(port.wstrb, w[1])
                ctx.set(port.wlast, w[2])
            ctx.set(port.wvalid, int(w is not None))
            rready = int(rng.random() >= self.stall)
            bready = int(rng.random() >= self.stall)
            ctx.set(port.rready, rready)
            ctx.set(port.bready, bready)
            sampled = await ctx.tick().sample(
                port.arready, port.awready, port.wready,
                port.rvalid, port.rid, port.rdata, port.rresp, port.rlast,
                port.bvalid, port.bid, port.bresp,
            )  # fmt: skip
            _, _, arready, awready, wready, rvalid, rid, rdata, rresp, rlast, bvalid, bid, bresp = sampled
            cycle += 1
            if ar is not None and arready:
                reads_out[ar.id].append(ar)
                ar = None
            if aw is not None and awready:
                writes_out[aw.id].append(aw)
                aw = None
            if w is not None and wready:
                w = None
            if rvalid and rready:
                assert reads_out[rid], f"m{self.index}: R beat with ID {rid}, no read of that ID open"
                assert rresp == AxiResp.OKAY.value, rresp
                if self.check_read_beat(reads_out[rid][0], rdata, rlast, cycle):
                    reads_out[rid].popleft()
                    reads_open -= 1
                    self.reads_done += 1
            if bvalid and bready:
                assert writes_out[bid], f"m{self.index}: B with ID {bid}, no write of that ID open"
                assert bresp == AxiResp.OKAY.value, bresp
                txn = writes_out[bid].popleft()
                for entry in txn.entries:
                    entry[1] = cycle
                writes_open -= 1
                self.writes_done += 1
        ctx.set(port.arvalid, 0)
        ctx.set(port.awvalid, 0)
        ctx.set(port.wvalid, 0)
        self.finished = True


# -- the monitor on every port ------------------------------------------------------------------------


class Monitor:
    """Watches all ports at every edge and checks that the arbiter only moves things, never alters them.

    Records the manager index of every AR and AW grant (``ar_grants``, ``aw_grants``) and the cycle of
    every handshake on ``s`` (``s_cycles[channel]``).
    """

    def __init__(self, dut):
        self.dut = dut
        self.ar_grants, self.aw_grants = [], []
        self.s_cycles = collections.defaultdict(list)
        self.w_bursts = 0

    async def process(self, ctx):
        dut, id_width = self.dut, self.dut.id_width
        ports = [*dut.m, dut.s]
        names = (
            "arvalid arready araddr arlen arsize arburst arid awvalid awready awaddr awlen awsize awburst "
            "awid wvalid wready wdata wstrb wlast rvalid rready rdata rresp rlast rid bvalid bready bresp bid"
        ).split()
        signals = [getattr(port, name) for port in ports for name in names]
        ar_pending = collections.deque()  # what s AR must carry next, in grant order
        aw_pending = collections.deque()
        w_order = collections.deque()  # (manager, beats) of granted writes, in grant order
        w_owner = None  # (manager, beats) of the W burst in progress on s
        w_beat = 0
        cycle = 0
        async for sampled in ctx.tick().sample(*signals):
            cycle += 1
            values = sampled[2:]
            v = [dict(zip(names, values[k * len(names) : (k + 1) * len(names)], strict=True))
                 for k in range(len(ports))]  # fmt: skip
            *m, s = v

            def fire(p, channel):
                return p[channel + "valid"] and p[channel + "ready"]

            # AR and AW: s carries the grants in order, each with the manager index above its ID.
            for ch, pending, grants in (
                ("ar", ar_pending, self.ar_grants),
                ("aw", aw_pending, self.aw_grants),
            ):
                keys = [ch + f for f in ("addr", "len", "size", "burst", "id")]
                if fire(s, ch):
                    assert pending, f"{ch} on s without a grant"
                    assert tuple(s[k] for k in keys) == pending.popleft(), f"{ch} altered"
                    self.s_cycles[ch].append(cycle)
                fired = [i for i, p in enumerate(m) if fire(p, ch)]
                assert len(fired) <= 1, f"{ch} granted to {fired} at once"
                for i in fired:
                    p = m[i]
                    pending.append((*(p[k] for k in keys[:-1]), p[ch + "id"] | i << id_width))
                    grants.append(i)
                    if ch == "aw":
                        w_order.append((i, p["awlen"] + 1))
            # W: a beat on s is exactly one manager's beat; a burst never mixes managers.
            fired = [i for i, p in enumerate(m) if fire(p, "w")]
            assert len(fired) == fire(s, "w"), f"W beat on s {fire(s, 'w')}, on managers {fired}"
            if fired:
                (i,) = fired
                if w_owner is None:
                    assert w_order, f"W beat of m{i} before any AW grant"
                    w_owner = w_order.popleft()
                    w_beat = 0
                assert i == w_owner[0], f"W beat of m{i} inside a burst of m{w_owner[0]}"
                for k in ("wdata", "wstrb", "wlast"):
                    assert m[i][k] == s[k], f"{k} altered"
                w_beat += 1
                assert s["wlast"] == (w_beat == w_owner[1]), f"wlast on beat {w_beat} of {w_owner[1]}"
                if s["wlast"]:
                    w_owner = None
                    self.w_bursts += 1
                self.s_cycles["w"].append(cycle)
            # R and B: valid reaches exactly the manager the ID names, with everything else unchanged.
            for ch, fields in (("r", ("data", "resp", "last")), ("b", ("resp",))):
                target = s[ch + "id"] >> id_width
                for i, p in enumerate(m):
                    assert p[ch + "valid"] == (s[ch + "valid"] and target == i), f"{ch}valid of m{i}"
                    if i == target and s[ch + "valid"]:
                        assert p[ch + "ready"] == s[ch + "ready"], f"{ch}ready of m{i}"
                        assert p[ch + "id"] == s[ch + "id"] & ((1 << id_width) - 1), f"{ch}id of m{i}"
                        for f in fields:
                            assert p[ch + f] == s[ch + f], f"{ch}{f} of m{i}"
                if fire(s, ch):
                    self.s_cycles[ch].append(cycle)


# -- test driver ---------------------------------------------------------------------------------------


def simulate(dut, rng, *, reads, writes, memory_args=(), manager_args=(), max_cycles=200_000):
    """Run managers with the given transactions (lists per manager) against the memory until all are
    answered; check the final memory image and that nothing is left over; return
    ``(managers, memory, monitor)``."""
    width = dut.s.signature.data_width_bytes
    initial = bytes(rng.randbytes(MEMORY_SIZE))
    image = bytearray(initial)
    history = History(initial)
    memory = Memory(dut.s, width, rng, image, **dict(memory_args))
    monitor = Monitor(dut)
    managers = [
        Manager(i, dut.m[i], width, random.Random(rng.random()), history, reads[i], writes[i],
                **dict(manager_args))
        for i in range(dut.managers)
    ]  # fmt: skip

    async def watchdog(ctx):  # a stuck arbiter fails the test instead of hanging it
        for _ in range(max_cycles):
            if all(mgr.finished for mgr in managers):
                return
            await ctx.tick()
        stuck = [
            f"m{mgr.index}: {mgr.reads_done}/{mgr.read_count} reads, "
            f"{mgr.writes_done}/{mgr.write_count} writes"
            for mgr in managers
            if not mgr.finished
        ]
        raise AssertionError(f"stuck after {max_cycles} cycles: {stuck}")

    run(
        dut,
        watchdog,
        processes=[memory.process, monitor.process, *(mgr.process for mgr in managers)],
        name="axi_arbiter",
    )
    # Every write landed with its strobes, nothing else changed.
    expected = bytearray(initial)
    for mgr in managers:
        for txn in mgr.written:
            for k in range(txn.beats):
                for lane in range(width):
                    if txn.strb[k] >> lane & 1:
                        expected[txn.addr + k * width + lane] = txn.data[k] >> 8 * lane & 0xFF
    if image != expected:
        addr = next(a for a in range(MEMORY_SIZE) if image[a] != expected[a])
        raise AssertionError(
            f"memory differs at {addr:#x}: {image[addr]:#04x}, expected {expected[addr]:#04x}"
        )
    leftover = [
        q for q in (*memory.reads.values(), *memory.responses.values(), memory.aws, memory.w_bursts) if q
    ]
    assert not leftover, f"memory still holds {leftover}"
    assert monitor.w_bursts == sum(len(w) for w in writes)
    assert len(monitor.ar_grants) == sum(len(r) for r in reads)
    return managers, memory, monitor


def random_transactions(rng, managers, width, id_width, count):
    """``count`` reads (anywhere) and writes (in the manager's own pages) per manager."""
    reads, writes = [], []
    for i in range(managers):
        own_pages = [p for p in range(PAGES) if p % managers == i]
        reads.append([ReadTxn(*random_burst(rng, width, range(PAGES)), rng.randrange(1 << id_width))
                      for _ in range(count)])  # fmt: skip
        ws = []
        for _ in range(count):
            addr, beats = random_burst(rng, width, own_pages)
            data = [rng.randrange(1 << 8 * width) for _ in range(beats)]
            strb = [random_strobe(rng, width) for _ in range(beats)]
            ws.append(WriteTxn(addr, beats, rng.randrange(1 << id_width), data, strb))
        writes.append(ws)
    return reads, writes


# -- tests ---------------------------------------------------------------------------------------------


def test_parameters():
    for managers, id_width, s_id_width in ((2, 1, 2), (3, 2, 4), (4, 1, 3), (5, 1, 4), (2, 31, 32)):
        dut = AxiArbiter(managers=managers, addr_width=32, data_width_bytes=8, id_width=id_width)
        Fragment.get(dut, None)  # elaborates (and so uses) it
        assert dut.s.signature.id_width == s_id_width  # id_width + ceil(log2(managers))
        assert dut.m[managers - 1].signature.id_width == id_width
        assert len(dut.m) == managers
    for bad in ({"managers": 1}, {"managers": 2, "max_write_bursts": 0}, {"managers": 2, "id_width": 32},
                {"managers": 2, "data_width_bytes": 3}):  # fmt: skip
        with pytest.raises(ValueError):
            AxiArbiter(**{"data_width_bytes": 8, **bad})


@pytest.mark.parametrize("managers", [2, 3])
def test_verilog_conversion(managers):
    dut = AxiArbiter(managers=managers, addr_width=32, data_width_bytes=8, id_width=2)
    text = verilog.convert(dut, name="axi_arbiter", emit_src=False)
    for i in range(managers):
        for port in ("araddr", "rdata", "wstrb", "bready"):
            assert f" m__{i}__{port};" in text, (i, port)
    assert f"output [{2 + (managers - 1).bit_length() - 1}:0] s__arid;" in text
    assert f" m__{managers}__araddr;" not in text


CONFIGS = {
    # managers, data width, manager ID width, W order FIFO depth, memory waits for AW before wready
    "3x8B": (3, 8, 2, 8, False),
    "4x4B_strict_shallow": (4, 4, 1, 2, True),
}


@pytest.mark.parametrize("config", CONFIGS)
def test_random_traffic(config):
    """Random reads and writes from every manager at once; everything checked (see the module doc)."""
    managers, width, id_width, depth, strict = CONFIGS[config]
    rng = make_rng(f"random_traffic_{config}")
    dut = AxiArbiter(managers=managers, addr_width=32, data_width_bytes=width, id_width=id_width,
                     max_write_bursts=depth)  # fmt: skip
    reads, writes = random_transactions(rng, managers, width, id_width, 100)
    ms, memory, monitor = simulate(
        dut, rng, reads=reads, writes=writes, memory_args={"w_waits_for_aw": strict, "pause": 0.25}
    )
    # The memory did reorder and interleave, the managers were really concurrent, and reads did see
    # written data (so the byte check is not only against the initial contents).
    fresh = sum(mgr.fresh_bytes for mgr in ms)
    print(f"overtaken responses {memory.overtaken}, interleaved R beats {memory.interleaved}, fresh {fresh}")
    assert memory.overtaken > 200 and memory.interleaved > 200, (memory.overtaken, memory.interleaved)
    assert fresh > 1000, fresh
    assert len(set(monitor.ar_grants[:40])) == managers


def test_round_robin_fairness():
    """Every manager keeps ``arvalid`` and ``awvalid`` high all the time: grants rotate strictly, so over
    any window the grant counts of two managers differ by at most 1."""
    managers, width, id_width = 4, 4, 1
    rng = make_rng("fairness")
    dut = AxiArbiter(managers=managers, addr_width=32, data_width_bytes=width, id_width=id_width)
    count = 60
    reads, writes = [[] for _ in range(managers)], [[] for _ in range(managers)]
    for i in range(managers):
        for _ in range(count):
            # Short bursts (1 read beat, 1..2 write beats), so the grants, not the data, set the pace.
            reads[i].append(ReadTxn(rng.randrange(MEMORY_SIZE // width) * width, 1, rng.randrange(2)))
            addr = i * PAGE + rng.randrange(PAGE // width - 1) * width  # manager i writes page i
            data = [rng.randrange(1 << 8 * width) for _ in range(2)]
            writes[i].append(WriteTxn(addr, rng.randint(1, 2), rng.randrange(2), data, [0xF] * 2))
    _, _, monitor = simulate(
        dut, rng, reads=reads, writes=writes,
        memory_args={"pause": 0.3, "latency": (0, 10)},
        manager_args={"gap": 0, "stall": 0, "max_reads": 1000, "max_writes": 1000},
    )  # fmt: skip
    for name, grants in (("AR", monitor.ar_grants), ("AW", monitor.aw_grants)):
        assert len(grants) == managers * count
        for length in range(1, 3 * managers + 1):
            for start in range(len(grants) - length + 1):
                counts = collections.Counter(grants[start : start + length])
                spread = max(counts[i] for i in range(managers)) - min(counts[i] for i in range(managers))
                assert spread <= 1, f"{name} grants {grants[start : start + length]} at {start}"


@pytest.mark.parametrize("kind", ["short", "long"])
def test_full_rate_single_manager(kind):
    """One manager of three active, memory never stalls: one AR per cycle, R and W one beat per cycle
    across bursts (1 or 16 beats), and one AW per cycle for single-beat bursts."""
    managers, width, id_width = 3, 8, 2
    rng = make_rng(f"full_rate_{kind}")
    dut = AxiArbiter(managers=managers, addr_width=32, data_width_bytes=width, id_width=id_width)
    beats, count = (1, 48) if kind == "short" else (16, 12)
    active = rng.randrange(managers)
    reads = [[] for _ in range(managers)]
    writes = [[] for _ in range(managers)]

    def address():
        return rng.randrange(PAGES) * PAGE + rng.randrange(PAGE // width - beats + 1) * width

    for _ in range(count):
        reads[active].append(ReadTxn(address(), beats, rng.randrange(4)))
        data = [rng.randrange(1 << 64) for _ in range(beats)]
        writes[active].append(WriteTxn(address(), beats, rng.randrange(4), data, [0xFF] * beats))
    _, _, monitor = simulate(
        dut, rng, reads=reads, writes=writes,
        memory_args={"pause": 0, "latency": (4, 4)},
        manager_args={"gap": 0, "stall": 0, "max_reads": 1000, "max_writes": 1000},
    )  # fmt: skip
    # Long write bursts fill the W order FIFO, so AW waits for W there; AW runs at full rate for short ones.
    for ch in ("ar", "aw", "r", "w") if kind == "short" else ("ar", "r", "w"):
        cycles = monitor.s_cycles[ch]
        assert len(cycles) == count * (beats if ch in "rw" else 1), ch
        assert cycles[-1] - cycles[0] == len(cycles) - 1, f"{ch}: bubbles in {cycles}"
