"""Driver scenarios, written once and run against every backend (``test_driver.py``): each takes two
opened transports of NICs on one fabric and a random generator, and drives them only through
``mrcnic.driver`` (registers, rings in host memory, doorbells, completions)."""

from __future__ import annotations

import random

from mrcnic import driver
from mrcnic.driver import CqeKind, CqeStatus, EvProfile, PeerAddress, QpState
from mrcnic.driver.fabric_setup import connect_over_fabric

GUARD = 4096


class Pair:
    """Two opened NICs with one connected QP each (A sends to B)."""

    def __init__(self, a, b, qa, qb, hosts, uplinks):
        self.a, self.b, self.qa, self.qb = a, b, qa, qb
        self.hosts, self.uplinks = hosts, uplinks


async def open_pair(transports, hosts, *, uplinks: int, half: int, seed: int) -> Pair:
    """Open both NICs, give them addresses and routes to each other, and connect one QP on each."""
    a = await driver.open(transports[0], cq_depth=64)
    b = await driver.open(transports[1], cq_depth=64)
    qa, qb = await connect_over_fabric(a, b, tuple(hosts), uplinks=uplinks, hosts_per_t0=half, seed=seed)
    return Pair(a, b, qa, qb, hosts, uplinks)


async def write_and_write_imm(pair: Pair, rng: random.Random, size: int = 96 * 1024, messages: int = 6):
    """RDMA WRITEs, every third one with immediate data: byte-exact placement, untouched memory around it,
    one SEND completion per WQE in order with its wr_id, one RECV_IMM completion per WRITE_IMM with its
    immediate and length, counters."""
    a, b, qa, qb = pair.a, pair.b, pair.qa, pair.qb
    source = a.memory.allocate(size)
    region = b.memory.allocate(size + 2 * GUARD)
    data = rng.randbytes(size)
    before = rng.randbytes(size + 2 * GUARD)
    await a.t.mem_write(source, data)
    await b.t.mem_write(region, before)
    mr = await b.register_memory(region + GUARD, size)
    chunk = size // messages
    imms = {}
    for i in range(messages):
        length = chunk if i < messages - 1 else size - chunk * (messages - 1)
        offset = i * chunk
        if i % 3 == 2:
            await qb.post_recv(wr_id=f"recv{i}")
            imms[i] = rng.getrandbits(32)
            await qa.post_write_imm(source + offset, mr.address + offset, mr.rkey, length, imms[i], wr_id=i)
        else:
            await qa.post_write(source + offset, mr.address + offset, mr.rkey, length, wr_id=i)
    sent = await a.wait_completions(messages, timeout_ns=5e6)
    assert [c.wr_id for c in sent] == list(range(messages)), sent
    assert all(c.ok and c.kind == CqeKind.SEND and c.qp == qa.index for c in sent), sent
    received = await b.wait_completions(len(imms), timeout_ns=1e6)
    assert [(c.wr_id, c.imm, c.kind) for c in received] == [
        (f"recv{i}", imms[i], CqeKind.RECV_IMM) for i in sorted(imms)
    ], received
    assert [c.byte_len for c in received] == [
        chunk if i < messages - 1 else size - chunk * (messages - 1) for i in sorted(imms)
    ]
    assert await b.t.mem_read(mr.address, size) == data
    assert await b.t.mem_read(region, GUARD) == before[:GUARD]
    assert await b.t.mem_read(mr.address + size, GUARD) == before[GUARD + size :]
    assert await a.poll_cq() == [] and await b.poll_cq() == []
    counters = await b.counters()
    assert counters["rx_placed_bytes"] == size, counters
    assert (await a.counters())["host_cqes_written"] == messages
    state = await a.queue_state(qa.index)
    assert state["sq_consumer"] == state["sq_completed"] == messages and state["status"] == 0
    return sent, received


async def misuse(pair: Pair, rng: random.Random):
    """Every misuse is refused by the driver with a clear message, before anything reaches the NIC."""
    a, qa = pair.a, pair.qa
    fresh = await pair.b.create_qp(sq_depth=4)  # a QP never connected (B's second)
    cases = [
        (fresh.post_write(0x1000, 0, 1, 64), driver.WrongQpState, "posting needs a connected QP"),
        (qa.post_write(0x1000, 0, 1, 0), driver.InvalidParameter, "1 to 2^31 bytes"),
        (qa.post_write(0x1000, 0, 1, (1 << 31) + 1), driver.InvalidParameter, "1 to 2^31 bytes"),
        (qa.post_write_imm(0x1000, 0, 1, 8, 1 << 32), driver.InvalidParameter, "32-bit"),
        (qa.post_write(-1, 0, 1, 8), driver.InvalidParameter, "local_addr"),
        (qa.connect(PeerAddress(1, 2, 0), psn=0, peer_psn=0), driver.WrongQpState, "needs a QP in reset"),
        (fresh.connect(PeerAddress(1, 2, 99), psn=0, peer_psn=0), driver.InvalidParameter, "route template"),
        (fresh.connect(PeerAddress(1, 2, 0), psn=1 << 24, peer_psn=0), driver.InvalidParameter, "24-bit PSN"),
        (fresh.connect(PeerAddress(1, 2, 0), psn=0, peer_psn=0), driver.WrongQpState, "no EV profile"),
        (a.create_qp(sq_depth=3), driver.InvalidParameter, "power of two"),
        (a.create_qp(sq_depth=1 << 16), driver.InvalidParameter, "power of two"),
        (a.register_memory(0, 0), driver.InvalidParameter, "empty"),
        (fresh.set_ev_profile(EvProfile([0] * a.caps.ev_slots, [], 1)), driver.InvalidParameter, "plane"),
    ]
    for coroutine, error, text in cases:
        try:
            await coroutine
        except error as e:
            assert text in str(e), (text, str(e))
        else:
            raise AssertionError(f"no {error.__name__} ({text})")
    # The send queue holds its depth of WQEs; one more is refused until completions free a slot.
    source = a.memory.allocate(64)
    for i in range(qa.sq_depth):
        await qa.post_write(source, 0x1000, 0x5A00, 64, wr_id=i)  # a bad R_Key: they fail at the peer
    try:
        await qa.post_write(source, 0x1000, 0x5A00, 64)
    except driver.QueueFull as e:
        assert "send queue full" in str(e)
    else:
        raise AssertionError("no QueueFull")


async def peer_stops_answering(pair: Pair, rng: random.Random, retry_ns: float):
    """A peer that never answers (B has no such QP): the first WQE completes RETRY_EXCEEDED, the others
    FLUSHED, the QP is in error, and later posts are refused."""
    a, qa = pair.a, pair.qa
    source = a.memory.allocate(4096)
    for i in range(3):
        await qa.post_write(source, 0x2000, 0x5A01, 1024, wr_id=i)
    done = await a.wait_completions(3, timeout_ns=retry_ns)
    assert [(c.wr_id, c.status) for c in done] == [
        (0, CqeStatus.RETRY_EXCEEDED),
        (1, CqeStatus.FLUSHED),
        (2, CqeStatus.FLUSHED),
    ], done
    assert qa.state == QpState.ERROR
    assert (await a.queue_state(qa.index))["status"] & 1
    try:
        await qa.post_write(source, 0x2000, 0x5A01, 8)
    except driver.WrongQpState as e:
        assert "error" in str(e)
    else:
        raise AssertionError("posting on a QP in error was accepted")


async def protection_error(pair: Pair, rng: random.Random):
    """A WRITE to memory the peer did not register: it completes REMOTE_ACCESS_ERROR (the peer's NAK),
    the WRITE before it SUCCESS, the one after FLUSHED; nothing is written at the peer; the QP is in error."""
    a, b, qa = pair.a, pair.b, pair.qa
    source = a.memory.allocate(4096)
    await a.t.mem_write(source, rng.randbytes(4096))
    region = b.memory.allocate(8192)
    before = rng.randbytes(8192)
    await b.t.mem_write(region, before)
    mr = await b.register_memory(region, 4096)
    await qa.post_write(source, mr.address, mr.rkey, 1024, wr_id="ok")
    await qa.post_write(source, mr.address + 4096, mr.rkey, 1024, wr_id="outside")  # past the region's end
    await qa.post_write(source, mr.address, mr.rkey, 1024, wr_id="after")
    done = await a.wait_completions(3, timeout_ns=5e6)
    assert [(c.wr_id, c.status) for c in done] == [
        ("ok", CqeStatus.SUCCESS),
        ("outside", CqeStatus.REMOTE_ACCESS_ERROR),
        ("after", CqeStatus.FLUSHED),
    ], done
    assert qa.state == QpState.ERROR
    assert await b.t.mem_read(region + 4096, 4096) == before[4096:]
    assert (await b.counters())["rx_access_error"] >= 1


async def write_imm_without_receive(pair: Pair, rng: random.Random):
    """A WRITE-with-immediate when the peer has posted no receive: REMOTE_OPERATION_ERROR (§7.5 row 11),
    and the peer writes no receive completion."""
    a, b, qa = pair.a, pair.b, pair.qa
    source = a.memory.allocate(2048)
    mr = await b.register_memory(b.memory.allocate(2048), 2048)
    await qa.post_write_imm(source, mr.address, mr.rkey, 2048, 0x1234, wr_id="imm")
    done = await a.wait_completions(1, timeout_ns=5e6)
    assert [(c.wr_id, c.status) for c in done] == [("imm", CqeStatus.REMOTE_OPERATION_ERROR)], done
    await a.t.idle(20_000)
    assert await b.poll_cq() == []


async def ev_slots_read_back(pair: Pair, rng: random.Random):
    """The EV slots of each connected QP, read back through the registers (``ev_slot`` COMMAND = 2, as
    ``mrcnic paths`` does), are the EV profile it was connected with, all GOOD; read again while a WRITE
    is in flight (the reads share the EV table with the packets) they still are, unless the sender
    retired an EV meanwhile (then each slot holds its EV or a backup of its plane); the WRITE lands."""
    a, b, qa, qb = pair.a, pair.b, pair.qa, pair.qb
    for nic, qp in ((a, qa), (b, qb)):
        assert await nic.ev_slots(qp.index) == [(ev, "GOOD") for ev in qp.profile.slots], qp
    size = 64 * 1024
    source, region = a.memory.allocate(size), b.memory.allocate(size)
    data = rng.randbytes(size)
    await a.t.mem_write(source, data)
    mr = await b.register_memory(region, size)
    await qa.post_write(source, mr.address, mr.rkey, size, wr_id="w")
    during = await a.ev_slots(qa.index)
    assert (await a.queue_state(qa.index))["sq_completed"] == 0  # the WRITE was still in flight
    done = await a.wait_completions(1, timeout_ns=5e6)
    assert [(c.wr_id, c.ok) for c in done] == [("w", True)], done
    assert await b.t.mem_read(mr.address, size) == data
    profile, planes = qa.profile, a.caps.planes
    if (await a.counters())["path_retired"] == 0:
        assert during == [(ev, "GOOD") for ev in profile.slots], during
    else:
        for s, (ev, _) in enumerate(during):
            assert ev == profile.slots[s] or ev in profile.backups[s % planes], (s, hex(ev))


async def completion_queue_full(pair: Pair, rng: random.Random):
    """A receiver that stops polling for a while: its completion queue fills with RECV_IMM completions
    and the NIC holds the rest back (``host_cq_full_stalls``), writing exactly one ring's worth; once the
    host polls again (within the sender's retry budget), every completion arrives in order and nothing is
    lost, the sender gets a SUCCESS completion for every WRITE, and the data lands."""
    a, b, qa, qb = pair.a, pair.b, pair.qa, pair.qb
    depth = 1 << b.cq_log2
    n, size = depth + depth // 2, 256
    source, region = a.memory.allocate(n * size), b.memory.allocate(n * size)
    data = rng.randbytes(n * size)
    await a.t.mem_write(source, data)
    mr = await b.register_memory(region, n * size)
    for i in range(n):
        await qb.post_recv(wr_id=i)
    sent, posted = [], 0
    for _ in range(2000):
        while posted < n and qa.outstanding < qa.sq_depth:
            at = posted * size
            await qa.post_write_imm(source + at, mr.address + at, mr.rkey, size, posted, wr_id=posted)
            posted += 1
        sent += await a.poll_cq()
        if posted == n:
            break
        await a.t.idle(1000)
    assert posted == n, f"{posted} of {n} posted: the sender's completions stopped"
    await a.t.idle(20_000)
    assert (await b.counters())["host_cq_full_stalls"] > 0, "the receiver's completion queue never filled"
    assert (await b.queue_state(qb.index))["rq_consumer"] == depth  # exactly a ring's worth written
    received = await b.wait_completions(n, timeout_ns=5e6)
    sent += await a.wait_completions(n - len(sent), timeout_ns=5e6)
    assert [(c.wr_id, c.imm, c.byte_len, c.ok) for c in received] == [(i, i, size, True) for i in range(n)]
    bad = [(i, c.wr_id, c.status.name) for i, c in enumerate(sent) if (c.wr_id, c.ok) != (i, True)]
    assert len(sent) == n and not bad, (len(sent), bad[:8])
    assert await b.t.mem_read(mr.address, n * size) == data
    assert await b.poll_cq() == [] and (await b.counters())["host_cqes_written"] == n
