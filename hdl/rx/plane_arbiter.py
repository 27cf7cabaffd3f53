"""Plane arbiter: merges the receive streams of all plane ports into one, a whole packet at a time.

Ref: docs/protocol.md §2 (every plane port delivers whole frames), §6 (planes are equal: none may starve).

Round robin at packet granularity: once the first beat of a packet is taken from a plane, only that
plane is served until its ``last`` beat. The choice of the next plane is combinational, so a packet can
start in the cycle after the previous one ended (full throughput, also with a single busy plane); the
plane served last has the lowest priority for the next choice. Every output beat carries the number of
the plane it came from.
"""

from amaranth import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..stream import PacketLayout, PacketStream
from ..tx.layouts import bits_for

__all__ = ["PlaneArbiter", "PlanePacketLayout"]


def PlanePacketLayout(data_width: int, planes: int, user_width: int = 0) -> data.StructLayout:
    """A packet-stream beat (``data``, ``keep``, ``last``, ``user``) tagged with its ``plane``."""
    fields = dict(PacketLayout(data_width, user_width).members)
    fields["plane"] = bits_for(planes)
    return data.StructLayout(fields)


class PlaneArbiter(wiring.Component):
    """Members: ``i`` (one packet stream per plane), ``o`` (packets with their ``plane``). Parameter
    ``user_width``: sideband bits per beat, passed along."""

    def __init__(self, *, data_width: int, planes: int, user_width: int = 0):
        if planes < 1:
            raise ValueError(f"need at least one plane, not {planes}")
        self.data_width, self.planes, self.user_width = data_width, planes, user_width
        super().__init__(
            {
                "i": In(PacketStream(data_width, user_width)).array(planes),
                "o": Out(stream.Signature(PlanePacketLayout(data_width, planes, user_width))),
            }
        )

    def elaborate(self, platform):
        m = Module()
        planes = self.planes
        width = bits_for(planes)
        busy = Signal()  # inside a packet: ``owner`` keeps the output until its last beat
        owner = Signal(width)
        previous = Signal(width, init=planes - 1)  # plane served last: lowest priority next
        choice = Signal(width)  # first valid plane after ``previous``, round robin
        with m.Switch(previous):
            for p in range(planes):
                with m.Case(p):
                    # Later assignments win: walk from the lowest to the highest priority.
                    for k in reversed(range(1, planes + 1)):
                        q = (p + k) % planes
                        with m.If(self.i[q].valid):
                            m.d.comb += choice.eq(q)
        sel = Signal(width)
        m.d.comb += sel.eq(choice)
        with m.If(busy):
            m.d.comb += sel.eq(owner)

        for p in range(planes):
            with m.If(sel == p):
                m.d.comb += [
                    self.o.payload.data.eq(self.i[p].payload.data),
                    self.o.payload.keep.eq(self.i[p].payload.keep),
                    self.o.payload.last.eq(self.i[p].payload.last),
                    *([self.o.payload.user.eq(self.i[p].payload.user)] if self.user_width else []),
                    self.o.valid.eq(self.i[p].valid),
                    self.i[p].ready.eq(self.o.ready),
                ]
        m.d.comb += self.o.payload.plane.eq(sel)

        with m.If(self.o.valid & self.o.ready):
            with m.If(self.o.payload.last):
                m.d.sync += [busy.eq(0), previous.eq(sel)]
            with m.Else():
                m.d.sync += [busy.eq(1), owner.eq(sel)]
        return m
