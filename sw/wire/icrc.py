"""RoCEv2 invariant CRC (ICRC) as used by MRC.

Ref: IBTA Vol. 1 Annex A17 (RoCEv2) §A17.4.4; docs/protocol.md §8.

The ICRC is CRC-32 (IEEE 802.3 polynomial, reflected, init and final XOR 0xFFFFFFFF: ``zlib.crc32``)
over 8 bytes of 0xFF (standing for the absent InfiniBand LRH), then the IPv6 header that precedes UDP
with traffic class, flow label and hop limit forced to ones, the UDP header with the checksum forced to
ones, the BTH with byte 4 forced to ones, and everything after the BTH up to the ICRC. In SRv6 mode the
covered IPv6 header is the *inner* one: the outer header and any SRH change at every hop.
The 32-bit result is stored least-significant byte first.
"""

from __future__ import annotations

import zlib

__all__ = [
    "ICRC_MASKED_OFFSETS",
    "ICRC_PREFIX",
    "ICRC_RESIDUE",
    "compute_icrc",
    "icrc_bytes",
    "mask_variant_fields",
]

ICRC_PREFIX = b"\xff" * 8

# (byte offset from the start of the covered IPv6 header, OR-mask applied before the CRC)
ICRC_MASKED_OFFSETS: tuple[tuple[int, int], ...] = (
    (0, 0x0F),  # traffic class [7:4] (the version nibble stays)
    (1, 0xFF),  # traffic class [3:0], flow label [19:16]
    (2, 0xFF),  # flow label [15:8]
    (3, 0xFF),  # flow label [7:0]
    (7, 0xFF),  # hop limit
    (46, 0xFF),  # UDP checksum
    (47, 0xFF),
    (52, 0xFF),  # BTH byte 4 (IBTA FECN/BECN/reserved)
)

# zlib.crc32 of any covered region followed by its own little-endian ICRC.
ICRC_RESIDUE = 0x2144DF1C


def mask_variant_fields(covered: bytes) -> bytes:
    masked = bytearray(covered)
    for offset, mask in ICRC_MASKED_OFFSETS:
        if offset < len(masked):
            masked[offset] |= mask
    return bytes(masked)


def compute_icrc(covered: bytes) -> int:
    """ICRC of ``covered`` = the IPv6 header before UDP through the last payload byte (no ICRC)."""
    return zlib.crc32(ICRC_PREFIX + mask_variant_fields(covered)) & 0xFFFFFFFF


def icrc_bytes(covered: bytes) -> bytes:
    return compute_icrc(covered).to_bytes(4, "little")
