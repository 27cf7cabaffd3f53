"""Packing Amaranth layouts into the integers a cocotb test writes to (and reads from) flat ports."""

from amaranth.hdl import Const
from amaranth.lib import data

__all__ = ["pack", "unpack"]


def pack(layout, fields) -> int:
    """The integer value of ``fields`` (a dict, nested for nested layouts) in ``layout``."""
    return Const.cast(data.Layout.cast(layout).const(fields)).value


def unpack(layout, value: int):
    """A read-only view of the integer ``value`` laid out as ``layout`` (fields as attributes)."""
    return data.Const(data.Layout.cast(layout), int(value))
