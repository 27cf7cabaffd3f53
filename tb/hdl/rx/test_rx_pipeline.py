"""The whole RX pipeline on Verilator: frames in on the plane ports, payload in host memory, answers out.

Host memory is a cocotbext-axi ``AxiRamWrite`` filled with a random pattern; the test keeps the image it
expects and compares all of it at the end (placed bytes exact, every other byte untouched). Frames are
built by ``mrcnic.wire`` (a share by scapy); every SACK, NACK and ACK the NIC sends is compared byte for
byte with what the reference model (``mrcnic.model.receiver.Receiver``) sends for the same arrival
sequence, and decoded once by scapy. Hostile frames each hit their own counter and leave the next good
packet placed; a seeded fuzz run sends malformed frames by the hundred.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from types import SimpleNamespace

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import (
    AxiRamWrite,
    AxiStreamBus,
    AxiStreamFrame,
    AxiStreamSink,
    AxiStreamSource,
    AxiWriteBus,
)
from scapy.layers.l2 import Ether

import mrcnic.wire.scapy_layers as sl
from mrcnic import wire
from mrcnic.hdl.rx.feedback_decoder import FeedbackKind, feedback_packet_layout
from mrcnic.hdl.rx.pipeline import RxPipeline, rx_qp_configure_layout
from mrcnic.hdl.rx.validator import mr_entry_layout
from mrcnic.hdl.tx.header_builder import tx_config_layout
from mrcnic.hdl.tx.layouts import bits_for
from mrcnic.hdl.tx.source_router import RouteTemplateLayout
from mrcnic.model.params import Params
from mrcnic.model.receiver import Receiver

from support.cocotb_runner import dut_params, run_cocotb
from support.cocotb_streams import stream_put
from support.layouts import pack, unpack

QPS, MRS, DESTS = 4, 8, 4
LOCATOR = 0xFCBBBB00
MEMORY = 1 << 20
HOST_A, HOST_B = 0, 5  # the peer (sender) and this NIC
GID_A, GID_B = wire.ip6("fd00::1"), wire.ip6("fd00::6")
PD = 3
CLOCK_NS = 4  # 250 MHz: the defaults of the time registers assume it


def never() -> int:
    """The largest value of the ACK timers' registers (``timer_width`` bits): a timer that does not fire
    within any test's waits (65,535 cycles at 16 bits)."""
    return (1 << int(dut_params().get("timer_width", 32))) - 1


def port_mac(plane):
    return 0x020000000500 + plane


def next_hop_mac(plane):
    return 0x0200000FF000 + plane


class Rx:
    """The DUT (NIC B), its memory and plane ports, the sender-side builders and the reference model."""

    def __init__(self, dut, *, seed: int, pause: float = 0.0, srv6: bool = True, pmtu_log2: int = 10):
        p = dut_params()
        self.dut, self.w, self.planes = dut, p["data_width"], p["planes"]
        self.rng = random.Random(seed)
        self.srv6, self.pmtu_log2, self.pmtu = srv6, pmtu_log2, 1 << pmtu_log2
        cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
        self.ram = AxiRamWrite(
            AxiWriteBus.from_prefix(dut, "m_axi", bus_separator="__"), dut.clk, dut.rst, size=MEMORY
        )
        self.ram.log.setLevel(logging.WARNING)
        if pause:  # the memory stalls too: AW and W accepted, B answered, each at random
            for channel in (self.ram.aw_channel, self.ram.w_channel, self.ram.b_channel):
                channel.set_pause_generator(iter(lambda: self.rng.random() < pause / 2, None))
        self.image = bytearray(self.rng.randbytes(MEMORY))
        self.ram.write(0, bytes(self.image))
        self.sources, self.sinks = [], []
        for plane in range(self.planes):
            src = AxiStreamSource(
                AxiStreamBus.from_prefix(dut, f"s_axis__{plane}", bus_separator="__"), dut.clk, dut.rst
            )
            sink = AxiStreamSink(
                AxiStreamBus.from_prefix(dut, f"m_axis__{plane}", bus_separator="__"), dut.clk, dut.rst
            )
            src.log.setLevel(logging.WARNING)
            sink.log.setLevel(logging.WARNING)
            if pause:
                sink.set_pause_generator(iter(lambda: self.rng.random() < pause, None))
            self.sources.append(src)
            self.sinks.append(sink)
        self.route_to_a = wire.RouteTemplate.for_clos(LOCATOR, src_t0=1, dst_t0=0, dst_host=HOST_A)
        self.qpn = {q: 0x200 + q for q in range(QPS)}
        self.peer_qpn = {q: 0x100 + q for q in range(QPS)}
        self.start_psn = {
            q: self.rng.choice([self.rng.randrange(1 << 24), (1 << 24) - 3]) for q in range(QPS)
        }
        # memory regions: index i covers [base, base + length); keys carry a tag above the index bits
        self.regions = {}
        for i in range(MRS - 1):
            base = i * (MEMORY // MRS) + self.rng.randrange(64, 512)
            length = MEMORY // MRS - 1024 - self.rng.randrange(256)
            rkey = (self.rng.randrange(1, 1 << 20) << 12) | i
            self.regions[i] = SimpleNamespace(base=base, length=length, rkey=rkey)
        self.completions = []
        self.allocated = []  # [start, end) of every message's target range
        self.model_frames = []
        self.received = []  # (plane, bytes) of control frames from the DUT
        params = Params(
            window=256, sack_bytes=16384, sack_delay_ps=1 << 60, ack_coalesce_ps=0, base_rtt_ps=1 << 60
        )
        self.models = {q: Receiver(self._model_qp(q), params) for q in range(QPS)}
        for q in range(QPS):
            self.models[q].cack = self.start_psn[q] - 1
            self.models[q].highest = self.start_psn[q] - 1

    # -- addressing ---------------------------------------------------------------------------------
    def port_address(self, plane, host=HOST_B):
        return wire.port_address(LOCATOR, plane, host)

    def forward(self, plane) -> wire.Addressing:
        """A → B as it arrives at B (the uSID container consumed down to B's port address)."""
        return wire.Addressing(
            src_mac=next_hop_mac(plane),
            dst_mac=port_mac(plane),
            src_gid=GID_A,
            dst_gid=GID_B,
            outer_src=self.port_address(plane, HOST_A) if self.srv6 else None,
            outer_dst=self.port_address(plane) if self.srv6 else None,
            hop_limit=60,
        )

    def reverse(self, ev) -> wire.Addressing:
        plane = ev >> 29
        return wire.Addressing(
            src_mac=port_mac(plane),
            dst_mac=next_hop_mac(plane),
            src_gid=GID_B,
            dst_gid=GID_A,
            outer_src=self.port_address(plane) if self.srv6 else None,
            outer_dst=self.route_to_a.destination(ev) if self.srv6 else None,
            hop_limit=64,
        )

    def _model_qp(self, q):
        rx = self

        class Region:
            def __init__(self, r):
                self.r = r

            def contains(self, va, n):
                return self.r.base <= va and va + n <= self.r.base + self.r.length

            def write(self, va, payload):
                pass  # the test's image is updated by the sender side

        endpoint = SimpleNamespace(
            regions={r.rkey: Region(r) for r in self.regions.values()},
            message_placed=lambda *a: None,
        )
        return SimpleNamespace(
            qpn=self.qpn[q],
            peer_qpn=self.peer_qpn[q],
            endpoint=endpoint,
            schedule=lambda *a: None,
            reverse_addressing=self.reverse,
            send_control=lambda plane, frame: rx.model_frames.append((plane, frame.encode())),
        )

    # -- set-up -------------------------------------------------------------------------------------
    async def start(self, *, posts=8, ack_gen_cycles=None, ack_interval=0, base_rtt=None):
        dut = self.dut
        ack_gen_cycles = never() if ack_gen_cycles is None else ack_gen_cycles
        base_rtt = never() if base_rtt is None else base_rtt
        for name in ("qp_configure", "mr_configure", "post_receive", "route_configure"):
            getattr(dut, f"{name}__valid").value = 0
        dut.feedback__ready.value = 1
        dut.receive_completion__ready.value = 1
        dut.config.value = pack(
            tx_config_layout(self.planes),
            {
                "srv6": int(self.srv6),
                "udp_port": 4791,
                "pkey": 0xFFFF,
                "hop_limit": 64,
                "dscp_data": wire.Dscp.TRIMMABLE,
                "dscp_retx": wire.Dscp.TRIMMABLE_RETX,
                "own_gid": GID_B,
                "port_mac": [port_mac(p) for p in range(self.planes)],
                "next_hop_mac": [next_hop_mac(p) for p in range(self.planes)],
                "port_address": [self.port_address(p) for p in range(self.planes)],
            },
        )
        # top-level inputs have no reset value in Verilog: every register is set here
        dut.udp_ports.value = wire.MRC_UDP_PORT | wire.MRC_UDP_PORT_ALT << 16
        dut.dscp_trimmed.value = wire.Dscp.TRIMMED
        dut.dscp_trimmed_lasthop.value = wire.Dscp.TRIMMED_LASTHOP
        dut.dscp_control.value = wire.Dscp.CONTROL
        dut.port_up.value = (1 << self.planes) - 1
        dut.ack_gen_bytes.value = 16384
        dut.ack_gen_cycles.value = ack_gen_cycles
        dut.ack_interval_cycles.value = ack_interval
        dut.base_rtt_cycles.value = base_rtt
        dut.rst.value = 1
        await ClockCycles(dut.clk, 4)
        dut.rst.value = 0
        await ClockCycles(dut.clk, 2)
        for q in range(QPS):
            entry = {
                "connected": 1,
                "qpn": self.qpn[q],
                "peer_qpn": self.peer_qpn[q],
                "peer_gid": GID_A,
                "dest": 2,
                "pd": PD,
                "pmtu_log2": self.pmtu_log2,
            }
            layout = rx_qp_configure_layout(QPS, DESTS)
            value = {"qp": q, "entry": entry, "initial_psn": self.start_psn[q], "initial_rqmsn": 0}
            await stream_put(dut, "qp_configure", pack(layout, value))
            for _ in range(posts):
                await stream_put(dut, "post_receive", q)
        mr_layout = {"index": bits_for(MRS), "entry": mr_entry_layout}
        from amaranth.lib import data

        for i, r in self.regions.items():
            entry = {
                "valid": 1,
                "rkey": r.rkey,
                "pd": PD,
                "remote_write": 1,
                "base": r.base,
                "length": r.length,
            }
            await stream_put(
                dut, "mr_configure", pack(data.StructLayout(mr_layout), {"index": i, "entry": entry})
            )
        route = self.route_to_a
        usids = list(route.usids) + [0] * (6 - len(route.usids))
        template = {
            "locator": route.locator,
            "usids": usids,
            "count": len(route.usids),
            "t1_slot": route.t1_slot,
        }
        layout = data.StructLayout({"dest": bits_for(DESTS), "template": RouteTemplateLayout})
        await stream_put(dut, "route_configure", pack(layout, {"dest": 2, "template": template}))
        cocotb.start_soon(self._collect())

    async def reconnect(self, q, psn):
        """Connect QP ``q`` again (after an error), the peer starting at ``psn``, MSN/RQMSN 0."""
        entry = {
            "connected": 1,
            "qpn": self.qpn[q],
            "peer_qpn": self.peer_qpn[q],
            "peer_gid": GID_A,
            "dest": 2,
            "pd": PD,
            "pmtu_log2": self.pmtu_log2,
        }
        value = {"qp": q, "entry": entry, "initial_psn": psn % (1 << 24), "initial_rqmsn": 0}
        await stream_put(self.dut, "qp_configure", pack(rx_qp_configure_layout(QPS, DESTS), value))

    async def _collect(self):
        dut = self.dut
        while True:
            await RisingEdge(dut.clk)
            for plane, sink in enumerate(self.sinks):
                while not sink.empty():
                    self.received.append((plane, bytes(sink.recv_nowait().tdata)))
            if dut.receive_completion__valid.value:
                self.completions.append(int(dut.receive_completion__payload.value))

    # -- traffic --------------------------------------------------------------------------------------
    def random_ev(self, plane=None):
        plane = self.rng.randrange(self.planes) if plane is None else plane
        return wire.make_ev(plane, self.rng.randrange(256), self.rng.randrange(1 << 21))

    def message(self, q, msn, rqmsn, length, *, imm=None, region=None, exclusive=True):
        """The packets of one WRITE (or WRITE_IMM) message as (psn offset, builder kwargs)."""
        r = self.regions[self.rng.randrange(MRS - 1) if region is None else region]
        while True:  # messages never overlap, so arrival order cannot change the expected image
            va = r.base + self.rng.randrange(r.length - length)
            if not exclusive or all(va + length <= a or b <= va for a, b in self.allocated):
                break
        if exclusive:
            self.allocated.append((va, va + length))
        payload = self.rng.randbytes(length)
        n = -(-length // self.pmtu)
        packets = []
        for k in range(n):
            if n == 1:
                op = wire.Opcode.WRITE_ONLY_IMM if imm is not None else wire.Opcode.WRITE_ONLY
            elif k == 0:
                op = wire.Opcode.WRITE_FIRST
            elif k < n - 1:
                op = wire.Opcode.WRITE_MIDDLE
            else:
                op = wire.Opcode.WRITE_LAST_IMM if imm is not None else wire.Opcode.WRITE_LAST
            part = payload[k * self.pmtu : (k + 1) * self.pmtu]
            packets.append(
                dict(
                    opcode=op,
                    dest_qp=self.qpn[q],
                    msn=msn,
                    rqmsn=rqmsn,
                    va=va + k * self.pmtu,
                    rkey=r.rkey,
                    dma_length=length,
                    payload=part,
                    imm=imm if op.has_immediate else None,
                    timestamp=self.rng.randrange(1 << 16),
                )
            )
        return va, payload, packets

    def frame(self, q, psn, kwargs, *, ev=None, ecn=wire.Ecn.ECT0, **extra):
        ev = self.random_ev() if ev is None else ev
        args = dict(kwargs, **extra)
        frame = wire.data_frame(self.forward(ev >> 29), ev=ev, psn=psn % (1 << 24), ecn=ecn, **args)
        return ev >> 29, frame

    async def send(self, plane, raw, *, model_frame=None, q=None, wait=True):
        """One frame (bytes or a codec frame), alone in the pipeline's input (so the arrival order is the
        model's)."""
        if not isinstance(raw, bytes | bytearray):
            raw = raw.encode()
        await self.sources[plane].send(AxiStreamFrame(raw))
        if wait:
            await self.sources[plane].wait()
        if model_frame is not None:
            self.models[q].on_data(model_frame, 0)

    async def settle(self, cycles=3000):
        await ClockCycles(self.dut.clk, cycles)

    def stat(self, name):
        return int(getattr(self.dut, f"stat_{name}").value)

    def check_memory(self):
        got = self.ram.read(0, MEMORY)
        if got != bytes(self.image):
            bad = [i for i in range(MEMORY) if got[i] != self.image[i]]
            raise AssertionError(f"{len(bad)} bytes differ, first at {bad[0]:#x}")

    def check_answers(self):
        """Every control frame equals the model's, per kind, as a multiset of (plane, bytes)."""
        for plane, raw in self.received:
            frame = wire.decode(raw, check_icrc=True)
            pkt = Ether(raw)
            assert pkt[sl.MRC_BTH].compute_icrc(None) == raw[-4:]
            assert frame.network.dscp == wire.Dscp.CONTROL
            assert wire.ev_fields(frame.ev)[0] == plane
        got = Counter(self.received)
        want = Counter(self.model_frames)
        if got != want:
            extra = [wire.decode(r[1]).opcode.name for r in (got - want)]
            missing = [wire.decode(r[1]).opcode.name for r in (want - got)]
            raise AssertionError(f"answers differ: extra {Counter(extra)}, missing {Counter(missing)}")


def scapy_data_frame(rx, frame, p) -> bytes:
    """The WRITE of ``frame`` (addressing, EV, PSN, ECN from the codec's frame; fields from the packet
    arguments ``p``) built layer by layer by scapy, which computes the lengths, the UDP checksum and the
    ICRC itself."""
    import ipaddress

    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6
    from scapy.packet import Raw

    def ip(value):
        return str(ipaddress.IPv6Address(value))

    def mac(value):
        return ":".join(f"{b:02x}" for b in value.to_bytes(6, "big"))

    ev, net = frame.ev, frame.network
    tc = net.dscp << 2 | net.ecn
    layers = Ether(src=mac(frame.eth.src), dst=mac(frame.eth.dst))
    if frame.outer is not None:
        layers /= IPv6(src=ip(frame.outer.src), dst=ip(frame.outer.dst), nh=41, tc=tc, fl=ev >> 16, hlim=60)
    layers /= IPv6(src=ip(GID_A), dst=ip(GID_B), nh=17, tc=tc, fl=ev >> 16, hlim=60)
    layers /= UDP(sport=ev & 0xFFFF, dport=wire.MRC_UDP_PORT)
    layers /= sl.MRC_BTH(opcode=int(p["opcode"]), dqpn=p["dest_qp"], psn=frame.bth.psn, ts=1, pkey=0xFFFF)
    layers /= sl.MRC_METH_TSETH(rqmsn=p["rqmsn"], msn=p["msn"], tx_timestamp=p["timestamp"])
    layers /= sl.MRC_RETH(va=p["va"], rkey=p["rkey"], dma_length=p["dma_length"])
    if p["imm"] is not None:
        layers /= sl.MRC_ImmDt(imm=p["imm"])
    return bytes(layers / Raw(p["payload"]))


def unpack_completion(value: int) -> dict:
    fields = (("qp", bits_for(QPS)), ("status", 8), ("imm", 32), ("byte_len", 32), ("rqmsn", 16))
    out = {}
    for name, width in fields:
        out[name] = value & ((1 << width) - 1)
        value >>= width
    return out


def kinds(frames):
    return Counter(wire.decode(raw).opcode.name for _, raw in frames)


# -- scoreboard ----------------------------------------------------------------------------------------


async def _reordered_messages(dut, *, srv6):
    seed = random.randrange(1 << 30)
    rx = Rx(dut, seed=seed, pause=0.3, srv6=srv6, pmtu_log2=random.choice([8, 10]))
    print(f"seed {seed}")
    await rx.start()
    rng = rx.rng
    arrivals = []  # (q, psn, packet kwargs)
    for q in range(3):
        psn, rqmsn = rx.start_psn[q], 0
        for msn in range(8):
            length = rng.choice([1, 7, rx.pmtu, rx.pmtu + 1, 3 * rx.pmtu - 5, rng.randint(1, 5 * rx.pmtu)])
            imm = rng.randrange(1 << 32) if rng.random() < 0.4 else None
            va, payload, packets = rx.message(q, msn, rqmsn, length, imm=imm)
            rx.image[va : va + length] = payload
            rqmsn += imm is not None
            for p in packets:
                arrivals.append((q, psn, p))
                psn += 1
    # local reordering (never beyond the window) and duplicates
    order = sorted(range(len(arrivals)), key=lambda i: i + rng.uniform(0, 12))
    sequence = []
    for i in order:
        sequence.append(arrivals[i])
        if rng.random() < 0.1:
            sequence.append(arrivals[rng.choice(order[: order.index(i) + 1])])
    for q, psn, p in sequence:
        ce = rng.random() < 0.1
        plane, frame = rx.frame(q, psn, p, ecn=wire.Ecn.CE if ce else wire.Ecn.ECT0)
        r = rng.random()
        if srv6 and r < 0.15:  # an SRH after the outer header (a source-routing hop left it): skipped
            frame.srh = wire.Srh(segments_left=0, last_entry=rng.randrange(4))
            frame.srh_segments = rng.randbytes(16 * rng.randint(0, 4))
        raw = frame.encode()
        if r > 0.7:  # a share built by scapy on its own (its lengths, checksum, RoCE ICRC)
            raw = scapy_data_frame(rx, frame, p)
        await rx.send(plane, raw, model_frame=wire.decode(raw, check_icrc=True), q=q)
    await rx.settle()
    rx.check_memory()
    rx.check_answers()
    want_imm = sorted(
        (q, c[2], c[3]) for q in range(3) for c in rx.models[q].completions if c[1] == "recv_imm"
    )
    got_imm = []
    for value in rx.completions:
        c = unpack_completion(value)
        assert c["status"] == 0
        got_imm.append((c["qp"], c["rqmsn"], c["imm"]))
    assert sorted(got_imm) == want_imm, f"receive completions {got_imm} != {want_imm}"
    assert rx.stat("placed") == sum(m.c["rx_pkts"] for m in rx.models.values())
    assert rx.stat("duplicate") == sum(m.c["dups"] for m in rx.models.values())
    print(f"answers {kinds(rx.received)}; {len(rx.completions)} receive completions")


@cocotb.test()
async def reordered_messages_srv6(dut):
    await _reordered_messages(dut, srv6=True)


@cocotb.test()
async def reordered_messages_single_ipv6(dut):
    await _reordered_messages(dut, srv6=False)


@cocotb.test()
async def coalescing_pacing_probes_and_feedback(dut):
    """The time- and byte-driven SACK (§7.2), ACK pacing (§7.4), duplicate Last with BTH.A, probes
    (§7.8, also trimmed) and feedback packets for our sending side."""
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rx = Rx(dut, seed=seed, pmtu_log2=10)
    # Waits are for 8-byte beats and longer: a narrower data path takes proportionally longer per packet.
    slow = max(1, 8 // rx.w)
    gen_cycles, interval = 600 * slow, 3000 * slow
    await rx.start(ack_gen_cycles=gen_cycles, ack_interval=interval)
    q, psn = 2, rx.start_psn[2]

    def answers(kind):
        return [f for f in (wire.decode(r) for _, r in rx.received) if f.opcode == kind]

    # 1. Three Middle packets of a long message: no trigger, so one SACK ACK_GEN_TIME after the first.
    va, payload, packets = rx.message(q, 0, 0, 40 * rx.pmtu, region=3)
    rx.image[va : va + len(payload)] = payload
    for k in range(3):
        await rx.send(*rx.frame(q, psn + k, packets[k], ev=rx.random_ev(0)), wait=False)
    await ClockCycles(dut.clk, 50 * slow)
    assert answers(wire.Opcode.SACK) == []
    await ClockCycles(dut.clk, gen_cycles + 200 * slow)
    sacks = answers(wire.Opcode.SACK)
    assert len(sacks) == 1
    seth = sacks[0][wire.Seth]
    assert seth.cack_psn == (psn + 2) % (1 << 24) and seth.ack_psn_offset == 0
    # 2. ACK_GEN bytes (timer off): 16 more in-order packets of 1 KiB -> exactly one SACK, at the 16th.
    dut.ack_gen_cycles.value = never()
    for k in range(3, 19):
        await rx.send(*rx.frame(q, psn + k, packets[k]))
    await ClockCycles(dut.clk, 100 * slow)
    sacks = answers(wire.Opcode.SACK)
    assert len(sacks) == 2 and sacks[1][wire.Seth].cack_psn == (psn + 18) % (1 << 24)
    dut.ack_gen_cycles.value = gen_cycles
    for k in range(19, 40):
        await rx.send(*rx.frame(q, psn + k, packets[k]))
    await ClockCycles(dut.clk, 300 * slow)
    acks = answers(wire.Opcode.ACK)
    assert [a[wire.Aeth].msn for a in acks] == [0]
    psn += 40
    # 3. ACK pacing: two one-packet messages back to back -> the second ACK waits for the interval.
    for msn in (1, 2):
        va, payload, packets = rx.message(q, msn, 0, 100, region=3)
        rx.image[va : va + len(payload)] = payload
        await rx.send(*rx.frame(q, psn, packets[0]))
        psn += 1
    await ClockCycles(dut.clk, 200 * slow)
    assert [a[wire.Aeth].msn for a in answers(wire.Opcode.ACK)] == [0]
    await ClockCycles(dut.clk, interval)
    assert [a[wire.Aeth].msn for a in answers(wire.Opcode.ACK)] == [0, 2]
    # 4. The last packet again with BTH.A = 1 (the requester lost the ACK): SACK and the current AETH.
    plane, frame = rx.frame(q, psn - 1, packets[0], ack_req=True)
    await rx.send(plane, frame.encode())
    await ClockCycles(dut.clk, interval + 200 * slow)
    assert [a[wire.Aeth].msn for a in answers(wire.Opcode.ACK)] == [0, 2, 2]
    assert rx.stat("duplicate") == 1
    # 5. A probe (and a trimmed one): PR = 1 SACK with the probe id, M = SKIP_ONCE when trimmed.
    for probe_id, dscp in ((0x1234, wire.Dscp.CONTROL), (0xFFFE, wire.Dscp.TRIMMED)):
        ev = rx.random_ev()
        frame = wire.control_frame(
            rx.forward(ev >> 29),
            ev=ev,
            opcode=wire.Opcode.PROBE,
            headers=[wire.Peth(probe_id=probe_id, spdcid=1, dpdcid=2, tx_timestamp=99)],
            dest_qp=rx.qpn[q],
            dscp=dscp,
        )
        await rx.send(ev >> 29, frame.encode())
        await ClockCycles(dut.clk, interval + 200 * slow)
        answer = answers(wire.Opcode.SACK)[-1]
        seth, cc = answer[wire.Seth], answer[wire.CcState]
        assert seth.pr == 1 and seth.probe_id == probe_id and seth.entropy == ev
        assert seth.m == (wire.SackVerdict.SKIP_ONCE if dscp == wire.Dscp.TRIMMED else wire.SackVerdict.NONE)
        assert seth.cack_psn == (psn - 1) % (1 << 24) and cc.tx_timestamp == 99
        assert answers(wire.Opcode.ACK)[-1][wire.Aeth].msn == 2  # the current AETH comes along
    assert rx.stat("probes") == 2
    # 6. Feedback for our sending side: SACK, NACK and ACK from the peer become records.
    records = []

    async def take():
        while True:
            await RisingEdge(dut.clk)
            if dut.feedback__valid.value:
                records.append(int(dut.feedback__payload.value))

    cocotb.start_soon(take())
    seth = wire.Seth(ack_psn_offset=3, entropy=0xABCD, cack_psn=77, sack_offset=-5, sack_bitmap=0xFF)
    fb = [
        (wire.Opcode.SACK, [seth, wire.CcState(rcvd_bytes=5)]),
        (wire.Opcode.NACK, [wire.Neth(nack_reason=1, entropy=0x77, nack_psn=12)]),
        (wire.Opcode.ACK, [wire.Aeth(syndrome=0x1F, msn=4)]),
    ]
    for opcode, headers in fb:
        frame = wire.control_frame(rx.forward(0), ev=1, opcode=opcode, headers=headers, dest_qp=rx.qpn[q])
        await rx.send(0, frame.encode())
    await ClockCycles(dut.clk, 100 * slow)
    assert len(records) == 3 and rx.stat("feedback") == 3
    layout = feedback_packet_layout(QPS)
    kinds_seen = [unpack(layout, r).kind for r in records]
    assert kinds_seen == [FeedbackKind.SACK, FeedbackKind.NACK, FeedbackKind.ACK]
    first = unpack(layout, records[0])
    assert first.ev == 0xABCD and first.trigger_psn == 80 and first.sack_base == 72 and first.qp == q
    assert unpack(layout, records[1]).nack_psn == 12 and unpack(layout, records[2]).msn == 4
    rx.check_memory()


# -- hostile input -----------------------------------------------------------------------------------


@cocotb.test()
async def hostile_frames_hit_their_counters(dut):
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rx = Rx(dut, seed=seed, pmtu_log2=8)
    await rx.start()
    rng = rx.rng
    q = 1
    psn = rx.start_psn[q]
    msn = 0

    def good():
        """A fresh one-packet message on QP ``q``; its bytes go into the expected image."""
        nonlocal psn, msn
        va, payload, packets = rx.message(q, msn, 0, rng.randint(1, rx.pmtu))
        rx.image[va : va + len(payload)] = payload
        plane, frame = rx.frame(q, psn, packets[0])
        psn += 1
        msn += 1
        return plane, frame.encode()

    def template():
        _, _, packets = rx.message(q, msn, 0, rng.randint(8, rx.pmtu), exclusive=False)
        return packets[0]

    r0 = rx.regions[0]

    def built(**changes):
        def build(psn, p):
            plane, frame = rx.frame(q, psn, dict(p, **changes))
            return plane, frame.encode()

        return build

    def edited(edit):
        """A frame at ``psn`` whose decoded headers ``edit`` changes (lengths and ICRC recomputed)."""

        def build(psn, p):
            plane, frame = rx.frame(q, psn, p)
            edit(frame)
            return plane, frame.encode()

        return build

    def raw_edit(edit):
        """A frame at ``psn`` whose bytes ``edit`` changes after encoding (nothing recomputed)."""

        def build(psn, p):
            plane, frame = rx.frame(q, psn, p)
            raw = bytearray(frame.encode())
            edit(raw)
            return plane, bytes(raw)

        return build

    def set_ip_length(delta):
        def edit(raw):
            raw[18:20] = (int.from_bytes(raw[18:20], "big") + delta).to_bytes(2, "big")

        return edit

    def set_byte(at, value):
        def edit(raw):
            raw[at] = value if value is not None else raw[at] ^ 0x40

        return edit

    cases = [  # (name, counter, build(psn, packet kwargs) -> (plane, raw))
        ("wrong R_Key", "access_error", lambda psn, p: built(rkey=p["rkey"] ^ 0x1000)(psn, p)),
        ("VA below region", "access_error", built(rkey=r0.rkey, va=r0.base - 1)),
        (
            "VA past region",
            "access_error",
            lambda psn, p: built(rkey=r0.rkey, va=r0.base + r0.length - len(p["payload"]) + 1)(psn, p),
        ),
        ("2^64 overflow", "access_error", built(rkey=r0.rkey, va=(1 << 64) - 4)),
        ("DMA length", "invalid_request", lambda psn, p: built(dma_length=len(p["payload"]) + 1)(psn, p)),
        ("unknown QP", "drop_unknown_qp", built(dest_qp=0x777)),
        ("wrong source", "drop_bad_source", edited(lambda f: setattr(f.ip, "src", wire.ip6("fd00::99")))),
        (
            "not for us",
            "drop_not_for_us",
            edited(lambda f: setattr(f.outer, "dst", rx.port_address(f.ev >> 29, host=9))),
        ),
        ("bad ICRC", "drop_bad_icrc", raw_edit(set_byte(-10, None))),
        ("UDP port", "drop_malformed", edited(lambda f: setattr(f.udp, "dport", 1234))),
        ("IPv6 next header", "drop_malformed", raw_edit(set_byte(14 + 6, 59))),
        ("IPv6 length +1", "drop_malformed", raw_edit(set_ip_length(+1))),
        ("IPv6 length -1", "drop_malformed", raw_edit(set_ip_length(-1))),
        ("random bytes", "drop_malformed", lambda psn, p: (0, rng.randbytes(200))),
    ]
    for cut in (13, 14, 53, 54, 94, 102, 114, 118, 122, 138, -1):
        cases.append(
            (
                f"truncated at {cut}",
                "drop_malformed",
                lambda psn, p, cut=cut: (0, rx.frame(q, psn, p)[1].encode()[:cut]),
            )
        )

    placed = rx.stat("placed")
    for name, counter, build in cases:
        before = rx.stat(counter)
        plane, raw = build(psn, template())
        await rx.send(plane, raw)
        await rx.settle(200)
        assert rx.stat(counter) == before + 1, f"{name}: {counter} {before} -> {rx.stat(counter)}"
        if counter in ("access_error", "invalid_request"):
            # Marked received, not placed; the message completes with a NAK and the QP is in ERROR
            # (§7.4): a WRITE now is refused until the QP is connected again.
            nak = [f for f in (wire.decode(r) for _, r in rx.received) if f.opcode == wire.Opcode.ACK][-1]
            syndrome = nak[wire.Aeth].syndrome
            want = 0x62 if counter == "access_error" else 0x61
            assert (syndrome, nak[wire.Aeth].msn) == (want, msn), name
            assert int(dut.qp_error.value) & (1 << q)
            refused = rx.stat("drop_qp_not_ready")
            refused_plane, refused_frame = rx.frame(q, psn + 1, template())
            await rx.send(refused_plane, refused_frame.encode())
            await rx.settle(200)
            assert rx.stat("drop_qp_not_ready") == refused + 1
            psn, msn = psn + 1, 0
            await rx.reconnect(q, psn)
        good_plane, good_raw = good()
        await rx.send(good_plane, good_raw)
        await rx.settle(200)
        placed += 1
        assert rx.stat("placed") == placed, f"the good packet after {name} was not placed"
    rx.check_memory()


@cocotb.test()
async def trimmed_and_out_of_window_are_nacked(dut):
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rx = Rx(dut, seed=seed, pmtu_log2=8)
    await rx.start(base_rtt=2000)
    q = 0
    psn = rx.start_psn[q]
    _, _, packets = rx.message(q, 0, 0, 3 * rx.pmtu)
    # trimmed: header only, DSCP TRIMMED, then LASTHOP
    for dscp, counter, reason in (
        (wire.Dscp.TRIMMED, "trimmed", wire.NackReason.TRIMMED),
        (wire.Dscp.TRIMMED_LASTHOP, "trimmed_lasthop", wire.NackReason.TRIMMED_LASTHOP),
    ):
        plane, frame = rx.frame(q, psn + 1, packets[1], dscp=dscp)
        raw = frame.encode()
        trimmed = raw[: len(raw) - len(packets[1]["payload"]) - 4]
        await rx.send(plane, trimmed)
        await rx.settle(300)
        assert rx.stat(counter) == 1
        nack = wire.decode(rx.received[-1][1])
        assert nack.opcode == wire.Opcode.NACK
        neth = nack[wire.Neth]
        assert (neth.nack_reason, neth.nack_psn, neth.entropy) == (reason, (psn + 1) % (1 << 24), frame.ev)
    # beyond the window: one NACK per base_rtt, the rest counted
    for k in range(3):
        plane, frame = rx.frame(q, psn + 300 + k, packets[1])
        await rx.send(plane, frame.encode())
    await rx.settle(300)
    assert rx.stat("psn_out_of_window") == 3 and rx.stat("oor_nack_suppressed") == 2
    oor = [wire.decode(r) for _, r in rx.received if wire.decode(r).opcode == wire.Opcode.NACK]
    assert oor[-1][wire.Neth].nack_reason == wire.NackReason.PSN_OOR_WINDOW
    assert rx.stat("placed") == 0
    rx.check_memory()


@cocotb.test()
async def timers_after_a_long_idle(dut):
    """The ACK interval (§7.4) and the out-of-window NACK's pacing after the QP was idle for longer than
    the engine's time wraps (2^(w+1) cycles for w-bit timer registers): a stamp from before the idle does
    not read as recent, so neither the NACK nor the ACK waits; right after them both are paced again."""
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rx = Rx(dut, seed=seed, pmtu_log2=8)
    slow = max(1, 8 // rx.w)
    interval = rtt = 2000 * slow
    await rx.start(ack_interval=interval, base_rtt=rtt)
    q = 1
    psn = rx.start_psn[q]
    _, _, far = rx.message(q, 0, 0, rx.pmtu)

    def answers(kind):
        return [f for f in (wire.decode(r) for _, r in rx.received) if f.opcode == kind]

    async def message(msn):
        nonlocal psn
        va, payload, packets = rx.message(q, msn, 0, 100, region=3)
        rx.image[va : va + len(payload)] = payload
        await rx.send(*rx.frame(q, psn, packets[0]))
        psn += 1

    async def out_of_window():
        plane, frame = rx.frame(q, psn + 300, far[0])
        await rx.send(plane, frame.encode())

    await out_of_window()
    await message(0)
    await ClockCycles(dut.clk, 300 * slow)
    assert len(answers(wire.Opcode.NACK)) == 1 and [a[wire.Aeth].msn for a in answers(wire.Opcode.ACK)] == [0]
    # Idle until the time has wrapped once and is a few hundred cycles past both stamps again (2^17 + 200:
    # the wrap of 16-bit registers' time; no wrap at all with 32 bits, where the test asserts the same).
    await ClockCycles(dut.clk, (1 << 17) + 200 * slow)
    await out_of_window()
    await message(1)
    await ClockCycles(dut.clk, 300 * slow)
    assert len(answers(wire.Opcode.NACK)) == 2 and rx.stat("oor_nack_suppressed") == 0
    assert [a[wire.Aeth].msn for a in answers(wire.Opcode.ACK)] == [0, 1]
    # Within the interval again: the NACK is suppressed, the next ACK waits for the interval's end.
    await out_of_window()
    await message(2)
    await ClockCycles(dut.clk, 300 * slow)
    assert len(answers(wire.Opcode.NACK)) == 2 and rx.stat("oor_nack_suppressed") == 1
    assert [a[wire.Aeth].msn for a in answers(wire.Opcode.ACK)] == [0, 1]
    await ClockCycles(dut.clk, interval)
    assert [a[wire.Aeth].msn for a in answers(wire.Opcode.ACK)] == [0, 1, 2]
    assert rx.stat("psn_out_of_window") == 3 and rx.stat("placed") == 3
    rx.check_memory()


@cocotb.test()
async def fuzz_then_good_message(dut):
    """Seeded random malformed frames: mutated good frames, truncations, random bytes. Afterwards memory
    outside every placed message is untouched and a good message is still placed."""
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rx = Rx(dut, seed=seed, pmtu_log2=8)
    await rx.start()
    rng = rx.rng
    q = 3
    # Every fuzz frame targets region 6. A mutation the ICRC does not see (outer IPv6 header, masked
    # fields, UDP checksum) leaves a valid packet that may be placed there, so region 6 is the one part of
    # memory the test does not compare; every byte outside it must be untouched.
    sacrificial = rx.regions[6]
    frames = 1000
    for _ in range(frames):
        _, _, packets = rx.message(q, 0, 0, rng.randint(1, rx.pmtu), region=6, exclusive=False)
        plane, frame = rx.frame(q, rx.start_psn[q] + rng.randrange(-5, 400), packets[0])
        raw = bytearray(frame.encode())
        r = rng.random()
        if r < 0.5:
            for _ in range(rng.randint(1, 4)):
                raw[rng.randrange(len(raw))] = rng.randrange(256)
        elif r < 0.8:
            raw = raw[: rng.randrange(1, len(raw))]
        else:
            raw = bytearray(rng.randbytes(rng.randint(1, 300)))
        await rx.sources[plane].send(AxiStreamFrame(bytes(raw)))
    for src in rx.sources:
        await src.wait()
    await rx.settle(2000)
    dropped = sum(
        rx.stat(f"drop_{d}") for d in ("malformed", "bad_icrc", "not_for_us", "unknown_qp", "bad_source")
    )
    print(f"fuzz: {rx.stat('frames')} frames, {dropped} dropped, {rx.stat('placed')} placed in region 6")
    assert dropped >= 0.9 * frames
    start, end = sacrificial.base, sacrificial.base + sacrificial.length
    rx.image[start:end] = rx.ram.read(start, end - start)
    rx.check_memory()
    # the pipeline still works: a good two-packet message on a freshly connected QP
    await rx.reconnect(q, 1000)
    va, payload, packets = rx.message(q, 0, 0, 2 * rx.pmtu, region=2)
    rx.image[va : va + len(payload)] = payload
    placed = rx.stat("placed")
    for k, p in enumerate(packets):
        plane, frame = rx.frame(q, 1000 + k, p)
        await rx.send(plane, frame.encode())
    await rx.settle(1000)
    assert rx.stat("placed") == placed + 2
    rx.check_memory()


@cocotb.test()
async def line_rate(dut):
    """`make bench-rx`: back-to-back 4 KiB-PMTU data packets, no backpressure anywhere. The figure is the
    input beats of all frames over the cycles from the first input beat to the last payload beat written
    to memory (the AXI W channel), i.e. the fraction of the input line rate the pipeline sustains."""
    import json
    from pathlib import Path

    pmtu_log2 = int(dut_params().get("pmtu_log2", 12))
    rx = Rx(dut, seed=1, pmtu_log2=pmtu_log2)
    await rx.start(ack_gen_cycles=1000, ack_interval=250)
    messages, packets_per_message = 4, 16 << (12 - pmtu_log2)
    raws = []
    for q in range(messages):
        psn = rx.start_psn[q]
        va, payload, packets = rx.message(q, 0, 0, packets_per_message * rx.pmtu, region=q)
        rx.image[va : va + len(payload)] = payload
        for k, p in enumerate(packets):
            _, frame = rx.frame(q, psn + k, p, ev=rx.random_ev(0))
            raws.append(frame.encode())
    first = last = None
    cycle = 0

    async def watch():
        nonlocal first, last, cycle
        while True:
            await RisingEdge(dut.clk)
            cycle += 1
            if first is None and dut.s_axis__0__tvalid.value and dut.s_axis__0__tready.value:
                first = cycle
            if dut.m_axi__wvalid.value and dut.m_axi__wready.value:
                last = cycle

    cocotb.start_soon(watch())
    for raw in raws:
        await rx.sources[0].send(AxiStreamFrame(raw))
    await rx.sources[0].wait()
    total = len(raws)
    for _ in range(400):
        if rx.stat("placed") == total and rx.stat("dma_commands") == total:
            break
        await ClockCycles(dut.clk, 100)
    await ClockCycles(dut.clk, 200)
    rx.check_memory()
    ideal = sum(-(-len(raw) // rx.w) for raw in raws)
    cycles = last - first + 1
    fraction = ideal / cycles
    result = {
        "data_width": rx.w,
        "planes": rx.planes,
        "packets": total,
        "pmtu": rx.pmtu,
        "cycles": cycles,
        "ideal_beats": ideal,
        "line_rate_fraction": round(fraction, 4),
    }
    out = Path(dut_params()["bench_out"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"RX line rate: {ideal} input beats placed in {cycles} cycles = {fraction:.4f} of the input rate "
        f"(data_width {rx.w}, {rx.planes} planes, {total} packets of {rx.pmtu} B)"
    )
    assert rx.stat("placed") == total


# -- runner ------------------------------------------------------------------------------------------

# Three builds: the boards' 64-bit path, the 32-bit path of the reduced NIC (`--nic data_width=4`), a
# 256-bit path, and both ends of the plane count (one plane is the ECPIX-5's NIC); the benchmarks measure
# the 4-plane 64-bit and the 2-plane 256-bit NIC.
CONFIGS = [
    pytest.param({"data_width": 8, "planes": 4}, id="dw8-p4"),
    pytest.param({"data_width": 32, "planes": 1}, id="dw32-p1"),
    # the boards' path width, with the Colorlight's 16-bit ACK timers
    pytest.param({"data_width": 4, "planes": 2, "timer_width": 16}, id="dw4-p2"),
]
BENCH_CONFIGS = [
    pytest.param({"data_width": 8, "planes": 4}, id="dw8-p4"),
    pytest.param({"data_width": 32, "planes": 2}, id="dw32-p2"),
]


def _design(params):
    return lambda: RxPipeline(
        data_width=params["data_width"],
        planes=params["planes"],
        qps=QPS,
        mrs=MRS,
        destinations=DESTS,
        timer_width=params.get("timer_width", 32),
    )


TESTS = [
    "coalescing_pacing_probes_and_feedback",
    "reordered_messages_srv6",
    "reordered_messages_single_ipv6",
    "hostile_frames_hit_their_counters",
    "trimmed_and_out_of_window_are_nacked",
    "timers_after_a_long_idle",
    "fuzz_then_good_message",
]


@pytest.mark.long(seconds=100)
@pytest.mark.parametrize("params", CONFIGS)
def test_rx_pipeline(params):
    run_cocotb(_design(params), name="rx_pipeline", module="test_rx_pipeline", params=params, testcase=TESTS)


@pytest.mark.bench
@pytest.mark.parametrize("params", BENCH_CONFIGS)
def test_bench_rx(params):
    """`make bench-rx`: prints the line-rate figure and writes build/bench/rx.json (first configuration)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    default = params == BENCH_CONFIGS[0].values[0]
    name = "rx.json" if default else f"rx-dw{params['data_width']}-p{params['planes']}.json"
    bench = dict(params, bench_out=str(root / "build" / "bench" / name))
    run_cocotb(
        _design(params),
        name="rx_pipeline",
        module="test_rx_pipeline",
        params=params,
        testcase="line_rate",
        test_dir_suffix="-bench",
        run_params=bench,
    )
