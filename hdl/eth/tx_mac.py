"""TX MAC: whole frames in, GMII bytes out with preamble, SFD, padding, FCS and the inter-frame gap.

Ref: IEEE Std 802.3-2022 §3.2 (frame format: 7 preamble octets 0x55, SFD 0xD5, then the frame), §4.2.3.3
(frames shorter than ``minFrameSize`` are padded: the data field is extended with zero octets so the frame
is 64 octets with the FCS), §3.2.9 (FCS: the complemented CRC-32 of the frame including padding, least
significant octet first), §4.4.2 (interPacketGap 96 bit times), §35.2.2.5 (``TX_ER`` with ``TX_EN``
makes the PHY send an error code, so the link partner drops the frame).

Members (one clock domain, 125 MHz at 1 Gb/s):

* ``i``: In(stream of :class:`~mrcnic.hdl.eth.frame.ByteLayout`): frame bytes without FCS. A frame is
  started only once ``i.valid`` shows its first byte, and then its bytes are taken one per cycle. The
  source must deliver them back to back: the TX buffer
  (:class:`~mrcnic.hdl.eth.tx_buffer.TxBuffer`) releases a frame only when it holds all of it. Should
  ``i.valid`` ever drop inside a frame, the MAC sends ``tx_er`` in that cycle (the frame is then
  rejected by the receiver, never truncated silently).
* ``txd``, ``tx_en``, ``tx_er``: Out, the GMII transmit signals, from registers.
* ``status``: Out(stream of :class:`~mrcnic.hdl.eth.frame.TxStatusLayout`, always ready): ``sent`` with
  the frame length (padding included, FCS excluded), in the cycle the last FCS octet is registered.

Timing: a frame's first preamble octet is on ``txd`` the cycle after ``i.valid`` is seen (once the gap
before it is over); the frame takes ``8 + max(n, 60) + 4`` cycles, then ``tx_en`` stays low for exactly
``ifg`` cycles if the next frame is waiting.
"""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..crc import crc32_update
from .frame import (
    DEFAULT_IFG,
    FCS_BYTES,
    LENGTH_BITS,
    MIN_FRAME,
    PREAMBLE,
    PREAMBLE_BYTES,
    SFD,
    ByteLayout,
    TxStatusLayout,
)

__all__ = ["TxMac"]


class TxMac(wiring.Component):
    """Parameter: ``ifg`` (idle octets between frames, at least 1; 12 by the standard)."""

    def __init__(self, *, ifg: int = DEFAULT_IFG):
        if ifg < 1:
            raise ValueError(f"ifg must be at least 1, not {ifg}")
        self.ifg = ifg
        super().__init__(
            {
                "i": In(stream.Signature(ByteLayout())),
                "txd": Out(8),
                "tx_en": Out(1),
                "tx_er": Out(1),
                "status": Out(stream.Signature(TxStatusLayout(), always_ready=True)),
            }
        )

    def elaborate(self, platform):
        m = Module()
        min_data = MIN_FRAME - FCS_BYTES

        crc = Signal(32)
        count = Signal(LENGTH_BITS)  # octets of the frame sent so far (padding included)
        step = Signal(range(max(PREAMBLE_BYTES, FCS_BYTES)))
        gap = Signal(range(self.ifg + 1), init=self.ifg)  # idle cycles on the wire since the last frame

        m.d.sync += self.status.valid.eq(0)

        with m.FSM():
            with m.State("IDLE"):
                m.d.sync += [self.tx_en.eq(0), self.tx_er.eq(0), self.txd.eq(0)]
                with m.If(gap < self.ifg):
                    m.d.sync += gap.eq(gap + 1)
                with m.Elif(self.i.valid):
                    # The register written now is the first preamble octet on the wire next cycle.
                    m.d.sync += [self.tx_en.eq(1), self.txd.eq(PREAMBLE), step.eq(0)]
                    m.next = "PREAMBLE"

            with m.State("PREAMBLE"):
                with m.If(step == PREAMBLE_BYTES - 1):
                    m.d.sync += [self.txd.eq(SFD), crc.eq(0xFFFFFFFF), count.eq(0)]
                    m.next = "DATA"
                with m.Else():
                    m.d.sync += [self.txd.eq(PREAMBLE), step.eq(step + 1)]

            with m.State("DATA"):
                m.d.comb += self.i.ready.eq(1)
                with m.If(self.i.valid):
                    byte = self.i.payload.data
                    m.d.sync += [
                        self.txd.eq(byte),
                        self.tx_er.eq(0),
                        crc.eq(crc32_update(crc, byte, 1)),
                        count.eq(count + 1),
                    ]
                    with m.If(self.i.payload.last):
                        m.d.sync += step.eq(0)
                        with m.If(count >= min_data - 1):
                            m.next = "FCS"
                        with m.Else():
                            m.next = "PAD"
                with m.Else():
                    # Unreachable with a store-and-forward source; poison the frame rather than cut it.
                    m.d.sync += [self.txd.eq(0), self.tx_er.eq(1)]

            with m.State("PAD"):
                m.d.sync += [self.txd.eq(0), crc.eq(crc32_update(crc, None, 1)), count.eq(count + 1)]
                with m.If(count >= min_data - 1):
                    m.next = "FCS"

            with m.State("FCS"):
                fcs = ~crc
                m.d.sync += [self.txd.eq(fcs.word_select(step, 8)), step.eq(step + 1)]
                with m.If(step == FCS_BYTES - 1):
                    m.d.sync += [
                        gap.eq(0),
                        self.status.valid.eq(1),
                        self.status.payload.sent.eq(1),
                        self.status.payload.dropped.eq(0),
                        self.status.payload.length.eq(count),
                    ]
                    m.next = "IDLE"

        return m
