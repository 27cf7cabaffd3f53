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
  are counted (``stat_dma_errors``) and still sent;
* built with ``responses``: random SACK, NACK and ACK records (every block random, whatever the opcode,
  ooo_count past 15 bits) come in beside the jobs; each stream's packets leave in its order, each
  response is the codec's control frame byte for byte, announced on its plane with
  :func:`response_beats` only while that plane has room (``response_room``, random), and counted by
  opcode.
"""

from __future__ import annotations

import random

import pytest

from mrcnic import wire
from mrcnic.hdl.tx.header_builder import HeaderBuilder, packet_beats_bound, response_beats

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


def _addressing(config, plane, peer, outer_dst, srv6) -> wire.Addressing:
    return wire.Addressing(
        src_mac=config["port_mac"][plane],
        dst_mac=config["next_hop_mac"][plane],
        src_gid=config["own_gid"],
        dst_gid=peer["peer_gid"],
        outer_src=config["port_address"][plane] if srv6 else None,
        outer_dst=outer_dst if srv6 else None,
        hop_limit=config["hop_limit"],
    )


def _expected(job, peers, config, srv6, memory, ts) -> bytes:
    """The packet the builder must send for ``job`` with send time ``ts``: the codec's frame, no ICRC."""
    d, plane = job["descriptor"], job["plane"]
    peer = peers[d["qp"]]
    addressing = _addressing(config, plane, peer, job["outer_dst"], srv6)
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


RESPONSES = (wire.Opcode.SACK, wire.Opcode.NACK, wire.Opcode.ACK)


def _random_response(rng, srv6_build):
    plane = rng.randrange(PLANES)
    ev = rng.randrange(1 << 32)
    pr = int(rng.random() < 0.25)
    return {
        "record": {
            "opcode": rng.choice(RESPONSES),
            "ev": ev,
            "qp": rng.randrange(QPS),
            "seth": {
                "m": rng.randrange(3),
                "pr": pr,
                "ack_psn_offset": rng.randrange(-(1 << 15), 1 << 15),
                "cack_psn": rng.randrange(1 << 24),
                "sack_offset": rng.randrange(-(1 << 15), 1 << 15),
                "sack_bitmap": rng.randrange(1 << 64),
            },
            "cc": {
                "tx_timestamp": rng.randrange(1 << 16),
                "ooo_count": rng.choice([rng.randrange(1 << 15), 0x7FFF, 0x8000, rng.randrange(1 << 16)]),
                "rcvd_bytes": rng.randrange(1 << 24),
            },
            "neth": {
                "nack_reason": rng.randrange(256),
                "nack_psn": rng.randrange(1 << 24),
                "tx_timestamp": rng.randrange(1 << 16),
            },
            "aeth": {"syndrome": rng.choice([0x1F, 0x61, 0x62, 0x63]), "msn": rng.randrange(1 << 24)},
        },
        "plane": plane,
        "route_ev": (ev & ((1 << 29) - 1)) | plane << 29,  # the answered EV, naming the port it leaves on
        **({"outer_dst": rng.randrange(1 << 128)} if srv6_build else {}),
    }


def _expected_response(response, peers, config, srv6) -> bytes:
    """The frame the builder must send for ``response``: the codec's control frame, no ICRC."""
    rec, plane = response["record"], response["plane"]
    peer = peers[rec["qp"]]
    addressing = _addressing(config, plane, peer, response.get("outer_dst"), srv6)
    ids = {"entropy": rec["ev"], "spdcid": peer["qpn"] & 0xFFFF, "dpdcid": peer["peer_qpn"] & 0xFFFF}
    opcode = wire.Opcode(rec["opcode"])
    if opcode == wire.Opcode.SACK:
        s, c = rec["seth"], rec["cc"]
        headers = [
            wire.Seth(
                m=s["m"],
                pr=s["pr"],
                ack_psn_offset=s["ack_psn_offset"],
                cack_psn=s["cack_psn"],
                sack_offset=s["sack_offset"],
                sack_bitmap=s["sack_bitmap"],
                **ids,
            ),
            wire.CcState(
                tx_timestamp=c["tx_timestamp"],
                ooo_count=min(c["ooo_count"], 0x7FFF),
                rcvd_bytes=c["rcvd_bytes"],
            ),
        ]
    elif opcode == wire.Opcode.NACK:
        n = rec["neth"]
        headers = [
            wire.Neth(
                nack_reason=n["nack_reason"], nack_psn=n["nack_psn"], tx_timestamp=n["tx_timestamp"], **ids
            )
        ]
    else:
        headers = [wire.Aeth(**rec["aeth"])]
    frame = wire.control_frame(
        addressing, ev=response["route_ev"], opcode=opcode, headers=headers, dest_qp=peer["peer_qpn"]
    )
    return frame.encode()[:-4]


@pytest.mark.parametrize(
    "w, srv6_build, srv6_register, responses",
    [(4, True, True, True), (4, False, True, True), (8, True, False, True), (8, False, True, False)],
)
def test_header_builder(w, srv6_build, srv6_register, responses):
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
        responses=responses,
    )
    srv6 = srv6_build and srv6_register
    config = _config(srv6_register)
    peers = _peers(rng)
    memory = rng.randbytes(1 << ADDR_WIDTH)
    jobs = [_random_job(rng, w) for _ in range(32)]
    resps = [_random_response(rng, srv6_build) for _ in range(24 if responses else 0)]
    count = len(jobs) + len(resps)
    commands, planes_taken, packets = [], [], []
    error_beats, dma_errors, resp_stats = [], [], []
    now_start = 0xFFFF - 200  # wraps during the run

    async def clock(ctx):
        """``now_ts`` moves by one every cycle (a real clock moves once per 128 ns: this is harder)."""
        now = now_start
        while True:
            ctx.set(dut.now_ts, now & 0xFFFF)
            await ctx.tick()
            now += 1

    async def peer_table(ctx):
        """The QP context's read port: ``peer`` follows ``peer_qp`` in the same cycle."""
        ctx.set(dut.peer, peers[0])  # peer_qp starts at 0
        while True:
            (qp,) = await ctx.changed(dut.peer_qp)
            ctx.set(dut.peer, peers[qp])

    async def feed_jobs(ctx):
        ctx.set(dut.config, config)
        for job in jobs:
            await stream_put(ctx, dut.job, job, stall=0.3, rng=rng)

    async def feed_responses(ctx):
        """Each record stays offered until the builder takes it (a stream's source holds its payload)."""
        for response in resps:
            await stream_put(ctx, dut.response, response, stall=0.5, rng=rng)

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
        for _ in range(count):
            while rng.random() < 0.3:
                await ctx.tick()
            ctx.set(dut.packet_plane.ready, 1)
            sampled = dut.packet_plane.payload, dut.now_ts, *([dut.response_room] if responses else [])
            record, now, *room = await ctx.tick().sample(*sampled).until(dut.packet_plane.valid)
            ctx.set(dut.packet_plane.ready, 0)
            planes_taken.append((int(record.plane), int(record.beats), now, room[0] if room else None))

    async def plane_rooms(ctx):
        """Each plane's room for a response comes and goes."""
        while True:
            ctx.set(dut.response_room, rng.randrange(1 << PLANES))
            for _ in range(rng.randint(1, 20)):  # not tick().repeat(): it is left hanging at the end
                await ctx.tick()

    async def take_packets(ctx):
        for _ in range(count):
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
        if responses:
            resp_stats.extend(ctx.get(getattr(dut, f"stat_{k}")) for k in ("sacks", "nacks", "acks"))

    run(
        dut,
        feed_jobs,
        *([feed_responses] if responses else []),
        dma,
        take_planes,
        take_packets,
        processes=[clock, peer_table, *([plane_rooms] if responses else [])],
        name=f"header_builder_{w}_{int(srv6_build)}{int(srv6_register)}{int(responses)}",
        deadline=2e-3,
    )
    assert len(packets) == count, f"{len(packets)} of {count} packets out by the deadline"
    writes = [j for j in jobs if j["descriptor"]["opcode"] != wire.Opcode.PROBE]
    assert commands == [(j["descriptor"]["local_addr"], j["descriptor"]["length"]) for j in writes]
    timestamps, next_job, next_resp, order = [], 0, 0, ""
    for n, (packet, (plane, beats, now, room)) in enumerate(zip(packets, planes_taken, strict=True)):
        timestamps.append(now)
        if next_resp < len(resps) and packet == _expected_response(resps[next_resp], peers, config, srv6):
            assert plane == resps[next_resp]["plane"], f"packet {n}: response announced on plane {plane}"
            assert beats == response_beats(w) >= -(-(len(packet) + 4) // w)
            assert room >> plane & 1, f"packet {n}: a response started without room on its plane"
            next_resp, order = next_resp + 1, order + "r"
            continue
        assert next_job < len(jobs), f"packet {n} is neither the next response nor a job"
        job = jobs[next_job]
        assert plane == job["plane"], f"packet {n}: announced on plane {plane}"
        want = _expected(job, peers, config, srv6, memory, now)
        assert packet == want, f"packet {n} ({wire.Opcode(job['descriptor']['opcode']).name}) differs"
        assert beats >= -(-(len(packet) + 4) // w), f"packet {n}: room for {beats} beats reserved"
        assert beats == packet_beats_bound(job["descriptor"]["length"], w)
        next_job, order = next_job + 1, order + "j"
    print(f"packets in order (j: job, r: response): {order}")
    assert (next_job, next_resp) == (len(jobs), len(resps))
    # The clock moved under the run, so the send times differ: they were not all taken at one moment.
    assert len(set(timestamps)) == count
    assert any(ts >= now_start for ts in timestamps) and any(ts < now_start for ts in timestamps), "no wrap"
    assert dma_errors == [sum(error_beats)]
    if responses:
        sent = [sum(r["record"]["opcode"] == k for r in resps) for k in RESPONSES]
        assert resp_stats == sent
        assert "jr" in order and "rj" in order, "responses and jobs never interleaved"
