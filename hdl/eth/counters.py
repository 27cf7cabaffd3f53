"""Port counters: the TX and RX status records of a port, counted in one clock domain.

The MAC blocks report per frame (:class:`~mrcnic.hdl.eth.frame.TxStatusLayout`,
:class:`~mrcnic.hdl.eth.frame.RxStatusLayout`) instead of keeping counters in their own clock domains,
so the records can cross into the core's domain through small FIFOs and every counter the core reads is
coherent there. Octet counts follow IEEE Std 802.3-2022 §30.3.1.1.8 / §30.3.1.1.14
(aOctetsTransmittedOK / aOctetsReceivedOK: data and padding octets, no preamble, SFD or FCS).

Members: ``tx_status``, ``rx_status`` In(stream, always ready): the records; Out(32), wrapping:

* ``tx_frames``, ``tx_bytes``: frames sent and their octets (padding included, FCS excluded).
* ``tx_dropped``: frames from the core not sent (empty, or longer than ``max_frame - 4`` octets).
* ``rx_frames``, ``rx_bytes``: good frames handed to the core and their octets (without FCS).
* ``rx_bad_fcs``, ``rx_errors`` (``RX_ER`` during the frame), ``rx_runts`` (under 64 octets with FCS),
  ``rx_oversize`` (over ``max_frame``), ``rx_overflow`` (good, but no room in the RX buffer): frames
  dropped, each counted once (:class:`~mrcnic.hdl.eth.frame.RxOutcome` gives the precedence).
"""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .frame import RxOutcome, RxStatusLayout, TxStatusLayout

__all__ = ["COUNTERS", "PortCounters"]

RX_DROPS = {
    "rx_bad_fcs": RxOutcome.BAD_FCS,
    "rx_errors": RxOutcome.ERROR,
    "rx_runts": RxOutcome.RUNT,
    "rx_oversize": RxOutcome.OVERSIZE,
    "rx_overflow": RxOutcome.OVERFLOW,
}
COUNTERS = ("tx_frames", "tx_bytes", "tx_dropped", "rx_frames", "rx_bytes", *RX_DROPS)


class PortCounters(wiring.Component):
    def __init__(self):
        super().__init__(
            {
                "tx_status": In(stream.Signature(TxStatusLayout(), always_ready=True)),
                "rx_status": In(stream.Signature(RxStatusLayout(), always_ready=True)),
                **{name: Out(32) for name in COUNTERS},
            }
        )

    def elaborate(self, platform):
        m = Module()

        tx = self.tx_status
        with m.If(tx.valid & tx.payload.sent):
            m.d.sync += [
                self.tx_frames.eq(self.tx_frames + 1),
                self.tx_bytes.eq(self.tx_bytes + tx.payload.length),
            ]
        with m.If(tx.valid & tx.payload.dropped):
            m.d.sync += self.tx_dropped.eq(self.tx_dropped + 1)

        rx = self.rx_status
        with m.If(rx.valid & (rx.payload.outcome == RxOutcome.GOOD)):
            m.d.sync += [
                self.rx_frames.eq(self.rx_frames + 1),
                self.rx_bytes.eq(self.rx_bytes + rx.payload.length),
            ]
        for name, outcome in RX_DROPS.items():
            counter: Signal = getattr(self, name)
            with m.If(rx.valid & (rx.payload.outcome == outcome)):
                m.d.sync += counter.eq(counter + 1)

        return m
