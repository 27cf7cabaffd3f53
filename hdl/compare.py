"""Comparisons of a signal with a constant, in LUTs instead of a carry chain.

Yosys maps ``x >= k`` for a constant ``k`` like any comparison, to a carry chain as long as ``x``
(on the ECP5, ``len(x) / 2`` CCU2C, that is ``len(x)`` logic cells), and simplifies only ``x < 2**n``.
Against a constant the comparison is a small sum of products of the bits that ABC packs into a few
LUT4s: ``x < k`` iff, at some bit ``i`` where ``k`` has a 1, ``x`` has a 0 and agrees with ``k`` above
``i``. For a 24-bit PSN distance that is about 7 LUT4s instead of 24 cells. Use these for comparisons
with constants on wide values; comparisons of two signals need the chain.
"""

from __future__ import annotations

from amaranth import Cat, Const, Value

__all__ = ["at_least", "at_most", "below", "above"]


def below(value: Value, constant: int) -> Value:
    """``value < constant`` for an unsigned ``value`` and an integer ``constant``."""
    width = len(value)
    if constant <= 0:
        return Const(0, 1)
    if constant >= 1 << width:
        return Const(1, 1)
    terms = []
    prefix_equal = Const(1, 1)  # the bits above ``bit`` agree with the constant's
    for bit in reversed(range(width)):
        if constant >> bit & 1:
            terms.append(prefix_equal & ~value[bit])
            prefix_equal = prefix_equal & value[bit]
        else:
            prefix_equal = prefix_equal & ~value[bit]
    return Cat(*terms).any()


def at_least(value: Value, constant: int) -> Value:
    """``value >= constant``."""
    return ~below(value, constant)


def at_most(value: Value, constant: int) -> Value:
    """``value <= constant``."""
    return below(value, constant + 1)


def above(value: Value, constant: int) -> Value:
    """``value > constant``."""
    return ~below(value, constant + 1)
