"""Stream packer: beats with a contiguous run of bytes at any lanes in, dense packet beats out.

The TX header builder concatenates header beats (full, the last one partial) and DMA payload beats (the
first one starting at lane ``addr % W``, see :class:`~mrcnic.hdl.dma.reader.DmaReader`) into one packet;
the RX placement path realigns payload the same way. This block squeezes out the holes so the result
follows the packet-stream convention of :mod:`mrcnic.hdl.stream` (every beat full except a packet's
last, whose ``keep`` is contiguous from lane 0).

Two stages:

1. *align*: move the input beat's byte run down to lane 0 (a rotation by the run's first lane). It
   depends only on the input beat, so it is a plain pipeline register.
2. *pack*: rotate the aligned run up to the first free lane of the accumulator and merge. Bytes that
   complete a word go out; the rest stay in the accumulator. A packet's leftover bytes never mix with
   the next packet: at ``last`` they go out, in one extra *flush* beat if the last input beat overflowed
   a word (the only cycle the input stalls while the output is ready).

Empty input beats (``keep = 0``) are folded into the held beat of the same packet, so a trailing
``keep = 0, last = 1`` beat still yields a correct last output beat (never an extra empty one). For that,
a beat whose bytes end exactly on a word boundary waits in stage 1 until the next input beat shows up
(or it is ``last``); at full rate the next beat is already there, so this costs nothing.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .stream import PacketStream, low_lanes

__all__ = ["StreamPacker"]


def _one_hot_to_index(one_hot, index_bits: int):
    """Binary index of the set bit of ``one_hot`` (0 when none is set)."""
    return Cat(*(Cat(one_hot[k] for k in range(len(one_hot)) if k >> b & 1).any() for b in range(index_bits)))


class StreamPacker(wiring.Component):
    """Parameter: ``data_width`` (bytes per beat, power of two).

    Members:

    * ``i``: In(:func:`~mrcnic.hdl.stream.PacketStream`). ``keep`` of each beat must be one contiguous
      run of lanes, starting and ending anywhere, or 0 (a beat with ``keep = 0`` carries nothing;
      with ``last`` it only ends the packet). Bytes outside ``keep`` are ignored.
    * ``o``: Out(:func:`~mrcnic.hdl.stream.PacketStream`): the same bytes, packed. Packet boundaries
      are kept; a packet with no bytes at all comes out as one beat ``keep = 0, last = 1``. Data bytes
      outside ``keep`` are undefined.

    ``i.ready`` depends combinationally on ``o.ready`` and on ``i.valid``/``i.payload.keep`` (allowed:
    ready may depend on valid); ``o.valid`` and ``o.payload`` are registers.

    Latency: 2 cycles from an input beat to the output beat it completes (more only when a beat that
    ends on a word boundary has to wait for its successor, see above). Throughput: one input beat per
    cycle; the input stalls one cycle at the end of a packet whose last bytes overflow the word they
    started (its prefix length mod W plus the last beat's bytes exceed W): the leftover then goes out
    as a flush beat.
    """

    def __init__(self, data_width: int):
        self.data_width = data_width
        super().__init__({"i": In(PacketStream(data_width)), "o": Out(PacketStream(data_width))})

    def elaborate(self, platform):
        m = Module()
        width = self.data_width
        lane_bits = width.bit_length() - 1

        def rotate_down(value, lanes):
            """Byte at lane ``lanes`` moves to lane 0."""
            return (Cat(value, value) >> Cat(Const(0, 3), lanes))[: 8 * width]

        def rotate_up(value, lanes):
            """Byte at lane 0 moves to lane ``lanes``."""
            return (Cat(value, value) << Cat(Const(0, 3), lanes))[8 * width : 16 * width]

        # -- stage 1: align the byte run to lane 0 ---------------------------------------------------
        keep = self.i.payload.keep
        run_start = Signal(lane_bits)
        run_end = Signal(lane_bits)
        run_length = Signal(range(width + 1))
        m.d.comb += [
            # In a contiguous run, exactly one lane has no kept lane below it (the first) and exactly one
            # has none above it (the last).
            run_start.eq(_one_hot_to_index(keep & ~Cat(Const(0, 1), keep[:-1]), lane_bits)),
            run_end.eq(_one_hot_to_index(keep & ~Cat(keep[1:], Const(0, 1)), lane_bits)),
            run_length.eq(Mux(keep.any(), run_end - run_start + 1, 0)),
        ]

        aligned_valid = Signal()
        aligned_data = Signal(8 * width)
        aligned_count = Signal(range(width + 1))
        aligned_last = Signal()

        # An empty input beat is folded into the held beat of the same packet instead of travelling on
        # its own: a trailing `keep = 0, last = 1` beat must turn the held beat into the packet's last,
        # or a packet that ends on a word boundary would get an extra empty beat.
        incoming_empty = self.i.valid & ~keep.any()
        fold = aligned_valid & ~aligned_last & incoming_empty
        effective_last = aligned_last | (fold & self.i.payload.last)

        # -- stage 2: pack into the accumulator --------------------------------------------------------
        acc = Signal(8 * width)
        acc_count = Signal(range(width))  # bytes held, at lanes 0 .. acc_count-1
        flush = Signal()  # acc holds the tail of a finished packet, to go out next

        out = self.o.payload
        advance = ~self.o.valid | self.o.ready

        total = Signal(range(2 * width))
        shifted = Signal(8 * width)  # the aligned run starting at lane acc_count (wrapping around)
        merged = Signal(8 * width)  # acc below lane acc_count, the run from there up
        held = low_lanes(acc_count, width)
        m.d.comb += [
            total.eq(acc_count + aligned_count),
            shifted.eq(rotate_up(aligned_data, acc_count)),
            merged.eq(
                Cat(Mux(held[k], acc.word_select(k, 8), shifted.word_select(k, 8)) for k in range(width))
            ),
        ]

        # A beat that ends its packet's bytes exactly on a word boundary waits until the next beat shows
        # it is not followed by empty beats up to `last` (see above); all other beats go on at once.
        decided = effective_last | (total != width) | (self.i.valid & ~incoming_empty)
        aligned_taken = Signal()
        m.d.comb += [
            aligned_taken.eq(aligned_valid & decided & advance & ~flush),
            self.i.ready.eq(~aligned_valid | aligned_taken | fold),
        ]
        with m.If(aligned_taken):
            m.d.sync += aligned_valid.eq(0)
        with m.If(self.i.valid & self.i.ready):
            with m.If(fold):
                with m.If(~aligned_taken):
                    m.d.sync += aligned_last.eq(effective_last)
            with m.Else():
                m.d.sync += [
                    aligned_valid.eq(1),
                    aligned_data.eq(rotate_down(self.i.payload.data, run_start)),
                    aligned_count.eq(run_length),
                    aligned_last.eq(self.i.payload.last),
                ]

        with m.If(advance):
            m.d.sync += self.o.valid.eq(0)

        with m.If(flush & advance):
            m.d.sync += [
                self.o.valid.eq(1),
                out.data.eq(acc),
                out.keep.eq(low_lanes(acc_count, width)),
                out.last.eq(1),
                acc_count.eq(0),
                flush.eq(0),
            ]
        with m.Elif(aligned_taken):
            with m.If(total >= width):
                # A full word; the bytes that wrapped around to lanes below acc_count start the next one.
                m.d.sync += [
                    self.o.valid.eq(1),
                    out.data.eq(merged),
                    out.keep.eq((1 << width) - 1),
                    out.last.eq(effective_last & (total == width)),
                    acc.eq(shifted),
                    acc_count.eq(total - width),
                    flush.eq(effective_last & (total != width)),
                ]
            with m.Elif(effective_last):
                m.d.sync += [
                    self.o.valid.eq(1),
                    out.data.eq(merged),
                    out.keep.eq(low_lanes(total, width)),
                    out.last.eq(1),
                    acc_count.eq(0),
                ]
            with m.Else():
                m.d.sync += [acc.eq(merged), acc_count.eq(total)]

        return m
