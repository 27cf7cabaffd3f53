"""Every header of the MRC wire format as a fixed-size, field-level object.

Each header class lists its fields in wire order (:attr:`Header.FIELDS`); fields are packed MSB first,
multi-byte fields in network byte order, exactly as drawn in docs/protocol.md (whose field tables are
generated from these lists, so the two cannot drift apart).

    >>> from mrcnic.wire import Bth, Opcode
    >>> Bth(opcode=Opcode.WRITE_ONLY, dest_qp=5, psn=7).pack().hex()
    'ca00ffff0000000500000007'
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import ClassVar

from .constants import ETHERTYPE_IPV6, IPPROTO_UDP, MRC_UDP_PORT

__all__ = [
    "HEADER_TYPES",
    "Aeth",
    "CcState",
    "Eeth",
    "Erth",
    "Ethernet",
    "Field",
    "Header",
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
    "WireError",
    "ip6",
    "mac",
    "probe_id_offset",
]


class WireError(ValueError):
    """Bytes that are not a well-formed MRC frame; ``reason`` is a short machine-readable code."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass(frozen=True)
class Field:
    name: str
    bits: int
    default: int = 0
    doc: str = ""
    signed: bool = False

    @property
    def reserved(self) -> bool:
        return self.name.startswith("resv")


def ip6(address: str | int | ipaddress.IPv6Address) -> int:
    """An IPv6 address as the 128-bit integer stored in address fields."""
    return int(ipaddress.IPv6Address(address))


def mac(address: str | int) -> int:
    """A MAC address (``"02:00:00:00:00:01"``) as the 48-bit integer stored in address fields."""
    if isinstance(address, int):
        return address
    return int(address.replace(":", "").replace("-", ""), 16)


class Header:
    """Base of all headers: construction by keyword, :meth:`pack`, :meth:`unpack`, equality."""

    NAME: ClassVar[str] = ""
    FIELDS: ClassVar[tuple[Field, ...]] = ()
    SIZE: ClassVar[int] = 0  # bytes, computed from FIELDS

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        bits = sum(f.bits for f in cls.FIELDS)
        if cls.FIELDS:
            assert bits % 8 == 0, f"{cls.__name__} is {bits} bits, not whole bytes"
            cls.SIZE = bits // 8
            cls._names = tuple(f.name for f in cls.FIELDS)

    def __init__(self, **values):
        for f in self.FIELDS:
            object.__setattr__(self, f.name, f.default)
        for name, value in values.items():
            setattr(self, name, value)

    def __setattr__(self, name, value):
        if name not in self._names:
            raise AttributeError(f"{type(self).__name__} has no field {name!r}")
        object.__setattr__(self, name, int(value))

    def copy(self, **changes) -> Header:
        new = type(self)(**self.fields())
        for name, value in changes.items():
            setattr(new, name, value)
        return new

    def fields(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self._names}

    def __eq__(self, other):
        return type(self) is type(other) and self.fields() == other.fields()

    def __repr__(self):
        shown = ", ".join(
            f"{f.name}={getattr(self, f.name):#x}"
            for f in self.FIELDS
            if not f.reserved or getattr(self, f.name)
        )
        return f"{type(self).__name__}({shown})"

    def pack(self) -> bytes:
        value = 0
        for f in self.FIELDS:
            v = getattr(self, f.name)
            lo, hi = (-(1 << (f.bits - 1)), (1 << (f.bits - 1)) - 1) if f.signed else (0, (1 << f.bits) - 1)
            if not lo <= v <= hi:
                raise ValueError(f"{type(self).__name__}.{f.name}={v} does not fit in {f.bits} bits")
            value = (value << f.bits) | (v & ((1 << f.bits) - 1))
        return value.to_bytes(self.SIZE, "big")

    @classmethod
    def unpack(cls, data: bytes, offset: int = 0):
        chunk = bytes(data[offset : offset + cls.SIZE])
        if len(chunk) < cls.SIZE:
            raise WireError(
                "truncated", f"{cls.NAME or cls.__name__} needs {cls.SIZE} bytes, {len(chunk)} left"
            )
        value = int.from_bytes(chunk, "big")
        header = cls.__new__(cls)
        shift = cls.SIZE * 8
        for f in cls.FIELDS:
            shift -= f.bits
            v = (value >> shift) & ((1 << f.bits) - 1)
            if f.signed and v >> (f.bits - 1):
                v -= 1 << f.bits
            object.__setattr__(header, f.name, v)
        return header

    @classmethod
    def layout(cls):
        """(byte offset, bit offset within the header, field) for every field, in wire order."""
        bit = 0
        for f in cls.FIELDS:
            yield bit // 8, bit, f
            bit += f.bits


class Ethernet(Header):
    """Ethernet II header (IEEE 802.3 §3.1.1). The FCS is added and stripped by the MAC."""

    NAME = "Ethernet"
    FIELDS = (
        Field("dst", 48, doc="destination MAC: the next hop's port MAC"),
        Field("src", 48, doc="source MAC: this plane port's MAC"),
        Field("ethertype", 16, ETHERTYPE_IPV6, doc="0x86DD (IPv6); anything else is not MRC"),
    )


class Ipv6(Header):
    """IPv6 fixed header (RFC 8200 §3). Used as the outer (SRv6) and the inner/only header."""

    NAME = "IPv6"
    FIELDS = (
        Field("version", 4, 6, doc="6"),
        Field("dscp", 6, doc="DSCP (traffic class [7:2]); §9 lists the code points"),
        Field("ecn", 2, doc="ECN (traffic class [1:0]): ECT(0)=0b10 on data and probes, CE=0b11 marked"),
        Field("flow_label", 20, doc="bits [15:0] = EV[31:16], bits [19:16] = 0; outer copies inner"),
        Field("payload_length", 16, doc="bytes after this 40-byte header (incl. ICRC, excl. FCS)"),
        Field("next_header", 8, IPPROTO_UDP, doc="outer: 41 (IPv6) or 43 (SRH); inner/only: 17 (UDP)"),
        Field("hop_limit", 8, 64, doc="outer: >= switch hops + 1 (each uSID shift decrements it)"),
        Field("src", 128, doc="outer: plane port address; inner/only: the sender's GID"),
        Field("dst", 128, doc="outer: uSID container (§5); inner/only: the receiver's GID"),
    )


class Srh(Header):
    """Segment Routing Header fixed part (RFC 8754 §2); ``8 * hdr_ext_len`` bytes of segments follow.

    Never generated by this NIC (v1); skipped on receive.
    """

    NAME = "SRH"
    FIELDS = (
        Field("next_header", 8, 41, doc="header after the SRH: 41 (inner IPv6)"),
        Field("hdr_ext_len", 8, doc="length in 8-byte units, not counting the first 8 bytes"),
        Field("routing_type", 8, 4, doc="4 = Segment Routing"),
        Field("segments_left", 8, doc="segments still to visit (not used by this NIC)"),
        Field("last_entry", 8, doc="index of the last segment"),
        Field("flags", 8),
        Field("tag", 16),
    )


class Udp(Header):
    """UDP header (RFC 768)."""

    NAME = "UDP"
    FIELDS = (
        Field("sport", 16, doc="EV[15:0]"),
        Field("dport", 16, MRC_UDP_PORT, doc="4791 (a register); 4971 also accepted on receive"),
        Field("length", 16, doc="8 + bytes from BTH to the end of the ICRC"),
        Field("checksum", 16, doc="0 on transmit, not checked on receive (masked out of the ICRC)"),
    )


class Bth(Header):
    """Base Transport Header (IBTA Vol. 1 §9.2), with MRC's use of the byte-8 flags."""

    NAME = "BTH"
    FIELDS = (
        Field("opcode", 8, doc="§3"),
        Field("se", 1, doc="solicited event: 0"),
        Field("m", 1, doc="migration request: 0"),
        Field("pad_count", 2, doc="0: MRC payloads are not padded"),
        Field("tver", 4, doc="transport version 0"),
        Field("pkey", 16, 0xFFFF, doc="partition key, 0xFFFF (a register)"),
        Field("resv8", 8, doc="0 on transmit; masked (0xFF) in the ICRC; ignored on receive"),
        Field("dest_qp", 24, doc="destination QP; 0x000002 for endpoint operations"),
        Field("ack_req", 1, doc="A: ask the responder for an immediate SACK"),
        Field("resv1", 1),
        Field("rtx", 1, doc="RTX: this data packet is a retransmission"),
        Field("ts", 1, doc="TS: a TSETH follows the METH (always 1 on data sent by this NIC)"),
        Field("resv4", 4),
        Field("psn", 24, doc="packet sequence number; endpoint operations: PSN[15:0] = request id"),
    )


class Meth(Header):
    """MRC Message Extended Transport Header, in every WRITE packet."""

    NAME = "METH"
    FIELDS = (
        Field(
            "rqmsn", 16, doc="receive-queue MSN: counts WRITE-with-immediate messages, same in all packets"
        ),
        Field("msn", 16, doc="requester MSN: counts all messages of the QP, same in all packets"),
    )


class Tseth(Header):
    """Requester Timestamp Extended Header: present iff BTH.TS."""

    NAME = "TSETH"
    FIELDS = (
        Field("tx_timestamp", 16, doc="send time in 128 ns units, modulo 2^16 (8.39 ms wrap)"),
        Field("tsr", 1, doc="timestamp resolution: 0 = 128 ns (the only value this NIC sends)"),
        Field("resv7", 7),
        Field("resv4", 4),
        Field("ftype", 4, 1, doc="format type 1"),
    )


class Reth(Header):
    """RDMA Extended Transport Header (IBTA §9.3.3), in every WRITE packet."""

    NAME = "RETH"
    FIELDS = (
        Field("va", 64, doc="remote virtual address of THIS packet's payload = message VA + k * PMTU"),
        Field("rkey", 32, doc="remote key of the target memory region, same in all packets"),
        Field("dma_length", 32, doc="length of the whole message in bytes, same in all packets"),
    )


class ImmDt(Header):
    """Immediate data, after the RETH of WRITE_LAST_IMM / WRITE_ONLY_IMM."""

    NAME = "ImmDt"
    FIELDS = (Field("imm", 32, doc="immediate value delivered in the receive completion"),)


class Aeth(Header):
    """ACK Extended Transport Header (IBTA §9.3.5): transport ACK of whole messages."""

    NAME = "AETH"
    FIELDS = (
        Field("syndrome", 8, 0x1F, doc="0x1F ACK; 0x61/0x62/0x63 NAK (invalid / remote access / remote op)"),
        Field("msn", 24, doc="all messages with MSN <= this are complete; the 16-bit METH MSN, [23:16] = 0"),
    )


class Seth(Header):
    """Reliability SACK Extended Transport Header (28 B); a CC_STATE follows."""

    NAME = "SETH"
    FIELDS = (
        Field("resv0", 8),
        Field("resv1", 1),
        Field("m", 2, doc="path verdict on the echoed EV: 0 NONE, 1 SKIP_ONCE (CE seen), 2 ALWAYS_SKIP"),
        Field("resv3", 3),
        Field("pr", 1, doc="1: this SACK answers a reliability probe"),
        Field("resv1b", 1),
        Field(
            "ack_psn_offset",
            16,
            signed=True,
            doc="PSN of the triggering packet - cack_psn (s16); if PR=1: the probe_id",
        ),
        Field("entropy", 32, doc="EV of the triggering packet (or probe), echoed"),
        Field("spdcid", 16, doc="responder's own QPN[15:0] (informational)"),
        Field("dpdcid", 16, doc="requester's QPN[15:0] (informational; BTH.dest_qp is authoritative)"),
        Field("resv8", 8),
        Field("cack_psn", 24, doc="cumulative ACK: every PSN up to and including this one was received"),
        Field("cc_type", 4, doc="0 = NSCC"),
        Field("cc_flags", 4, doc="0"),
        Field("mpr", 8, doc="dynamic max PSN range in 128-PSN units; 0 = off (v1)"),
        Field("sack_offset", 16, signed=True, doc="SACK base PSN - cack_psn (s16); the base is 8-aligned"),
        Field("sack_bitmap", 64, doc="bit i (LSB = bit 0) set: PSN base+i received"),
    )


def _seth_probe_id(self) -> int:
    """With PR=1 the 16 bits of ``ack_psn_offset`` carry the probe id (unsigned)."""
    return self.ack_psn_offset & 0xFFFF


def probe_id_offset(probe_id: int) -> int:
    """The signed ``ack_psn_offset`` value that carries ``probe_id`` (0..65535) in a probe reply."""
    if not 0 <= probe_id < 1 << 16:
        raise ValueError(f"probe id {probe_id} is not 16 bits")
    return probe_id - (1 << 16) if probe_id >= 1 << 15 else probe_id


Seth.probe_id = property(_seth_probe_id)


class CcState(Header):
    """Congestion-control state that follows the SETH (8 B)."""

    NAME = "CC_STATE"
    FIELDS = (
        Field("tx_timestamp", 16, doc="TSETH timestamp of the triggering packet, echoed"),
        Field("resv1", 1),
        Field("ooo_count", 15, doc="packets received above cack_psn (saturates at 0x7FFF)"),
        Field("restore_cwnd", 1, doc="receiver penalty episode over: restore the saved cwnd"),
        Field("rcv_cwnd_pen", 7, doc="receiver window penalty 0..127 (0 in v1)"),
        Field("rcvd_bytes", 24, doc="payload bytes received, cumulative, in 256-byte units (mod 2^24)"),
    )


class Neth(Header):
    """Reliability NACK Extended Transport Header (20 B)."""

    NAME = "NETH"
    FIELDS = (
        Field("resv16", 16),
        Field("nack_reason", 8, doc="NACK reason code, §7.3"),
        Field("vendor_info", 8, doc="0"),
        Field("entropy", 32, doc="EV of the NACKed packet, echoed"),
        Field("spdcid", 16, doc="sender's own QPN[15:0] (informational)"),
        Field("dpdcid", 16, doc="peer QPN[15:0] (informational; BTH.dest_qp is authoritative)"),
        Field("resv8", 8),
        Field("nack_psn", 24, doc="PSN of the NACKed packet"),
        Field("cc_type", 4, doc="0 = NSCC"),
        Field("cc_flags", 4, doc="0"),
        Field("resv8b", 8),
        Field("tx_timestamp", 16, doc="TSETH timestamp of the NACKed packet, echoed"),
    )


class Peth(Header):
    """Reliability Probe Extended Transport Header (16 B): elicits a SACK with PR=1, uses no PSN."""

    NAME = "PETH"
    FIELDS = (
        Field("resv24", 24),
        Field("vendor_info", 8, doc="0"),
        Field("probe_id", 16, doc="echoed in the SACK's ack_psn_offset"),
        Field("resv16", 16),
        Field("spdcid", 16, doc="sender's own QPN[15:0] (informational)"),
        Field("dpdcid", 16, doc="peer QPN[15:0] (informational; BTH.dest_qp is authoritative)"),
        Field("tx_timestamp", 16, doc="send time, 128 ns units; echoed in the SACK's CC_STATE"),
        Field("tsr", 1, doc="timestamp resolution: 0 = 128 ns"),
        Field("resv11", 11),
        Field("ftype", 4, 1, doc="format type 1"),
    )


class Erth(Header):
    """Endpoint Request Transport Header (16 B), BTH.dest_qp = 2, request id in BTH.PSN[15:0]."""

    NAME = "ERTH"
    FIELDS = (
        Field("resv8", 8),
        Field("resv6", 6),
        Field("op", 2, doc="0 = Port Status Update, 1 = EV Probe"),
        Field("resv8b", 8),
        Field("vendor_info", 8, doc="0"),
        Field("port_status_mask", 32, doc="bit i set: the sender's plane i port is up (API port number i+1)"),
        Field("resv32", 32),
        Field("tx_timestamp", 16, doc="send time in 128 ns units, modulo 2^16"),
        Field("tsr", 1, doc="timestamp resolution: 0 = 128 ns"),
        Field("resv11", 11),
        Field("ftype", 4, 1, doc="format type 1"),
    )


class Eeth(Header):
    """Endpoint Response Extended Transport Header (36 B)."""

    NAME = "EETH"
    FIELDS = (
        Field("resv8", 8),
        Field("resv4", 4),
        Field("op", 2, doc="the request's op, echoed"),
        Field("resv2", 2),
        Field("resv16", 16),
        Field("port_status_mask", 32, doc="the responder's own port mask (this NIC's choice)"),
        Field(
            "service_time", 32, doc="ns between request arrival and response departure (this NIC's choice)"
        ),
        Field("resv128", 128),
        Field("tx_timestamp", 16, doc="the request's timestamp, echoed"),
        Field("tsr", 1, doc="timestamp resolution: 0 = 128 ns"),
        Field("resv11", 11),
        Field("ftype", 4, 1, doc="format type 1"),
        Field("resv32", 32),
    )


HEADER_TYPES: tuple[type[Header], ...] = (
    Ethernet,
    Ipv6,
    Srh,
    Udp,
    Bth,
    Meth,
    Tseth,
    Reth,
    ImmDt,
    Aeth,
    Seth,
    CcState,
    Neth,
    Peth,
    Erth,
    Eeth,
)
