"""The wire codec: round trips, every malformation, scapy as an independent decoder, pcap, CLI."""

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scapy.all import rdpcap
from scapy.contrib.roce import BTH
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

import mrcnic.wire.scapy_layers as sl
from mrcnic import wire
from mrcnic.cli import main as cli_main
from mrcnic.wire.examples import EXAMPLE_LOCATOR, example_addressing, example_frames
from mrcnic.wire.icrc import ICRC_RESIDUE, compute_icrc
from mrcnic.wire.pcap import read_pcap, write_pcap

ALL_EXAMPLES = [(srv6, name, frame) for srv6 in (True, False) for name, frame in example_frames(srv6)]
IDS = [f"{'srv6' if s else 'single'}-{n}" for s, n, _ in ALL_EXAMPLES]


# -- headers -----------------------------------------------------------------------------------
@given(st.data())
def test_every_header_round_trips(draw):
    for kind in wire.HEADER_TYPES:
        values = {}
        for f in kind.FIELDS:
            lo, hi = (-(1 << (f.bits - 1)), (1 << (f.bits - 1)) - 1) if f.signed else (0, (1 << f.bits) - 1)
            values[f.name] = draw.draw(st.integers(lo, hi))
        header = kind(**values)
        raw = header.pack()
        assert len(raw) == kind.SIZE
        assert kind.unpack(raw) == header


def test_header_values_are_range_checked():
    with pytest.raises(ValueError):
        wire.Bth(psn=1 << 24).pack()
    with pytest.raises(ValueError):
        wire.Seth(ack_psn_offset=40000).pack()
    with pytest.raises(AttributeError):
        wire.Bth(nonsense=1)


def test_known_bytes():
    # BTH of a WRITE_ONLY to QP 5, PSN 7: opcode, flags, P_Key 0xFFFF, byte 4, QP, flags, PSN.
    assert (
        wire.Bth(opcode=wire.Opcode.WRITE_ONLY, dest_qp=5, psn=7).pack().hex() == "ca00ffff0000000500000007"
    )
    seth = wire.Seth(m=1, pr=1, ack_psn_offset=-2, cack_psn=0x123456, sack_offset=-8, sack_bitmap=1)
    raw = seth.pack()
    assert raw[1] == 0b0010_0010 and raw[2:4] == b"\xff\xfe" and raw[13:16] == b"\x12\x34\x56"
    assert raw[18:20] == b"\xff\xf8" and raw[27] == 1


# -- frames ------------------------------------------------------------------------------------
@pytest.mark.parametrize("srv6,name,frame", ALL_EXAMPLES, ids=IDS)
def test_example_frames_round_trip(srv6, name, frame):
    raw = frame.encode()
    decoded = wire.decode(raw, check_icrc=True)
    assert decoded.encode() == raw
    assert decoded.srv6 == srv6
    assert decoded.ev == frame.ev
    assert len(raw) == wire.header_length(frame.bth.opcode, bool(frame.bth.ts), srv6) + len(frame.payload) + 4
    assert decoded.payload == frame.payload
    # The residue property the gateware checker relies on.
    import zlib

    covered = wire.icrc.mask_variant_fields(decoded.covered_bytes())
    assert zlib.crc32(wire.icrc.ICRC_PREFIX + covered + raw[-4:]) == ICRC_RESIDUE


def test_ev_placement():
    frame = example_frames(True)[0][1]
    frame.set_ev(0xA1B2C3D4)
    raw = frame.encode()
    d = wire.decode(raw)
    assert d.udp.sport == 0xC3D4 and d.ip.flow_label == 0xA1B2 and d.outer.flow_label == 0xA1B2
    assert d.ev == 0xA1B2C3D4


def _write(srv6=False, payload=b"x" * 64):
    return next(f for name, f in example_frames(srv6) if name == "write_only").copy(), payload


@pytest.mark.parametrize("srv6", [True, False])
def test_malformed_frames_are_rejected_with_a_reason(srv6):
    frame, _ = _write(srv6)
    good = frame.encode()
    ip_at = 14 + (40 if srv6 else 0)
    cases = {}
    raw = bytearray(good)
    raw[12:14] = b"\x08\x00"
    cases["not_ipv6"] = raw
    raw = bytearray(good)
    raw[ip_at] = 0x40 | (raw[ip_at] & 0x0F)
    cases["bad_ip_version"] = raw
    raw = bytearray(good)
    raw[ip_at + 6] = 6  # TCP
    cases["bad_next_header"] = raw
    raw = bytearray(good)
    raw[ip_at + 42 : ip_at + 44] = (5000).to_bytes(2, "big")
    cases["bad_udp_port"] = raw
    for delta in (-1, +1):  # IPv6 payload length lying in both directions
        raw = bytearray(good)
        length = int.from_bytes(raw[ip_at + 4 : ip_at + 6], "big") + delta
        raw[ip_at + 4 : ip_at + 6] = length.to_bytes(2, "big")
        cases[f"bad_length{delta:+d}"] = raw
    raw = bytearray(good)
    raw[ip_at + 48] = 0x04  # RC SEND_ONLY: not an MRC opcode
    cases["unknown_opcode"] = raw
    raw = bytearray(good)
    raw[ip_at + 49] |= 0x01  # BTH TVer 1
    cases["bad_transport_version"] = raw
    raw = bytearray(good)
    raw[ip_at + 49] |= 0x10  # BTH pad count 1
    cases["bad_pad_count"] = raw
    raw = bytearray(good)
    raw[ip_at + 53 : ip_at + 56] = b"\x00\x00\x02"  # a WRITE to the endpoint-operations QP
    cases["bad_endpoint_qp"] = raw
    for label, raw in cases.items():
        with pytest.raises(wire.WireError) as error:
            wire.decode(bytes(raw), check_icrc=True)
        assert error.value.reason == label.split("-")[0].split("+")[0], label


@pytest.mark.parametrize("srv6", [True, False])
def test_truncated_at_every_byte(srv6):
    good = _write(srv6)[0].encode()
    for cut in range(len(good)):
        with pytest.raises(wire.WireError):
            wire.decode(good[:cut])


def test_bad_icrc_detected_but_masked_fields_free():
    frame, _ = _write(False)
    good = bytearray(frame.encode())
    for offset in (14 + 40 + 8 + 12, len(good) - 5):  # METH byte, last payload byte
        raw = bytearray(good)
        raw[offset] ^= 0x10
        with pytest.raises(wire.WireError) as error:
            wire.decode(bytes(raw), check_icrc=True)
        assert error.value.reason == "bad_icrc"
    raw = bytearray(good)
    raw[14 + 7] = 3  # hop limit
    raw[14 + 1] ^= 0xFF  # traffic class low bits + flow label
    raw[14 + 46] = 0x12  # UDP checksum
    raw[14 + 52] = 0x80  # BTH byte 4
    wire.decode(bytes(raw), check_icrc=True)


def test_srh_is_skipped_and_not_covered_by_icrc():
    frame = _write(True)[0]
    frame.srh = wire.Srh(segments_left=1, last_entry=0)
    frame.srh_segments = bytes(16)
    raw = frame.encode()
    decoded = wire.decode(raw, check_icrc=True)
    assert decoded.srh is not None and decoded.outer.next_header == 43
    assert decoded.payload == frame.payload
    assert raw[-4:] == _write(True)[0].encode()[-4:]  # same ICRC with or without the SRH


def test_trimmed_packet_is_headers_only():
    frame = _write(True)[0]
    frame.outer.dscp = wire.Dscp.TRIMMED
    raw = frame.encode()[: 14 + 128]  # a switch keeps 128 bytes of L3
    decoded = wire.decode(raw)
    assert decoded.trimmed and decoded.payload == b"" and decoded.icrc is None
    assert decoded[wire.Reth].va == frame[wire.Reth].va
    assert decoded.bth.psn == frame.bth.psn


def test_control_packets_are_never_trimmed():
    sack = next(f for name, f in example_frames(False) if name == "sack").copy()
    sack.ip.dscp = wire.Dscp.TRIMMED
    with pytest.raises(wire.WireError) as error:
        wire.decode(sack.encode())
    assert error.value.reason == "bad_trimmed_opcode"


def test_probe_id_rides_in_ack_psn_offset():
    for probe_id in (0, 0x42, 0x7FFF, 0x8000, 0xFFFF):
        seth = wire.Seth(pr=1, ack_psn_offset=wire.headers.probe_id_offset(probe_id))
        assert wire.Seth.unpack(seth.pack()).probe_id == probe_id
        assert seth.pack()[2:4] == probe_id.to_bytes(2, "big")


def test_data_frame_rejects_wrong_arguments():
    addr = example_addressing(False)
    with pytest.raises(ValueError):
        wire.data_frame(
            addr,
            ev=0,
            opcode=wire.Opcode.WRITE_ONLY_IMM,
            dest_qp=1,
            psn=0,
            msn=0,
            rqmsn=0,
            va=0,
            rkey=0,
            dma_length=1,
            payload=b"x",
        )
    with pytest.raises(ValueError):
        wire.control_frame(addr, ev=0, opcode=wire.Opcode.WRITE_ONLY, headers=[])


# -- scapy as an independent decoder -------------------------------------------------------------
_SCAPY_NAMES = {
    "solicited": "se",
    "migreq": "m",
    "padcount": "pad_count",
    "version": "tver",
    "dqpn": "dest_qp",
    "ackreq": "ack_req",
}


@pytest.mark.parametrize("srv6,name,frame", ALL_EXAMPLES, ids=IDS)
def test_scapy_decodes_the_same_fields(srv6, name, frame):
    raw = frame.encode()
    pkt = Ether(raw)
    ours = wire.decode(raw)
    ip_layers = [layer for layer in pkt.layers() if layer is IPv6]
    assert len(ip_layers) == (2 if srv6 else 1)
    inner = pkt[IPv6][IPv6] if srv6 else pkt[IPv6]
    assert inner.fl == ours.ip.flow_label and inner.tc == (ours.ip.dscp << 2 | ours.ip.ecn)
    assert pkt[UDP].sport == ours.udp.sport and pkt[UDP].len == ours.udp.length
    bth = pkt[sl.MRC_BTH]
    for field in bth.fields_desc[:-1]:
        codec_name = _SCAPY_NAMES.get(field.name, field.name)
        if codec_name in ("fecn", "becn", "resv6"):
            continue
        assert bth.getfieldval(field.name) == getattr(ours.bth, codec_name), field.name
    layer = bth.payload
    for header in ours.ext:
        for f in header.FIELDS:
            if f.name.startswith("resv"):
                continue
            assert layer.getfieldval(f.name) == getattr(header, f.name), (type(header).__name__, f.name)
        # scapy shows METH and TSETH as one layer: move on after the TSETH part.
        if not (isinstance(header, wire.Meth) and isinstance(layer, sl.MRC_METH_TSETH)):
            layer = layer.payload
    if ours.payload:
        assert bytes(layer) == ours.payload


@pytest.mark.parametrize("srv6,name,frame", ALL_EXAMPLES, ids=IDS)
def test_icrc_matches_scapys_roce_icrc(srv6, name, frame):
    raw = frame.encode()
    ip_start = 14 + (40 if srv6 else 0)
    # Rebuild the covered part with scapy's own RoCE BTH class and let scapy compute the ICRC.
    ip = IPv6(raw[ip_start : ip_start + 48])
    ip[UDP].remove_payload()
    pkt = ip / BTH(raw[ip_start + 48 :])
    assert pkt[BTH].compute_icrc(None) == raw[-4:]
    assert compute_icrc(raw[ip_start:-4]).to_bytes(4, "little") == raw[-4:]


# -- pcap and CLI --------------------------------------------------------------------------------
def test_pcap_round_trip(tmp_path):
    frames = [(1000 * i + 7, f.encode()) for i, (_, _, f) in enumerate(ALL_EXAMPLES)]
    write_pcap(tmp_path / "x.pcap", frames)
    assert list(read_pcap(tmp_path / "x.pcap")) == frames
    assert len(rdpcap(str(tmp_path / "x.pcap"))) == len(frames)


def test_cli_wire_example_writes_a_decodable_pcap(tmp_path, capsys):
    out = tmp_path / "x.pcap"
    assert cli_main(["wire", "example", "--out", str(out)]) == 0
    packets = rdpcap(str(out))
    assert len(packets) == len(ALL_EXAMPLES)
    opcodes = set()
    for pkt, (_srv6, name, frame) in zip(packets, ALL_EXAMPLES, strict=True):
        bth = pkt[sl.MRC_BTH]
        opcodes.add(bth.opcode)
        assert bth.psn == frame.bth.psn
        # Every frame's ICRC verifies with scapy's RoCE computation.
        assert bth.compute_icrc(None) == bytes(pkt)[-4:], name
        if wire.Opcode(bth.opcode).is_write:
            assert pkt[sl.MRC_RETH].va == frame[wire.Reth].va
    assert opcodes == {op.value for op in wire.Opcode}
    assert cli_main(["wire", "decode", str(out)]) == 0
    assert "MALFORMED" not in capsys.readouterr().out


# -- paths ---------------------------------------------------------------------------------------
def test_usid_shifts_along_a_cross_t1_path():
    ev = wire.make_ev(plane=2, uplink=7, salt=99)
    route = wire.RouteTemplate.for_clos(EXAMPLE_LOCATOR, src_t0=0, dst_t0=3, dst_host=13)
    da = route.destination(ev)
    hops = []
    while True:
        active = (da >> 80) & 0xFFFF
        plane, role, index = wire.usid_fields(active)
        hops.append((plane, role, index))
        nxt = wire.next_csid_shift(da)
        if nxt is None:
            break
        da = nxt
    R = wire.Role
    assert hops == [(2, R.T0, 0), (2, R.T1, 7), (2, R.T0, 3), (2, R.HOST, 13)]
    assert da == wire.port_address(EXAMPLE_LOCATOR, 2, 13)
    assert route.hops == 3


def test_same_t0_path_and_ev_fields():
    route = wire.RouteTemplate.for_clos(EXAMPLE_LOCATOR, src_t0=1, dst_t0=1, dst_host=5)
    ev = wire.make_ev(plane=3, uplink=200, salt=1)
    assert route.specialise(ev) == [wire.usid(3, wire.Role.T0, 1), wire.usid(3, wire.Role.HOST, 5)]
    assert wire.ev_fields(ev) == (3, 200, 1)
    rng = random.Random(5)
    for _ in range(100):
        p, u, s = rng.randrange(8), rng.randrange(256), rng.randrange(1 << 21)
        assert wire.ev_fields(wire.make_ev(p, u, s)) == (p, u, s)
    with pytest.raises(ValueError):
        wire.make_ev(8)
