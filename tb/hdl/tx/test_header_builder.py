"""The TX header builder alone on the Amaranth simulator (hdl/tx/header_builder.py).

Random WRITE jobs of all six opcodes and PROBE jobs, at 4 and 8 bytes a beat, in SRv6 mode, in
single-IPv6 mode by register and built without SRv6, with random stalls on every stream and a send-time
clock (``now_ts``) that moves every cycle and wraps:

* every packet is the codec's frame (``mrcnic.wire.data_frame`` / ``control_frame``) byte for byte,
  without its ICRC (the inserter behind appends it): the peer's fields are those of the job's QP
  (``peer_qp`` is answered combinationally, a different peer per QP), the payload is host memory at the
  job's local address;
* the TSETH / PETH ``tx_timestamp`` is ``now_ts`` of the cycle the packet's ``packet_plane`` record was
  taken, the cycle its header starts (the module docstring's rule), not of a later beat;
* ``packet_plane`` names the job's plane, and its ``beats`` is never below the beats the packet takes
  with its ICRC, packed;
* one DMA read per WRITE job, in job order, none for a probe; payload beats flagged with a read error
  are counted (``stat_dma_errors``) and still sent.
"""

from __future__ import annotations

import random

import pytest

from mrcnic import wire
from mrcnic.hdl.tx.header_builder import HeaderBuilder, packet_beats_bound

from support.pysim import run, stream_get, stream_put

QPS, EV_SLOTS, PLANES, ADDR_WIDTH = 2, 4, 2, 16
WRITES = [o for o in wire.Opcode if o.is_write]


def _config(srv6_register: bool) -> dict:
    return {
        "srv6": int(srv6_register),
        "udp_port": 4791,
        "pkey": 0xFFFF,
        "hop_limit": 61,
        "dscp_data": wire.Dscp.TRIMMABLE,
        "dscp_retx": wire.Dscp.TRIMMABLE_RETX,
        "own_gid": 0xFD00_0000_0000_0000_0000_0000_0000_0A01,
        "port_mac": [0x02_00_00_00_10_00 + p for p in range(PLANES)],
        "next_hop_mac": [0x02_00_00_00_20_00 + p for p in range(PLANES)],
        "port_address": [0xFCBB_0000_0000_0000_0000_0000_0000_0100 + p for p in range(PLANES)],
    }


def _peers(rng):
    return [
        {
            "qpn": rng.randrange(1 << 24),
            "peer_qpn": rng.randrange(1 << 24),
            "peer_gid": rng.randrange(1 << 128),
        }
        for _ in range(QPS)
    ]


def _random_job(rng, w):
    probe = rng.random() < 0.2
    opcode = wire.Opcode.PROBE if probe else rng.choice(WRITES)
    length = 0 if probe else rng.choice([1, 2, 3, w - 1, w, w + 1, rng.randint(1, 40), rng.randint(40, 300)])
    return {
        "descriptor": {
            "qp": rng.randrange(QPS),
            "opcode": opcode,
            "psn": 0 if probe else rng.randrange(1 << 24),
            "msn": rng.randrange(1 << 16),
            "rqmsn": rng.randrange(1 << 16),
            "local_addr": rng.randrange((1 << ADDR_WIDTH) - length),
            "va": rng.randrange(1 << 64),
            "rkey": rng.randrange(1 << 32),
            "dma_length": rng.randrange(1 << 32),
            "length": length,
            "imm": rng.randrange(1 << 32),
            "rtx": 0 if probe else int(rng.random() < 0.3),
            "avoid_slot": 0,
            "probe_id": rng.randrange(1 << 16) if probe else 0,
            "ack_req": 0 if probe else int(rng.random() < 0.3),
        },
        "ev": rng.randrange(1 << 32),
        "slot": rng.randrange(EV_SLOTS),
        "plane": rng.randrange(PLANES),
        "outer_dst": rng.randrange(1 << 128),
    }


def _expected(job, peers, config, srv6, memory, ts) -> bytes:
    """The packet the builder must send for ``job`` with send time ``ts``: the codec's frame, no ICRC."""
    d, plane = job["descriptor"], job["plane"]
    peer = peers[d["qp"]]
    addressing = wire.Addressing(
        src_mac=config["port_mac"][plane],
        dst_mac=config["next_hop_mac"][plane],
        src_gid=config["own_gid"],
        dst_gid=peer["peer_gid"],
        outer_src=config["port_address"][plane] if srv6 else None,
        outer_dst=job["outer_dst"] if srv6 else None,
        hop_limit=config["hop_limit"],
    )
    dscp = config["dscp_retx"] if d["rtx"] else config["dscp_data"]
    opcode = wire.Opcode(d["opcode"])
    if opcode == wire.Opcode.PROBE:
        peth = wire.Peth(
            probe_id=d["probe_id"],
            spdcid=peer["qpn"] & 0xFFFF,
            dpdcid=peer["peer_qpn"] & 0xFFFF,
            tx_timestamp=ts,
        )
        frame = wire.control_frame(
            addressing,
            ev=job["ev"],
            opcode=opcode,
            dest_qp=peer["peer_qpn"],
            dscp=dscp,
            ecn=wire.Ecn.ECT0,
            headers=[peth],
        )
    else:
        start = d["local_addr"]
        frame = wire.data_frame(
            addressing,
            ev=job["ev"],
            opcode=opcode,
            dest_qp=peer["peer_qpn"],
            psn=d["psn"],
            msn=d["msn"],
            rqmsn=d["rqmsn"],
            va=d["va"],
            rkey=d["rkey"],
            dma_length=d["dma_length"],
            payload=memory[start : start + d["length"]],
            imm=d["imm"] if opcode.has_immediate else None,
            timestamp=ts,
            rtx=bool(d["rtx"]),
            ack_req=bool(d["ack_req"]),
            dscp=dscp,
        )
    return frame.encode()[:-4]


@pytest.mark.parametrize(
    "w, srv6_build, srv6_register",
    [(4, True, True), (4, False, True), (8, True, False)],
)
def test_header_builder(w, srv6_build, srv6_register):
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    dut = HeaderBuilder(
        data_width=w,
        qps=QPS,
        ev_slots=EV_SLOTS,
        planes=PLANES,
        lookahead=2,
        srv6=srv6_build,
        addr_width=ADDR_WIDTH,
    )
    srv6 = srv6_build and srv6_register
    config = _config(srv6_register)
    peers = _peers(rng)
    memory = rng.randbytes(1 << ADDR_WIDTH)
    jobs = [_random_job(rng, w) for _ in range(32)]
    commands, planes_taken, packets = [], [], []
    error_beats, dma_errors = [], []
    now_start = 0xFFFF - 300  # wraps during the run

    async def clock(ctx):
        """``now_ts`` moves by one every cycle (a real clock moves once per 128 ns: this is harder)."""
        now = now_start
        while True:
            ctx.set(dut.now_ts, now & 0xFFFF)
            await ctx.tick()
            now += 1

    async def peer_table(ctx):
        """The QP context's read port: ``peer`` follows ``peer_qp`` in the same cycle."""
        async for (qp,) in ctx.changed(dut.peer_qp):
            ctx.set(dut.peer, peers[qp])

    async def feed_jobs(ctx):
        ctx.set(dut.config, config)
        for job in jobs:
            await stream_put(ctx, dut.job, job, stall=0.3, rng=rng)

    async def dma(ctx):
        """Serves the payload reads in order, beats at their memory lanes, some flagged with an error."""
        for _ in range(sum(j["descriptor"]["opcode"] != wire.Opcode.PROBE for j in jobs)):
            cmd = await stream_get(ctx, dut.dma_cmd, stall=0.3, rng=rng)
            addr, length = int(cmd.addr), int(cmd.length)
            commands.append((addr, length))
            first, end = addr // w, -(-(addr + length) // w)
            for word in range(first, end):
                keep = sum(1 << k for k in range(w) if addr <= word * w + k < addr + length)
                octets = bytes(
                    memory[word * w + k] if keep >> k & 1 else rng.randrange(256) for k in range(w)
                )
                error = int(rng.random() < 0.05)
                error_beats.append(error)
                beat = {"data": int.from_bytes(octets, "little"), "keep": keep, "last": int(word == end - 1)}
                await stream_put(ctx, dut.dma_data, {**beat, "error": error}, stall=0.3, rng=rng)

    async def take_planes(ctx):
        for _ in jobs:
            while rng.random() < 0.3:
                await ctx.tick()
            ctx.set(dut.packet_plane.ready, 1)
            record, now = (
                await ctx.tick().sample(dut.packet_plane.payload, dut.now_ts).until(dut.packet_plane.valid)
            )
            ctx.set(dut.packet_plane.ready, 0)
            planes_taken.append((int(record.plane), int(record.beats), now))

    async def take_packets(ctx):
        for _ in jobs:
            octets, beats = bytearray(), 0
            while True:
                beat = await stream_get(ctx, dut.packet, stall=0.3, rng=rng)
                beats += 1
                raw = int(beat.data).to_bytes(w, "little")
                octets += bytes(raw[k] for k in range(w) if int(beat.keep) >> k & 1)
                if beat.last:
                    break
            packets.append(bytes(octets))
        await ctx.tick().repeat(2)
        dma_errors.append(ctx.get(dut.stat_dma_errors))

    run(
        dut,
        feed_jobs,
        dma,
        take_planes,
        take_packets,
        processes=[clock, peer_table],
        name=f"header_builder_{w}_{int(srv6_build)}{int(srv6_register)}",
        deadline=2e-3,
    )
    assert len(packets) == len(jobs), f"{len(packets)} of {len(jobs)} packets out by the deadline"
    writes = [j for j in jobs if j["descriptor"]["opcode"] != wire.Opcode.PROBE]
    assert commands == [(j["descriptor"]["local_addr"], j["descriptor"]["length"]) for j in writes]
    timestamps = []
    for n, (job, packet, (plane, beats, now)) in enumerate(zip(jobs, packets, planes_taken, strict=True)):
        assert plane == job["plane"], f"packet {n}: announced on plane {plane}"
        want = _expected(job, peers, config, srv6, memory, now)
        assert packet == want, f"packet {n} ({wire.Opcode(job['descriptor']['opcode']).name}) differs"
        assert beats >= -(-(len(packet) + 4) // w), f"packet {n}: room for {beats} beats reserved"
        assert beats == packet_beats_bound(job["descriptor"]["length"], w)
        timestamps.append(now)
    # The clock moved under the run, so the send times differ: they were not all taken at one moment.
    assert len(set(timestamps)) == len(jobs)
    assert any(ts >= now_start for ts in timestamps) and any(ts < now_start for ts in timestamps), "no wrap"
    assert dma_errors == [sum(error_beats)]
