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
  frame, the cycle after its last beat: the MAC's outcome, or ``OVERFLOW`` for a good frame that did not
  fit; the MAC's length.
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

        beat = self.i.payload
        overflow = Signal()  # an octet of the frame in progress found the ring full
        m.d.comb += [ring.w_data.eq(beat.data), ring.w_last.eq(beat.last)]
        m.d.sync += self.status.valid.eq(0)

        with m.If(self.i.valid):
            with m.If(~beat.last):
                m.d.comb += ring.w_en.eq(~overflow)
                with m.If(~ring.w_room):
                    # Once an octet is lost, later ones must not be stored either (room may come back).
                    m.d.sync += overflow.eq(1)
            with m.Else():
                keep = Signal()
                m.d.comb += keep.eq((beat.outcome == RxOutcome.GOOD) & ~overflow & ring.w_room)
                m.d.sync += [
                    overflow.eq(0),
                    self.status.valid.eq(1),
                    self.status.payload.length.eq(beat.length),
                ]
                with m.If(keep):
                    m.d.comb += [ring.w_en.eq(1), ring.w_commit.eq(1)]
                    m.d.sync += self.status.payload.outcome.eq(RxOutcome.GOOD)
                with m.Else():
                    m.d.comb += ring.w_discard.eq(1)
                    with m.If(beat.outcome == RxOutcome.GOOD):
                        m.d.sync += self.status.payload.outcome.eq(RxOutcome.OVERFLOW)
                    with m.Else():
                        m.d.sync += self.status.payload.outcome.eq(beat.outcome)

        return m
