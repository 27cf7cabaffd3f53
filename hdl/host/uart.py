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

Both count the cycles of a bit up from 0 and compare with ``divisor`` (and ``divisor`` / 2): restarting
at 0 is the flip-flops' own reset, and no reload value (``divisor`` - 1) needs a subtractor. The state is
kept in a few flags and a bit counter rather than a state machine, which Yosys maps into fewer LUTs. With
``divisor`` tied to 62 (the Colorlight's 62.5 MHz at 1 Mbaud), Yosys ``synth_ecp5`` as in
``mrcnic.boards.synth_block``: 43 logic cells for the receiver and 47 for the transmitter, from 75 and 126.
"""

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import cdc, data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["DIVISOR_BITS", "UartRx", "UartTx", "rx_byte_layout"]

DIVISOR_BITS = 16


def rx_byte_layout() -> data.StructLayout:
    """A received character: its 8 data bits and whether its stop bit was missing."""
    return data.StructLayout({"data": 8, "framing_error": 1})


class UartRx(wiring.Component):
    """Members: ``rx`` (In, the pin), ``divisor`` (In, clocks per bit), ``data`` (Out, one
    :func:`rx_byte_layout` per character, no backpressure: a UART cannot wait; ``data.payload`` is meaningful
    only while ``data.valid`` is high)."""

    rx: In(1, init=1)
    divisor: In(DIVISOR_BITS)
    data: Out(stream.Signature(rx_byte_layout(), always_ready=True))

    def elaborate(self, platform):
        m = Module()
        line = Signal(init=1)
        m.submodules.sync_rx = cdc.FFSynchronizer(self.rx, line, init=1, stages=2)

        # Cycles since the falling edge or the last sample: counting up and comparing with `divisor`
        # needs no reload value (`divisor` - 1, a subtractor unless `divisor` is a constant).
        timer = Signal(DIVISOR_BITS, reset_less=True)  # only counts from a restart
        half = Signal()
        full = Signal()
        m.d.comb += [half.eq(timer + 1 == self.divisor >> 1), full.eq(timer + 1 == self.divisor)]
        active = Signal()  # a character is being received
        wait_high = Signal()  # after a framing error: until the line goes high (a break counts once)
        bit = Signal(range(10))  # 0: the start bit (checked half a bit in), 1..8: data, 9: stop
        shreg = Signal(8)
        # The character stays in `shreg` until the next one's first data bit, 1.5 bit times at least.
        m.d.comb += self.data.payload.data.eq(shreg)

        edge = ~active & ~wait_high & ~line
        sample = active & Mux(bit == 0, half, full)
        m.d.sync += self.data.valid.eq(0)
        with m.If(edge | sample):
            m.d.sync += timer.eq(0)
        with m.Else():
            m.d.sync += timer.eq(timer + 1)
        with m.If(edge):
            m.d.sync += [active.eq(1), bit.eq(0)]
        with m.If(sample):
            m.d.sync += bit.eq(bit + 1)
            with m.If(bit == 0):
                with m.If(line):
                    m.d.sync += active.eq(0)  # a glitch, not a start bit
            with m.Elif(bit == 9):
                m.d.sync += [
                    active.eq(0),
                    wait_high.eq(~line),
                    self.data.valid.eq(1),
                    self.data.payload.framing_error.eq(~line),
                ]
            with m.Else():
                m.d.sync += shreg.eq(Cat(shreg[1:], line))
        with m.If(wait_high & line):
            m.d.sync += wait_high.eq(0)
        return m


class UartTx(wiring.Component):
    """Members: ``tx`` (Out, the pin, idle high), ``divisor`` (In, clocks per bit), ``data`` (In, bytes
    to send; taken when the previous character's stop bit is over)."""

    tx: Out(1, init=1)
    divisor: In(DIVISOR_BITS)
    data: In(stream.Signature(8))

    def elaborate(self, platform):
        m = Module()
        timer = Signal(DIVISOR_BITS, reset_less=True)  # cycles into the bit, as in UartRx
        bit_end = Signal()
        m.d.comb += bit_end.eq(timer + 1 == self.divisor)
        bit = Signal(range(11), init=10)  # on the line: 0 the start bit, 1..8 data, 9 the stop bit; 10 idle
        hold = Signal(8)
        line = Signal(init=1)
        m.d.comb += self.tx.eq(line)
        # Ready in the last cycle of the stop bit too: characters go out back to back.
        m.d.comb += self.data.ready.eq((bit == 10) | ((bit == 9) & bit_end))
        with m.If(self.data.valid & self.data.ready | bit_end):
            m.d.sync += timer.eq(0)
        with m.Else():
            m.d.sync += timer.eq(timer + 1)
        with m.If(self.data.valid & self.data.ready):
            m.d.sync += [line.eq(0), hold.eq(self.data.payload), bit.eq(0)]
        with m.Elif(bit_end & (bit != 10)):
            # the next bit: data LSB first, the stop bit, then idle (both 1)
            m.d.sync += [line.eq(Cat(hold, 1, 1).bit_select(bit, 1)), bit.eq(bit + 1)]
        return m
