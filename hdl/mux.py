"""Wide multiplexers as trees of 2:1 multiplexers.

Yosys maps a ``Switch`` over many cases (a ``$pmux``) and a value-indexed ``Array`` or ``word_select``
(a ``$shiftx`` over the whole vector) to more LUT4s than a tree of 2:1 multiplexers on the bits of the
index: the counter bank's 80-way sample multiplexer of 8-bit samples took 1,092 LUT4s (and 140 L6MUX21)
as a ``Switch`` and 631 as a tree (``synth_ecp5``, 2026-12-05).
"""

from amaranth import Mux, Value

__all__ = ["select"]


def select(values, index: Value) -> Value:
    """``values[index]`` as a tree of 2:1 multiplexers on the bits of ``index``, which must be below
    ``len(values)`` (past it the result is one of the values). The values are zero-extended to the
    widest. Pass a signal (or a slice of one) as ``index``: each bit of it is read by several
    multiplexers, and an expression would be written out again at every read in the generated Verilog.
    """
    level = [Value.cast(value) for value in values]
    if not level:
        raise ValueError("select() needs at least one value")
    for bit in range(len(index)):
        if len(level) == 1:
            break
        level = [
            Mux(index[bit], level[k + 1], level[k]) if k + 1 < len(level) else level[k]
            for k in range(0, len(level), 2)
        ]
    return level[0]
