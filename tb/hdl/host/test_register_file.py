"""Register file (Amaranth simulator): the linked list read back over AXI4-Lite, read/write registers
driving the core's inputs (byte strobes, registers wider than a word), read-only registers and counters,
table blocks pushing their staged record (writes wait while it is pending), DECERR beyond the map.
Random delays between the AXI channels; seeds printed (``REGISTER_FILE_SEED=<seed>`` reruns one)."""

import os
import random

from amaranth import ClockDomain, Module
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from mrcnic.hdl.host.nic_top import board_counter_shapes
from mrcnic.hdl.host.register_file import RegisterFile
from mrcnic.hdl.nic import core_signature
from mrcnic.hdl.tx.path_selector import EvState
from mrcnic.regmap import MAGIC, BlockType, Capabilities, nic_register_map

from support.pysim import run

# Without the queue blocks: the register file is built around the core alone until the queue engine lands.
CAPS = Capabilities(planes=2, qps=2, ev_slots=8, backups=1, mrs=4, destinations=2, host_queues=False)
OKAY, DECERR = 0, 3


def new_seed() -> int:
    seed = int(os.environ.get("REGISTER_FILE_SEED", random.randrange(1 << 30)))
    print(f"seed {seed}")
    return seed


def make():
    params = {k: getattr(CAPS, k) for k in ("planes", "qps", "ev_slots", "backups", "mrs", "destinations")}
    regmap = nic_register_map(CAPS)
    # the register file sees the core's ports and the counter inputs of MrcNicTop (MACs, host link)
    ports = {**core_signature(**params).members}
    ports.update({name: Out(shape) for name, shape in board_counter_shapes(CAPS.planes).items()})
    return regmap, RegisterFile(regmap, wiring.Signature(ports))


class Manager:
    """AXI4-Lite manager: address first, data after a random delay, response taken after another."""

    def __init__(self, ctx, bus, rng):
        self.ctx, self.bus, self.rng = ctx, bus, rng

    async def idle(self, most=3):
        for _ in range(self.rng.randrange(most)):
            await self.ctx.tick()

    async def write(self, address, value, strobe=0xF):
        ctx, bus = self.ctx, self.bus
        ctx.set(bus.awaddr, address)
        ctx.set(bus.awvalid, 1)
        await self.idle()
        ctx.set(bus.wdata, value)
        ctx.set(bus.wstrb, strobe)
        ctx.set(bus.wvalid, 1)
        await ctx.tick().until(bus.awready)
        ctx.set(bus.awvalid, 0)
        ctx.set(bus.wvalid, 0)
        await self.idle()
        ctx.set(bus.bready, 1)
        (resp,) = await ctx.tick().sample(bus.bresp).until(bus.bvalid)
        ctx.set(bus.bready, 0)
        return resp

    async def read(self, address, want_resp=OKAY):
        ctx, bus = self.ctx, self.bus
        ctx.set(bus.araddr, address)
        ctx.set(bus.arvalid, 1)
        await ctx.tick().until(bus.arready)
        ctx.set(bus.arvalid, 0)
        await self.idle()
        ctx.set(bus.rready, 1)
        data, resp = await ctx.tick().sample(bus.rdata, bus.rresp).until(bus.rvalid)
        ctx.set(bus.rready, 0)
        assert resp == want_resp, (hex(address), resp)
        return data

    async def read_wide(self, address, words):
        value = 0
        for i in range(words):
            value |= (await self.read(address + 4 * i)) << (32 * i)
        return value

    async def write_wide(self, address, value, words):
        for i in range(words):
            assert await self.write(address + 4 * i, (value >> (32 * i)) & 0xFFFFFFFF) == OKAY


def test_walk_registers_and_counters():
    rng = random.Random(new_seed())
    regmap, dut = make()

    async def bench(ctx):
        bus = Manager(ctx, dut.bus, rng)
        # The linked list, as a driver walks it.
        address, names = 0, []
        while True:
            block = next(b for b in regmap.blocks if b.base == address)
            header = [await bus.read(address + 4 * i) for i in range(4)]
            assert header == regmap.header(block)
            names.append(block.name)
            if header[2] == 0:
                break
            address = header[2]
        assert names == [b.name for b in regmap.blocks]
        ident = regmap["nic_id"]
        assert await bus.read(ident.address("MAGIC")) == MAGIC
        assert await bus.read(ident.address("PLANES")) == CAPS.planes
        # Read/write registers drive the core's inputs; defaults are the map's resets.
        rel = regmap["reliability"]
        assert ctx.get(dut.rto_cycles) == rel.register("RTO_CYCLES").reset
        assert await bus.read(rel.address("RTO_CYCLES")) == rel.register("RTO_CYCLES").reset
        await bus.write(rel.address("RTO_CYCLES"), 0xDEADBEEF)
        assert ctx.get(dut.rto_cycles) == 0xDEADBEEF
        await bus.write(rel.address("RTO_CYCLES"), 0x00110000, strobe=0b0100)  # one byte lane
        assert await bus.read(rel.address("RTO_CYCLES")) == 0xDE11BEEF
        # A narrow register keeps its width; a 128-bit one takes four words.
        await bus.write(rel.address("RETRY_BUDGET"), 0xFFFFFFFF)
        assert await bus.read(rel.address("RETRY_BUDGET")) == 7 and ctx.get(dut.retry_budget) == 7
        gid = rng.getrandbits(128)
        tr = regmap["transport"]
        await bus.write_wide(tr.address("OWN_GID"), gid, 4)
        assert ctx.get(dut.config.own_gid) == gid and await bus.read_wide(tr.address("OWN_GID"), 4) == gid
        port1 = regmap["port1"]
        mac = rng.getrandbits(48)
        await bus.write_wide(port1.address("MAC"), mac, 2)
        assert ctx.get(dut.config.port_mac[1]) == mac and ctx.get(dut.config.port_mac[0]) == 0
        await bus.write(port1.address("LINK_UP"), 0)
        assert ctx.get(dut.plane_up) == 0b01
        # Read-only: counters come from the core; writes change nothing. (Event counters step and are
        # read through the counter bank: test_counters_follow_the_core below.) A byte counter is read
        # directly: it may jump.
        counters = regmap["counters"]
        ctx.set(dut.stat_rx_placed_bytes, 12345)
        assert await bus.read(counters.address("RX_PLACED_BYTES")) == 12345
        assert await bus.write(counters.address("RX_PLACED_BYTES"), 0) == OKAY
        assert await bus.read(counters.address("RX_PLACED_BYTES")) == 12345
        ctx.set(dut.stat_port_tx_bytes[1], 0xCAFE)
        assert await bus.read(port1.address("TX_BYTES")) == 0xCAFE
        assert await bus.read(regmap["port0"].address("TX_BYTES")) == 0
        assert await bus.write(ident.address("PLANES"), 9) == OKAY
        assert await bus.read(ident.address("PLANES")) == CAPS.planes
        # A hole inside the map reads 0; beyond the map: DECERR.
        port0 = regmap["port0"]
        assert port0.base + port0.size < regmap["port1"].base  # the port block ends before the next one
        assert await bus.read(port0.base + port0.size) == 0
        assert await bus.read(ident.address("ADDR_WIDTH")) == CAPS.addr_width
        assert await bus.read(regmap.size, want_resp=DECERR) == 0
        assert await bus.write(regmap.size + 4, 1) == DECERR

    run(dut, bench, name="register_file_walk")


def test_counters_follow_the_core():
    """Event counters read through the counter bank: every counter steps by random amounts up to its
    ``max_step`` (past the bank's narrow samples' range); a read taken meanwhile returns a value the
    counter had while the read was in progress (the bank is exact, not a snapshot of an earlier scan),
    and once the counters stop every register reads its counter, also after a reset that clears them.
    Counter reads are taken at least four cycles apart, whatever the manager does: the bank's samples
    are sized for that (``read_interval``)."""
    rng = random.Random(new_seed())
    regmap, dut = make()
    top = Module()
    top.domains.sync = cd = ClockDomain()
    top.submodules.dut = dut
    counted = [(block, r) for block in regmap.blocks for r in block.registers if r.max_step]
    assert len(counted) > 70
    ports = {r.name + block.name: _port(dut, r.binding) for block, r in counted}
    history: list[dict] = []  # the counters' values, cycle by cycle
    running = [True]
    counter_addresses = {block.address(r.name) for block, r in counted}
    counter_reads: list[int] = []  # cycles in which a counter read was taken

    async def watch_reads(ctx):
        cycle = 0
        while running[0]:
            _, _, valid, ready, address = await ctx.tick().sample(
                dut.bus.arvalid, dut.bus.arready, dut.bus.araddr
            )
            if valid and ready and address in counter_addresses:
                counter_reads.append(cycle)
            cycle += 1

    async def counters(ctx):
        values = {key: 0 for key in ports}
        while running[0]:
            for (_block, r), key in zip(counted, ports, strict=True):
                if rng.random() < 0.6:
                    values[key] = (values[key] + rng.randint(1, r.max_step)) & 0xFFFFFFFF
                ctx.set(ports[key], values[key])
            history.append(dict(values))
            await ctx.tick()

    async def bench(ctx):
        bus = Manager(ctx, dut.bus, rng)
        await ctx.tick().repeat(600)  # the reset scrub and the bank's first scan
        for _ in range(80):
            block, r = rng.choice(counted)
            key = r.name + block.name
            before = len(history)
            value = await bus.read(block.address(r.name))
            during = {h[key] for h in history[before - 1 :]}
            assert value in during, (r.name, value, sorted(during))
        # Counter reads as fast as the file takes them: address and data channels always ready.
        block, r = counted[0]
        ctx.set(dut.bus.araddr, block.address(r.name))
        ctx.set(dut.bus.arvalid, 1)
        ctx.set(dut.bus.rready, 1)
        await ctx.tick().repeat(60)
        ctx.set(dut.bus.arvalid, 0)
        await ctx.tick().repeat(4)
        ctx.set(dut.bus.rready, 0)
        spacing = [b - a for a, b in zip(counter_reads, counter_reads[1:], strict=False)]
        assert min(spacing) == 4, sorted(set(spacing))
        await ctx.tick().repeat(1000)
        running[0] = False
        await ctx.tick()
        final = history[-1]
        # every counter went past its narrow sample's range (9 bits here) at least once
        assert min(final.values()) >= 1 << dut.counter_sample_width
        for block, r in counted:
            assert await bus.read(block.address(r.name)) == final[r.name + block.name], r.name
        # A reset clears the core's counters and the bank's totals follow (block RAM keeps its data).
        for port in ports.values():
            ctx.set(port, 0)
        ctx.set(cd.rst, 1)
        await ctx.tick()
        ctx.set(cd.rst, 0)
        await ctx.tick().repeat(600)
        for block, r in rng.sample(counted, 10):
            assert await bus.read(block.address(r.name)) == 0, r.name

    run(top, bench, counters, processes=[watch_reads], name="register_file_counters")


def _port(dut, binding):
    value = dut
    for part in binding.split("."):
        name, _, index = part.partition("[")
        value = getattr(value, name)
        if index:
            value = value[int(index[:-1])]
    return value


def test_table_push_and_backpressure():
    rng = random.Random(new_seed())
    regmap, dut = make()
    records = []

    async def bench(ctx):
        bus = Manager(ctx, dut.bus, rng)
        mr = regmap["mr"]
        assert mr.kind == BlockType.TABLE and mr.table == "mr_configure"
        for n in range(6):
            fields = {
                "INDEX": rng.randrange(CAPS.mrs),
                "VALID": 1,
                "RKEY": rng.getrandbits(32),
                "PD": rng.getrandbits(8),
                "REMOTE_WRITE": rng.getrandbits(1),
                "BASE": rng.getrandbits(64),
                "LENGTH": rng.getrandbits(64),
            }
            for name, value in fields.items():
                await bus.write_wide(mr.address(name), value, mr.register(name).words)
            status = await bus.read(mr.address("STATUS"))
            assert status == n << 16  # nothing pending, n taken
            await bus.write(mr.address("COMMAND"), 1)
            # The next writes into the block wait until the core has taken the record.
            assert await bus.write(mr.address("PD"), 0) == OKAY
            assert len(records) == n + 1
            got = records[-1]
            assert (got.index, got.entry.valid, got.entry.rkey, got.entry.pd) == (
                fields["INDEX"],
                1,
                fields["RKEY"],
                fields["PD"],
            )
            assert (got.entry.remote_write, got.entry.base, got.entry.length) == (
                fields["REMOTE_WRITE"],
                fields["BASE"],
                fields["LENGTH"],
            )
        assert await bus.read(mr.address("STATUS")) == 6 << 16
        # A COMMAND write with bit 0 clear pushes nothing.
        await bus.write(mr.address("COMMAND"), 2)
        await ctx.tick().repeat(20)
        assert len(records) == 6

    async def core(ctx):
        """Takes records slowly: ready only after a random wait once a record is offered."""
        stream = dut.mr_configure
        wait = rng.randrange(40)
        samples = ctx.tick().sample(stream.valid, stream.ready, stream.payload)
        async for _, _, valid, ready, payload in samples:
            if valid and ready:
                records.append(payload)
                wait = rng.randrange(40)
            elif valid:
                wait = max(0, wait - 1)
            ctx.set(stream.ready, valid and not ready and wait == 0)

    run(dut, bench, processes=[core], name="register_file_table")


def test_table_read_back():
    """A table with ``read_back`` (``ev_slot``): STATUS[1] = 1 (and 0 elsewhere); COMMAND = 2 sends the
    staged key fields (QP, SLOT) on the request stream once and pushes no record; STATUS[0] stays 1 until
    the answer lands in EV and STATE; meanwhile reads of those fields and writes to the block wait, and
    STATUS can be polled. A read-back then a push writes the loaded values back; other COMMAND values do
    nothing."""
    rng = random.Random(new_seed())
    regmap, dut = make()
    ev_slot = regmap["ev_slot"]
    assert ev_slot.read_back == ("ev_read", "ev_read_answer")
    table = {(q, s): (rng.getrandbits(32), rng.choice([0, 2, 3])) for q in range(CAPS.qps) for s in range(8)}
    requests, records = [], []

    async def bench(ctx):
        bus = Manager(ctx, dut.bus, rng)
        assert await bus.read(ev_slot.address("STATUS")) == 0b10
        assert await bus.read(regmap["mr"].address("STATUS")) == 0
        for n, (q, s) in enumerate(rng.sample(sorted(table), 10)):
            await bus.write(ev_slot.address("QP"), q)
            await bus.write(ev_slot.address("SLOT"), s)
            await bus.write(ev_slot.address("COMMAND"), 2)
            if n % 2:  # poll STATUS[0], then read
                polls = 0
                while (status := await bus.read(ev_slot.address("STATUS"))) & 1:
                    polls += 1
                assert status == 0b10 and polls > 0
            # a read of a field waits for the answer (n even: issued right after the command)
            assert await bus.read(ev_slot.address("EV")) == table[q, s][0]
            assert await bus.read(ev_slot.address("STATE")) == table[q, s][1]
            assert (await bus.read(ev_slot.address("QP")), await bus.read(ev_slot.address("SLOT"))) == (q, s)
            assert requests[-1] == (q, s) and len(requests) == n + 1
        assert records == []
        # Read-modify-write: the loaded fields go back out with a push (the writes wait for the answer).
        q, s = 1, 6
        await bus.write(ev_slot.address("QP"), q)
        await bus.write(ev_slot.address("SLOT"), s)
        await bus.write(ev_slot.address("COMMAND"), 2)
        await bus.write(ev_slot.address("COMMAND"), 1)
        assert await bus.read(ev_slot.address("STATE")) == table[q, s][1]  # the push is not a read-back
        while await bus.read(ev_slot.address("STATUS")) & 1:
            pass
        assert records == [(q, s, *table[q, s])]
        assert await bus.read(ev_slot.address("STATUS")) == 1 << 16 | 0b10
        # COMMAND = 3 (or 0): neither.
        await bus.write(ev_slot.address("COMMAND"), 3)
        await bus.write(ev_slot.address("COMMAND"), 0)
        await ctx.tick().repeat(30)
        assert len(records) == 1 and len(requests) == 11
        assert await bus.read(ev_slot.address("STATUS")) == 1 << 16 | 0b10

    async def core(ctx):
        """Answers each request after a random wait, and takes pushed records."""
        req, ans, cfg = dut.ev_read, dut.ev_read_answer, dut.ev_configure
        ctx.set(cfg.ready, 1)
        pending, wait = [], 0
        samples = ctx.tick().sample(
            req.valid, req.ready, req.payload, ans.valid, ans.ready, cfg.valid, cfg.payload
        )
        async for _, _, r_valid, r_ready, r_payload, a_valid, a_ready, c_valid, c_payload in samples:
            if r_valid and r_ready:
                requests.append((r_payload.qp, r_payload.slot))
                pending.append((r_payload.qp, r_payload.slot))
                # at least a few cycles: the polling reads below must see STATUS[0] pending
                wait = 8 + rng.randrange(20)
            if a_valid and a_ready:
                pending.pop(0)
            if c_valid:
                records.append((c_payload.qp, c_payload.slot, c_payload.ev, c_payload.state.value))
            wait = max(0, wait - 1)
            ctx.set(req.ready, not pending and rng.random() < 0.5)
            if pending and wait == 0 and not (a_valid and not a_ready):
                ev, state = table[pending[0]]
                ctx.set(ans.payload, {"ev": ev, "state": EvState(state)})
                ctx.set(ans.valid, 1)
            else:
                ctx.set(ans.valid, 0)

    run(dut, bench, processes=[core], name="register_file_read_back")


def test_reset_restores_read_back():
    """A reset without reconfiguration: the registers and what the bus reads back both return to the map's
    resets (the read-back memory's scrub copies its reset image back), and the bus waits until then."""
    rng = random.Random(new_seed())
    regmap, dut = make()
    top = Module()
    top.domains.sync = cd = ClockDomain()
    top.submodules.dut = dut
    rel, tr = regmap["reliability"], regmap["transport"]
    words = len(range(0, regmap.size, 4))
    scrub_cycles = 1 << (words - 1).bit_length()

    async def bench(ctx):
        bus = Manager(ctx, dut.bus, rng)
        reset = rel.register("RTO_CYCLES").reset
        await bus.write(rel.address("RTO_CYCLES"), 0xDEADBEEF)
        await bus.write(rel.address("RETRY_BUDGET"), 0xFFFFFFFF, strobe=0b0001)
        await bus.write_wide(tr.address("OWN_GID"), rng.getrandbits(128), 4)
        assert await bus.read(rel.address("RTO_CYCLES")) == 0xDEADBEEF
        ctx.set(cd.rst, 1)
        await ctx.tick()
        ctx.set(cd.rst, 0)
        assert ctx.get(dut.rto_cycles) == reset and ctx.get(dut.config.own_gid) == 0
        ctx.set(dut.bus.araddr, rel.address("RTO_CYCLES"))
        ctx.set(dut.bus.arvalid, 1)
        waited = 0
        while not ctx.get(dut.bus.arready):
            await ctx.tick()
            waited += 1
        print(f"bus waited {waited} cycles after the reset ({words} words in the map)")
        assert waited >= scrub_cycles
        await ctx.tick()  # the read is taken at this edge
        ctx.set(dut.bus.arvalid, 0)
        ctx.set(dut.bus.rready, 1)
        (data,) = await ctx.tick().sample(dut.bus.rdata).until(dut.bus.rvalid)
        ctx.set(dut.bus.rready, 0)
        assert data == reset
        assert await bus.read(rel.address("RETRY_BUDGET")) == rel.register("RETRY_BUDGET").reset
        assert await bus.read_wide(tr.address("OWN_GID"), 4) == 0
        header = [await bus.read(rel.base + 4 * i) for i in range(4)]
        assert header == regmap.header(rel)
        # and writes after the scrub land in both again, partial strobes included
        await bus.write(rel.address("RTO_CYCLES"), 0x00AB0000, strobe=0b0100)
        want = (reset & ~0x00FF0000) | 0x00AB0000
        assert await bus.read(rel.address("RTO_CYCLES")) == want == ctx.get(dut.rto_cycles)

    run(top, bench, name="register_file_reset")


def test_concurrent_read_and_write_of_one_word():
    """A manager that writes and reads at once (AXI4-Lite's read and write channels are independent):
    the writer stores an increasing sequence into one read/write register, the reader reads it back
    with random timing, so reads land in write cycles, before, during and after them. Every read returns
    a value the register held while the read was in flight: never older than the last write answered
    before the read was issued, never newer than the last write issued before it was answered, so the
    values read never go backwards; the core sees each answered write."""
    rng = random.Random(new_seed())
    regmap, dut = make()
    rel = regmap["reliability"]
    address = rel.address("RTO_CYCLES")
    state = {"issued": rel.register("RTO_CYCLES").reset, "answered": rel.register("RTO_CYCLES").reset}
    writes, reads = 150, 300
    seen = []

    async def writer(ctx):
        bus = dut.bus
        for n in range(1, writes + 1):
            value = n * 0x01010101 & 0xFFFFFFFF
            for _ in range(rng.randrange(3)):
                await ctx.tick()
            ctx.set(bus.awaddr, address)
            ctx.set(bus.awvalid, 1)
            ctx.set(bus.wdata, value)
            ctx.set(bus.wstrb, 0xF)
            ctx.set(bus.wvalid, 1)
            state["issued"] = value
            await ctx.tick().until(bus.awready)
            ctx.set(bus.awvalid, 0)
            ctx.set(bus.wvalid, 0)
            ctx.set(bus.bready, 1)
            (resp,) = await ctx.tick().sample(bus.bresp).until(bus.bvalid)
            ctx.set(bus.bready, 0)
            assert resp == OKAY
            state["answered"] = value
            assert ctx.get(dut.rto_cycles) == value

    async def reader(ctx):
        bus = dut.bus
        for _ in range(reads):
            for _ in range(rng.randrange(3)):
                await ctx.tick()
            oldest = state["answered"]
            ctx.set(bus.araddr, address)
            ctx.set(bus.arvalid, 1)
            await ctx.tick().until(bus.arready)
            ctx.set(bus.arvalid, 0)
            ready = rng.random() < 0.7
            while True:
                ctx.set(bus.rready, ready)
                _, _, valid, data, resp = await ctx.tick().sample(bus.rvalid, bus.rdata, bus.rresp)
                if valid and ready:
                    break
                ready = ready or rng.random() < 0.5
            ctx.set(bus.rready, 0)
            newest = state["issued"]
            assert resp == OKAY
            assert oldest <= data <= newest, (hex(oldest), hex(data), hex(newest))
            assert data in (rel.register("RTO_CYCLES").reset,) or data % 0x01010101 == 0, hex(data)
            seen.append(data)

    collisions = [0]

    async def watch(ctx):
        """Counts the cycles in which a read waits on a write taken at the same edge."""
        bus = dut.bus
        async for _, _, arvalid, awvalid, awready in ctx.tick().sample(bus.arvalid, bus.awvalid, bus.awready):
            collisions[0] += arvalid and awvalid and awready

    run(dut, writer, reader, processes=[watch], name="register_file_concurrent")
    print(f"{len(seen)} reads, {len(set(seen))} values, {collisions[0]} reads offered in a write cycle")
    assert collisions[0] > 10, "the random timing should put reads into write cycles"
    assert seen == sorted(seen), "a read went backwards"
    assert len(set(seen)) > 20, "the reads should have followed the writes"
