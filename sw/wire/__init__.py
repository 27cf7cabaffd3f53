"""The MRC wire format: one codec for every header, whole-frame build/parse, scapy layers, pcap.

Ref: docs/protocol.md. Typical use::

    from mrcnic import wire
    frame = wire.decode(raw_bytes, check_icrc=True)
    frame[wire.Reth].va, frame.ev, frame.payload
"""

from .build import Addressing, control_frame, data_frame
from .constants import (
    ENDPOINT_QPN,
    MRC_UDP_PORT,
    MRC_UDP_PORT_ALT,
    AethSyndrome,
    Dscp,
    Ecn,
    EndpointOp,
    NackReason,
    Opcode,
    SackVerdict,
)
from .frame import Frame, decode, extension_headers, header_length
from .headers import (
    HEADER_TYPES,
    Aeth,
    Bth,
    CcState,
    Eeth,
    Erth,
    Ethernet,
    Field,
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
    ip6,
    mac,
)
from .icrc import ICRC_RESIDUE, compute_icrc
from .usid import Role, RouteTemplate, ev_fields, make_ev, next_csid_shift, port_address, usid, usid_fields

__all__ = [
    "ENDPOINT_QPN",
    "HEADER_TYPES",
    "ICRC_RESIDUE",
    "MRC_UDP_PORT",
    "MRC_UDP_PORT_ALT",
    "Addressing",
    "Aeth",
    "AethSyndrome",
    "Bth",
    "CcState",
    "Dscp",
    "Ecn",
    "Eeth",
    "EndpointOp",
    "Erth",
    "Ethernet",
    "Field",
    "Frame",
    "Header",
    "ImmDt",
    "Ipv6",
    "Meth",
    "NackReason",
    "Neth",
    "Opcode",
    "Peth",
    "Reth",
    "Role",
    "RouteTemplate",
    "SackVerdict",
    "Seth",
    "Srh",
    "Tseth",
    "Udp",
    "WireError",
    "compute_icrc",
    "control_frame",
    "data_frame",
    "decode",
    "ev_fields",
    "extension_headers",
    "header_length",
    "ip6",
    "mac",
    "make_ev",
    "next_csid_shift",
    "port_address",
    "usid",
    "usid_fields",
]
