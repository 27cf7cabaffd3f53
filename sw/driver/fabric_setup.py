"""Set two NICs up to talk over the simulated Clos fabric (``mrcnic.fabric``): addresses, a route
template to each other, one connected QP each. Used by the model backend's ``model:demo`` device, the
driver tests and the simulated RTL systems (any backend: only driver calls)."""

from __future__ import annotations

import random

from ..fabric.topology import LOCATOR
from ..model.endpoint import gid
from ..wire import RouteTemplate
from .nic import EvProfile, Nic, PeerAddress, Qp

__all__ = ["connect_over_fabric"]


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
