"""Gateware layouts of every MRC header, and the one adapter between wire order and struct order.

Ref: docs/protocol.md §4 (field tables); the Python codec is :mod:`mrcnic.wire.headers`. Tests check
that bytes built by the codec decode field by field through these layouts in gateware, and back.

Each ``Struct`` lists its fields **in wire order** (first field = first on the wire), exactly as the
protocol document draws them. Amaranth places the first field of a struct at bit 0, while a network
header puts its first field in the most significant bits of byte 0; :func:`from_wire` and
:func:`to_wire` convert between the two with wiring only (no logic): byte ``i`` of a header is bits
``[8i+7 : 8i]`` of the wire vector, the lane order of our packet streams.

(No ``from __future__ import annotations`` here: ``data.Struct`` reads its annotations as shapes.)
"""

from amaranth import Cat, Module, Mux, Signal, Value
from amaranth.hdl import ShapeCastable
from amaranth.lib import data

from mrcnic.wire.constants import Opcode

from .compare import above

__all__ = [
    "HEADER_LAYOUTS",
    "Aeth",
    "Bth",
    "CcState",
    "Eeth",
    "Erth",
    "Ethernet",
    "ImmDt",
    "Ipv6",
    "Meth",
    "Neth",
    "Peth",
    "Reth",
    "Seth",
    "Srh",
    "Tseth",
    "Udp",
    "SINGLE_IPV6_START",
    "beat_stack",
    "both_modes_stack",
    "control_extension",
    "from_wire",
    "single_first_beat",
    "to_wire",
    "wire_bytes",
]


class Ethernet(data.Struct):
    """Ethernet II (IEEE 802.3 §3.1.1), 14 bytes."""

    dst: 48
    src: 48
    ethertype: 16


class Ipv6(data.Struct):
    """IPv6 fixed header (RFC 8200 §3), 40 bytes."""

    version: 4
    dscp: 6
    ecn: 2
    flow_label: 20
    payload_length: 16
    next_header: 8
    hop_limit: 8
    src: 128
    dst: 128


class Srh(data.Struct):
    """Segment Routing Header fixed part (RFC 8754 §2), 8 bytes; skipped on receive."""

    next_header: 8
    hdr_ext_len: 8
    routing_type: 8
    segments_left: 8
    last_entry: 8
    flags: 8
    tag: 16


class Udp(data.Struct):
    """UDP (RFC 768), 8 bytes; sport = EV[15:0]."""

    sport: 16
    dport: 16
    length: 16
    checksum: 16


class Bth(data.Struct):
    """Base Transport Header (IBTA Vol. 1 §9.2) with MRC's byte-8 flags, 12 bytes."""

    opcode: 8
    se: 1
    m: 1
    pad_count: 2
    tver: 4
    pkey: 16
    resv8: 8
    dest_qp: 24
    ack_req: 1
    resv1: 1
    rtx: 1
    ts: 1
    resv4: 4
    psn: 24


class Meth(data.Struct):
    """MRC Message Extended Transport Header, 4 bytes."""

    rqmsn: 16
    msn: 16


class Tseth(data.Struct):
    """Requester Timestamp Extended Header (present iff BTH.TS), 4 bytes."""

    tx_timestamp: 16
    tsr: 1
    resv7: 7
    resv4: 4
    ftype: 4


class Reth(data.Struct):
    """RDMA Extended Transport Header (IBTA §9.3.3), 16 bytes; in every WRITE packet."""

    va: 64
    rkey: 32
    dma_length: 32


class ImmDt(data.Struct):
    """Immediate data of WRITE_LAST_IMM / WRITE_ONLY_IMM, 4 bytes."""

    imm: 32


class Aeth(data.Struct):
    """ACK Extended Transport Header (IBTA §9.3.5), 4 bytes."""

    syndrome: 8
    msn: 24


class Seth(data.Struct):
    """Reliability SACK Extended Transport Header, 28 bytes (a CC_STATE follows)."""

    resv0: 8
    resv1: 1
    m: 2
    resv3: 3
    pr: 1
    resv1b: 1
    ack_psn_offset: data.signed(16)
    entropy: 32
    spdcid: 16
    dpdcid: 16
    resv8: 8
    cack_psn: 24
    cc_type: 4
    cc_flags: 4
    mpr: 8
    sack_offset: data.signed(16)
    sack_bitmap: 64


class CcState(data.Struct):
    """Congestion-control state after the SETH, 8 bytes."""

    tx_timestamp: 16
    resv1: 1
    ooo_count: 15
    restore_cwnd: 1
    rcv_cwnd_pen: 7
    rcvd_bytes: 24


class Neth(data.Struct):
    """Reliability NACK Extended Transport Header, 20 bytes."""

    resv16: 16
    nack_reason: 8
    vendor_info: 8
    entropy: 32
    spdcid: 16
    dpdcid: 16
    resv8: 8
    nack_psn: 24
    cc_type: 4
    cc_flags: 4
    resv8b: 8
    tx_timestamp: 16


class Peth(data.Struct):
    """Reliability Probe Extended Transport Header, 16 bytes."""

    resv24: 24
    vendor_info: 8
    probe_id: 16
    resv16: 16
    spdcid: 16
    dpdcid: 16
    tx_timestamp: 16
    tsr: 1
    resv11: 11
    ftype: 4


class Erth(data.Struct):
    """Endpoint Request Transport Header, 16 bytes."""

    resv8: 8
    resv6: 6
    op: 2
    resv8b: 8
    vendor_info: 8
    port_status_mask: 32
    resv32: 32
    tx_timestamp: 16
    tsr: 1
    resv11: 11
    ftype: 4


class Eeth(data.Struct):
    """Endpoint Response Extended Transport Header, 36 bytes."""

    resv8: 8
    resv4: 4
    op: 2
    resv2: 2
    resv16: 16
    port_status_mask: 32
    service_time: 32
    resv128: 128
    tx_timestamp: 16
    tsr: 1
    resv11: 11
    ftype: 4
    resv32: 32


HEADER_LAYOUTS: dict[str, type[data.Struct]] = {
    "Ethernet": Ethernet,
    "IPv6": Ipv6,
    "SRH": Srh,
    "UDP": Udp,
    "BTH": Bth,
    "METH": Meth,
    "TSETH": Tseth,
    "RETH": Reth,
    "ImmDt": ImmDt,
    "AETH": Aeth,
    "SETH": Seth,
    "CC_STATE": CcState,
    "NETH": Neth,
    "PETH": Peth,
    "ERTH": Erth,
    "EETH": Eeth,
}


def wire_bytes(layout: ShapeCastable) -> int:
    """Size of a header layout in bytes."""
    size = data.Layout.cast(layout).size
    if size % 8:
        raise ValueError(f"{layout!r} is {size} bits, not whole bytes")
    return size // 8


def _wire_fields(layout: data.Layout):
    """(field, offset of its first bit from the header's most significant bit), in wire order."""
    for _, field in sorted(layout, key=lambda item: item[1].offset):
        if isinstance(field.shape, data.Layout) or (
            isinstance(field.shape, type) and issubclass(field.shape, data.View)
        ):
            raise TypeError("header layouts are flat: nested structs have no defined wire order here")
        # Struct order equals wire order, so the struct offset is also the offset from the MSB.
        yield field, field.offset


def _byte_swap(value: Value, nbytes: int) -> Value:
    return Cat(*(value[8 * i : 8 * i + 8] for i in reversed(range(nbytes))))


def from_wire(layout: ShapeCastable, wire: Value) -> data.View:
    """View of a header whose bytes are ``wire`` (byte 0, first on the wire, in bits [7:0])."""
    layout = data.Layout.cast(layout)
    nbytes = wire_bytes(layout)
    # As one network-order integer, the first field sits in the most significant bits.
    big_endian = _byte_swap(Value.cast(wire)[: 8 * nbytes], nbytes)
    total = layout.size
    bits = [
        big_endian[total - offset - field.width : total - offset] for field, offset in _wire_fields(layout)
    ]
    return data.View(layout, Cat(*bits))


def to_wire(view: data.View) -> Value:
    """Wire bytes of a header view (byte 0 in bits [7:0]): the inverse of :func:`from_wire`."""
    layout = data.Layout.cast(view.shape())
    nbytes = wire_bytes(layout)
    raw = Value.cast(view)
    # Network-order integer: fields from the least significant end are the last ones on the wire.
    fields = list(_wire_fields(layout))
    big_endian = Cat(*(raw[field.offset : field.offset + field.width] for field, _ in reversed(fields)))
    return _byte_swap(big_endian, nbytes)


# Where a single-IPv6 frame starts in :func:`both_modes_stack`: its Ethernet header (14 bytes) then ends
# where an SRv6 frame's outer IPv6 header does (byte 54).
SINGLE_IPV6_START = 40


def both_modes_stack(
    srv6: Value, ethernet: data.View, outer: data.View, inner: data.View, rest: Value
) -> Value:
    """The wire bytes of a header stack laid out for both addressing modes (docs/protocol.md §2.1,
    §2.2): with ``srv6``, Ethernet | outer IPv6 | inner IPv6 | ``rest`` from byte 0; without, Ethernet |
    inner IPv6 | ``rest`` from byte :data:`SINGLE_IPV6_START`. Everything from the inner IPv6 header on
    sits at the same place in both modes, so only the 14 bytes before it depend on ``srv6`` (a register
    loaded with ``Mux(srv6, srv6_stack, single_stack)`` would multiplex every byte)."""
    eth_outer = Cat(to_wire(ethernet), to_wire(outer))
    split = 8 * SINGLE_IPV6_START
    return Cat(eth_outer[:split], Mux(srv6, eth_outer[split:], to_wire(ethernet)), to_wire(inner), rest)


def single_first_beat(data_width: int) -> int:
    """The beat of :func:`beat_stack` at which a single-IPv6 frame starts (an SRv6 frame: beat 0)."""
    return SINGLE_IPV6_START // data_width if SINGLE_IPV6_START % data_width == 0 else 0


def beat_stack(
    srv6: Value, ethernet: data.View, outer: data.View, inner: data.View, rest: Value, data_width: int
) -> Value:
    """A header stack to emit ``data_width`` bytes a beat, by beat index from :func:`single_first_beat`.

    Where a single-IPv6 frame's start (:data:`SINGLE_IPV6_START`) is a beat boundary, the stack is
    :func:`both_modes_stack`; with wider beats each mode starts at beat 0 (every byte then depends on
    ``srv6``)."""
    if single_first_beat(data_width):
        return both_modes_stack(srv6, ethernet, outer, inner, rest)
    return Mux(
        srv6,
        Cat(to_wire(ethernet), to_wire(outer), to_wire(inner), rest),
        Cat(to_wire(ethernet), to_wire(inner), rest),
    )


OOO_COUNT_MAX = 0x7FFF  # CC_STATE ooo_count is 15 bits on the wire, saturating (docs/protocol.md §7.2)
# Bytes after the BTH of each control frame: SETH + CC_STATE, NETH, AETH (docs/protocol.md §4).
CONTROL_EXTENSION_LENGTHS = {Opcode.SACK: 28 + 8, Opcode.NACK: 20, Opcode.ACK: 4}
CONTROL_EXTENSION_BYTES = max(CONTROL_EXTENSION_LENGTHS.values())


def control_extension(m: Module, record, own_qpn: Value, peer_qpn: Value) -> Value:
    """The wire bytes after the BTH of a SACK (SETH + CC_STATE), NACK (NETH) or ACK (AETH), by
    ``record.opcode`` (anything else: the AETH), zero-padded to :data:`CONTROL_EXTENSION_BYTES`.

    ``record`` is a ``mrcnic.hdl.tx.layouts.control_record_layout`` view; the answered EV goes in the
    SETH / NETH ``entropy``, the QPNs' low halves in SPDCID / DPDCID, ``ooo_count`` saturates at
    0x7FFF (docs/protocol.md §4, §7.2-§7.4)."""
    seth, cc, neth, aeth = Signal(Seth), Signal(CcState), Signal(Neth), Signal(Aeth)
    m.d.comb += [
        seth.m.eq(record.seth.m),
        seth.pr.eq(record.seth.pr),
        seth.ack_psn_offset.eq(record.seth.ack_psn_offset),
        seth.entropy.eq(record.ev),
        seth.spdcid.eq(own_qpn[:16]),
        seth.dpdcid.eq(peer_qpn[:16]),
        seth.cack_psn.eq(record.seth.cack_psn),
        seth.sack_offset.eq(record.seth.sack_offset),
        seth.sack_bitmap.eq(record.seth.sack_bitmap),
        cc.tx_timestamp.eq(record.cc.tx_timestamp),
        cc.ooo_count.eq(Mux(above(record.cc.ooo_count, OOO_COUNT_MAX), OOO_COUNT_MAX, record.cc.ooo_count)),
        cc.rcvd_bytes.eq(record.cc.rcvd_bytes),
        neth.nack_reason.eq(record.neth.nack_reason),
        neth.entropy.eq(record.ev),
        neth.spdcid.eq(own_qpn[:16]),
        neth.dpdcid.eq(peer_qpn[:16]),
        neth.nack_psn.eq(record.neth.nack_psn),
        neth.tx_timestamp.eq(record.neth.tx_timestamp),
        aeth.eq(record.aeth),
    ]
    return Mux(
        record.opcode == Opcode.SACK,
        Cat(to_wire(seth), to_wire(cc)),
        Mux(record.opcode == Opcode.NACK, to_wire(neth), to_wire(aeth)),
    )
