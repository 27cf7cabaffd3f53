"""A plane switch (T0 or T1): uSID forwarding (RFC 9800 NEXT-C-SID) plus a static /48 table, or ECMP.

SRv6 mode, per frame: the outer DA must carry the fabric locator; if its active uSID is this switch's,
shift it out (``next_csid_shift``; a switch is never the final endpoint, so an empty argument drops);
decrement the outer hop limit (a frame whose hop limit would reach 0 is dropped); look up
locator || active uSID in the static table to get the egress port; unroutable frames are dropped.

ECMP mode (single-IPv6 baseline): route on the destination GID; at a T0 a destination not below it goes
up on ``hash(src, dst, sport, dport, flow label) mod uplinks`` (CRC-32 of the 5-tuple, salted per switch).
"""

from __future__ import annotations

import zlib

from ..wire import next_csid_shift

__all__ = ["Switch", "ecmp_hash"]


def ecmp_hash(src: int, dst: int, sport: int, dport: int, flow_label: int, salt: int = 0) -> int:
    key = (
        src.to_bytes(16, "big")
        + dst.to_bytes(16, "big")
        + sport.to_bytes(2, "big")
        + dport.to_bytes(2, "big")
        + flow_label.to_bytes(3, "big")
        + salt.to_bytes(4, "big")
    )
    return zlib.crc32(key)


class Switch:
    def __init__(
        self, name: str, plane: int, own_usid: int, locator: int, *, srv6: bool = True, salt: int = 0
    ):
        self.name = name
        self.plane = plane
        self.usid = own_usid
        self.locator = locator
        self.srv6 = srv6
        self.salt = salt
        self.ports: list = []
        self.routes: dict[int, int] = {}  # active uSID (srv6) -> egress port
        self.host_routes: dict[int, int] = {}  # ECMP mode: destination host -> egress port (down)
        self.uplinks: list[int] = []  # ECMP mode: uplink ports
        self.up = True
        self.c = dict(rx=0, no_route=0, hop_limit=0, not_mine=0, dead=0)
        self._hash_cache: dict = {}

    def port_idle(self, port, now: int) -> None:
        pass

    def receive(self, frame, in_port: int, now: int) -> None:
        if not self.up:
            self.c["dead"] += 1
            return
        self.c["rx"] += 1
        if self.srv6:
            net = frame.outer
            da = net.dst
            if da >> 96 != self.locator:
                self.c["not_mine"] += 1
                return
            active = (da >> 80) & 0xFFFF
            if active == self.usid:
                da = next_csid_shift(da)
                if da is None:
                    self.c["no_route"] += 1
                    return
                net.dst = da
                active = (da >> 80) & 0xFFFF
            if net.hop_limit <= 1:
                self.c["hop_limit"] += 1
                return
            net.hop_limit -= 1
            port = self.routes.get(active)
        else:
            ip = frame.ip
            if ip.hop_limit <= 1:
                self.c["hop_limit"] += 1
                return
            ip.hop_limit -= 1
            port = self.host_routes.get(ip.dst & 0xFFFF)
            if port is None and self.uplinks:
                key = (ip.src, ip.dst, frame.udp.sport, frame.udp.dport, ip.flow_label)
                h = self._hash_cache.get(key)
                if h is None:
                    h = self._hash_cache[key] = ecmp_hash(*key, salt=self.salt)
                port = self.uplinks[h % len(self.uplinks)]
        if port is None:
            self.c["no_route"] += 1
            return
        self.ports[port].enqueue(frame, now)
