"""TX buffer: store and forward of whole frames in front of the TX MAC.

A frame from the core is released to :class:`~mrcnic.hdl.eth.tx_mac.TxMac` only once all of it is in
the buffer, so the MAC can send it at line rate without ever running dry in the middle (IEEE Std
802.3-2022 §4.2.3: a frame is transmitted as one contiguous bit stream; GMII has no way to pause it).

Members (one clock domain, the TX MAC's):

* ``i``: In(stream of :data:`SerialByteLayout`): octets of frames from the core, as the byte serializer
  (:class:`~mrcnic.hdl.eth.width.ByteSerializer`) emits them: ``{data, last, empty}``; a beat with
  ``empty`` carries no octet and only ends the frame (with ``last``). A taken beat waits a cycle in an
  input stage, where what it does to the ring is decided; ``ready`` depends only on that stage's
  registers, the ring's room (a register) and ``drop_ok``, and is low while the staged beat waits for
  room in the ring (an octet to store) or for ``drop_ok`` (a drop).
* ``o``: Out(stream of :class:`~mrcnic.hdl.eth.frame.ByteLayout`): whole frames, each back to back.
* ``dropped``: Out(1), a one-cycle pulse per frame from the core that is not sent (in a cycle when
  ``drop_ok`` is high): an empty frame, or one longer than ``max_frame - 4`` octets (it could never be
  sent; keeping it would also block the buffer forever if it exceeded the buffer). A dropped frame's
  octets are consumed and thrown away.
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
        length = Signal(range(limit + 1))  # octets of the frame in progress taken so far
        at_limit = Signal()  # length == limit, as a register
        started = Signal()  # length != 0, as a register
        dropping = Signal()  # the frame in progress is too long: swallow the rest of it

        # The input stage: the beat taken last, with what it does to the ring, decided when it was taken.
        # The ring's controls are then a LUT or two behind flip-flops, and the input's ready depends on
        # registers only (before, ready decoded the beat and the write controls followed from it: ten
        # LUT levels from the status FIFO's level to a block RAM's write enable, the ECPIX-5's transmit
        # clock's critical path, 2026-12-07).
        staged = Signal()
        staged_data = Signal(8)
        staged_last = Signal()
        append = Signal()  # store the octet (needs room)
        commit = Signal()  # the frame is complete: make it readable
        mark = Signal()  # the frame ended in an empty beat: flag the octet stored last as its end
        discard = Signal()  # the frame is too long: drop what is stored of it
        drop = Signal()  # a frame is not sent: count it (needs ``drop_ok``)

        go = Signal()  # the staged beat's action happens this cycle
        m.d.comb += [
            go.eq((~append | ring.w_room) & (~drop | self.drop_ok)),
            self.i.ready.eq(~staged | go),
            ring.w_data.eq(staged_data),
            ring.w_last.eq(staged_last),
            ring.w_en.eq(staged & append),  # the ring appends only with room
            ring.w_commit.eq(staged & commit & go),
            ring.w_mark_last.eq(staged & mark),
            ring.w_discard.eq(staged & discard & go),
            self.dropped.eq(staged & drop & go),
        ]
        with m.If(go):
            m.d.sync += staged.eq(0)

        beat = self.i.payload
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [
                staged.eq(1),
                staged_data.eq(beat.data),
                staged_last.eq(beat.last),
                append.eq(0),
                commit.eq(0),
                mark.eq(0),
                discard.eq(0),
                drop.eq(0),
            ]
            end_frame = [length.eq(0), at_limit.eq(0), started.eq(0)]
            with m.If(dropping):
                with m.If(beat.last):
                    m.d.sync += [dropping.eq(0), drop.eq(1)]
            with m.Elif(beat.empty):
                with m.If(beat.last):
                    m.d.sync += end_frame
                    with m.If(started):
                        m.d.sync += [mark.eq(1), commit.eq(1)]
                    with m.Else():
                        m.d.sync += drop.eq(1)  # an empty frame
            with m.Elif(at_limit):
                # One octet more than the longest frame that can be sent.
                m.d.sync += [discard.eq(1), *end_frame]
                with m.If(beat.last):
                    m.d.sync += drop.eq(1)
                with m.Else():
                    m.d.sync += dropping.eq(1)
            with m.Else():
                m.d.sync += [
                    append.eq(1),
                    length.eq(length + 1),
                    at_limit.eq(length == limit - 1),
                    started.eq(1),
                ]
                with m.If(beat.last):
                    m.d.sync += [commit.eq(1), *end_frame]

        return m
