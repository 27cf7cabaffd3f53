"""Width conversion between the core's packet beats (``data_width`` octets) and the MAC's octets.

Both blocks run in the MAC's 125 MHz domains, after (TX) or before (RX) the clock-domain crossing: an
octet per cycle there is exactly the line rate, whereas the core's clock may be slower than 125 MHz.

* :class:`ByteSerializer`: In(:func:`~mrcnic.hdl.stream.PacketStream`), Out(stream of
  :class:`~mrcnic.hdl.eth.tx_buffer.SerialByteLayout`). The octets of each beat whose ``keep`` bit is
  set, lowest lane first (any ``keep`` pattern works; the packet convention is a contiguous run from
  lane 0), one per cycle, back to back across beats. ``last`` is set on the last octet of a beat with
  ``last``; a beat with ``keep = 0`` and ``last`` becomes one ``empty`` ``last`` beat, one with
  ``keep = 0`` without ``last`` is dropped. ``i.ready`` is a register (a beat waits in a second register
  while the one before is sent), so at ``data_width`` >= 2 the octets flow at one per cycle.
* :class:`BytePacker`: In(stream of :class:`~mrcnic.hdl.eth.frame.ByteLayout`), Out(packet stream):
  ``data_width`` octets per beat from lane 0, a frame's last beat partial (``keep`` contiguous from
  lane 0), following :mod:`mrcnic.hdl.stream`. Takes an octet per cycle as long as the output is taken.
  With ``user_width``, each beat carries the ``user`` bits of its last octet (a frame's last beat: those
  of the frame's last octet, the port's ICRC verdict).
"""

from __future__ import annotations

from amaranth import Const, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..stream import PacketStream
from .frame import ByteLayout
from .tx_buffer import SerialByteLayout

__all__ = ["BytePacker", "ByteSerializer"]


class ByteSerializer(wiring.Component):
    """Parameter: ``data_width`` (octets per input beat, a power of two)."""

    def __init__(self, data_width: int):
        self.data_width = data_width
        super().__init__(
            {
                "i": In(PacketStream(data_width)),
                "o": Out(stream.Signature(SerialByteLayout())),
            }
        )

    def elaborate(self, platform):
        m = Module()
        w = self.data_width

        # Two beat registers: ``pending`` takes the input (its ready is a register, so the core-side FIFO
        # is not at the end of the output's ready logic), ``current`` is being sent.
        pending_data = Signal(8 * w)
        pending_keep = Signal(w)
        pending_last = Signal()
        pending = Signal()
        beat = Signal(8 * w)
        mask = Signal(w)  # lanes of the current beat not sent yet
        beat_last = Signal()
        held = Signal()

        rest = Signal(w)  # mask without its lowest set lane
        single = Signal()  # at most one lane left: a register, as it gates the reload of the beat
        m.d.comb += rest.eq(mask & (mask - 1))

        def at_most_one(lanes):
            return (lanes & (lanes - 1)) == 0

        lowest = Signal(8)
        for k in reversed(range(w)):
            with m.If(mask[k]):
                m.d.comb += lowest.eq(beat.word_select(k, 8))

        pull = Signal()  # current is empty or sends its final output beat now: load the pending beat
        m.d.comb += [
            self.o.valid.eq(held),
            self.o.payload.data.eq(lowest),
            self.o.payload.empty.eq(mask == 0),
            self.o.payload.last.eq(beat_last & single),
            pull.eq(~held | (self.o.ready & single)),
            self.i.ready.eq(~pending),
        ]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += [mask.eq(rest), single.eq(at_most_one(rest))]
        with m.If(pull):
            m.d.sync += [
                beat.eq(pending_data),
                mask.eq(pending_keep),
                single.eq(at_most_one(pending_keep)),
                beat_last.eq(pending_last),
                # A beat without octets and without last carries nothing.
                held.eq(pending & (pending_keep.any() | pending_last)),
                pending.eq(0),
            ]
        with m.If(self.i.valid & self.i.ready):
            payload = self.i.payload
            m.d.sync += [
                pending_data.eq(payload.data),
                pending_keep.eq(payload.keep),
                pending_last.eq(payload.last),
                pending.eq(1),
            ]

        return m


class BytePacker(wiring.Component):
    """Parameters: ``data_width`` (octets per output beat, a power of two), ``user_width`` (sideband bits
    per octet: a beat carries those of its last octet)."""

    def __init__(self, data_width: int, user_width: int = 0):
        self.data_width, self.user_width = data_width, user_width
        super().__init__(
            {
                "i": In(stream.Signature(ByteLayout(user_width))),
                "o": Out(PacketStream(data_width, user_width)),
            }
        )

    def elaborate(self, platform):
        m = Module()
        w = self.data_width

        acc = Signal(8 * w)
        lane = Signal(range(w))
        m.d.comb += self.i.ready.eq(~self.o.valid | self.o.ready)

        with m.If(self.o.valid & self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(self.i.valid & self.i.ready):
            byte = self.i.payload.data
            with m.If(self.i.payload.last | (lane == w - 1)):
                merged = Signal(8 * w)
                m.d.comb += [merged.eq(acc), merged.word_select(lane, 8).eq(byte)]
                m.d.sync += [
                    self.o.valid.eq(1),
                    self.o.payload.data.eq(merged),
                    self.o.payload.keep.eq(((Const(1, w + 1) << (lane + 1)) - 1)[:w]),
                    self.o.payload.last.eq(self.i.payload.last),
                    lane.eq(0),
                ]
                if self.user_width:
                    m.d.sync += self.o.payload.user.eq(self.i.payload.user)
            with m.Else():
                m.d.sync += [acc.word_select(lane, 8).eq(byte), lane.eq(lane + 1)]

        return m
