"""Set two NICs up to talk to each other, through driver calls only (any backend): over the simulated
Clos fabric (``mrcnic.fabric``: addresses, a route template to each other, one connected QP each; used
by the model backend's ``model:demo`` device, the driver tests and the simulated RTL systems), or cabled
back to back (two boards, :func:`connect_cabled`)."""

from __future__ import annotations

import random

from ..fabric.topology import LOCATOR
from ..model.endpoint import gid
from ..wire import RouteTemplate
from .nic import EvProfile, InvalidParameter, Nic, PeerAddress, Qp

__all__ = ["cable_mac", "connect_cabled", "connect_over_fabric"]


async def connect_over_fabric(
    a: Nic, b: Nic, hosts: tuple[int, int], *, uplinks: int, hosts_per_t0: int, seed: int, sq_depth: int = 16
) -> tuple[Qp, Qp]:
    """NIC ``a`` on fabric host ``hosts[0]``, ``b`` on ``hosts[1]``; route template 0 of each leads to the
    other; EV profiles drawn over ``uplinks`` T1 uplinks per plane; random first PSNs from ``seed``."""
    rng = random.Random(seed)
    qa, qb = await a.create_qp(sq_depth=sq_depth), await b.create_qp(sq_depth=sq_depth)
    for nic, me, peer in ((a, hosts[0], hosts[1]), (b, hosts[1], hosts[0])):
        await nic.set_addresses(gid=gid(me))
        await nic.set_route(
            0, RouteTemplate.for_clos(LOCATOR, me // hosts_per_t0, peer // hosts_per_t0, peer)
        )
    psn_a, psn_b = rng.randrange(1 << 24), rng.randrange(1 << 24)
    await qa.connect(
        PeerAddress(gid(hosts[1]), qb.qpn, 0),
        psn=psn_a,
        peer_psn=psn_b,
        profile=EvProfile.draw(a.caps, uplinks, seed + 1),
    )
    await qb.connect(
        PeerAddress(gid(hosts[0]), qa.qpn, 0),
        psn=psn_b,
        peer_psn=psn_a,
        profile=EvProfile.draw(b.caps, uplinks, seed + 2),
    )
    return qa, qb


def cable_mac(side: int, plane: int) -> int:
    """The port MAC :func:`connect_cabled` gives plane ``plane`` of NIC ``side`` (0 or 1): locally
    administered, 02:4d:52:43:<side>:<plane>."""
    return 0x024D_5243_0000 | side << 8 | plane


async def connect_cabled(a: Nic, b: Nic, *, seed: int, sq_depth: int = 16) -> tuple[Qp, Qp]:
    """Two NICs cabled port to port (plane p of ``a`` to plane p of ``b``, no switches): single-IPv6 mode
    (an SRv6 route would name switches that are not there), GIDs of fabric hosts 0 and 1, each port's
    next hop the peer's port on the same plane, EV profiles over the planes (one "uplink" each), one
    connected QP each with random first PSNs from ``seed``. Both NICs must have the same planes."""
    if a.caps.planes != b.caps.planes:
        raise InvalidParameter(f"cabled NICs need the same planes, not {a.caps.planes} and {b.caps.planes}")
    planes = a.caps.planes
    rng = random.Random(seed)
    qa, qb = await a.create_qp(sq_depth=sq_depth), await b.create_qp(sq_depth=sq_depth)
    for side, nic in enumerate((a, b)):
        await nic.set_parameters(srv6=0)
        await nic.set_addresses(
            gid=gid(side),
            port_macs=[cable_mac(side, p) for p in range(planes)],
            next_hop_macs=[cable_mac(1 - side, p) for p in range(planes)],
        )
    psn_a, psn_b = rng.randrange(1 << 24), rng.randrange(1 << 24)
    await qa.connect(
        PeerAddress(gid(1), qb.qpn, 0), psn=psn_a, peer_psn=psn_b, profile=EvProfile.draw(a.caps, 1, seed + 1)
    )
    await qb.connect(
        PeerAddress(gid(0), qa.qpn, 0), psn=psn_b, peer_psn=psn_a, profile=EvProfile.draw(b.caps, 1, seed + 2)
    )
    return qa, qb
