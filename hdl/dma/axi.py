"""AXI4 memory-mapped interface signatures (manager side), flat so the ports keep their AXI names.

Ref: ARM IHI 0022 (AMBA AXI and ACE Protocol Specification), §A2 (signal list), §A3.4 (bursts: INCR,
at most 256 beats, no burst crosses a 4 KiB boundary), §A3.4.4 (RRESP/BRESP encoding).

The members are named exactly like the AXI signals (``araddr``, ``rdata``, ...), not nested per
channel, so a top-level port ``m_axi`` converts to ``m_axi__araddr``, ``m_axi__rdata``, ... and
cocotbext-axi binds it with ``AxiBus.from_prefix(dut, "m_axi", bus_separator="__")`` (or
``AxiReadBus``/``AxiWriteBus`` for one direction). Only the signals this NIC drives are present; the
optional AXI signals (``arlock``, ``arcache``, ``arprot``, ``arqos``, ...) take their defaults at the
interconnect.
"""

from __future__ import annotations

from amaranth.lib import enum, wiring
from amaranth.lib.wiring import In, Out

__all__ = [
    "Axi4ReadSignature",
    "Axi4Signature",
    "Axi4WriteSignature",
    "AxiBurst",
    "AxiResp",
]


class AxiBurst(enum.Enum, shape=2):
    """``AxBURST`` encoding (§A3.4.1)."""

    FIXED = 0
    INCR = 1
    WRAP = 2


class AxiResp(enum.Enum, shape=2):
    """``RRESP``/``BRESP`` encoding (§A3.4.4): anything but OKAY/EXOKAY is an error."""

    OKAY = 0
    EXOKAY = 1
    SLVERR = 2
    DECERR = 3


def _check_params(addr_width: int, data_width_bytes: int, id_width: int) -> None:
    if not isinstance(addr_width, int) or not 12 <= addr_width <= 64:
        raise ValueError(f"addr_width must be an integer in 12..64, not {addr_width!r}")
    if (
        not isinstance(data_width_bytes, int)
        or not 1 <= data_width_bytes <= 128
        or data_width_bytes & (data_width_bytes - 1)
    ):
        # AXI data buses are 8..1024 bits wide, a power of two (§A1.3 / §A2.1).
        raise ValueError(f"data_width_bytes must be a power of two in 1..128, not {data_width_bytes!r}")
    if not isinstance(id_width, int) or not 1 <= id_width <= 32:
        raise ValueError(f"id_width must be an integer in 1..32, not {id_width!r}")


def _read_members(addr_width: int, data_width_bytes: int, id_width: int) -> dict:
    return {
        "araddr": Out(addr_width),
        "arlen": Out(8),  # beats - 1
        "arsize": Out(3),  # log2(bytes per beat)
        "arburst": Out(2),
        "arid": Out(id_width),
        "arvalid": Out(1),
        "arready": In(1),
        "rdata": In(8 * data_width_bytes),
        "rresp": In(2),
        "rlast": In(1),
        "rid": In(id_width),
        "rvalid": In(1),
        "rready": Out(1),
    }


def _write_members(addr_width: int, data_width_bytes: int, id_width: int) -> dict:
    return {
        "awaddr": Out(addr_width),
        "awlen": Out(8),
        "awsize": Out(3),
        "awburst": Out(2),
        "awid": Out(id_width),
        "awvalid": Out(1),
        "awready": In(1),
        "wdata": Out(8 * data_width_bytes),
        "wstrb": Out(data_width_bytes),
        "wlast": Out(1),
        "wvalid": Out(1),
        "wready": In(1),
        "bresp": In(2),
        "bid": In(id_width),
        "bvalid": In(1),
        "bready": Out(1),
    }


class _AxiSignatureBase(wiring.Signature):
    def __init__(self, members: dict, addr_width: int, data_width_bytes: int, id_width: int):
        self._addr_width = addr_width
        self._data_width_bytes = data_width_bytes
        self._id_width = id_width
        super().__init__(members)

    @property
    def addr_width(self) -> int:
        return self._addr_width

    @property
    def data_width_bytes(self) -> int:
        return self._data_width_bytes

    @property
    def id_width(self) -> int:
        return self._id_width

    @property
    def size_log2(self) -> int:
        """``AxSIZE`` of a full-width beat."""
        return self._data_width_bytes.bit_length() - 1

    def _params(self) -> tuple:
        return (self._addr_width, self._data_width_bytes, self._id_width)

    def __eq__(self, other):
        return type(other) is type(self) and other._params() == self._params()

    def __hash__(self):
        return hash((type(self), self._params()))

    def __repr__(self):
        return (
            f"{type(self).__name__}(addr_width={self._addr_width}, "
            f"data_width_bytes={self._data_width_bytes}, id_width={self._id_width})"
        )


class Axi4ReadSignature(_AxiSignatureBase):
    """AXI4 read channels (AR, R), manager side: ``ar*`` and ``rready`` are outputs."""

    def __init__(self, *, addr_width: int = 64, data_width_bytes: int, id_width: int = 4):
        _check_params(addr_width, data_width_bytes, id_width)
        super().__init__(
            _read_members(addr_width, data_width_bytes, id_width), addr_width, data_width_bytes, id_width
        )


class Axi4WriteSignature(_AxiSignatureBase):
    """AXI4 write channels (AW, W, B), manager side: ``aw*``, ``w*`` and ``bready`` are outputs."""

    def __init__(self, *, addr_width: int = 64, data_width_bytes: int, id_width: int = 4):
        _check_params(addr_width, data_width_bytes, id_width)
        super().__init__(
            _write_members(addr_width, data_width_bytes, id_width), addr_width, data_width_bytes, id_width
        )


class Axi4Signature(_AxiSignatureBase):
    """A full AXI4 manager port: the members of :class:`Axi4ReadSignature` and :class:`Axi4WriteSignature`."""

    def __init__(self, *, addr_width: int = 64, data_width_bytes: int, id_width: int = 4):
        _check_params(addr_width, data_width_bytes, id_width)
        members = _read_members(addr_width, data_width_bytes, id_width)
        members.update(_write_members(addr_width, data_width_bytes, id_width))
        super().__init__(members, addr_width, data_width_bytes, id_width)
