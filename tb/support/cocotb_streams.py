"""Driving and watching ``lib.stream`` ports of a converted Amaranth design from cocotb.

A stream member ``name`` of the top level becomes the ports ``name__valid``, ``name__ready`` and
``name__payload`` (one flat vector; use :func:`support.layouts.pack` to build it).
"""

from cocotb.triggers import RisingEdge

__all__ = ["StreamDriver", "stream_get", "stream_put"]


async def stream_put(dut, name: str, payload: int) -> None:
    """Offer ``payload`` on input stream ``name`` until the design takes it."""
    valid, ready = getattr(dut, f"{name}__valid"), getattr(dut, f"{name}__ready")
    getattr(dut, f"{name}__payload").value = payload
    valid.value = 1
    while True:
        await RisingEdge(dut.clk)
        if ready.value:  # the value just before the edge: the handshake happened at this edge
            break
    valid.value = 0


async def stream_get(dut, name: str) -> int:
    """Take one payload from output stream ``name``."""
    valid, ready = getattr(dut, f"{name}__valid"), getattr(dut, f"{name}__ready")
    payload = getattr(dut, f"{name}__payload")
    ready.value = 1
    while True:
        await RisingEdge(dut.clk)
        if valid.value:
            value = int(payload.value)
            break
    ready.value = 0
    return value


class StreamDriver:
    """A queue in front of an input stream: ``put`` without waiting, ``idle()`` when all were taken."""

    def __init__(self, dut, name: str):
        import cocotb

        self.dut, self.name = dut, name
        self.queue = []
        self.taken = 0
        getattr(dut, f"{name}__valid").value = 0
        self._task = cocotb.start_soon(self._run())

    def put(self, payload: int) -> None:
        self.queue.append(payload)

    def idle(self) -> bool:
        return not self.queue

    async def _run(self):
        while True:
            if self.queue:
                await stream_put(self.dut, self.name, self.queue[0])
                self.queue.pop(0)
                self.taken += 1
            else:
                await RisingEdge(self.dut.clk)
