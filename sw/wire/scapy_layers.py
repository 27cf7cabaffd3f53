"""scapy layers for the MRC headers, so ``rdpcap`` on our captures shows every MRC field.

Importing this module binds UDP port 4791 (and 4971) to :class:`MRC_BTH` - scapy's RoCE ``BTH`` with
MRC's names for the byte-8 flags (A, RTX, TS) - and binds the MRC extension headers after it by opcode.
The field lists here are written independently of :mod:`mrcnic.wire.headers`; tests check that the two
decode every example frame to the same values. The ICRC is scapy's own RoCEv2 computation.

Example::

    from scapy.all import rdpcap
    import mrcnic.wire.scapy_layers  # noqa: F401  (binds the layers)
    for pkt in rdpcap("x.pcap"):
        pkt.show()
"""

from __future__ import annotations

from scapy.contrib.roce import BTH
from scapy.fields import (
    BitEnumField,
    BitField,
    ByteEnumField,
    ByteField,
    IntField,
    LongField,
    ShortField,
    SignedShortField,
    X3BytesField,
    XBitField,
    XByteField,
    XIntField,
    XLongField,
    XShortField,
)
from scapy.layers.inet import UDP
from scapy.packet import Packet, Raw, bind_layers, split_layers

from .constants import MRC_UDP_PORT, MRC_UDP_PORT_ALT, NackReason, Opcode

__all__ = [
    "MRC_AETH",
    "MRC_BTH",
    "MRC_CC_STATE",
    "MRC_EETH",
    "MRC_ERTH",
    "MRC_ImmDt",
    "MRC_METH",
    "MRC_METH_TSETH",
    "MRC_NETH",
    "MRC_PETH",
    "MRC_RETH",
    "MRC_SETH",
    "MRC_TSETH",
]

_OPCODES = {op.value: op.name for op in Opcode}


class MRC_BTH(BTH):
    """BTH with MRC flag names; ICRC handling (last 4 bytes, RoCEv2 computation) inherited from scapy."""

    name = "MRC BTH"
    match_subclass = True
    fields_desc = [
        ByteEnumField("opcode", 0, _OPCODES),
        BitField("solicited", 0, 1),
        BitField("migreq", 0, 1),
        BitField("padcount", 0, 2),
        BitField("version", 0, 4),
        XShortField("pkey", 0xFFFF),
        BitField("fecn", 0, 1),
        BitField("becn", 0, 1),
        BitField("resv6", 0, 6),
        XBitField("dqpn", 0, 24),
        BitField("ackreq", 0, 1),
        BitField("resv1", 0, 1),
        BitField("rtx", 0, 1),
        BitField("ts", 0, 1),
        BitField("resv4", 0, 4),
        BitField("psn", 0, 24),
        *BTH.fields_desc[-1:],  # the ICRC (an FCS-style field holding the last 4 bytes)
    ]


class MRC_METH(Packet):
    name = "MRC METH"
    fields_desc = [ShortField("rqmsn", 0), ShortField("msn", 0)]


class MRC_TSETH(Packet):
    name = "MRC TSETH"
    fields_desc = [
        XShortField("tx_timestamp", 0),
        BitField("tsr", 0, 1),
        BitField("resv7", 0, 7),
        BitField("resv4", 0, 4),
        BitField("ftype", 1, 4),
    ]


class MRC_RETH(Packet):
    name = "MRC RETH"
    fields_desc = [XLongField("va", 0), XIntField("rkey", 0), IntField("dma_length", 0)]


class MRC_ImmDt(Packet):
    name = "MRC ImmDt"
    fields_desc = [XIntField("imm", 0)]


class MRC_AETH(Packet):
    name = "MRC AETH"
    fields_desc = [XByteField("syndrome", 0x1F), BitField("msn", 0, 24)]


class MRC_SETH(Packet):
    name = "MRC SETH"
    fields_desc = [
        ByteField("resv0", 0),
        BitField("resv1", 0, 1),
        BitEnumField("m", 0, 2, {0: "NONE", 1: "SKIP_ONCE", 2: "ALWAYS_SKIP"}),
        BitField("resv3", 0, 3),
        BitField("pr", 0, 1),
        BitField("resv1b", 0, 1),
        SignedShortField("ack_psn_offset", 0),
        XIntField("entropy", 0),
        XShortField("spdcid", 0),
        XShortField("dpdcid", 0),
        ByteField("resv8", 0),
        BitField("cack_psn", 0, 24),
        BitField("cc_type", 0, 4),
        BitField("cc_flags", 0, 4),
        ByteField("mpr", 0),
        SignedShortField("sack_offset", 0),
        XLongField("sack_bitmap", 0),
    ]


class MRC_CC_STATE(Packet):
    name = "MRC CC_STATE"
    fields_desc = [
        XShortField("tx_timestamp", 0),
        BitField("resv1", 0, 1),
        BitField("ooo_count", 0, 15),
        BitField("restore_cwnd", 0, 1),
        BitField("rcv_cwnd_pen", 0, 7),
        BitField("rcvd_bytes", 0, 24),
    ]


class MRC_NETH(Packet):
    name = "MRC NETH"
    fields_desc = [
        ShortField("resv16", 0),
        ByteEnumField("nack_reason", 0, {r.value: r.name for r in NackReason}),
        XByteField("vendor_info", 0),
        XIntField("entropy", 0),
        XShortField("spdcid", 0),
        XShortField("dpdcid", 0),
        ByteField("resv8", 0),
        BitField("nack_psn", 0, 24),
        BitField("cc_type", 0, 4),
        BitField("cc_flags", 0, 4),
        ByteField("resv8b", 0),
        XShortField("tx_timestamp", 0),
    ]


class MRC_PETH(Packet):
    name = "MRC PETH"
    fields_desc = [
        X3BytesField("resv24", 0),
        XByteField("vendor_info", 0),
        XShortField("probe_id", 0),
        ShortField("resv16", 0),
        XShortField("spdcid", 0),
        XShortField("dpdcid", 0),
        XShortField("tx_timestamp", 0),
        BitField("tsr", 0, 1),
        BitField("resv11", 0, 11),
        BitField("ftype", 1, 4),
    ]


class MRC_ERTH(Packet):
    name = "MRC ERTH"
    fields_desc = [
        ByteField("resv8", 0),
        BitField("resv6", 0, 6),
        BitEnumField("op", 0, 2, {0: "PORT_STATUS_UPDATE", 1: "EV_PROBE"}),
        ByteField("resv8b", 0),
        XByteField("vendor_info", 0),
        XIntField("port_status_mask", 0),
        IntField("resv32", 0),
        XShortField("tx_timestamp", 0),
        BitField("tsr", 0, 1),
        BitField("resv11", 0, 11),
        BitField("ftype", 1, 4),
    ]


class MRC_EETH(Packet):
    name = "MRC EETH"
    fields_desc = [
        ByteField("resv8", 0),
        BitField("resv4", 0, 4),
        BitEnumField("op", 0, 2, {0: "PORT_STATUS_UPDATE", 1: "EV_PROBE"}),
        BitField("resv2", 0, 2),
        ShortField("resv16", 0),
        XIntField("port_status_mask", 0),
        IntField("service_time", 0),
        LongField("resv128_hi", 0),
        LongField("resv128_lo", 0),
        XShortField("tx_timestamp", 0),
        BitField("tsr", 0, 1),
        BitField("resv11", 0, 11),
        BitField("ftype", 1, 4),
        IntField("resv32", 0),
    ]


def _bind() -> None:
    for port in (MRC_UDP_PORT, MRC_UDP_PORT_ALT):
        split_layers(UDP, BTH, dport=port)
        bind_layers(UDP, MRC_BTH, dport=port)
    for op in Opcode:
        if op.is_write:
            # TSETH presence depends on BTH.TS: bind the two variants by (opcode, ts).
            bind_layers(MRC_BTH, MRC_METH_TSETH, opcode=op.value, ts=1)
            bind_layers(MRC_BTH, MRC_METH, opcode=op.value, ts=0)
    bind_layers(MRC_METH, MRC_RETH)
    bind_layers(MRC_METH_TSETH, MRC_RETH)
    bind_layers(MRC_BTH, MRC_AETH, opcode=Opcode.ACK.value)
    bind_layers(MRC_BTH, MRC_SETH, opcode=Opcode.SACK.value)
    bind_layers(MRC_SETH, MRC_CC_STATE)
    bind_layers(MRC_BTH, MRC_NETH, opcode=Opcode.NACK.value)
    bind_layers(MRC_BTH, MRC_PETH, opcode=Opcode.PROBE.value)
    bind_layers(MRC_BTH, MRC_ERTH, opcode=Opcode.ENDPOINT_REQUEST.value)
    bind_layers(MRC_BTH, MRC_EETH, opcode=Opcode.ENDPOINT_RESPONSE.value)


class MRC_METH_TSETH(Packet):
    """METH followed by TSETH (BTH.TS = 1), shown as one layer so the binding stays by opcode."""

    name = "MRC METH+TSETH"
    fields_desc = MRC_METH.fields_desc + MRC_TSETH.fields_desc


def _reth_payload_class(self: MRC_RETH, payload: bytes):
    # ImmDt follows the RETH only for the two *_IMM opcodes. While dissecting, only the underlayer
    # chain is linked, so walk down it to find the BTH.
    layer = self.underlayer
    while layer is not None and not isinstance(layer, MRC_BTH):
        layer = layer.underlayer
    if layer is not None and layer.opcode in (Opcode.WRITE_LAST_IMM, Opcode.WRITE_ONLY_IMM):
        return MRC_ImmDt
    return Raw


MRC_RETH.guess_payload_class = _reth_payload_class

_bind()
