"""ICRC inserter: appends each packet's ICRC (4 bytes, least significant first) after its last byte.

Ref: docs/protocol.md §8. The packed packet stream is fed to the ICRC engine and, in parallel, into a
data FIFO; a packet's last beat leaves the FIFO only with its CRC appended. The FIFO absorbs the
engine's latency: after the first packet of a burst it holds that many beats, so the tails of later
packets find their CRC ready and the output runs without bubbles.
"""

from amaranth import Cat, Const, Module, Signal
from amaranth.lib import fifo, wiring
from amaranth.lib.wiring import In, Out

from ..icrc import IcrcEngine
from ..stream import PacketLayout, PacketStream

__all__ = ["IcrcInserter"]


class IcrcInserter(wiring.Component):
    """Members: ``i`` (packed packets without ICRC), ``o`` (the same with the ICRC appended),
    ``skip`` (bytes not covered: 54 in SRv6 mode, 14 in single-IPv6 mode).

    Parameters: ``data_width`` (bytes, >= 4), ``depth`` (data FIFO beats; more than the engine latency).
    """

    def __init__(self, *, data_width: int, depth: int = 32):
        if data_width < 4:
            raise ValueError("the ICRC inserter needs at least 4 bytes per beat")
        self.data_width, self.depth = data_width, depth
        super().__init__(
            {"i": In(PacketStream(data_width)), "o": Out(PacketStream(data_width)), "skip": In(16)}
        )

    def elaborate(self, platform):
        m = Module()
        w = self.data_width
        m.submodules.engine = engine = IcrcEngine(w)
        m.submodules.beats = beats = fifo.SyncFIFOBuffered(width=PacketLayout(w).size, depth=self.depth)

        # Tee: a beat is taken only when both the engine and the FIFO can take it.
        m.d.comb += [
            engine.i.payload.data.eq(self.i.payload.data),
            engine.i.payload.keep.eq(self.i.payload.keep),
            engine.i.payload.last.eq(self.i.payload.last),
            engine.i.payload.skip.eq(self.skip),
            engine.i.valid.eq(self.i.valid & beats.w_rdy),
            beats.w_data.eq(self.i.payload),
            beats.w_en.eq(self.i.valid & engine.i.ready),
            self.i.ready.eq(engine.i.ready & beats.w_rdy),
        ]

        head = PacketLayout(w)(beats.r_data)
        valid_bytes = Signal(range(w + 1))
        for lanes in range(w + 1):
            with m.If(head.keep == (1 << lanes) - 1):
                m.d.comb += valid_bytes.eq(lanes)
        # The last beat and up to one extra beat, with the CRC placed right after the valid bytes.
        crc_le = engine.o.payload.crc  # bits [7:0] are the first byte on the wire
        widened = Signal(16 * w)
        widened_keep = Signal(2 * w)
        m.d.comb += [
            # Lanes past the valid bytes may hold anything: clear them before the CRC goes in.
            widened.eq(
                Cat(head.data & ((Const(1, 8 * w + 1) << (8 * valid_bytes)) - 1), Const(0, 8 * w))
                | (crc_le << (8 * valid_bytes))
            ),
            widened_keep.eq((Const(1, 2 * w + 1) << (valid_bytes + 4)) - 1),
        ]
        spills = valid_bytes + 4 > w

        with m.FSM():
            with m.State("PASS"):
                with m.If(~head.last):
                    m.d.comb += [
                        self.o.valid.eq(beats.r_rdy),
                        self.o.payload.eq(head),
                        beats.r_en.eq(self.o.ready),
                    ]
                with m.Else():
                    m.d.comb += [
                        self.o.valid.eq(beats.r_rdy & engine.o.valid),
                        self.o.payload.data.eq(widened[: 8 * w]),
                        self.o.payload.keep.eq(widened_keep[:w]),
                        self.o.payload.last.eq(~spills),
                    ]
                    with m.If(self.o.valid & self.o.ready):
                        with m.If(spills):
                            m.next = "SPILL"  # keep the beat and the CRC for the second half
                        with m.Else():
                            m.d.comb += [beats.r_en.eq(1), engine.o.ready.eq(1)]
            with m.State("SPILL"):
                m.d.comb += [
                    self.o.valid.eq(1),
                    self.o.payload.data.eq(widened[8 * w :]),
                    self.o.payload.keep.eq(widened_keep[w:]),
                    self.o.payload.last.eq(1),
                ]
                with m.If(self.o.ready):
                    m.d.comb += [beats.r_en.eq(1), engine.o.ready.eq(1)]
                    m.next = "PASS"
        return m
