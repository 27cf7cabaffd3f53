"""RX MAC: GMII bytes in, the frame's bytes out without the FCS, with a verdict on the last one.

Ref: IEEE Std 802.3-2022 §35.2.2.7-§35.2.2.9 (``RX_DV`` frames the preamble, SFD and frame; ``RX_ER``
with ``RX_DV`` flags a receive error in the frame), §3.2.1-§3.2.2 (preamble 0x55 octets, SFD 0xD5; a
PHY may shorten the preamble, so any number of 0x55 octets, none included, may precede the SFD),
§3.2.9 and §4.2.4.1.2 (FCS check: the CRC-32 remainder of frame plus FCS is the constant
:data:`~mrcnic.hdl.eth.frame.FCS_RESIDUE`), §4.2.4.2.2 (frames under 64 octets are discarded).

Members (one clock domain: the PHY's receive clock):

* ``rxd``, ``rx_dv``, ``rx_er``: In, GMII receive signals (registered here first).
* ``o``: Out(stream of :class:`~mrcnic.hdl.eth.frame.RxBeatLayout`, always ready; nothing here can wait
  for the line). One beat per octet of the frame except the FCS, and for every frame that had an SFD a
  ``last`` beat with the outcome (:class:`~mrcnic.hdl.eth.frame.RxOutcome`, first match wins: ``ERROR``,
  ``OVERSIZE``, ``RUNT``, ``BAD_FCS``, else ``GOOD``) and the length without FCS.

The FCS is stripped by holding the last five octets received: when ``RX_DV`` falls, four of them are the
FCS and the fifth is the frame's last octet, which goes out with ``last``. So a frame's beats trail the
wire by five octets, and its last beat comes out two cycles after ``RX_DV`` falls on the pins. Octets
after ``max_frame`` are not emitted (the frame is dropped anyway). Octets before an SFD that is not
preceded by 0x55 octets only, and whole bursts without an SFD, are ignored.
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..crc import crc32_update
from .frame import (
    DEFAULT_MAX_FRAME,
    FCS_BYTES,
    FCS_RESIDUE,
    LENGTH_BITS,
    MIN_FRAME,
    PREAMBLE,
    SFD,
    RxBeatLayout,
    RxOutcome,
    check_max_frame,
)

__all__ = ["RxMac"]

HOLD = FCS_BYTES + 1


class RxMac(wiring.Component):
    """Parameter: ``max_frame`` (longest good frame, octets with FCS)."""

    def __init__(self, *, max_frame: int = DEFAULT_MAX_FRAME):
        self.max_frame = check_max_frame(max_frame)
        super().__init__(
            {
                "rxd": In(8),
                "rx_dv": In(1),
                "rx_er": In(1),
                "o": Out(stream.Signature(RxBeatLayout(), always_ready=True)),
            }
        )

    def elaborate(self, platform):
        m = Module()

        # Input registers: the PHY interface's outputs are the only logic before them.
        d = Signal(8)
        dv = Signal()
        er = Signal()
        m.d.sync += [d.eq(self.rxd), dv.eq(self.rx_dv), er.eq(self.rx_er)]

        hold = [Signal(8, name=f"hold{k}") for k in range(HOLD)]  # hold[0]: the oldest octet
        held = Signal(range(HOLD + 1))
        # Octets after the SFD so far, FCS included; saturates just above max_frame.
        count = Signal(range(self.max_frame + 2))
        # count <= max_frame and count < MIN_FRAME as registers, updated with the count: the output's
        # enable and the verdict then start at flip-flops, not at the count's comparators (the
        # Colorlight's receive clock's critical path at 776f3d4, docs/boards.md).
        within = Signal(init=1)
        short = Signal(init=1)
        crc = Signal(32)
        error = Signal()

        m.d.sync += self.o.valid.eq(0)

        def start_frame():
            m.d.sync += [crc.eq(0xFFFFFFFF), count.eq(0), within.eq(1), short.eq(1), held.eq(0), error.eq(0)]

        with m.FSM():
            with m.State("IDLE"):
                with m.If(dv):
                    with m.If(d == SFD):
                        start_frame()
                        m.next = "DATA"
                    with m.Elif(d == PREAMBLE):
                        m.next = "PREAMBLE"
                    with m.Else():
                        m.next = "SKIP"

            with m.State("PREAMBLE"):
                with m.If(~dv):
                    m.next = "IDLE"
                with m.Elif(d == SFD):
                    start_frame()
                    m.next = "DATA"
                with m.Elif(d != PREAMBLE):
                    m.next = "SKIP"

            with m.State("SKIP"):
                with m.If(~dv):
                    m.next = "IDLE"

            with m.State("DATA"):
                with m.If(dv):
                    m.d.sync += [
                        crc.eq(crc32_update(crc, d, 1)),
                        error.eq(error | er),
                        hold[HOLD - 1].eq(d),
                    ]
                    m.d.sync += [hold[k].eq(hold[k + 1]) for k in range(HOLD - 1)]
                    with m.If(within):
                        m.d.sync += [
                            count.eq(count + 1),
                            within.eq(count != self.max_frame),
                            short.eq(count < MIN_FRAME - 1),
                        ]
                    with m.If(held < HOLD):
                        m.d.sync += held.eq(held + 1)
                    # The oldest octet is now known not to be FCS; past max_frame, stop emitting.
                    with m.Elif(within):
                        m.d.sync += [
                            self.o.valid.eq(1),
                            self.o.payload.data.eq(hold[0]),
                            self.o.payload.last.eq(0),
                        ]
                with m.Else():
                    outcome = Signal(RxOutcome)
                    with m.If(error):
                        m.d.comb += outcome.eq(RxOutcome.ERROR)
                    with m.Elif(~within):
                        m.d.comb += outcome.eq(RxOutcome.OVERSIZE)
                    with m.Elif(short):
                        m.d.comb += outcome.eq(RxOutcome.RUNT)
                    with m.Elif(crc != FCS_RESIDUE):
                        m.d.comb += outcome.eq(RxOutcome.BAD_FCS)
                    with m.Else():
                        m.d.comb += outcome.eq(RxOutcome.GOOD)
                    m.d.sync += [
                        self.o.valid.eq(1),
                        self.o.payload.data.eq(hold[0]),
                        self.o.payload.last.eq(1),
                        self.o.payload.outcome.eq(outcome),
                        self.o.payload.length.eq(Mux(count >= FCS_BYTES, count - FCS_BYTES, 0)),
                    ]
                    m.next = "IDLE"

        assert self.max_frame + 1 < 1 << LENGTH_BITS
        return m
