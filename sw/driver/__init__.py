"""The ``mrcnic`` driver: a verbs-shaped async API over any backend (docs/host-interface.md).

nic = await mrcnic.driver.open("model:")           # or open(transport) for a simulated NIC
mr = await nic.register_memory(address, length)
qp = await nic.create_qp()
await qp.connect(peer, psn=..., peer_psn=..., profile=EvProfile.draw(nic.caps, uplinks, seed))
await qp.post_write(local, remote, rkey, length, wr_id=1)
completions = await nic.poll_cq()
"""

from __future__ import annotations

from ..regmap import CqeKind, CqeStatus
from .nic import (
    QPN_BASE,
    Completion,
    DriverError,
    EvProfile,
    InvalidParameter,
    MemoryRegion,
    Nic,
    PeerAddress,
    Qp,
    QpState,
    QueueFull,
    WrongQpState,
    open_nic,
)
from .transport import HostMemoryAllocator, Transport

__all__ = [
    "Completion",
    "CqeKind",
    "CqeStatus",
    "DriverError",
    "EvProfile",
    "HostMemoryAllocator",
    "InvalidParameter",
    "MemoryRegion",
    "Nic",
    "PeerAddress",
    "QPN_BASE",
    "Qp",
    "QpState",
    "QueueFull",
    "Transport",
    "WrongQpState",
    "open",
]


async def open(target, *, cq_depth: int = 256) -> Nic:
    """Open a NIC: a :class:`Transport`, or a device URL.

    URLs: ``model:`` (a reference-model NIC on its own simulated fabric, with a peer NIC next to it),
    ``uart:<port>[?baud=N&memory=BASE:SIZE&timeout=S&retries=N]`` (a board's UART host bridge on a serial
    port, e.g. ``uart:///dev/ttyUSB1?baud=1000000``; docs/uart-bridge.md).
    """
    if isinstance(target, Transport):
        return await open_nic(target, cq_depth=cq_depth)
    if not isinstance(target, str):
        raise InvalidParameter(f"open() takes a device URL or a Transport, not {type(target).__name__}")
    scheme, _, rest = target.partition(":")
    if scheme == "model":
        from .model_backend import ModelCluster

        if rest not in ("", "//"):
            raise InvalidParameter(f"model URL {target!r}: use 'model:'")
        return await open_nic(ModelCluster(2).devices[0], cq_depth=cq_depth)
    if scheme == "uart":
        from .uart_backend import open_uart

        transport = open_uart(target)
        try:
            return await open_nic(transport, cq_depth=cq_depth)
        except BaseException:
            await transport.close()
            raise
    raise InvalidParameter(f"unknown device URL {target!r}: expected 'model:' or 'uart:<port>'")
