"""RX buffer: store and forward of received frames; only good frames that fit go on to the core.

A received frame can only be judged at its end (IEEE Std 802.3-2022 §4.2.4.1.2: FCS check;
§4.2.4.2.2: length check), so the RX MAC's octets are written into a
:class:`~mrcnic.hdl.eth.packet_ring.PacketRing` as they arrive and the frame is committed or discarded by
its verdict. The line cannot be paused, so when the ring is full (the core is not taking frames fast
enough) the frame in progress is dropped whole and counted as ``OVERFLOW``; frames already committed
are never touched, so backpressure from the core never corrupts a frame.

Members (one clock domain, the PHY's receive clock):

* ``i``: In(stream of :class:`~mrcnic.hdl.eth.frame.RxBeatLayout`, always ready), from
  :class:`~mrcnic.hdl.eth.rx_mac.RxMac`.
* ``o``: Out(stream of :class:`~mrcnic.hdl.eth.frame.ByteLayout`): good frames without FCS, in order.
* ``status``: Out(stream of :class:`~mrcnic.hdl.eth.frame.RxStatusLayout`, always ready): one record per
  frame, two cycles after its last beat (an input stage, then the verdict): the MAC's outcome, or
  ``OVERFLOW`` for a good frame that did not fit; the MAC's length.
"""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .frame import ByteLayout, RxBeatLayout, RxOutcome, RxStatusLayout
from .packet_ring import PacketRing

__all__ = ["RxBuffer"]


class RxBuffer(wiring.Component):
    """Parameter: ``depth`` (octets: a power of two, or whole block RAMs, see :class:`PacketRing`)."""

    def __init__(self, *, depth: int):
        self.depth = depth
        super().__init__(
            {
                "i": In(stream.Signature(RxBeatLayout(), always_ready=True)),
                "o": Out(stream.Signature(ByteLayout())),
                "status": Out(stream.Signature(RxStatusLayout(), always_ready=True)),
            }
        )

    def elaborate(self, platform):
        m = Module()
        m.submodules.ring = ring = PacketRing(self.depth)
        wiring.connect(m, ring.r, wiring.flipped(self.o))

        # The MAC's beat, decoded in an input stage: the ring's controls are then a LUT or two behind
        # registers (the RX MAC and the ring may sit far apart; the decode and the pointer updates each
        # get a cycle).
        data = Signal(8)
        length = Signal.like(self.i.payload.length)
        outcome = Signal.like(self.i.payload.outcome)
        octet = Signal()  # a beat with an octet and not the last
        end = Signal()  # the frame's last beat: its last octet (if any) and the MAC's verdict
        good_end = Signal()  # ... and the verdict is GOOD
        beat = self.i.payload
        m.d.sync += [
            data.eq(beat.data),
            length.eq(beat.length),
            outcome.eq(beat.outcome),
            octet.eq(self.i.valid & ~beat.last),
            end.eq(self.i.valid & beat.last),
            good_end.eq(self.i.valid & beat.last & (beat.outcome == RxOutcome.GOOD)),
        ]

        overflow = Signal()  # an octet of the frame in progress found the ring full
        m.d.comb += [ring.w_data.eq(data), ring.w_last.eq(end)]
        m.d.sync += self.status.valid.eq(0)

        with m.If(octet):
            m.d.comb += ring.w_en.eq(~overflow)
            with m.If(~ring.w_room):
                # Once an octet is lost, later ones must not be stored either (room may come back).
                m.d.sync += overflow.eq(1)
        with m.If(end):
            keep = Signal()
            m.d.comb += keep.eq(good_end & ~overflow & ring.w_room)
            m.d.sync += [
                overflow.eq(0),
                self.status.valid.eq(1),
                self.status.payload.length.eq(length),
            ]
            with m.If(keep):
                m.d.comb += [ring.w_en.eq(1), ring.w_commit.eq(1)]
                m.d.sync += self.status.payload.outcome.eq(RxOutcome.GOOD)
            with m.Else():
                m.d.comb += ring.w_discard.eq(1)
                with m.If(good_end):
                    m.d.sync += self.status.payload.outcome.eq(RxOutcome.OVERFLOW)
                with m.Else():
                    m.d.sync += self.status.payload.outcome.eq(outcome)

        return m
