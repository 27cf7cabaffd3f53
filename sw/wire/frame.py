"""Whole MRC frames: the header stack of every packet type, built from and parsed into field objects.

Ref: docs/protocol.md §2 (header stacks), §3 (which headers follow the BTH for each opcode).

A :class:`Frame` is what crosses a plane port without the Ethernet FCS (the MAC adds and strips it)::

    SRv6 mode:   Ethernet | outer IPv6 (NH 41, or 43 + SRH) | [SRH] | inner IPv6 (NH 17) | UDP | BTH | ...
    single mode: Ethernet | IPv6 (NH 17) | UDP | BTH | ...
    after BTH:   extension headers by opcode | payload | ICRC (4 B, little-endian)

:meth:`Frame.encode` fills in every length, next-header and the ICRC unless told otherwise, so tests
can also build frames that lie. :func:`decode` checks all of them and raises :class:`WireError` with a
short reason code. Packets marked trimmed by their DSCP are decoded as headers only.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .constants import (
    ENDPOINT_QPN,
    ETHERTYPE_IPV6,
    IPPROTO_IPV6,
    IPPROTO_ROUTING,
    IPPROTO_UDP,
    MRC_UDP_PORT,
    MRC_UDP_PORT_ALT,
    Dscp,
    Opcode,
)
from .headers import (
    Aeth,
    Bth,
    CcState,
    Eeth,
    Erth,
    Ethernet,
    Header,
    ImmDt,
    Ipv6,
    Meth,
    Neth,
    Peth,
    Reth,
    Seth,
    Srh,
    Tseth,
    Udp,
    WireError,
)
from .icrc import compute_icrc

__all__ = ["Frame", "decode", "extension_headers", "header_length"]


def extension_headers(opcode: int, ts: bool) -> tuple[type[Header], ...]:
    """The headers that follow the BTH for ``opcode`` (``ts``: BTH.TS, adds a TSETH to WRITEs)."""
    try:
        op = Opcode(opcode)
    except ValueError:
        raise WireError("unknown_opcode", f"opcode {opcode:#04x} is not an MRC opcode") from None
    if op.is_write:
        return (Meth, *((Tseth,) if ts else ()), Reth, *((ImmDt,) if op.has_immediate else ()))
    return {
        Opcode.ACK: (Aeth,),
        Opcode.ENDPOINT_REQUEST: (Erth,),
        Opcode.ENDPOINT_RESPONSE: (Eeth,),
        Opcode.SACK: (Seth, CcState),
        Opcode.NACK: (Neth,),
        Opcode.PROBE: (Peth,),
    }[op]


def header_length(opcode: int, ts: bool = True, srv6: bool = True) -> int:
    """Bytes from the start of the frame to the first payload byte."""
    return (
        Ethernet.SIZE
        + Ipv6.SIZE * (2 if srv6 else 1)
        + Udp.SIZE
        + Bth.SIZE
        + sum(h.SIZE for h in extension_headers(opcode, ts))
    )


@dataclass
class Frame:
    eth: Ethernet
    ip: Ipv6  # the IPv6 header before UDP: inner in SRv6 mode, the only one otherwise
    udp: Udp
    bth: Bth
    ext: list[Header] = field(default_factory=list)
    payload: bytes = b""
    outer: Ipv6 | None = None  # SRv6 mode only
    srh: Srh | None = None  # received only (never generated)
    srh_segments: bytes = b""
    icrc: int | None = None  # None: computed by encode()
    trimmed: bool = False  # decoded from a packet whose DSCP says it was trimmed: headers only

    # -- access -----------------------------------------------------------------------------
    def get(self, kind: type[Header]) -> Header | None:
        for h in self.ext:
            if isinstance(h, kind):
                return h
        return None

    def __getitem__(self, kind):
        h = self.get(kind)
        if h is None:
            raise KeyError(f"{kind.__name__} not in this frame")
        return h

    @property
    def opcode(self) -> Opcode:
        return Opcode(self.bth.opcode)

    @property
    def srv6(self) -> bool:
        return self.outer is not None

    @property
    def network(self) -> Ipv6:
        """The IPv6 header switches look at: the outer one in SRv6 mode."""
        return self.outer if self.outer is not None else self.ip

    @property
    def ev(self) -> int:
        """The 32-bit entropy value: UDP source port = EV[15:0], inner flow label[15:0] = EV[31:16]."""
        return ((self.ip.flow_label & 0xFFFF) << 16) | self.udp.sport

    def set_ev(self, ev: int) -> None:
        self.udp.sport = ev & 0xFFFF
        self.ip.flow_label = (ev >> 16) & 0xFFFF
        if self.outer is not None:
            self.outer.flow_label = self.ip.flow_label

    def copy(self) -> Frame:
        return replace(
            self,
            eth=self.eth.copy(),
            ip=self.ip.copy(),
            udp=self.udp.copy(),
            bth=self.bth.copy(),
            ext=[h.copy() for h in self.ext],
            outer=self.outer.copy() if self.outer else None,
            srh=self.srh.copy() if self.srh else None,
        )

    # -- bytes --------------------------------------------------------------------------------
    def covered_bytes(self) -> bytes:
        """The ICRC-covered bytes (IPv6 before UDP through the payload), lengths as they stand."""
        return (
            self.ip.pack()
            + self.udp.pack()
            + self.bth.pack()
            + b"".join(h.pack() for h in self.ext)
            + self.payload
        )

    def fix(self) -> Frame:
        """Set every length and next-header field to the value the payload implies (in place)."""
        l4 = Udp.SIZE + Bth.SIZE + sum(h.SIZE for h in self.ext) + len(self.payload) + 4
        self.udp.length = l4
        self.ip.payload_length = l4
        self.ip.next_header = IPPROTO_UDP
        self.eth.ethertype = ETHERTYPE_IPV6
        if self.outer is not None:
            srh_len = (Srh.SIZE + len(self.srh_segments)) if self.srh is not None else 0
            self.outer.payload_length = srh_len + Ipv6.SIZE + l4
            self.outer.next_header = IPPROTO_ROUTING if self.srh is not None else IPPROTO_IPV6
            if self.srh is not None:
                self.srh.next_header = IPPROTO_IPV6
                self.srh.hdr_ext_len = len(self.srh_segments) // 8
        return self

    def encode(self, *, fix: bool = True, icrc: bool = True) -> bytes:
        """Wire bytes (no FCS). ``fix``: compute lengths; ``icrc``: compute the ICRC if it is None."""
        frame = self.copy().fix() if fix else self
        covered = frame.covered_bytes()
        value = frame.icrc if frame.icrc is not None else (compute_icrc(covered) if icrc else 0)
        prefix = frame.eth.pack()
        if frame.outer is not None:
            prefix += frame.outer.pack()
            if frame.srh is not None:
                prefix += frame.srh.pack() + frame.srh_segments
        if frame.trimmed:
            return prefix + covered  # a trimmed packet has no ICRC
        return prefix + covered + value.to_bytes(4, "little")

    def icrc_ok(self) -> bool:
        return self.icrc is not None and self.icrc == compute_icrc(self.covered_bytes())

    def summary(self) -> str:
        bth = self.bth
        parts = [f"{self.opcode.name} qp={bth.dest_qp:#x} psn={bth.psn}"]
        if self.opcode.is_write:
            reth = self[Reth]
            parts.append(f"va={reth.va:#x} len={len(self.payload)}")
        parts.append(f"ev={self.ev:#010x}")
        if self.trimmed:
            parts.append("TRIMMED")
        return " ".join(parts)


def decode(
    data: bytes,
    *,
    udp_ports: tuple[int, ...] = (MRC_UDP_PORT, MRC_UDP_PORT_ALT),
    trimmed_dscp: tuple[int, ...] = (Dscp.TRIMMED, Dscp.TRIMMED_LASTHOP),
    check_icrc: bool = False,
) -> Frame:
    """Parse an MRC frame (no FCS). Raises :class:`WireError` for anything malformed.

    A packet whose network-layer DSCP is in ``trimmed_dscp`` is parsed as headers only: lengths are not
    trusted, payload and ICRC are absent (``Frame.trimmed``), and the WRITE headers may be cut short
    only after the BTH (a trimmed packet always keeps its BTH).
    """
    data = bytes(data)
    eth = Ethernet.unpack(data, 0)
    if eth.ethertype != ETHERTYPE_IPV6:
        raise WireError("not_ipv6", f"ethertype {eth.ethertype:#06x}")
    pos = Ethernet.SIZE
    first = Ipv6.unpack(data, pos)
    if first.version != 6:
        raise WireError("bad_ip_version", f"IP version {first.version}")
    trimmed = first.dscp in trimmed_dscp
    pos += Ipv6.SIZE
    outer = srh = None
    segments = b""
    if first.next_header in (IPPROTO_IPV6, IPPROTO_ROUTING):
        outer = first
        if not trimmed and first.payload_length != len(data) - pos:
            raise WireError(
                "bad_length", f"outer payload length {first.payload_length}, {len(data) - pos} present"
            )
        if first.next_header == IPPROTO_ROUTING:
            srh = Srh.unpack(data, pos)
            if srh.routing_type != 4:
                raise WireError("bad_routing_header", f"routing type {srh.routing_type}")
            seg_len = 8 * srh.hdr_ext_len
            segments = data[pos + Srh.SIZE : pos + Srh.SIZE + seg_len]
            if len(segments) < seg_len:
                raise WireError("truncated", "SRH segments")
            pos += Srh.SIZE + seg_len
            if srh.next_header != IPPROTO_IPV6:
                raise WireError("bad_next_header", f"SRH next header {srh.next_header}")
        ip = Ipv6.unpack(data, pos)
        if ip.version != 6:
            raise WireError("bad_ip_version", f"inner IP version {ip.version}")
        pos += Ipv6.SIZE
    else:
        ip = first
    if ip.next_header != IPPROTO_UDP:
        raise WireError("bad_next_header", f"next header {ip.next_header} where UDP (17) was expected")
    if not trimmed and ip.payload_length != len(data) - pos:
        raise WireError("bad_length", f"IPv6 payload length {ip.payload_length}, {len(data) - pos} present")
    udp = Udp.unpack(data, pos)
    if udp.dport not in udp_ports:
        raise WireError("bad_udp_port", f"UDP destination port {udp.dport}")
    if not trimmed and udp.length != len(data) - pos:
        raise WireError("bad_length", f"UDP length {udp.length}, {len(data) - pos} present")
    pos += Udp.SIZE
    bth = Bth.unpack(data, pos)
    pos += Bth.SIZE
    kinds = extension_headers(bth.opcode, bool(bth.ts))
    op = Opcode(bth.opcode)
    if bth.tver != 0:
        raise WireError("bad_transport_version", f"BTH TVer {bth.tver}")
    if bth.pad_count != 0:
        raise WireError("bad_pad_count", f"BTH pad count {bth.pad_count} (MRC payloads are never padded)")
    endpoint_op = op in (Opcode.ENDPOINT_REQUEST, Opcode.ENDPOINT_RESPONSE)
    if endpoint_op != (bth.dest_qp == ENDPOINT_QPN):
        raise WireError("bad_endpoint_qp", f"{op.name} to QP {bth.dest_qp:#x}")
    if trimmed and not (op.is_write or op == Opcode.PROBE):
        raise WireError("bad_trimmed_opcode", f"{op.name} marked trimmed: control packets are never trimmed")
    ext: list[Header] = []
    for kind in kinds:
        if trimmed and pos + kind.SIZE > len(data):
            break  # a trim may cut after the BTH; what is left is reported as missing
        ext.append(kind.unpack(data, pos))
        pos += kind.SIZE
    frame = Frame(
        eth=eth,
        ip=ip,
        udp=udp,
        bth=bth,
        ext=ext,
        outer=outer,
        srh=srh,
        srh_segments=segments,
        trimmed=trimmed,
    )
    if trimmed:
        return frame
    if len(data) - pos < 4:
        raise WireError("truncated", "no room for the ICRC")
    frame.payload = data[pos:-4]
    frame.icrc = int.from_bytes(data[-4:], "little")
    if not Opcode(bth.opcode).is_write and frame.payload:
        raise WireError("bad_length", f"{len(frame.payload)} unexpected bytes after a control header")
    if check_icrc and not frame.icrc_ok():
        raise WireError(
            "bad_icrc", f"ICRC {frame.icrc:#010x}, expected {compute_icrc(frame.covered_bytes()):#010x}"
        )
    return frame
