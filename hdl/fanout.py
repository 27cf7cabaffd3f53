"""Record streams that go to several blocks, or come from several: a fork and a priority merge.

The closed loop of the NIC has a few of these: every SACK/NACK/ACK record goes to both the TX tracker and
the prober; the path selector hears path events from both the tracker and the prober; one connect
request configures the segmenter, the tracker and the congestion controller together.
"""

from amaranth import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["StreamFork", "StreamMerge"]


class StreamFork(wiring.Component):
    """One record stream in, ``outputs`` copies out. The input record is taken once every output has
    taken it; outputs may take it in different cycles (each remembers that it has), so a slow consumer
    delays the next record, never a duplicate or a loss. Zero latency when all outputs are ready."""

    def __init__(self, shape, outputs: int):
        if outputs < 1:
            raise ValueError(f"need at least one output, not {outputs}")
        self.outputs = outputs
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape)).array(outputs)})

    def elaborate(self, platform):
        m = Module()
        taken = Signal(self.outputs)  # output k already took the current record
        done = Signal(self.outputs)
        for k, o in enumerate(self.o):
            m.d.comb += [
                o.payload.eq(self.i.payload),
                o.valid.eq(self.i.valid & ~taken[k]),
                done[k].eq(taken[k] | o.ready),
            ]
        m.d.comb += self.i.ready.eq(done.all())
        with m.If(self.i.valid):
            with m.If(self.i.ready):
                m.d.sync += taken.eq(0)
            with m.Else():
                for k, o in enumerate(self.o):
                    with m.If(o.valid & o.ready):
                        m.d.sync += taken[k].eq(1)
        return m


class StreamMerge(wiring.Component):
    """``inputs`` record streams of one shape in, one out; the lowest-numbered valid input wins. A record
    offered and not yet taken keeps the output (the choice is held), so the output obeys the stream
    rules even when a higher-priority input becomes valid meanwhile. No latency."""

    def __init__(self, shape, inputs: int):
        if inputs < 1:
            raise ValueError(f"need at least one input, not {inputs}")
        self.inputs = inputs
        super().__init__({"i": In(stream.Signature(shape)).array(inputs), "o": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        held = Signal()  # last cycle's record was offered and not taken: same input again
        owner = Signal(range(self.inputs))
        choice = Signal(range(self.inputs))
        for k in reversed(range(self.inputs)):
            with m.If(self.i[k].valid):
                m.d.comb += choice.eq(k)
        with m.If(held):
            m.d.comb += choice.eq(owner)
        for k in range(self.inputs):
            with m.If(choice == k):
                m.d.comb += [
                    self.o.valid.eq(self.i[k].valid),
                    self.o.payload.eq(self.i[k].payload),
                    self.i[k].ready.eq(self.o.ready),
                ]
        m.d.sync += [held.eq(self.o.valid & ~self.o.ready), owner.eq(choice)]
        return m
