"""Response builder: every SACK / NACK / ACK frame equals ``mrcnic.wire.control_frame`` byte for byte.

Amaranth simulator, W = 8 and 32, 1/2/4 planes, SRv6 and single-IPv6 mode: random records of all three
kinds (probe answers with PR = 1, negative offsets, ooo_count past the 15-bit field, random EVs), random
port_up masks (down ports, no port at all), a route template rewritten mid-run, unknown opcodes, random
stalls on both sides. Each frame is compared with the codec's frame built from the matching
``Addressing`` (outer DA from ``RouteTemplate.destination``), and decoded once by scapy
(``mrcnic.wire.scapy_layers``: fields and scapy's own RoCE ICRC). Beats must be packed, the plane
sideband constant and right, and the counters exact. One cocotb/Verilator smoke test runs the Verilog.
"""

import os
import random

import cocotb
import pytest
from amaranth.lib import data
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

import mrcnic.wire.scapy_layers as sl
from mrcnic import wire
from mrcnic.hdl.rx.response_builder import ResponseBuilder, output_layout, peer_layout, response_layout
from mrcnic.hdl.tx.header_builder import tx_config_layout
from mrcnic.hdl.tx.layouts import bits_for
from mrcnic.hdl.tx.source_router import RouteTemplateLayout
from mrcnic.wire import Opcode
from mrcnic.wire.headers import probe_id_offset
from mrcnic.wire.usid import NO_T1_SLOT, Role

from support.cocotb_runner import dut_params, run_cocotb
from support.layouts import pack
from support.pysim import run, stream_get, stream_put

QPS, DESTS = 8, 4
KINDS = (Opcode.SACK, Opcode.NACK, Opcode.ACK)
PEER_FIELDS = ("dest", "peer_qpn", "peer_gid", "own_qpn")  # per QP, in the builder's peer table


# -- the Python picture of the block's configuration and of each frame ------------------------------
class Setup:
    """Random NIC registers and route templates, and the codec frame each record must become."""

    def __init__(self, rng, *, planes, srv6):
        self.rng, self.planes, self.srv6 = rng, planes, srv6
        self.locator = rng.randrange(1 << 32)
        self.own_gid = rng.randrange(1 << 128)
        self.hop_limit = rng.randrange(1, 256)
        # None: the register's reset value (CONTROL). Any other value but the trimmed marks (§9.1).
        trimmed = (wire.Dscp.TRIMMED, wire.Dscp.TRIMMED_LASTHOP)
        self.dscp = rng.choice([None, rng.choice([d for d in range(64) if d not in trimmed])])
        host = rng.randrange(2048)
        self.port_mac = [rng.randrange(1 << 48) for _ in range(planes)]
        self.next_hop_mac = [rng.randrange(1 << 48) for _ in range(planes)]
        self.port_address = [wire.port_address(self.locator, p, host) for p in range(planes)]
        self.routes = [self.random_route() for _ in range(DESTS)]
        self.peers = [self.random_peer() for _ in range(QPS)]

    def random_peer(self):
        rng = self.rng
        return {
            "dest": rng.randrange(DESTS),
            "peer_qpn": rng.randrange(1 << 24),
            "peer_gid": rng.randrange(1 << 128),
            "own_qpn": rng.randrange(1 << 24),
        }

    def peer_configure(self, qp):
        return {"qp": qp, "peer": dict(self.peers[qp])}

    async def configure_peers(self, ctx, dut, peers=None, **stalls):
        """Write every QP's peer (``peers``: these instead of the current ones)."""
        for q, peer in enumerate(peers or self.peers):
            await stream_put(ctx, dut.peer_configure, {"qp": q, "peer": dict(peer)}, **stalls)

    @staticmethod
    def to_dut(rec):
        """The record as the block takes it: the QP's addressing is in its peer table."""
        return {k: v for k, v in rec.items() if k not in PEER_FIELDS}

    def random_route(self):
        rng = self.rng
        kind = rng.choice(["clos", "same_t0", "custom"])
        if kind == "custom":  # any length, any T1 slot
            n = rng.randint(1, 6)
            usids = [
                wire.usid(rng.randrange(8), rng.choice(list(Role)), rng.randrange(2048)) for _ in range(n)
            ]
            return wire.RouteTemplate(self.locator, usids, rng.choice([NO_T1_SLOT, rng.randrange(n)]))
        t0 = rng.randrange(64)
        dst_t0 = t0 if kind == "same_t0" else rng.randrange(64)
        return wire.RouteTemplate.for_clos(self.locator, t0, dst_t0, rng.randrange(2048))

    def config(self):
        return {
            "srv6": int(self.srv6),
            "udp_port": wire.MRC_UDP_PORT,
            "pkey": 0xFFFF,
            "hop_limit": self.hop_limit,
            "dscp_data": wire.Dscp.TRIMMABLE,
            "dscp_retx": wire.Dscp.TRIMMABLE_RETX,
            "own_gid": self.own_gid,
            "port_mac": self.port_mac,
            "next_hop_mac": self.next_hop_mac,
            "port_address": self.port_address,
        }

    @staticmethod
    def template(dest, route):
        usids = list(route.usids) + [0] * (6 - len(route.usids))
        return {
            "dest": dest,
            "template": {
                "locator": route.locator,
                "usids": usids,
                "count": len(route.usids),
                "t1_slot": route.t1_slot,
            },
        }

    def random_record(self, *, bad_opcode=False):
        rng = self.rng
        kind = rng.choice(KINDS)
        if bad_opcode:
            kind = rng.choice([Opcode.PROBE, Opcode.WRITE_ONLY, 0x00, 0xFF])
        pr = int(kind == Opcode.SACK and rng.random() < 0.25)
        ack_offset = probe_id_offset(rng.randrange(1 << 16)) if pr else rng.randrange(-(1 << 15), 1 << 15)
        qp = rng.randrange(QPS)
        return {
            "opcode": int(kind),
            "ev": rng.randrange(1 << 32),
            "qp": qp,
            **self.peers[qp],  # what the frame must carry; not sent (``to_dut``)
            # Every block random, whatever the kind: fields of other kinds must not leak into the frame.
            "seth": {
                "m": rng.randrange(3),
                "pr": pr,
                "ack_psn_offset": ack_offset,
                "cack_psn": rng.randrange(1 << 24),
                "sack_offset": rng.choice([rng.randrange(-(1 << 15), 1 << 15), -8, -6, 0]),
                "sack_bitmap": rng.randrange(1 << 64),
            },
            "cc": {
                "tx_timestamp": rng.randrange(1 << 16),
                "ooo_count": rng.choice(
                    [rng.randrange(1 << 15), rng.randrange(1 << 16), 0x7FFF, 0x8000, 0xFFFF]
                ),
                "rcvd_bytes": rng.randrange(1 << 24),
            },
            "neth": {
                "nack_reason": rng.choice([int(r) for r in wire.NackReason] + [rng.randrange(256)]),
                "nack_psn": rng.randrange(1 << 24),
                "tx_timestamp": rng.randrange(1 << 16),
            },
            "aeth": {"syndrome": rng.choice([0x1F, 0x61, 0x62, 0x63]), "msn": rng.randrange(1 << 24)},
        }

    def random_port_up(self):
        rng, full = self.rng, (1 << self.planes) - 1
        x = rng.random()
        if x < 0.5:
            return full
        if x < 0.9:
            return rng.randrange(1, full + 1)
        return 0

    def plane_for(self, ev, port_up):
        """§5.8 as the block implements it: ev[31:29] mod P, else the lowest up port, else None."""
        asked = (ev >> 29) % self.planes
        if port_up >> asked & 1:
            return asked
        up = [p for p in range(self.planes) if port_up >> p & 1]
        return up[0] if up else None

    def expected(self, rec, port_up, routes):
        """(plane, frame bytes) the record must give, or None if it is dropped."""
        if rec["opcode"] not in KINDS:
            return None
        plane = self.plane_for(rec["ev"], port_up)
        if plane is None:
            return None
        ev = rec["ev"]
        route_ev = (ev & ((1 << 29) - 1)) | (plane << 29)
        addr = wire.Addressing(
            src_mac=self.port_mac[plane],
            dst_mac=self.next_hop_mac[plane],
            src_gid=self.own_gid,
            dst_gid=rec["peer_gid"],
            outer_src=self.port_address[plane] if self.srv6 else None,
            outer_dst=routes[rec["dest"]].destination(route_ev) if self.srv6 else None,
            hop_limit=self.hop_limit,
        )
        spdcid, dpdcid = rec["own_qpn"] & 0xFFFF, rec["peer_qpn"] & 0xFFFF
        op = Opcode(rec["opcode"])
        if op == Opcode.SACK:
            s, c = rec["seth"], rec["cc"]
            headers = [
                wire.Seth(
                    m=s["m"],
                    pr=s["pr"],
                    ack_psn_offset=s["ack_psn_offset"],
                    entropy=ev,
                    spdcid=spdcid,
                    dpdcid=dpdcid,
                    cack_psn=s["cack_psn"],
                    sack_offset=s["sack_offset"],
                    sack_bitmap=s["sack_bitmap"],
                ),
                wire.CcState(
                    tx_timestamp=c["tx_timestamp"],
                    ooo_count=min(c["ooo_count"], 0x7FFF),
                    rcvd_bytes=c["rcvd_bytes"],
                ),
            ]
        elif op == Opcode.NACK:
            n = rec["neth"]
            headers = [
                wire.Neth(
                    nack_reason=n["nack_reason"],
                    entropy=ev,
                    spdcid=spdcid,
                    dpdcid=dpdcid,
                    nack_psn=n["nack_psn"],
                    tx_timestamp=n["tx_timestamp"],
                )
            ]
        else:
            headers = [wire.Aeth(**rec["aeth"])]
        dscp = wire.Dscp.CONTROL if self.dscp is None else self.dscp
        frame = wire.control_frame(
            addr, ev=route_ev, opcode=op, headers=headers, dest_qp=rec["peer_qpn"], dscp=dscp
        )
        return plane, frame.encode()

    def scapy_check(self, raw, rec, plane, routes):
        """Independent decode of a few fields, and scapy's own RoCEv2 ICRC over the covered bytes."""
        pkt = Ether(raw)
        route_ev = (rec["ev"] & ((1 << 29) - 1)) | (plane << 29)
        assert pkt[Ether].src == _mac_str(self.port_mac[plane]) and pkt[Ether].dst == _mac_str(
            self.next_hop_mac[plane]
        )
        net = pkt[IPv6]  # the network header: the outer one in SRv6 mode
        dscp = wire.Dscp.CONTROL if self.dscp is None else self.dscp
        assert net.tc == dscp << 2, "DSCP CONTROL register, ECN Not-ECT"
        if self.srv6:
            assert net.nh == 41 and wire.ip6(net.dst) == routes[rec["dest"]].destination(route_ev)
            assert wire.ip6(net.src) == self.port_address[plane]
        assert pkt[UDP].sport == route_ev & 0xFFFF and pkt[UDP].len == len(raw) - (94 if self.srv6 else 54)
        bth = pkt[sl.MRC_BTH]
        assert (bth.opcode, bth.dqpn, bth.psn, bth.pkey) == (rec["opcode"], rec["peer_qpn"], 0, 0xFFFF)
        assert bth.compute_icrc(None) == raw[-4:]
        if rec["opcode"] == Opcode.SACK:
            seth = pkt[sl.MRC_SETH]
            assert seth.entropy == rec["ev"] and seth.pr == rec["seth"]["pr"]
            assert seth.sack_offset == rec["seth"]["sack_offset"]
            assert pkt[sl.MRC_CC_STATE].ooo_count == min(rec["cc"]["ooo_count"], 0x7FFF)
        elif rec["opcode"] == Opcode.NACK:
            neth = pkt[sl.MRC_NETH]
            assert neth.entropy == rec["ev"] and neth.nack_psn == rec["neth"]["nack_psn"]
        else:
            assert pkt[sl.MRC_AETH].msn == rec["aeth"]["msn"]


def _mac_str(value):
    return ":".join(f"{b:02x}" for b in value.to_bytes(6, "big"))


def _frame_lengths(srv6):
    base = 14 + 40 * (2 if srv6 else 1) + 8 + 12 + 4
    return {Opcode.SACK: base + 36, Opcode.NACK: base + 20, Opcode.ACK: base + 4}


# -- Amaranth simulator ---------------------------------------------------------------------------
# srv6 None: a builder built without SRv6 (destinations = 0), its SRV6 register set to 1 all the same.
# icrc False: built with append_icrc=False (the NIC's: its transmit pipeline appends the ICRC).
CONFIGS = [(w, planes, srv6, True) for w in (8, 32) for planes in (1, 2, 4) for srv6 in (True, False)]
CONFIGS += [
    (8, 2, None, True),
    (32, 1, None, True),
    (8, 2, None, False),
    (8, 4, True, False),
    (4, 1, False, False),
    (4, 2, True, False),
    (4, 2, None, False),
]
MODE_IDS = {True: "srv6", False: "single", None: "built-without-srv6"}


@pytest.mark.parametrize(
    "w, planes, srv6, icrc",
    CONFIGS,
    ids=[f"dw{w}-p{p}-{MODE_IDS[s]}" + ("" if c else "-no-icrc") for w, p, s, c in CONFIGS],
)
def test_frames_equal_the_codec(w, planes, srv6, icrc):
    seed = int(os.environ.get("SEED") or random.randrange(1 << 30))
    print(f"seed {seed} (SEED={seed} reproduces)")
    rng = random.Random(seed)
    built = srv6 is not None
    srv6 = bool(srv6)
    setup = Setup(rng, planes=planes, srv6=srv6)
    # Without SRv6 there are no templates to write, and the record's dest (1 bit) is ignored.
    dests = DESTS if built else 2
    dut = ResponseBuilder(
        data_width=w, planes=planes, qps=QPS, destinations=DESTS if built else 0, append_icrc=icrc
    )
    n_records = 120
    rewrite_at = n_records // 2  # dest 0's template is rewritten here: later records use the new one
    new_route = setup.random_route()
    for peer in setup.peers:
        peer["dest"] %= dests
    first_peers = list(setup.peers)
    new_peer = {**setup.random_peer(), "dest": 0}  # QP 0's peer from rewrite_at on (0: dest 0's route)
    plan = []  # (record, port_up, routes in force)
    for i in range(n_records):
        routes = setup.routes if i < rewrite_at else [new_route, *setup.routes[1:]]
        if i == rewrite_at:
            setup.peers[0] = new_peer
        rec = setup.random_record(bad_opcode=rng.random() < 0.04)
        plan.append((rec, setup.random_port_up(), routes))
    expected = [
        (rec, routes, exp) for rec, up, routes in plan if (exp := setup.expected(rec, up, routes)) is not None
    ]
    got = []
    counters = {}

    async def source(ctx):
        ctx.set(dut.config, {**setup.config(), "srv6": 1} if not built else setup.config())
        if setup.dscp is not None:
            ctx.set(dut.dscp_control, setup.dscp)
        await setup.configure_peers(ctx, dut, first_peers, stall=0.3, rng=rng)
        for d, route in enumerate(setup.routes if built else []):
            await stream_put(ctx, dut.route_configure, Setup.template(d, route), stall=0.3, rng=rng)
        for i, (rec, up, _) in enumerate(plan):
            if i == rewrite_at:  # QP 0's peer is rewritten: it waits for the held record, if any
                await stream_put(ctx, dut.peer_configure, {"qp": 0, "peer": new_peer})
            if i == rewrite_at and built:
                await stream_put(ctx, dut.route_configure, Setup.template(0, new_route))
            ctx.set(dut.port_up, up)  # sampled in the cycle the record is taken
            await stream_put(ctx, dut.response, Setup.to_dut(rec), stall=0.3, rng=rng)

    async def sink(ctx):
        beats, planes_seen = [], set()
        while len(got) < len(expected):
            beat = await stream_get(ctx, dut.o, stall=0.4, rng=rng)
            n = bin(beat.keep).count("1")
            assert beat.keep == (1 << n) - 1 and n > 0, "keep contiguous from lane 0"
            if not beat.last:
                assert n == w, "packed: every beat full but the last"
            beats.append(beat.data.to_bytes(w, "little")[:n])
            planes_seen.add(beat.plane)
            if beat.last:
                assert len(planes_seen) == 1, "plane constant over a frame"
                got.append((planes_seen.pop(), b"".join(beats)))
                beats = []
        for _ in range(60):  # nothing more comes out
            await ctx.tick()
            assert not ctx.get(dut.o.valid)
        for name in ("sacks", "nacks", "acks", "no_plane", "bad_opcode"):
            counters[name] = ctx.get(getattr(dut, f"stat_{name}"))

    run(dut, source, sink, name=f"response_builder_{w}_{planes}_{srv6}_{icrc}")

    assert len(got) == len(expected)
    lengths = _frame_lengths(srv6)
    for i, ((plane, raw), (rec, routes, (exp_plane, exp_raw))) in enumerate(zip(got, expected, strict=True)):
        assert plane == exp_plane, f"frame {i}: plane"
        if not icrc:  # the frame without its last four bytes; the rest of the checks on the whole frame
            assert raw == exp_raw[:-4], f"frame {i}: got {raw.hex()}\nwant {exp_raw[:-4].hex()} (no ICRC)"
            raw += exp_raw[-4:]
        assert raw == exp_raw, (
            f"frame {i} ({Opcode(rec['opcode']).name}):\n got {raw.hex()}\nwant {exp_raw.hex()}"
        )
        assert len(raw) == lengths[rec["opcode"]]
        frame = wire.decode(raw, check_icrc=True)
        assert frame.srv6 == srv6 and frame.bth.psn == 0
        setup.scapy_check(raw, rec, plane, routes)
    kinds = [rec["opcode"] for rec, _, _ in expected]
    assert counters == {
        "sacks": kinds.count(Opcode.SACK),
        "nacks": kinds.count(Opcode.NACK),
        "acks": kinds.count(Opcode.ACK),
        "no_plane": sum(1 for rec, up, _ in plan if rec["opcode"] in KINDS and up == 0),
        "bad_opcode": sum(1 for rec, _, _ in plan if rec["opcode"] not in KINDS),
    }
    # The test must have exercised what it claims to (fixed lengths make these near-certain).
    assert set(kinds) == set(KINDS) or len(expected) < 12


def test_reverse_path_rule_cases():
    """Directed §5.8 cases on 4 planes: named port up, down (lowest up port, EV fields rewritten,
    entropy kept), a plane number >= P (taken mod P), and no port up (dropped, counted)."""
    rng = random.Random(7)
    setup = Setup(rng, planes=4, srv6=True)
    dut = ResponseBuilder(data_width=8, planes=4, qps=QPS, destinations=DESTS)
    ev = wire.make_ev(plane=2, uplink=9, salt=0x1234)
    cases = [  # (ev, port_up, plane used)
        (ev, 0b1111, 2),
        (ev, 0b1010, 1),
        (ev, 0b1000, 3),
        (wire.make_ev(plane=6, uplink=1, salt=5), 0b1111, 2),
        (ev, 0b0000, None),
    ]
    records = []
    for i, (e, _, _) in enumerate(cases):
        rec = setup.random_record()
        rec.update(opcode=int(KINDS[i % 3]), ev=e)
        records.append(rec)
    got = []

    async def source(ctx):
        ctx.set(dut.config, setup.config())
        await setup.configure_peers(ctx, dut)
        for d, route in enumerate(setup.routes):
            await stream_put(ctx, dut.route_configure, Setup.template(d, route))
        for rec, (_, up, _) in zip(records, cases, strict=True):
            ctx.set(dut.port_up, up)
            await stream_put(ctx, dut.response, Setup.to_dut(rec))

    async def sink(ctx):
        while len(got) < 4:
            raw = b""
            while True:
                beat = await stream_get(ctx, dut.o)
                raw += beat.data.to_bytes(8, "little")[: bin(beat.keep).count("1")]
                if beat.last:
                    break
            got.append((beat.plane, raw))
        for _ in range(40):
            await ctx.tick()
        assert ctx.get(dut.stat_no_plane) == 1

    run(dut, source, sink, name="response_builder_rpr")
    for (plane, raw), rec, (e, up, want) in zip(got, records[:4], cases[:4], strict=True):
        assert plane == want
        frame = wire.decode(raw, check_icrc=True)
        assert wire.ev_fields(frame.ev)[0] == want, "the frame's own EV names its port"
        assert frame.ev & ((1 << 29) - 1) == e & ((1 << 29) - 1), "uplink and salt kept"
        if frame.opcode != Opcode.ACK:
            echoed = frame[wire.Seth if frame.opcode == Opcode.SACK else wire.Neth].entropy
            assert echoed == e, "the echoed EV is never modified"
        assert frame.outer.dst == setup.routes[rec["dest"]].destination(frame.ev)
        assert (plane, raw) == setup.expected(rec, up, setup.routes)


@pytest.mark.parametrize("w", [8, 32])
def test_each_frame_keeps_the_mode_it_was_built_in(w):
    """SRV6 switched off while an SRv6 frame waits in the emitter (output held): that frame still goes
    out whole in SRv6 mode (the emitter takes its beats where that mode's layout put them), the next one
    in single-IPv6 mode; and back. Frames byte-exact, ICRC checked, scapy decode."""
    rng = random.Random(11)
    setup = Setup(rng, planes=2, srv6=True)
    dut = ResponseBuilder(data_width=w, planes=2, qps=QPS, destinations=DESTS)
    records = []
    for kind in (Opcode.SACK, Opcode.NACK, Opcode.ACK):
        rec = setup.random_record()
        rec["opcode"] = int(kind)
        records.append(rec)
    modes = [True, False, True]
    released, got = [], []

    async def source(ctx):
        if setup.dscp is not None:
            ctx.set(dut.dscp_control, setup.dscp)
        await setup.configure_peers(ctx, dut)
        for d, route in enumerate(setup.routes):
            await stream_put(ctx, dut.route_configure, Setup.template(d, route))
        setup.srv6 = modes[0]
        ctx.set(dut.config, setup.config())
        for i, rec in enumerate(records):
            await stream_put(ctx, dut.response, Setup.to_dut(rec))
            await ctx.tick().until(dut.o.valid)  # the frame is in the emitter, its first beat offered
            setup.srv6 = not modes[i]  # the other mode while it waits (the next frame's, if any)
            ctx.set(dut.config, setup.config())
            for _ in range(5):
                await ctx.tick()
            released.append(True)
            while len(got) <= i:  # the next record only once this frame is out
                await ctx.tick()

    async def sink(ctx):
        for _ in records:
            while len(released) <= len(got):
                await ctx.tick()
            raw = b""
            while True:
                beat = await stream_get(ctx, dut.o, stall=0.3, rng=rng)
                raw += beat.data.to_bytes(w, "little")[: bin(beat.keep).count("1")]
                if beat.last:
                    break
            got.append(raw)

    run(dut, source, sink, name=f"response_builder_mode_switch_{w}")
    for raw, rec, srv6 in zip(got, records, modes, strict=True):
        setup.srv6 = srv6
        _, want = setup.expected(rec, 0b11, setup.routes)
        assert raw == want, f"{'SRv6' if srv6 else 'single'} frame:\n got {raw.hex()}\nwant {want.hex()}"
        frame = wire.decode(raw, check_icrc=True)
        assert frame.srv6 == srv6
        setup.scapy_check(raw, rec, frame.ev >> 29 & 1, setup.routes)


@pytest.mark.parametrize("w", [8, 32])
def test_back_to_back_frames_have_few_idle_cycles(w):
    """Records offered back to back, output always ready: the gaps between frames stay small."""
    rng = random.Random(3)
    results = {}
    for srv6 in (True, False):
        setup = Setup(rng, planes=2, srv6=srv6)
        dut = ResponseBuilder(data_width=w, planes=2, qps=QPS, destinations=DESTS)
        records = []
        for i in range(24):
            rec = setup.random_record()
            rec["opcode"] = int(KINDS[i % 3])  # the shortest frames (ACK) between the longer ones
            records.append(rec)
        trace = []

        async def source(ctx, setup=setup, dut=dut, records=records):
            ctx.set(dut.config, setup.config())
            await setup.configure_peers(ctx, dut)
            for d, route in enumerate(setup.routes):
                await stream_put(ctx, dut.route_configure, Setup.template(d, route))
            for rec in records:
                await stream_put(ctx, dut.response, Setup.to_dut(rec))

        async def sink(ctx, dut=dut, records=records, trace=trace):
            ctx.set(dut.o.ready, 1)
            frames = 0
            while frames < len(records):
                valid, last = ctx.get(dut.o.valid), ctx.get(dut.o.payload.last)
                trace.append(valid + (valid and last))  # 0 idle, 1 beat, 2 last beat
                frames += valid and last
                await ctx.tick()

        run(dut, source, sink, name=f"response_builder_gaps_{w}_{srv6}")
        # From the end of the first frame on (its tail waits for the ICRC engine's latency once).
        steady = trace[trace.index(2) + 1 :]
        idle = steady.count(0)
        gaps = [len(g) for g in "".join(map(str, steady)).replace("2", "1").split("1") if g]
        results[srv6] = (len(steady) - idle, idle, max(gaps, default=0))
    print(
        f"W={w}, after the first frame (beats, idle cycles, longest gap): "
        f"SRv6 {results[True]}, single {results[False]}"
    )
    for _, idle, longest in results.values():
        assert longest <= 2 and idle <= 4


# -- cocotb / Verilator smoke test ---------------------------------------------------------------------
SMOKE = {"data_width": 8, "planes": 2}


class _Ports:
    """Stream transfers on the Verilog ports: inputs change after a rising edge, handshakes are sampled
    at the falling edge, when everything has settled."""

    def __init__(self, dut, rng):
        self.dut, self.rng = dut, rng

    async def put(self, name, value):
        port = lambda s: getattr(self.dut, f"{name}__{s}")  # noqa: E731
        port("payload").value = value
        port("valid").value = 1
        while True:
            await FallingEdge(self.dut.clk)
            taken = int(port("ready").value)
            await RisingEdge(self.dut.clk)
            if taken:
                break
        port("valid").value = 0

    async def frames(self, count, w, layout, stall=0.3):
        out, raw = [], b""
        while len(out) < count:
            self.dut.o__ready.value = int(self.rng.random() >= stall)
            await FallingEdge(self.dut.clk)
            if int(self.dut.o__valid.value) and int(self.dut.o__ready.value):
                beat = data.Const(layout, int(self.dut.o__payload.value))
                raw += int(beat.data).to_bytes(w, "little")[: bin(int(beat.keep)).count("1")]
                if beat.last:
                    out.append((int(beat.plane), raw))
                    raw = b""
            await RisingEdge(self.dut.clk)
        self.dut.o__ready.value = 0
        return out


@cocotb.test()
async def smoke(dut):
    p = dut_params()
    w, planes = p["data_width"], p["planes"]
    rng = random.Random(cocotb.RANDOM_SEED)
    setup = Setup(rng, planes=planes, srv6=True)
    setup.dscp = None
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.response__valid.value = 0
    dut.route_configure__valid.value = 0
    dut.peer_configure__valid.value = 0
    dut.o__ready.value = 0
    dut.config.value = pack(tx_config_layout(planes), setup.config())
    dut.dscp_control.value = wire.Dscp.CONTROL
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    ports = _Ports(dut, rng)
    route_layout = {"dest": bits_for(DESTS), "template": RouteTemplateLayout}
    for d, route in enumerate(setup.routes):
        await ports.put("route_configure", pack(data.StructLayout(route_layout), Setup.template(d, route)))
    peer_layout_ = data.StructLayout({"qp": bits_for(QPS), "peer": peer_layout(DESTS)})
    for q in range(QPS):
        await ports.put("peer_configure", pack(peer_layout_, setup.peer_configure(q)))
    plan = [(setup.random_record(), ups) for ups in (0b11, 0b11, 0b01, 0b10, 0b11, 0b00, 0b11)]
    for i, (rec, _) in enumerate(plan):
        rec["opcode"] = int(KINDS[i % 3])
    expected = [e for rec, up in plan if (e := setup.expected(rec, up, setup.routes)) is not None]
    layout = response_layout(QPS, DESTS)

    async def feed():
        for rec, up in plan:
            dut.port_up.value = up
            await ports.put("response", pack(layout, Setup.to_dut(rec)))

    cocotb.start_soon(feed())
    got = await ports.frames(len(expected), w, output_layout(w, planes))
    assert got == expected
    for (_, raw), (rec, _) in zip(got, [x for x in plan if x[1]], strict=True):
        setup.scapy_check(raw, rec, wire.ev_fields(wire.decode(raw, check_icrc=True).ev)[0], setup.routes)
    await ClockCycles(dut.clk, 10)
    kinds = [rec["opcode"] for rec, up in plan if up]
    assert int(dut.stat_sacks.value) == kinds.count(Opcode.SACK)
    assert int(dut.stat_nacks.value) == kinds.count(Opcode.NACK)
    assert int(dut.stat_acks.value) == kinds.count(Opcode.ACK)
    assert int(dut.stat_no_plane.value) == 1
    dut._log.info("%d frames equal the codec", len(got))


def test_response_builder_cocotb():
    run_cocotb(
        lambda: ResponseBuilder(
            data_width=SMOKE["data_width"], planes=SMOKE["planes"], qps=QPS, destinations=DESTS
        ),
        name="response_builder",
        module=__name__,
        params=SMOKE,
        testcase="smoke",
    )
