"""TX buffer: store and forward of whole frames in front of the TX MAC.

A frame from the core is released to :class:`~mrcnic.hdl.eth.tx_mac.TxMac` only once all of it is in
the buffer, so the MAC can send it at line rate without ever running dry in the middle (IEEE Std
802.3-2022 §4.2.3: a frame is transmitted as one contiguous bit stream; GMII has no way to pause it).

Members (one clock domain, the TX MAC's):

* ``i``: In(stream of :data:`SerialByteLayout`): octets of frames from the core, as the byte serializer
  (:class:`~mrcnic.hdl.eth.width.ByteSerializer`) emits them: ``{data, last, empty}``; a beat with
  ``empty`` carries no octet and only ends the frame (with ``last``). ``ready`` is low only while the
  ring is full and the beat brings an octet to store.
* ``o``: Out(stream of :class:`~mrcnic.hdl.eth.frame.ByteLayout`): whole frames, each back to back.
* ``dropped``: Out(1), a one-cycle pulse per frame from the core that is not sent: an empty frame, or
  one longer than ``max_frame - 4`` octets (it could never be sent; keeping it would also block the
  buffer forever if it exceeded the buffer). A dropped frame's octets are consumed and thrown away.
* ``drop_ok``: In(1), the pulse can be recorded now (room in the status FIFO); the beat that would
  raise ``dropped`` waits while it is low, so no drop goes uncounted.

``depth`` must be at least ``max_frame`` so that any frame that can be sent fits in an empty buffer
(otherwise the writer would wait for room that only its own frame holds).
"""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .frame import DEFAULT_MAX_FRAME, FCS_BYTES, ByteLayout, check_max_frame
from .packet_ring import PacketRing

__all__ = ["SerialByteLayout", "TxBuffer"]


class SerialByteLayout(data.StructLayout):
    """An octet of a frame, or (``empty``) none: the end of a frame whose last beat had no bytes."""

    def __init__(self):
        super().__init__({"data": 8, "last": 1, "empty": 1})


class TxBuffer(wiring.Component):
    """Parameters: ``depth`` (octets, at least ``max_frame``: a power of two, or whole block RAMs),
    ``max_frame`` (octets with FCS)."""

    def __init__(self, *, depth: int, max_frame: int = DEFAULT_MAX_FRAME):
        self.max_frame = check_max_frame(max_frame)
        if depth < max_frame:
            raise ValueError(f"TX buffer depth {depth} is smaller than max_frame {max_frame}")
        self.depth = depth
        super().__init__(
            {
                "i": In(stream.Signature(SerialByteLayout())),
                "o": Out(stream.Signature(ByteLayout())),
                "dropped": Out(1),
                "drop_ok": In(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        m.submodules.ring = ring = PacketRing(self.depth)
        wiring.connect(m, ring.r, wiring.flipped(self.o))

        limit = self.max_frame - FCS_BYTES
        length = Signal(range(limit + 1))  # octets of the frame in progress stored so far
        at_limit = Signal()  # length == limit, as a register
        # length != 0, as a register: the ready logic then starts at flip-flops, not at a 13-bit compare
        # (that compare was the head of the MAC transmit clock's critical path, docs/boards.md).
        started = Signal()
        dropping = Signal()  # the frame in progress is too long: swallow the rest of it
        beat = self.i.payload
        take = Signal()
        m.d.comb += take.eq(self.i.valid & self.i.ready)
        m.d.comb += [ring.w_data.eq(beat.data), ring.w_last.eq(beat.last)]
        m.d.sync += self.dropped.eq(0)

        with m.If(dropping):
            m.d.comb += self.i.ready.eq(~beat.last | self.drop_ok)
            with m.If(take & beat.last):
                m.d.sync += [dropping.eq(0), self.dropped.eq(1)]
        with m.Elif(beat.empty):
            m.d.comb += self.i.ready.eq(~beat.last | started | self.drop_ok)
            with m.If(take & beat.last):
                m.d.sync += [length.eq(0), at_limit.eq(0), started.eq(0)]
                with m.If(~started):
                    m.d.sync += self.dropped.eq(1)
                with m.Else():
                    m.d.comb += [ring.w_mark_last.eq(1), ring.w_commit.eq(1)]
        with m.Elif(at_limit):
            # One octet more than the longest frame that can be sent.
            m.d.comb += self.i.ready.eq(~beat.last | self.drop_ok)
            with m.If(take):
                m.d.comb += ring.w_discard.eq(1)
                m.d.sync += [length.eq(0), at_limit.eq(0), started.eq(0)]
                with m.If(beat.last):
                    m.d.sync += self.dropped.eq(1)
                with m.Else():
                    m.d.sync += dropping.eq(1)
        with m.Else():
            m.d.comb += [self.i.ready.eq(ring.w_room), ring.w_en.eq(self.i.valid)]
            with m.If(take):
                m.d.sync += [length.eq(length + 1), at_limit.eq(length == limit - 1), started.eq(1)]
                with m.If(beat.last):
                    m.d.comb += ring.w_commit.eq(1)
                    m.d.sync += [length.eq(0), at_limit.eq(0), started.eq(0)]

        return m
