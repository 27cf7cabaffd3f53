"""A register slice for a stream: both of its outputs towards the streams (``i.ready``, ``o.valid``) and
the payload come from flip-flops, so a ready/valid chain through it is cut in two.

A block that decides what to do next from its consumer's ``ready`` (a RAM's read enable, a pipeline's
shift) makes one long combinational path with its consumer's own logic; on the Colorlight 5A-75B the
RX ring's read pipeline and the ICRC checker behind it were the receive clock's critical path, 12.7 ns
of mostly routing (docs/boards.md, "Colorlight 5A-75B: the bitstream"). With this between
them each side sees a register.

Two places, ``main`` (the one offered on ``o``) and ``skid`` (the word that arrives in the cycle
``o.ready`` goes low: ``i.ready`` is last cycle's and cannot refuse it), so words pass one per cycle
while ``o`` takes them, one cycle after they came in.
"""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["SkidBuffer"]


class SkidBuffer(wiring.Component):
    """Members: ``i`` (In, stream of ``shape``), ``o`` (Out, the same words in order), one clock domain
    (``sync``)."""

    def __init__(self, shape):
        self.shape = shape
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        skid = Signal(self.shape)
        skid_valid = Signal()
        main_free = Signal()
        m.d.comb += [
            self.i.ready.eq(~skid_valid),
            main_free.eq(~self.o.valid | self.o.ready),
        ]
        with m.If(main_free):
            # The skid's word goes first; a word coming in now goes to ``main`` only if there is none.
            with m.If(skid_valid):
                m.d.sync += [self.o.payload.eq(skid), skid_valid.eq(0)]
            with m.Else():
                m.d.sync += [self.o.payload.eq(self.i.payload), self.o.valid.eq(self.i.valid)]
        with m.Elif(self.i.valid & ~skid_valid):
            m.d.sync += [skid.eq(self.i.payload), skid_valid.eq(1)]
        return m
