"""AXI4-Lite interface signature (manager side), flat so the ports keep their AXI names.

Ref: ARM IHI 0022 (AMBA AXI and ACE Protocol Specification), Part B (AXI4-Lite): 32-bit data, every
transaction a single beat, no IDs; §A3.4.4 for the response codes (:class:`~mrcnic.hdl.dma.axi.AxiResp`).

A subordinate port is ``In(AxiLiteSignature(...))``; a top-level port ``s_axil`` converts to
``s_axil__awaddr``, ... and cocotbext-axi binds it with ``AxiLiteBus.from_prefix(dut, "s_axil",
bus_separator="__")``.
"""

from __future__ import annotations

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["AxiLiteSignature"]


class AxiLiteSignature(wiring.Signature):
    """AXI4-Lite, 32-bit data, ``addr_width`` address bits; manager side."""

    def __init__(self, *, addr_width: int = 16):
        if not isinstance(addr_width, int) or not 4 <= addr_width <= 64:
            raise ValueError(f"addr_width must be an integer in 4..64, not {addr_width!r}")
        self._addr_width = addr_width
        super().__init__(
            {
                "awaddr": Out(addr_width),
                "awprot": Out(3),
                "awvalid": Out(1),
                "awready": In(1),
                "wdata": Out(32),
                "wstrb": Out(4),
                "wvalid": Out(1),
                "wready": In(1),
                "bresp": In(2),
                "bvalid": In(1),
                "bready": Out(1),
                "araddr": Out(addr_width),
                "arprot": Out(3),
                "arvalid": Out(1),
                "arready": In(1),
                "rdata": In(32),
                "rresp": In(2),
                "rvalid": In(1),
                "rready": Out(1),
            }
        )

    @property
    def addr_width(self) -> int:
        return self._addr_width

    def __eq__(self, other):
        return type(other) is type(self) and other._addr_width == self._addr_width

    def __hash__(self):
        return hash((type(self), self._addr_width))

    def __repr__(self):
        return f"AxiLiteSignature(addr_width={self._addr_width})"
