"""Fabric units: uSID forwarding and hop limit, static routes, output queues (ECN, trimming, priority,
tail drop), serial links, ECMP hash stability, the event loop."""

import pytest

from mrcnic.fabric.events import EventLoop
from mrcnic.fabric.link import Port, frame_wire_bytes, link_bytes
from mrcnic.fabric.switch import Switch, ecmp_hash
from mrcnic.fabric.topology import LOCATOR, Fabric, FabricConfig
from mrcnic.wire import (
    Addressing,
    Dscp,
    Ecn,
    Opcode,
    Role,
    RouteTemplate,
    data_frame,
    make_ev,
    next_csid_shift,
    port_address,
    usid,
)


class Sink:
    def __init__(self):
        self.got = []

    def receive(self, frame, port, now):
        self.got.append((now, port, frame))

    def port_idle(self, port, now):
        pass


def frame_to(dst_host, src_host=0, plane=1, uplink=2, payload=4096, hop_limit=8, srv6=True, fabric_half=2):
    tmpl = RouteTemplate.for_clos(LOCATOR, src_host // fabric_half, dst_host // fabric_half, dst_host)
    ev = make_ev(plane, uplink, 5)
    addr = Addressing(
        1,
        2,
        3,
        4,
        outer_src=port_address(LOCATOR, plane, src_host) if srv6 else None,
        outer_dst=tmpl.destination(ev) if srv6 else None,
        hop_limit=hop_limit,
    )
    return data_frame(
        addr,
        ev=ev,
        opcode=Opcode.WRITE_MIDDLE,
        dest_qp=16,
        psn=1,
        msn=0,
        rqmsn=0,
        va=0,
        rkey=1,
        dma_length=payload,
        payload=bytes(payload),
        timestamp=0,
    )


def test_wire_sizes():
    f = frame_to(5)
    assert frame_wire_bytes(f) == len(f.encode()) + 4
    assert link_bytes(f) == len(f.encode()) + 24
    f.payload = b""
    f.trimmed = True
    # trimmed: Ethernet + 124 L3 header bytes (2 x IPv6, UDP, BTH, METH, TSETH, RETH), no ICRC, FCS
    assert frame_wire_bytes(f) == len(f.encode()) + 4 == 14 + 124 + 4


def fabric(**kw):
    args = dict(hosts=8, planes=2, radix=4)
    args.update(kw)
    return Fabric(FabricConfig(**args))


def walk(fab, frame, src_host, plane):
    """Follow a frame hop by hop through the switches (no queues); returns the path and the end node."""
    node = fab.t0[plane][src_host // fab.cfg.half]
    path = []
    while isinstance(node, Switch):
        path.append(node.name)
        before = len(path)
        sent = {}
        for port in node.ports:
            port.enqueue = lambda fr, now, port=port, sent=sent: sent.setdefault("port", port)
        node.receive(frame, 0, 0)
        for port in node.ports:
            del port.enqueue
        if "port" not in sent:
            return path, None
        assert len(path) == before
        node = sent["port"].peer
    return path, node


def test_usid_forwarding_cross_t1():
    fab = fabric()
    f = frame_to(dst_host=5, src_host=0, plane=1, uplink=1)
    path, end = walk(fab, f, 0, 1)
    assert path == ["p1.t0.0", "p1.t1.1", "p1.t0.2"]  # T1 index = the EV's uplink
    assert end is fab.hosts[5]
    assert f.outer.dst == port_address(LOCATOR, 1, 5)  # every switch shifted its own uSID out
    assert f.outer.hop_limit == 8 - 3


def test_usid_forwarding_same_t0():
    fab = fabric()
    f = frame_to(dst_host=1, src_host=0, plane=0)
    path, end = walk(fab, f, 0, 0)
    assert path == ["p0.t0.0"] and end is fab.hosts[1]


def test_hop_limit_and_unroutable():
    fab = fabric()
    f = frame_to(dst_host=5, hop_limit=3, uplink=1)  # 3 switches need >= 4
    path, end = walk(fab, f, 0, 1)
    assert end is None and path == ["p1.t0.0", "p1.t1.1", "p1.t0.2"]
    assert fab.t0[1][2].c["hop_limit"] == 1
    f = frame_to(dst_host=5, hop_limit=4, uplink=1)
    assert walk(fab, f, 0, 1)[1] is fab.hosts[5]
    sw = fab.t0[0][0]
    bad = frame_to(dst_host=5, plane=0, uplink=1)
    bad.outer.dst = (LOCATOR << 96) | (usid(0, Role.T0, 0) << 80) | (usid(0, Role.T1, 7) << 64)
    sw.receive(bad, 0, 0)
    assert sw.c["no_route"] == 1
    other = frame_to(dst_host=5, plane=0)
    other.outer.dst = (0x12345678 << 96) | (other.outer.dst & ((1 << 96) - 1))
    sw.receive(other, 0, 0)
    assert sw.c["not_mine"] == 1
    last = frame_to(dst_host=1, plane=0)  # a switch is never the final uSID
    last.outer.dst = (LOCATOR << 96) | (usid(0, Role.T0, 0) << 80)
    assert next_csid_shift(last.outer.dst) is None
    sw.receive(last, 0, 0)
    assert sw.c["no_route"] == 2


def make_port(**kw):
    loop = EventLoop()
    port = Port(Sink(), 0, 100_000_000_000, 1_000_000)
    port.loop = loop
    sink = Sink()
    port.connect(sink, 3, None)
    port.switch_port = True
    for k, v in kw.items():
        setattr(port, k, v)
    return loop, port, sink


def test_serial_link_timing():
    loop, port, sink = make_port()
    f1, f2 = frame_to(5), frame_to(5)
    port.enqueue(f1, 0)
    port.enqueue(f2, 0)
    loop.run()
    ser = int(link_bytes(f1) * 80)  # 80 ps per byte at 100 Gb/s
    assert [t for t, _, _ in sink.got] == [ser + 1_000_000, 2 * ser + 1_000_000]
    assert sink.got[0][1] == 3


def test_ecn_threshold_and_last_hop():
    size = link_bytes(frame_to(5))
    loop, port, sink = make_port(ecn_bytes=2 * size)
    frames = [frame_to(5) for _ in range(5)]
    for f in frames:
        port.enqueue(f, 0)
    loop.run()
    # the first departs at once; queue before each enqueue: 0,0,1,2,3 frames -> CE when > 2 frames
    assert [f.outer.ecn for _, _, f in sink.got] == [Ecn.ECT0, Ecn.ECT0, Ecn.ECT0, Ecn.ECT0, Ecn.CE]
    loop, port, sink = make_port(ecn_bytes=0, last_hop=True)
    for _ in range(4):
        port.enqueue(frame_to(5), 0)
    loop.run()
    assert all(f.outer.ecn == Ecn.ECT0 for _, _, f in sink.got)


@pytest.mark.parametrize("last_hop,dscp", [(False, Dscp.TRIMMED), (True, Dscp.TRIMMED_LASTHOP)])
def test_trim_and_priority(last_hop, dscp):
    size = link_bytes(frame_to(5))
    loop, port, sink = make_port(trim_bytes=2 * size, last_hop=last_hop)
    frames = [frame_to(5) for _ in range(5)]
    for i, f in enumerate(frames):
        f.bth.psn = i
        port.enqueue(f, 0)
    loop.run()
    order = [f.bth.psn for _, _, f in sink.got]
    # PSN 0 on the wire, 1-2 queued, 3 and 4 trimmed and sent ahead of the queued data
    assert order == [0, 3, 4, 1, 2]
    trimmed = [f for _, _, f in sink.got if f.trimmed]
    assert [f.bth.psn for f in trimmed] == [3, 4]
    assert all(f.payload == b"" and f.outer.dscp == dscp and f.ip.dscp == dscp for f in trimmed)
    assert port.c["trims"] == 2


def test_control_priority_and_tail_drop():
    size = link_bytes(frame_to(5))
    loop, port, sink = make_port(buffer_bytes=2 * size, trimming=False)
    for i in range(5):
        f = frame_to(5)
        f.bth.psn = i
        port.enqueue(f, 0)
    ctrl = frame_to(5, payload=0)
    ctrl.outer.dscp = Dscp.CONTROL
    ctrl.bth.psn = 99
    port.enqueue(ctrl, 0)
    loop.run()
    assert [f.bth.psn for _, _, f in sink.got] == [0, 99, 1, 2]
    assert port.c["drops"] == 2


def test_link_down_and_loss():
    loop, port, sink = make_port()
    port.enqueue(frame_to(5), 0)
    port.set_up(False)  # in flight when the link dies: lost
    port.enqueue(frame_to(5), 0)
    loop.run()
    assert sink.got == [] and port.c["down_drops"] == 2
    loop, port, sink = make_port(loss=0.5)
    for _ in range(200):
        port.enqueue(frame_to(5, payload=64), 0)
    loop.run()
    assert 70 < len(sink.got) < 130 and port.c["loss_drops"] == 200 - len(sink.got)


def test_ecmp_hash_stable():
    assert ecmp_hash(1, 2, 3, 4, 5) == ecmp_hash(1, 2, 3, 4, 5) == 0xB29AF23A  # CRC-32: platform independent
    values = [ecmp_hash(1, 2, sport, 4791, 0) % 8 for sport in range(64)]
    assert values == [ecmp_hash(1, 2, sport, 4791, 0) % 8 for sport in range(64)]
    assert len(set(values)) == 8  # spreads
    fab = fabric(srv6=False)
    f = frame_to(5, srv6=False)
    f.ip.dst = 6  # GID of host 5 (low bits = host + 1)
    path1, end1 = walk(fab, f, 0, 1)
    f = frame_to(5, srv6=False)
    f.ip.dst = 6
    path2, end2 = walk(fab, f, 0, 1)
    assert path1 == path2 and end1 is end2 is fab.hosts[5] and len(path1) == 3


def test_event_loop_order():
    loop = EventLoop()
    out = []
    loop.at(5, lambda now, x: out.append((now, x)), "b")
    loop.at(1, lambda now, x: out.append((now, x)), "a")
    loop.at(5, lambda now, x: out.append((now, x)), "c")
    loop.run()
    assert out == [(1, "a"), (5, "b"), (5, "c")] and loop.events == 3


def test_topology_shape():
    fab = fabric(hosts=16, radix=8, planes=3)
    assert len(fab.t0[0]) == 4 and len(fab.t1[2]) == 4
    assert all(len(h.ports) == 3 for h in fab.hosts)
    with pytest.raises(ValueError):
        Fabric(FabricConfig(hosts=64, radix=4))
