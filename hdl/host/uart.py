"""UART receiver and transmitter: asynchronous start-stop characters, 8 data bits, no parity, 1 stop bit
(8N1), least significant bit first, idle line high.

Ref: ITU-T Rec. V.4 (structure of start-stop characters: a start element of binary 0, the data bits LSB
first, a stop element of binary 1; the line rests at binary 1); the usual 16550-style 8N1 framing.

The bit time is ``divisor`` clock cycles, an input so a board can tie it to a constant
(``clk_hz // baud``) and a testbench can change it without a rebuild. ``divisor`` must be at least 4.

:class:`UartRx` samples the line through a two-flip-flop synchroniser (the pin is asynchronous to the
clock). A falling edge starts a character; the start bit is checked half a bit later (a shorter low pulse
is a glitch and is ignored), then every data bit and the stop bit are sampled one bit time apart, i.e. in
the middle of each bit. The receiver is ready for the next start bit right after the middle of the stop
bit, so a transmitter up to about 4% faster or slower than ``divisor`` is still received (the sampling
point drifts by at most half a bit over 9.5 bits, less the synchroniser's one-cycle uncertainty). A stop
bit sampled low is a *framing error*: the character is still delivered, flagged, and the receiver waits
for the line to go high again before it looks for the next start bit (so a break, the line held low,
counts once).

:class:`UartTx` sends each byte it takes as start bit, 8 data bits, one stop bit.
"""

from amaranth import Cat, Module, Signal
from amaranth.lib import cdc, data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["DIVISOR_BITS", "UartRx", "UartTx", "rx_byte_layout"]

DIVISOR_BITS = 16


def rx_byte_layout() -> data.StructLayout:
    """A received character: its 8 data bits and whether its stop bit was missing."""
    return data.StructLayout({"data": 8, "framing_error": 1})


class UartRx(wiring.Component):
    """Members: ``rx`` (In, the pin), ``divisor`` (In, clocks per bit), ``data`` (Out, one
    :func:`rx_byte_layout` per character, no backpressure: a UART cannot wait)."""

    rx: In(1, init=1)
    divisor: In(DIVISOR_BITS)
    data: Out(stream.Signature(rx_byte_layout(), always_ready=True))

    def elaborate(self, platform):
        m = Module()
        line = Signal(init=1)
        m.submodules.sync_rx = cdc.FFSynchronizer(self.rx, line, init=1, stages=2)

        timer = Signal(DIVISOR_BITS)
        bits = Signal(range(9))
        shreg = Signal(8)
        m.d.sync += self.data.valid.eq(0)
        with m.If(timer != 0):
            m.d.sync += timer.eq(timer - 1)

        with m.FSM():
            with m.State("IDLE"):
                with m.If(~line):
                    # Half a bit, so the following samples fall in the middle of each bit.
                    m.d.sync += timer.eq((self.divisor >> 1) - 1)
                    m.next = "START"
            with m.State("START"):
                with m.If(timer == 0):
                    with m.If(line):
                        m.next = "IDLE"  # a glitch, not a start bit
                    with m.Else():
                        m.d.sync += [timer.eq(self.divisor - 1), bits.eq(0)]
                        m.next = "DATA"
            with m.State("DATA"):
                with m.If(timer == 0):
                    m.d.sync += [
                        shreg.eq(Cat(shreg[1:], line)),
                        bits.eq(bits + 1),
                        timer.eq(self.divisor - 1),
                    ]
                    with m.If(bits == 7):
                        m.next = "STOP"
            with m.State("STOP"):
                with m.If(timer == 0):
                    m.d.sync += [
                        self.data.valid.eq(1),
                        self.data.payload.data.eq(shreg),
                        self.data.payload.framing_error.eq(~line),
                    ]
                    with m.If(line):
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "BREAK"
            with m.State("BREAK"):
                with m.If(line):
                    m.next = "IDLE"
        return m


class UartTx(wiring.Component):
    """Members: ``tx`` (Out, the pin, idle high), ``divisor`` (In, clocks per bit), ``data`` (In, bytes
    to send; taken when the previous character's stop bit is over)."""

    tx: Out(1, init=1)
    divisor: In(DIVISOR_BITS)
    data: In(stream.Signature(8))

    def elaborate(self, platform):
        m = Module()
        timer = Signal(DIVISOR_BITS)
        bits = Signal(range(11))
        shreg = Signal(10, init=0x3FF)
        m.d.comb += self.tx.eq(shreg[0])
        # Ready in the last cycle of the stop bit too: characters go out back to back.
        m.d.comb += self.data.ready.eq((bits == 0) | ((bits == 1) & (timer == 0)))
        with m.If(self.data.valid & self.data.ready):
            # start bit (0), data LSB first, stop bit (1)
            m.d.sync += [shreg.eq(Cat(0, self.data.payload, 1)), bits.eq(10), timer.eq(self.divisor - 1)]
        with m.Elif(bits != 0):
            with m.If(timer == 0):
                m.d.sync += [shreg.eq(Cat(shreg[1:], 1)), bits.eq(bits - 1), timer.eq(self.divisor - 1)]
            with m.Else():
                m.d.sync += timer.eq(timer - 1)
        return m
