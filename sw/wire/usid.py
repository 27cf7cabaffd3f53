"""SRv6 uSID addressing and the 32-bit entropy value (EV): how a path is named.

Ref: RFC 9800 §4.1 (NEXT-C-SID flavour, 32-bit locator block + 16-bit C-SIDs, 0 = end of carrier);
docs/protocol.md §5.

uSID (16 bits)::

    [15:13] plane   [12:11] role (1 = T0 switch, 2 = T1 switch, 3 = host port)   [10:0] index

EV (32 bits)::

    [31:29] plane   [28:21] uplink (T0 uplink number = index of the T1 in that plane)   [20:0] salt

A destination's *route template* is a list of up to six uSIDs whose plane bits are filled from the EV
when a packet is sent, plus which slot (if any) is the T1 hop whose index comes from the EV's uplink.
For a cross-T1 destination the container is ``LOC | T0(src) | T1(uplink) | T0(dst) | HOST(dst) | 0 | 0``;
for a destination under the same T0 it is ``LOC | T0 | HOST(dst) | 0 ...``. The last uSID always names
the destination NIC's port, an address the NIC owns, so no switch ever holds the last uSID.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

__all__ = [
    "MAX_USIDS",
    "NO_T1_SLOT",
    "Role",
    "RouteTemplate",
    "ev_fields",
    "make_ev",
    "next_csid_shift",
    "port_address",
    "usid",
    "usid_fields",
]

MAX_USIDS = 6
NO_T1_SLOT = 7


class Role(enum.IntEnum):
    T0 = 1
    T1 = 2
    HOST = 3


def usid(plane: int, role: Role | int, index: int) -> int:
    if not 0 <= plane < 8:
        raise ValueError(f"plane {plane} out of range 0..7")
    if not 0 <= index < 2048:
        raise ValueError(f"uSID index {index} out of range 0..2047")
    return (plane << 13) | (int(role) << 11) | index


def usid_fields(value: int) -> tuple[int, Role, int]:
    return (value >> 13) & 7, Role((value >> 11) & 3), value & 0x7FF


def make_ev(plane: int, uplink: int = 0, salt: int = 0) -> int:
    if not 0 <= plane < 8 or not 0 <= uplink < 256 or not 0 <= salt < (1 << 21):
        raise ValueError(f"EV fields out of range: plane={plane} uplink={uplink} salt={salt}")
    return (plane << 29) | (uplink << 21) | salt


def ev_fields(ev: int) -> tuple[int, int, int]:
    """(plane, uplink, salt) of an EV."""
    return (ev >> 29) & 7, (ev >> 21) & 0xFF, ev & 0x1FFFFF


def container(locator: int, usids: list[int]) -> int:
    if len(usids) > MAX_USIDS:
        raise ValueError(f"{len(usids)} uSIDs do not fit one 128-bit carrier (max {MAX_USIDS})")
    value = (locator & 0xFFFFFFFF) << 96
    for i, u in enumerate(usids):
        value |= (u & 0xFFFF) << (80 - 16 * i)
    return value


def port_address(locator: int, plane: int, host_index: int) -> int:
    """The IPv6 address a NIC owns on a plane: ``LOC | HOST(plane, index) | 0...``."""
    return container(locator, [usid(plane, Role.HOST, host_index)])


def next_csid_shift(address: int) -> int | None:
    """RFC 9800 End with NEXT-C-SID on a /48 local SID: shift the argument left by 16 bits.

    Returns the new destination, or ``None`` when the argument is zero (this node is the endpoint).
    """
    argument = address & ((1 << 80) - 1)
    if argument == 0:
        return None
    locator = address >> 96
    return (locator << 96) | ((argument << 16) & ((1 << 96) - 1))


@dataclass
class RouteTemplate:
    """Per-destination source route, specialised per packet by the EV (see module docstring)."""

    locator: int
    usids: list[int] = field(default_factory=list)  # plane bits are ignored: they come from the EV
    t1_slot: int = NO_T1_SLOT  # slot whose index bits come from the EV's uplink, or NO_T1_SLOT

    def __post_init__(self):
        if not 1 <= len(self.usids) <= MAX_USIDS:
            raise ValueError("a route template has 1 to 6 uSIDs")
        if self.t1_slot != NO_T1_SLOT and not 0 <= self.t1_slot < len(self.usids):
            raise ValueError(f"t1_slot {self.t1_slot} outside the template's {len(self.usids)} uSIDs")

    @classmethod
    def for_clos(cls, locator: int, src_t0: int, dst_t0: int, dst_host: int) -> RouteTemplate:
        """The template of a two-tier Clos plane: through a T1 unless both hosts share a T0."""
        if src_t0 == dst_t0:
            return cls(locator, [usid(0, Role.T0, src_t0), usid(0, Role.HOST, dst_host)])
        return cls(
            locator,
            [
                usid(0, Role.T0, src_t0),
                usid(0, Role.T1, 0),
                usid(0, Role.T0, dst_t0),
                usid(0, Role.HOST, dst_host),
            ],
            t1_slot=1,
        )

    def specialise(self, ev: int) -> list[int]:
        plane, uplink, _ = ev_fields(ev)
        out = []
        for slot, u in enumerate(self.usids):
            u = (u & 0x1FFF) | (plane << 13)
            if slot == self.t1_slot:
                u = (u & ~0x7FF) | uplink
            out.append(u)
        return out

    def destination(self, ev: int) -> int:
        """The outer IPv6 destination address for a packet sent on ``ev``."""
        return container(self.locator, self.specialise(ev))

    @property
    def hops(self) -> int:
        """Switches on the path (each one decrements the hop limit once)."""
        return len(self.usids) - 1
