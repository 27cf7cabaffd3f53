"""The whole TX pipeline on Verilator: work requests in, MRC frames out on the plane ports.

Host memory is a cocotbext-axi ``AxiRamRead``; every frame is decoded by mrcnic.wire (lengths, ICRC) and
by scapy (fields, scapy's own RoCE ICRC); messages are rebuilt from the payloads at their RETH addresses
and compared byte for byte with the source memory; the EV of every packet is checked against the reference
model's choice (mrcnic.model.ev.EvTable) for the same seed and feedback; the outer destination against
mrcnic.wire.RouteTemplate.
"""

import logging
import random
from collections import Counter

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiRamRead, AxiReadBus, AxiStreamBus, AxiStreamSink
from scapy.layers.l2 import Ether

import mrcnic.wire.scapy_layers as sl
from mrcnic import wire
from mrcnic.hdl.tx.header_builder import MAX_HEADER_BYTES, tx_config_layout
from mrcnic.hdl.tx.layouts import (
    MAX_CONTROL_FRAME_BYTES,
    FeedbackEvent,
    WriteKind,
    descriptor_layout,
    feedback_layout,
    work_request_layout,
)
from mrcnic.hdl.tx.path_selector import EvState, configure_layout, seed_layout
from mrcnic.hdl.tx.pipeline import TxPipeline, probe_request_layout, qp_context_layout
from mrcnic.hdl.tx.source_router import RouteTemplateLayout
from mrcnic.hdl.tx.tracker import retransmit_layout, sent_layout
from mrcnic.model.ev import EvTable

from support.cocotb_runner import dut_params, run_cocotb
from support.cocotb_streams import StreamDriver, stream_put
from support.layouts import pack, unpack

QPS, EV_SLOTS, DESTS = 4, 16, 4
LOCATOR = 0xFCBBBB00
MEMORY = 1 << 20
NOW_TS = 0x2345


class Tx:
    """Test bench state: the DUT, its memory, plane sinks, and the Python picture of its configuration."""

    def __init__(self, dut, *, srv6=True, pmtu_log2=12, pause=0.0, seed=1):
        p = dut_params()
        self.dut, self.w, self.planes = dut, p["data_width"], p["planes"]
        # A build without route templates sends single-IPv6 frames whatever its SRV6 register says.
        self.dests = p.get("destinations", DESTS)
        self.layouts = _Layouts(self.dests)
        self.srv6_register = srv6
        self.srv6, self.pmtu = srv6 and self.dests > 0, 1 << pmtu_log2
        self.pmtu_log2 = pmtu_log2
        self.rng = random.Random(seed)
        cocotb.start_soon(Clock(dut.clk, 8, unit="ns").start())
        self.ram = AxiRamRead(
            AxiReadBus.from_prefix(dut, "m_axi", bus_separator="__"), dut.clk, dut.rst, size=MEMORY
        )
        self.ram.write(0, self.rng.randbytes(MEMORY))
        self.ram.log.setLevel(logging.WARNING)  # one line per burst / frame is too much
        self.sinks = []
        for plane in range(self.planes):
            sink = AxiStreamSink(
                AxiStreamBus.from_prefix(dut, f"m_axis__{plane}", bus_separator="__"), dut.clk, dut.rst
            )
            sink.log.setLevel(logging.WARNING)
            if pause:
                sink.set_pause_generator(iter(lambda: self.rng.random() < pause, None))
            self.sinks.append(sink)
        self.tables = {
            q: EvTable(EV_SLOTS, self.planes, 8, seed=100 + q, lfsr_seed=0x1000 + 77 * q) for q in range(QPS)
        }
        self.routes = {
            d: wire.RouteTemplate.for_clos(LOCATOR, src_t0=0, dst_t0=d, dst_host=4 * d + 1)
            for d in range(DESTS)
        }
        self.start_psn = {q: self.rng.randrange(1 << 24) for q in range(QPS)}
        self.peer_qpn = {q: 0x100 + q for q in range(QPS)}
        self.peer_gid = {q: wire.ip6(f"fd00::{q + 10:x}") for q in range(QPS)}
        self.own_gid = wire.ip6("fd00::1")

    def own_qpn(self, q):
        return 0x200 + q

    def port_mac(self, plane):
        return 0x020000000100 + plane

    def next_hop_mac(self, plane):
        return 0x0200000FF000 + plane

    def port_address(self, plane):
        return wire.port_address(LOCATOR, plane, 0)

    def addressing(self, q, plane, ev):
        """What this bench's frames of QP ``q`` on ``plane`` with EV ``ev`` carry as addresses."""
        return wire.Addressing(
            src_mac=self.port_mac(plane),
            dst_mac=self.next_hop_mac(plane),
            src_gid=self.own_gid,
            dst_gid=self.peer_gid[q],
            outer_src=self.port_address(plane) if self.srv6 else None,
            outer_dst=self.routes[q % DESTS].destination(ev) if self.srv6 else None,
            hop_limit=64,
        )

    async def start(self):
        dut = self.dut
        for name in (
            "work_request",
            "retransmit",
            "probe",
            "reserve_configure",
            "feedback",
            "sequence_configure",
            "ev_configure",
            "ev_seed",
            *(["route_configure"] if self.dests else []),  # no route templates without SRv6
            "qp_configure",
            "control",
        ):
            getattr(dut, f"{name}__valid").value = 0
        dut.config.value = pack(
            tx_config_layout(self.planes),
            {
                "srv6": int(self.srv6_register),
                "udp_port": 4791,
                "pkey": 0xFFFF,
                "hop_limit": 64,
                "dscp_data": wire.Dscp.TRIMMABLE,
                "dscp_retx": wire.Dscp.TRIMMABLE_RETX,
                "own_gid": self.own_gid,
                "port_mac": [self.port_mac(p) for p in range(self.planes)],
                "next_hop_mac": [self.next_hop_mac(p) for p in range(self.planes)],
                "port_address": [self.port_address(p) for p in range(self.planes)],
            },
        )
        dut.dscp_control.value = wire.Dscp.CONTROL
        dut.sent__ready.value = 1
        dut.watch__ready.value = 1
        dut.plane_queue_beats.value = (1 << len(dut.plane_queue_beats)) - 1  # no limit beyond FIFO room
        dut.pmtu_log2.value = self.pmtu_log2
        dut.min_active.value = 2
        dut.cwnd_open.value = (1 << QPS) - 1
        dut.plane_up.value = (1 << self.planes) - 1
        dut.now_ts.value = NOW_TS
        self.set_psn_limits({q: (self.start_psn[q] + (1 << 22)) & 0xFFFFFF for q in range(QPS)})
        dut.rst.value = 1
        await ClockCycles(dut.clk, 4)
        dut.rst.value = 0
        await ClockCycles(dut.clk, 2)
        for q in range(QPS):
            await stream_put(
                dut,
                "sequence_configure",
                pack(self.layouts.sequence, {"qp": q, "psn": self.start_psn[q], "msn": 0, "rqmsn": 0}),
            )
            await stream_put(
                dut,
                "qp_configure",
                pack(
                    self.layouts.qp,
                    {
                        "qp": q,
                        "context": {
                            "qpn": self.own_qpn(q),
                            "peer_qpn": self.peer_qpn[q],
                            "peer_gid": self.peer_gid[q],
                            "dest": q % max(self.dests, 1),
                        },
                    },
                ),
            )
            await stream_put(
                dut, "ev_seed", pack(seed_layout(QPS), {"qp": q, "seed": self.tables[q].lfsr_seed})
            )
            for slot, entry in enumerate(self.tables[q].slots):
                await stream_put(
                    dut,
                    "ev_configure",
                    pack(
                        configure_layout(QPS, EV_SLOTS),
                        {"qp": q, "slot": slot, "ev": entry.ev, "state": EvState.GOOD},
                    ),
                )
        for d, route in self.routes.items() if self.dests else ():
            usids = list(route.usids) + [0] * (6 - len(route.usids))
            await stream_put(
                dut,
                "route_configure",
                pack(
                    self.layouts.route,
                    {
                        "dest": d,
                        "template": {
                            "locator": route.locator,
                            "usids": usids,
                            "count": len(route.usids),
                            "t1_slot": route.t1_slot,
                        },
                    },
                ),
            )
        self.requests = StreamDriver(dut, "work_request")

    def set_psn_limits(self, limits):
        value = 0
        for q in range(QPS):
            value |= limits[q] << (24 * q)
        self.dut.psn_limit.value = value

    def post(self, qp, length, *, kind=WriteKind.WRITE, local=None, remote=None):
        local = self.rng.randrange(MEMORY - length) if local is None else local
        remote = self.rng.randrange(1 << 48) if remote is None else remote
        wr = {
            "qp": qp,
            "kind": kind,
            "local_addr": local,
            "remote_va": remote,
            "rkey": 0xAB000000 + qp,
            "length": length,
            "imm": self.rng.randrange(1 << 32),
        }
        self.requests.put(pack(work_request_layout(QPS), wr))
        return wr

    async def collect(self, count, timeout_cycles=2_000_000):
        frames = []  # (plane, bytes) in arrival order per plane
        for _ in range(timeout_cycles // 64):
            for plane, sink in enumerate(self.sinks):
                while not sink.empty():
                    frames.append((plane, bytes(sink.recv_nowait().tdata)))
            if len(frames) >= count:
                return frames
            await ClockCycles(self.dut.clk, 64)
        raise AssertionError(f"only {len(frames)} of {count} frames arrived")

    def check_frame(self, plane, raw):
        """Everything one frame must satisfy on its own; returns the decoded frame."""
        frame = wire.decode(raw, check_icrc=True)
        assert frame.srv6 == self.srv6
        assert (
            frame.opcode.is_write and frame.bth.ts == 1 and frame.bth.tver == 0 and frame.bth.pkey == 0xFFFF
        )
        ev = frame.ev
        assert wire.ev_fields(ev)[0] == plane, "sent on the plane its EV names"
        q = next(q for q in range(QPS) if frame.bth.dest_qp == self.peer_qpn[q])
        assert ev in {s.ev for s in self.tables[q].slots}
        assert frame.eth.src == self.port_mac(plane) and frame.eth.dst == self.next_hop_mac(plane)
        assert frame.ip.src == self.own_gid and frame.ip.dst == self.peer_gid[q]
        assert frame[wire.Tseth].tx_timestamp == NOW_TS
        net = frame.network
        assert net.dscp == (wire.Dscp.TRIMMABLE_RETX if frame.bth.rtx else wire.Dscp.TRIMMABLE)
        assert net.ecn == wire.Ecn.ECT0 and net.hop_limit == 64
        if self.srv6:
            assert frame.outer.dst == self.routes[q % DESTS].destination(ev)
            assert frame.outer.src == self.port_address(plane)
            assert frame.outer.flow_label == frame.ip.flow_label
        # scapy, independently: fields and its own RoCE ICRC over the (inner) IPv6 header onward.
        pkt = Ether(raw)
        bth = pkt[sl.MRC_BTH]
        assert bth.psn == frame.bth.psn and bth.dqpn == frame.bth.dest_qp and bth.opcode == frame.bth.opcode
        assert bth.compute_icrc(None) == raw[-4:]
        assert pkt[sl.MRC_RETH].va == frame[wire.Reth].va
        return q, frame


def _check_messages(tx, posted, decoded):
    """Rebuild each message from its packets: every byte exactly once, equal to the source memory."""
    by_qp = {}
    for q, frame in decoded:
        by_qp.setdefault(q, []).append(frame)
    for q, frames in by_qp.items():
        psns = sorted((f.bth.psn - tx.start_psn[q]) & 0xFFFFFF for f in frames)
        assert psns == list(range(len(frames))), f"QP {q}: PSNs not contiguous from the start PSN"
    for q, wrs in posted.items():
        frames = by_qp.get(q, [])
        for msn, wr in enumerate(wrs):
            parts = [f for f in frames if f[wire.Meth].msn == msn]
            image = bytearray(wr["length"])
            seen = bytearray(wr["length"])
            for f in parts:
                reth = f[wire.Reth]
                assert reth.rkey == wr["rkey"] and reth.dma_length == wr["length"]
                offset = reth.va - wr["remote_va"]
                assert 0 <= offset and offset + len(f.payload) <= wr["length"]
                assert offset % tx.pmtu == 0 and len(f.payload) <= tx.pmtu
                image[offset : offset + len(f.payload)] = f.payload
                for i in range(offset, offset + len(f.payload)):
                    seen[i] += 1
            assert all(c == 1 for c in seen), f"QP {q} message {msn}: bytes not covered exactly once"
            assert bytes(image) == tx.ram.read(wr["local_addr"], wr["length"]), f"QP {q} message {msn}"
            if wr["kind"] == WriteKind.WRITE_IMM:
                last = max(parts, key=lambda f: f.bth.psn - tx.start_psn[q])
                assert last[wire.ImmDt].imm == wr["imm"]


def _packets(length, pmtu):
    return -(-length // pmtu)


async def _random_writes(dut, srv6):
    """1 B to 64 KiB, random alignment, several QPs, WRITE and WRITE_IMM, random backpressure."""
    tx = Tx(dut, srv6=srv6, pmtu_log2=random.choice([8, 10, 12]), pause=0.3, seed=random.randrange(1 << 30))
    await tx.start()
    posted = {q: [] for q in range(QPS)}
    sizes = [1, 2, 63, tx.pmtu - 1, tx.pmtu, tx.pmtu + 1, 65536] + [
        random.randint(1, 20000) for _ in range(12)
    ]
    random.shuffle(sizes)
    for n, size in enumerate(sizes):
        q = n % QPS
        kind = random.choice([WriteKind.WRITE, WriteKind.WRITE_IMM])
        posted[q].append(tx.post(q, size, kind=kind))
    total = sum(_packets(w["length"], tx.pmtu) for ws in posted.values() for w in ws)
    frames = await tx.collect(total)
    decoded = [tx.check_frame(plane, raw) for plane, raw in frames]
    _check_messages(tx, posted, decoded)
    assert int(dut.stat_packets.value) == total
    assert int(dut.stat_dma_errors.value) == 0


@cocotb.test()
async def random_writes_srv6(dut):
    await _random_writes(dut, srv6=True)


@cocotb.test()
async def random_writes_single_ipv6(dut):
    await _random_writes(dut, srv6=False)


@cocotb.test()
async def ev_choices_equal_the_reference_model(dut):
    """No backpressure: per QP, the EV of packet k is the k-th choice of the model's EvTable, also after
    ECN, trim and loss feedback (skips of 1 and 4 visits, a retired slot never used again)."""
    tx = Tx(dut, pmtu_log2=8, seed=random.randrange(1 << 30))
    await tx.start()
    q = 1
    # No backups: replacing a retired EV from the plane's backups is issue 6 (the gateware retires in place).
    model = EvTable(EV_SLOTS, tx.planes, 8, seed=100 + q, lfsr_seed=0x1000 + 77 * q, backups=0, min_active=2)
    all_planes = (1 << tx.planes) - 1
    feedback = StreamDriver(dut, "feedback")

    async def send_and_compare(packets):
        tx.post(q, packets * tx.pmtu)
        frames = await tx.collect(packets)
        frames.sort(key=lambda pf: (wire.decode(pf[1]).bth.psn - tx.start_psn[q]) & 0xFFFFFF)
        got = [wire.decode(raw).ev for _, raw in frames]
        want = [model.select(all_planes) for _ in range(packets)]
        assert got == want
        return got

    evs = await send_and_compare(3 * EV_SLOTS)
    # Spraying is even: with every slot GOOD, each rotation uses every slot once, each plane 1/P of it.
    assert Counter(evs) == {s.ev: 3 for s in model.slots}
    assert Counter(wire.ev_fields(ev)[0] for ev in evs) == {
        p: 3 * EV_SLOTS // tx.planes for p in range(tx.planes)
    }
    # Feedback on three different slots, then compare again.
    slots = random.sample(range(EV_SLOTS), 3)
    events = [(slots[0], FeedbackEvent.ECN), (slots[1], FeedbackEvent.TRIM), (slots[2], FeedbackEvent.LOSS)]
    for slot, event in events:
        ev = model.slots[slot].ev
        feedback.put(pack(feedback_layout(QPS, EV_SLOTS), {"qp": q, "slot": slot, "ev": ev, "event": event}))
        if event == FeedbackEvent.ECN:
            model.penalise(ev, 1)
        elif event == FeedbackEvent.TRIM:
            model.penalise(ev, 4)
        else:
            model.mark_bad(ev)
    # Stale feedback (wrong EV for the slot) changes nothing.
    feedback.put(
        pack(feedback_layout(QPS, EV_SLOTS), {"qp": q, "slot": 0, "ev": 0x12345, "event": FeedbackEvent.LOSS})
    )
    while not feedback.idle():
        await RisingEdge(dut.clk)
    await ClockCycles(dut.clk, 4)
    evs = await send_and_compare(4 * EV_SLOTS)
    retired = model.slots[slots[2]].ev
    assert retired not in evs, "an ASSUMED_BAD EV is not used"
    # Restored (as the prober will do after k answered probes): it is used again.
    feedback.put(
        pack(
            feedback_layout(QPS, EV_SLOTS),
            {"qp": q, "slot": slots[2], "ev": retired, "event": FeedbackEvent.PROBE_OK},
        )
    )
    model.restore(retired)
    while not feedback.idle():
        await RisingEdge(dut.clk)
    await ClockCycles(dut.clk, 4)
    evs = await send_and_compare(2 * EV_SLOTS)
    assert retired in evs  # 2N choices always span one whole rotation


class SentMonitor:
    """The ``sent`` records (the TX tracker's input), taken every cycle."""

    def __init__(self, dut):
        self.dut, self.records = dut, []
        cocotb.start_soon(self._run())

    async def _run(self):
        layout = sent_layout(QPS, EV_SLOTS)
        while True:
            await RisingEdge(self.dut.clk)
            if self.dut.sent__valid.value:
                self.records.append(unpack(layout, int(self.dut.sent__payload.value)))


@cocotb.test()
async def retransmissions_by_psn_and_probes(dut):
    """Every data packet is reported on ``sent``; a retransmit request names only a PSN and the slot to
    avoid, and the pipeline rebuilds that packet (same payload, RETH, sequence numbers) with BTH.RTX, DSCP
    TRIMMABLE_RETX and another EV; a request for a PSN it never sent is dropped and counted; a probe
    request becomes the codec's PROBE frame, byte for byte, on the probed EV's plane."""
    tx = Tx(dut, pmtu_log2=8, seed=random.randrange(1 << 30))
    await tx.start()
    sent = SentMonitor(dut)
    q, packets = 2, 8
    wr = tx.post(q, packets * tx.pmtu)
    frames = await tx.collect(packets)
    originals = {}
    for plane, raw in frames:
        _, frame = tx.check_frame(plane, raw)
        originals[frame.bth.psn] = frame
    await ClockCycles(dut.clk, 8)
    assert [int(r.psn) for r in sent.records] == [(tx.start_psn[q] + k) & 0xFFFFFF for k in range(packets)]
    for r in sent.records:
        frame = originals[int(r.psn)]
        assert int(r.qp) == q and int(r.ev) == frame.ev and not int(r.rtx)
        assert int(r.length) == len(frame.payload)
        assert tx.tables[q].slots[int(r.slot)].ev == frame.ev
    # Two retransmissions, and one request for a PSN that was never sent.
    retransmit = StreamDriver(dut, "retransmit")
    chosen = [sent.records[1], sent.records[5]]
    for r in chosen:
        retransmit.put(
            pack(retransmit_layout(QPS, EV_SLOTS), {"qp": q, "psn": int(r.psn), "avoid_slot": int(r.slot)})
        )
    never = (tx.start_psn[q] + 100) & 0xFFFFFF
    retransmit.put(pack(retransmit_layout(QPS, EV_SLOTS), {"qp": q, "psn": never, "avoid_slot": 0}))
    again = await tx.collect(2)
    await ClockCycles(dut.clk, 200)
    assert sum(sink.count() for sink in tx.sinks) == 0, "nothing for the PSN never sent"
    assert int(dut.stat_stale_retransmits.value) == 1
    for plane, raw in again:
        _, frame = tx.check_frame(plane, raw)
        first = originals[frame.bth.psn]
        assert frame.bth.rtx == 1 and frame.network.dscp == wire.Dscp.TRIMMABLE_RETX
        assert frame.payload == first.payload and frame.bth.opcode == first.bth.opcode
        assert frame[wire.Reth].va == first[wire.Reth].va and frame[wire.Meth].msn == first[wire.Meth].msn
        assert frame.ev != first.ev, "a retransmission avoids the slot of its previous attempt"
        assert frame.payload == tx.ram.read(
            wr["local_addr"] + frame[wire.Reth].va - wr["remote_va"], len(frame.payload)
        )
    assert [int(r.rtx) for r in sent.records[packets:]] == [1, 1]
    assert sorted(int(r.psn) for r in sent.records[packets:]) == sorted(int(r.psn) for r in chosen)
    # A probe on one EV of each plane.
    probes = StreamDriver(dut, "probe")
    for plane in range(tx.planes):
        ev = tx.tables[q].slots[plane].ev
        probes.put(pack(probe_request_layout(QPS), {"qp": q, "ev": ev, "probe_id": 0x4000 + plane}))
    got = await tx.collect(tx.planes)
    assert int(dut.stat_probes.value) == tx.planes
    assert len(sent.records) == packets + 2, "probes are not data packets: no sent record"
    for plane, raw in got:
        ev = tx.tables[q].slots[plane].ev
        addressing = tx.addressing(q, plane, ev)
        peth = wire.Peth(
            probe_id=0x4000 + plane,
            spdcid=tx.own_qpn(q) & 0xFFFF,
            dpdcid=tx.peer_qpn[q] & 0xFFFF,
            tx_timestamp=NOW_TS,
        )
        want = wire.control_frame(
            addressing,
            ev=ev,
            opcode=wire.Opcode.PROBE,
            dest_qp=tx.peer_qpn[q],
            dscp=wire.Dscp.TRIMMABLE,
            ecn=wire.Ecn.ECT0,
            headers=[peth],
        )
        assert raw == want.encode(), f"probe on plane {plane}"
        assert Ether(raw)[sl.MRC_PETH].probe_id == 0x4000 + plane


@cocotb.test()
async def blocked_plane_gets_nothing_while_others_flow(dut):
    tx = Tx(dut, pmtu_log2=8, seed=random.randrange(1 << 30))
    if tx.planes < 2:
        return
    await tx.start()
    blocked = 1
    tx.sinks[blocked].pause = True
    posted = {q: [tx.post(q, 40 * tx.pmtu)] for q in range(QPS)}
    total = QPS * 40
    # Everything not on the blocked plane arrives; the blocked plane's FIFO holds only what fitted in it.
    await ClockCycles(dut.clk, 30000)
    arrived = sum(sink.count() for sink in tx.sinks)
    held = total - arrived
    assert tx.sinks[blocked].count() == 0
    w = tx.w
    actual = -(-(138 + tx.pmtu + 4) // w)  # beats of one of these packets in the FIFO (SRv6, no ImmDt)
    max_beats = -(-(MAX_HEADER_BYTES + 4096 + 4) // w) + 1
    fifo_depth = 2 * max_beats + -(-(MAX_CONTROL_FRAME_BYTES + 4) // w)  # two packets and a control frame
    # A packet is chosen for the plane while its FIFO has room for a maximum-size one beyond the claims.
    assert 0 < held <= (fifo_depth - max_beats) // actual + 1, f"{held} packets held for the blocked plane"
    tx.sinks[blocked].pause = False
    frames = await tx.collect(total)
    decoded = [tx.check_frame(plane, raw) for plane, raw in frames]
    _check_messages(tx, posted, decoded)


def _control_frame(tx, rng):
    """A SACK, NACK or ACK as the receive side routes it to this pipeline, and the frame that must leave:
    (plane, record, frame with ICRC)."""
    plane = rng.randrange(tx.planes)
    q = rng.randrange(QPS)
    ev = (plane << 29) | rng.randrange(1 << 29)  # an EV naming an up port: it addresses the frame as is
    addr = tx.addressing(q, plane, ev)
    ids = {"entropy": ev, "spdcid": tx.own_qpn(q) & 0xFFFF, "dpdcid": tx.peer_qpn[q] & 0xFFFF}
    opcode = rng.choice([wire.Opcode.SACK, wire.Opcode.NACK, wire.Opcode.ACK])
    seth = {
        "m": rng.randrange(3),
        "pr": rng.randrange(2),
        "ack_psn_offset": rng.randrange(-100, 100),
        "cack_psn": rng.randrange(1 << 24),
        "sack_offset": rng.randrange(-100, 100),
        "sack_bitmap": rng.randrange(1 << 64),
    }
    cc = {"tx_timestamp": rng.randrange(1 << 16), "ooo_count": 7, "rcvd_bytes": rng.randrange(1 << 24)}
    neth = {"nack_reason": 1, "nack_psn": rng.randrange(1 << 24), "tx_timestamp": rng.randrange(1 << 16)}
    aeth = {"syndrome": 0x1F, "msn": rng.randrange(1 << 16)}
    if opcode == wire.Opcode.SACK:
        headers = [wire.Seth(**seth, **ids), wire.CcState(**cc)]
    elif opcode == wire.Opcode.NACK:
        headers = [wire.Neth(**neth, **ids)]
    else:
        headers = [wire.Aeth(**aeth)]
    frame = wire.control_frame(addr, ev=ev, opcode=opcode, headers=headers, dest_qp=tx.peer_qpn[q])
    record = {
        "record": {"opcode": opcode, "ev": ev, "qp": q, "seth": seth, "cc": cc, "neth": neth, "aeth": aeth},
        "plane": plane,
        "route_ev": ev,
        **({"outer_dst": addr.outer_dst or 0} if tx.dests else {}),
    }
    return plane, record, frame.encode()


def _put_control_record(driver, tx, record):
    """Offer ``record`` on ``control``."""
    from mrcnic.hdl.tx.header_builder import response_job_layout

    driver.put(pack(response_job_layout(QPS, tx.planes, bool(tx.dests)), record))


@cocotb.test()
async def control_frames_share_the_icrc(dut):
    """The receive side's routed control records built between data packets under random backpressure:
    each frame leaves on its plane, in order, byte for byte the Python definition with its ICRC (and
    scapy's ICRC); the data is still intact; one blocked plane holds back neither data nor control
    frames for the others."""
    tx = Tx(dut, srv6=random.choice([True, False]), pmtu_log2=8, pause=0.3, seed=random.randrange(1 << 30))
    await tx.start()
    control = StreamDriver(dut, "control")
    rng = tx.rng
    posted = {q: [] for q in range(QPS)}
    expected = {p: [] for p in range(tx.planes)}
    total = 0
    for n in range(24):
        q = n % QPS
        wr = tx.post(q, rng.randint(1, 3 * tx.pmtu))
        posted[q].append(wr)
        total += _packets(wr["length"], tx.pmtu)
        for _ in range(rng.randrange(4)):
            plane, record, raw = _control_frame(tx, rng)
            expected[plane].append(raw)
            _put_control_record(control, tx, record)
    controls = sum(len(v) for v in expected.values())
    frames = await tx.collect(total + controls)
    got = {p: [] for p in range(tx.planes)}
    data_frames = []
    for plane, raw in frames:
        if wire.decode(raw, check_icrc=True).opcode.is_write:
            data_frames.append((plane, raw))
        else:
            got[plane].append(raw)
            assert Ether(raw)[sl.MRC_BTH].compute_icrc(None) == raw[-4:], "scapy's ICRC"
    for plane in range(tx.planes):
        for k, (g, e) in enumerate(zip(got[plane], expected[plane], strict=False)):
            assert g == e, f"plane {plane} control frame {k}: got {g.hex()}, expected {e.hex()}"
        assert len(got[plane]) == len(expected[plane]), f"plane {plane}: control frames missing"
    _check_messages(tx, posted, [tx.check_frame(plane, raw) for plane, raw in data_frames])
    assert int(dut.stat_control_frames.value) == controls
    kinds = [wire.decode(raw).opcode for frames_of_plane in expected.values() for raw in frames_of_plane]
    for name, opcode in (("sacks", wire.Opcode.SACK), ("nacks", wire.Opcode.NACK), ("acks", wire.Opcode.ACK)):
        assert int(getattr(dut, f"stat_{name}").value) == kinds.count(opcode), name
    assert int(dut.stat_packets.value) == total
    print(f"{controls} control frames and {total} data packets, srv6={tx.srv6}")

    # One plane's port blocked, its FIFO full of data: control frames for the other planes still pass.
    if tx.planes < 2:
        return
    blocked = 1
    tx.sinks[blocked].clear_pause_generator()  # the random one would override `pause`
    tx.sinks[blocked].pause = True
    for q in range(QPS):
        tx.post(q, 40 * tx.pmtu)
    await ClockCycles(dut.clk, 20000)
    before = [sink.count() for sink in tx.sinks]
    for _ in range(8):
        plane, record, raw = _control_frame(tx, rng)
        while plane == blocked:
            plane, record, raw = _control_frame(tx, rng)
        _put_control_record(control, tx, record)
    for _ in range(200):
        await ClockCycles(dut.clk, 100)
        if control.idle():
            break
    assert control.idle(), "control frames for open planes were held behind the blocked plane"
    assert tx.sinks[blocked].count() == before[blocked] == 0
    tx.sinks[blocked].pause = False


@cocotb.test()
async def line_rate(dut):
    """`make bench-tx`: 4 KiB PMTU, no backpressure, back-to-back 64 KiB writes on every QP. The busy
    fraction of the output = beats a perfectly packed stream needs / cycles from first to last beat."""
    import json
    from pathlib import Path

    tx = Tx(dut, pmtu_log2=dut_params().get("bench_pmtu_log2", 12), seed=1)
    await tx.start()
    posted = {
        q: [tx.post(q, 65536, local=(q * 65536 + 64 * q) % (MEMORY - 65536)) for _ in range(4)]
        for q in range(QPS)
    }
    total = sum(_packets(w["length"], tx.pmtu) for ws in posted.values() for w in ws)
    frames = []
    times = []
    while len(frames) < total:
        for plane, sink in enumerate(tx.sinks):
            while not sink.empty():
                frame = sink.recv_nowait()
                frames.append((plane, bytes(frame.tdata)))
                times.append((frame.sim_time_start, frame.sim_time_end))
        await ClockCycles(dut.clk, 256)
    decoded = [tx.check_frame(plane, raw) for plane, raw in frames]
    _check_messages(tx, posted, decoded)
    period_ps = 8000
    start = min(t[0] for t in times)
    end = max(t[1] for t in times)
    cycles = (end - start) // period_ps + 1
    ideal_beats = sum(-(-len(raw) // tx.w) for _, raw in frames)
    fraction = ideal_beats / cycles
    result = {
        "data_width": tx.w,
        "planes": tx.planes,
        "pmtu": tx.pmtu,
        "packets": total,
        "cycles": cycles,
        "ideal_beats": ideal_beats,
        "line_rate_fraction": round(fraction, 4),
    }
    out = Path(dut_params()["bench_out"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"TX line rate: {ideal_beats} beats in {cycles} cycles = {fraction:.4f} of the core rate "
        f"(data_width {tx.w}, {tx.planes} planes, {total} packets of {tx.pmtu} bytes)"
    )


class _Layouts:
    def __init__(self, dests):
        from amaranth.lib import data

        from mrcnic.hdl.tx.layouts import bits_for

        self.sequence = data.StructLayout({"qp": bits_for(QPS), "psn": 24, "msn": 16, "rqmsn": 16})
        self.qp = data.StructLayout({"qp": bits_for(QPS), "context": qp_context_layout(dests)})
        self.route = data.StructLayout({"dest": bits_for(dests), "template": RouteTemplateLayout})


_ = descriptor_layout


# Three builds: the boards' 64-bit path, the 32-bit path of the reduced NIC (`--nic data_width=4`), a
# 256-bit path, and both ends of the plane count (one plane is the ECPIX-5's NIC); the benchmarks measure
# the 4-plane 64-bit and the 2-plane 256-bit NIC.
CONFIGS = [
    pytest.param({"data_width": 8, "planes": 4}, id="dw8-p4"),
    pytest.param({"data_width": 32, "planes": 1}, id="dw32-p1"),
    # the Colorlight's shape, with its one payload read ahead (BoardSpec.nic)
    pytest.param({"data_width": 4, "planes": 2, "lookahead": 1}, id="dw4-p2"),
]
BENCH_CONFIGS = [
    pytest.param({"data_width": 8, "planes": 4}, id="dw8-p4"),
    pytest.param({"data_width": 32, "planes": 2}, id="dw32-p2"),
]


def _design(params):
    return lambda: TxPipeline(
        data_width=params["data_width"],
        planes=params["planes"],
        qps=QPS,
        ev_slots=EV_SLOTS,
        destinations=params.get("destinations", DESTS),
        lookahead=params.get("lookahead", 4),
        control_in=True,  # as in the NIC: the receive side's control frames go out through here
    )


TESTS = [
    "random_writes_srv6",
    "random_writes_single_ipv6",
    "ev_choices_equal_the_reference_model",
    "retransmissions_by_psn_and_probes",
    "blocked_plane_gets_nothing_while_others_flow",
    "control_frames_share_the_icrc",
]


@pytest.mark.long(seconds=100)
@pytest.mark.parametrize("params", CONFIGS)
def test_tx_pipeline(params):
    run_cocotb(_design(params), name="tx_pipeline", module="test_tx_pipeline", params=params, testcase=TESTS)


# The two-plane boards' TX pipeline: built without SRv6 (no route templates, and the SRV6 register set
# to 1 is ignored: every frame is single-IPv6) and with two payload reads ahead (BOARD_NIC).
@pytest.mark.long(seconds=60)
def test_tx_pipeline_without_srv6():
    params = {"data_width": 8, "planes": 2, "destinations": 0, "lookahead": 2}
    run_cocotb(
        _design(params),
        name="tx_pipeline",
        module="test_tx_pipeline",
        params=params,
        testcase=[
            "random_writes_srv6",
            "random_writes_single_ipv6",
            "retransmissions_by_psn_and_probes",
            "control_frames_share_the_icrc",
        ],
    )


def test_header_builder_needs_a_lookahead():
    from mrcnic.hdl.tx.header_builder import HeaderBuilder

    with pytest.raises(ValueError, match="lookahead must be at least 1, not 0"):
        HeaderBuilder(data_width=8, qps=1, ev_slots=4, planes=2, lookahead=0)


@pytest.mark.bench
@pytest.mark.parametrize("params", BENCH_CONFIGS)
def test_bench_tx(params):
    """`make bench-tx`: prints the line-rate figure and writes build/bench/tx.json (first configuration)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    default = params == BENCH_CONFIGS[0].values[0]
    name = "tx.json" if default else f"tx-dw{params['data_width']}-p{params['planes']}.json"
    bench = dict(params, bench_out=str(root / "build" / "bench" / name))
    # Same Verilator build as the tests: run_params do not take part in the build key.
    run_cocotb(
        _design(params),
        name="tx_pipeline",
        module="test_tx_pipeline",
        params=params,
        testcase="line_rate",
        test_dir_suffix="-bench",
        run_params=bench,
    )
