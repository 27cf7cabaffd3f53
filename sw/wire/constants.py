"""Code points of the MRC wire format: opcodes, DSCP defaults, NACK reasons, SACK path verdicts.

Ref: docs/protocol.md §3 (opcodes), §9 (DSCP), §7.3 (NACK reasons).
"""

from __future__ import annotations

import enum

__all__ = [
    "ENDPOINT_QPN",
    "ETHERTYPE_IPV6",
    "IPPROTO_IPV6",
    "IPPROTO_ROUTING",
    "IPPROTO_UDP",
    "MRC_UDP_PORT",
    "MRC_UDP_PORT_ALT",
    "AethSyndrome",
    "Dscp",
    "Ecn",
    "EndpointOp",
    "NackReason",
    "Opcode",
    "SackVerdict",
]

ETHERTYPE_IPV6 = 0x86DD
IPPROTO_ROUTING = 43  # IPv6 Routing header (SRH, RFC 8754)
IPPROTO_IPV6 = 41  # IPv6-in-IPv6
IPPROTO_UDP = 17
MRC_UDP_PORT = 4791  # RoCEv2 IANA port; transmit default (a register)
MRC_UDP_PORT_ALT = 4971  # the value printed in one place of the MRC 1.0 text; accepted on receive
ENDPOINT_QPN = 0x000002  # reserved destination QP of connectionless endpoint operations


class Opcode(enum.IntEnum):
    """BTH opcodes used by MRC (IBTA manufacturer-specific class, bits [7:5] = 0b110)."""

    WRITE_FIRST = 0xC6
    WRITE_MIDDLE = 0xC7
    WRITE_LAST = 0xC8
    WRITE_LAST_IMM = 0xC9
    WRITE_ONLY = 0xCA
    WRITE_ONLY_IMM = 0xCB
    ACK = 0xD1
    ENDPOINT_REQUEST = 0xD8
    ENDPOINT_RESPONSE = 0xD9
    SACK = 0xDC
    NACK = 0xDD
    PROBE = 0xDE

    @property
    def is_write(self) -> bool:
        return Opcode.WRITE_FIRST <= self <= Opcode.WRITE_ONLY_IMM

    @property
    def has_immediate(self) -> bool:
        return self in (Opcode.WRITE_LAST_IMM, Opcode.WRITE_ONLY_IMM)

    @property
    def starts_message(self) -> bool:
        return self in (Opcode.WRITE_FIRST, Opcode.WRITE_ONLY, Opcode.WRITE_ONLY_IMM)

    @property
    def ends_message(self) -> bool:
        return self in (Opcode.WRITE_LAST, Opcode.WRITE_LAST_IMM, Opcode.WRITE_ONLY, Opcode.WRITE_ONLY_IMM)


class Dscp(enum.IntEnum):
    """Default DSCP code points (every one is a register in the NIC and an option in the model)."""

    NO_TRIM = 0  # data when the fabric cannot trim
    TRIMMABLE = 4  # first transmission of data, reliability probes
    TRIMMABLE_RETX = 8  # retransmitted data
    TRIMMED = 12  # set by a switch that trimmed the packet
    TRIMMED_LASTHOP = 16  # set by the last-hop switch that trimmed the packet
    CONTROL = 46  # SACK, NACK, transport ACK, endpoint operations


class Ecn(enum.IntEnum):
    NOT_ECT = 0b00
    ECT1 = 0b01
    ECT0 = 0b10
    CE = 0b11


class NackReason(enum.IntEnum):
    """NETH nack_reason codes (same numbering as UET PDS NACK codes)."""

    TRIMMED = 0x01
    TRIMMED_LASTHOP = 0x02
    NO_BITMAP = 0x06
    NO_PKT_BUFFER = 0x07
    NO_RESOURCE = 0x0A
    PSN_OOR_WINDOW = 0x0B
    UNEXP_EVENT = 0x19

    @property
    def retryable(self) -> bool:
        return self != NackReason.UNEXP_EVENT

    @property
    def implicates_path(self) -> bool:
        return self == NackReason.TRIMMED


class SackVerdict(enum.IntEnum):
    """SETH ``m``: the responder's verdict on the path (EV) of the packet that triggered the SACK."""

    NONE = 0
    SKIP_ONCE = 1  # the triggering packet arrived with ECN CE
    ALWAYS_SKIP = 2  # never sent by this NIC (v1), understood on receive


class EndpointOp(enum.IntEnum):
    PORT_STATUS_UPDATE = 0
    EV_PROBE = 1


class AethSyndrome(enum.IntEnum):
    """AETH syndrome values used by MRC transport ACKs (IBTA encoding: [7:5] type, [4:0] value)."""

    ACK = 0x1F  # ACK, no credit information (MRC has no receive credits)
    NAK_INVALID_REQUEST = 0x61
    NAK_REMOTE_ACCESS = 0x62  # R_Key / bounds / access-rights violation
    NAK_REMOTE_OPERATION = 0x63  # e.g. receive queue empty for a WRITE-with-immediate
