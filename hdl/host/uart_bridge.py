"""UART host bridge: the host reaches the NIC's registers and the host memory over a serial line.

Ref: docs/uart-bridge.md (the protocol byte by byte, and this behaviour); :mod:`mrcnic.driver.uart_protocol`
(the same codec in Python, and :class:`~mrcnic.driver.uart_protocol.BridgeModel`, this bridge's reference
behaviour); Cheshire & Baker 1999 (COBS); IEEE Std 802.3-2022 §3.2.9 (CRC-32, reflected, as
``zlib.crc32``); ARM IHI 0022 Part B (AXI4-Lite), §A3.4.4 (responses).

Members:

* ``rx`` (In), ``tx`` (Out): the UART pins, 8N1 (:mod:`.uart`); ``divisor`` (In): clocks per bit.
* ``registers``: Out(AxiLiteSignature(``reg_addr_width``)), to the NIC's ``s_axil``.
* ``memory``: Out(AxiLiteSignature(``mem_addr_width``)), to the host memory.
* ``stat_<name>`` for each of :data:`COUNTERS` (Out(``counter_width``), wrapping): ``frames_ok`` (requests
  with a good CRC and a valid form, repeated ones included), ``bad_crc``, ``bad_frame`` (dropped frames and
  BAD_REQUEST ones), ``framing_errors`` (characters whose stop bit was low), ``bus_errors`` (SLVERR or
  DECERR answers), ``timeouts``, ``repeated`` (retried writes answered without being performed again).

Behaviour. The receiver decodes COBS as the characters arrive and collects one request: its header in
registers, its data in a byte buffer (the CRC lands there too), the CRC-32 of every byte. At the
delimiter:

1. a frame that had a COBS error, a character with a framing error, a character that arrived while the
   bridge was busy (see below), or fewer than 12 bytes is dropped: no answer;
2. a CRC mismatch is answered BAD_CRC (with the SEQ as received: the host only acts on an answer whose SEQ
   it is waiting for, and retrying is always safe);
3. reserved CMD bits, COUNT 0 or above ``max_words``, a length that does not match, an unaligned address,
   or a range beyond the port's address bits are answered BAD_REQUEST;
4. a write whose SEQ and CRC field equal those of the last request performed, if that was a write, is a
   retry whose answer was lost: it is answered with the remembered STATUS (| REPEATED) and DONE, and not
   performed again;
5. otherwise the words are accessed one AXI4-Lite transaction at a time, at consecutive addresses, until
   the first SLVERR/DECERR (status SLVERR/DECERR) or a word not finished within ``timeout`` cycles
   (TIMEOUT: the valid signals drop, which a hung subordinate cannot object to); DONE counts the words
   that completed. The answer carries the data of a read (DONE words).

Only a request that reaches step 5 changes the remembered last write (a read forgets it). Nothing before
the delimiter performs an access, so a corrupted or truncated frame never does. R and B are always
ready, so a response that comes after its timeout is absorbed while the bridge waits for the next frame.
The answer goes through the COBS encoder, which holds up to 254 bytes (one block), so the bridge listens
again as soon as the answer's last byte has been handed over, while the encoder still sends. *Busy* is:
the cycle of the checks, the accesses, and handing over an answer that carries read data (it comes from
the buffer the next request would fill); an answer without data (writes, errors) is handed over while the
next frame is received, so the two halves of a frame split by a corrupted 0x00 are each answered as if
they had come apart. A frame complete while the bridge is still answering waits for its checks.

Size. The bridge is built for a board without a logic cell to spare (the Colorlight 5A-75B).
``python -m mrcnic.boards.synth_block mrcnic.hdl.host.uart_bridge:UartBridge`` (the board's parameters, the
defaults) gives 951 logic cells: 745 LUT4, 79 CCU2C, 8 LUT-RAM blocks, 734 FF, 2 DP16KD (1,583 before:
1,049 LUT4, 267 CCU2C, 780 FF); 878 with ``divisor`` tied to 62 as on that board (1,584 before). How:

* the received bytes' CRC-32 is bit-serial (a byte goes in over the 8 cycles after it; a character takes
  40 at least), the answer's takes 4 bits a cycle, and the answer's CRC goes out of its own register,
  which feeding its bits back shifts a byte at a time; both restart through a reset, which the flip-flops
  take as it is;
* the buffer holds bytes, and one pointer (word, byte) serves receiving, the accesses and the answer:
  received bytes go in as they come, the answer reads them without a multiplexer, a word read from a bus
  is kept per bus (no 32-bit multiplexer) and stored a byte a cycle, a word to write is gathered a byte a
  cycle. The frame's length is checked on the same word count;
* the counters share one adder: each event is remembered and served within 8 cycles from a copy of the
  counters in LUT RAM (:meth:`UartBridge._counter_bank`); the outputs stay registers;
* the range check adds ADDRESS[9:2] and COUNT only (:meth:`UartBridge._fits`); the bus timer counts from
  where its top bit sets at the timeout; registers are cleared by the flip-flops' resets, not by
  multiplexers;
* the encoder keeps one pointer for its block (:class:`CobsEncoder`), the UART counts up to ``divisor``
  (:mod:`.uart`).

Timing that changed with this: an answer byte goes into the encoder every 2 cycles (it was 1, read data
1.25), a word read takes 4 more cycles to store, a word to write 4 more to gather. The answer to a
64-word read of data without a zero byte (a 254-byte COBS block, sent once complete) thus starts about
450 cycles later: such reads get 0.909 of the line's byte rate at 62 clocks per bit (0.910 before) and
0.842 at the minimum of 4 (0.874 before; 23 characters beyond the line time where the driver waits 40).
A counter follows its event by up to 8 cycles (15 right after a reset, while the copy is cleared).
"""

from amaranth import Cat, Module, Mux, Signal
from amaranth.hdl import ResetInserter
from amaranth.lib import crc, data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from mrcnic.driver.uart_protocol import MIN_REQUEST, REPEATED, REQUEST_HEADER, Status

from ..tables import UNDEFINED_COLLISIONS
from .axil import AxiLiteSignature
from .uart import DIVISOR_BITS, UartRx, UartTx, rx_byte_layout

__all__ = ["COUNTERS", "CobsDecoder", "CobsEncoder", "UartBridge"]

COUNTERS = ("frames_ok", "bad_crc", "bad_frame", "framing_errors", "bus_errors", "timeouts", "repeated")

# The receiver counts 8 header bytes, then words: a frame without a whole word after the header is short.
assert REQUEST_HEADER == 8 and MIN_REQUEST == REQUEST_HEADER + 4


def decoded_layout() -> data.StructLayout:
    """A decoded frame byte (``end`` = 0), or the end of a frame (``end`` = 1, ``error``: unusable)."""
    return data.StructLayout({"data": 8, "end": 1, "error": 1})


def frame_byte_layout() -> data.StructLayout:
    return data.StructLayout({"data": 8, "last": 1})


class CobsDecoder(wiring.Component):
    """COBS decoder for a byte stream that cannot wait (a UART receiver).

    ``i``: characters (:func:`~.uart.rx_byte_layout`); ``o``: :func:`decoded_layout`, one item per
    character at most, one cycle later. A 0x00 character ends a frame: ``o`` gives ``end`` with
    ``error`` set if the frame's last block was cut short or a character of the frame had a framing error
    (that character is never taken for a delimiter). Empty frames (repeated delimiters) give nothing. The
    zero implied at the end of the last block is dropped, so a frame ending right after a 255 block
    decodes the same with or without a final 0x01 block.
    """

    i: In(stream.Signature(rx_byte_layout(), always_ready=True))
    o: Out(stream.Signature(decoded_layout(), always_ready=True))

    def elaborate(self, platform):
        m = Module()
        # 1 + data bytes left in the current block (1: the next byte is a code byte), so a code byte loads
        # as it is, without a subtractor.
        remaining = Signal(8, init=1)
        zero_pending = Signal()  # the current block (code < 255) ends in an implied zero
        started = Signal()  # a character since the last delimiter
        error = Signal()
        byte = self.i.payload.data
        m.d.sync += self.o.valid.eq(0)
        with m.If(self.i.valid):
            with m.If(self.i.payload.framing_error):
                m.d.sync += [started.eq(1), error.eq(1)]
            with m.Elif(byte == 0):
                with m.If(started):
                    m.d.sync += [
                        self.o.valid.eq(1),
                        self.o.payload.end.eq(1),
                        self.o.payload.error.eq(error | (remaining != 1)),
                    ]
                m.d.sync += [remaining.eq(1), zero_pending.eq(0), started.eq(0), error.eq(0)]
            with m.Elif(remaining == 1):
                m.d.sync += [started.eq(1), remaining.eq(byte), zero_pending.eq(byte != 0xFF)]
                with m.If(zero_pending):
                    m.d.sync += [self.o.valid.eq(1), self.o.payload.data.eq(0), self.o.payload.end.eq(0)]
            with m.Else():
                m.d.sync += [
                    started.eq(1),
                    remaining.eq(remaining - 1),
                    self.o.valid.eq(1),
                    self.o.payload.data.eq(byte),
                    self.o.payload.end.eq(0),
                ]
        return m


class CobsEncoder(wiring.Component):
    """COBS encoder: ``i`` takes a frame's bytes (``last`` on its final byte), ``o`` gives the encoded
    frame and its 0x00 delimiter.

    Bytes are collected in a block RAM until a zero or the 254th non-zero byte closes the block; then the
    code byte and the block go out while ``i`` waits. The final block always follows the last byte (code
    0x01 if it is empty, as :func:`~mrcnic.driver.uart_protocol.cobs_encode` does). One pointer serves as
    write address, block size and read address (a FIFO would keep two pointers and a level), and ``o``
    idles a cycle after each byte while the next one is read: the UART takes a byte every 10 bit times.
    """

    i: In(stream.Signature(frame_byte_layout()))
    o: Out(stream.Signature(8))

    def elaborate(self, platform):
        m = Module()
        # Filling and sending never overlap, so a read never meets a write.
        m.submodules.block = block = Memory(shape=8, depth=256, init=[], attrs=UNDEFINED_COLLISIONS)
        wp = block.write_port()
        rp = block.read_port()
        ptr = Signal(8)  # FILL: bytes of the block so far; BLOCK: the byte being sent
        ptr_next = Signal(8)
        ptr_clear, ptr_inc = Signal(), Signal()
        m.d.comb += ptr_next.eq(ptr + 1)
        with m.If(ptr_clear):
            m.d.sync += ptr.eq(0)
        with m.Elif(ptr_inc):
            m.d.sync += ptr.eq(ptr_next)
        size = Signal(8)  # bytes of the block being sent
        fetched = Signal()  # rp.data holds byte `ptr`
        final = Signal()  # the block being sent is the frame's last: the delimiter follows
        more = Signal()  # the last byte closed a block: an empty final block follows

        byte, last = self.i.payload.data, self.i.payload.last
        nonzero = byte != 0
        m.d.comb += [wp.addr.eq(ptr), wp.data.eq(byte), rp.addr.eq(ptr)]
        with m.FSM():
            with m.State("FILL"):
                m.d.comb += self.i.ready.eq(1)
                with m.If(self.i.valid):
                    m.d.comb += [wp.en.eq(nonzero), ptr_inc.eq(nonzero)]
                    with m.If(~nonzero | (ptr == 253)):
                        m.d.sync += [final.eq(0), more.eq(last)]
                        m.next = "CODE"
                    with m.Elif(last):
                        m.d.sync += final.eq(1)
                        m.next = "CODE"
            with m.State("CODE"):
                # `ptr` is the block's size: the code byte is one more
                m.d.comb += [self.o.valid.eq(1), self.o.payload.eq(ptr_next)]
                with m.If(self.o.ready):
                    m.d.comb += ptr_clear.eq(1)
                    m.d.sync += [size.eq(ptr), fetched.eq(0)]
                    m.next = "BLOCK"
            with m.State("BLOCK"):
                with m.If(ptr == size):
                    m.d.comb += ptr_clear.eq(1)
                    with m.If(final):
                        m.next = "DELIMITER"
                    with m.Elif(more):
                        m.d.sync += [final.eq(1), more.eq(0)]
                        m.next = "CODE"  # ptr 0: code 0x01
                    with m.Else():
                        m.next = "FILL"
                with m.Elif(~fetched):
                    m.d.sync += fetched.eq(1)
                with m.Else():
                    m.d.comb += [self.o.valid.eq(1), self.o.payload.eq(rp.data)]
                    with m.If(self.o.ready):
                        m.d.comb += ptr_inc.eq(1)
                        m.d.sync += fetched.eq(0)
            with m.State("DELIMITER"):
                m.d.comb += [self.o.valid.eq(1), self.o.payload.eq(0)]
                with m.If(self.o.ready):
                    m.next = "FILL"
        return m


class UartBridge(wiring.Component):
    def __init__(
        self,
        *,
        max_words: int = 64,
        reg_addr_width: int = 16,
        mem_addr_width: int = 32,
        timeout: int = 1 << 16,
        counter_width: int = 32,
    ):
        if not isinstance(max_words, int) or not 1 <= max_words <= 255:
            raise ValueError(f"max_words must be an integer in 1..255 (COUNT is one byte), not {max_words!r}")
        for name, width in (("reg_addr_width", reg_addr_width), ("mem_addr_width", mem_addr_width)):
            if not isinstance(width, int) or not 4 <= width <= 32:
                raise ValueError(f"{name} must be an integer in 4..32 (ADDRESS is 32 bits), not {width!r}")
        if not isinstance(timeout, int) or timeout < 2:
            raise ValueError(f"timeout must be an integer of at least 2 cycles, not {timeout!r}")
        self.max_words, self.timeout = max_words, timeout
        self.reg_addr_width, self.mem_addr_width = reg_addr_width, mem_addr_width
        members = {
            "rx": In(1, init=1),
            "tx": Out(1, init=1),
            "divisor": In(DIVISOR_BITS),
            "registers": Out(AxiLiteSignature(addr_width=reg_addr_width)),
            "memory": Out(AxiLiteSignature(addr_width=mem_addr_width)),
        }
        members.update({f"stat_{name}": Out(counter_width) for name in COUNTERS})
        super().__init__(members)

    @staticmethod
    def _fits(address, end_low, width):
        """Whether ``address`` + 4 x COUNT <= 2^``width``, given ``end_low`` = ``address``[2:10] + COUNT
        (9 bits): above bit 9 only "all zero" and "all ones" matter, so no 32-bit adder."""
        high_zero = (address[width:] == 0) if width < 32 else 1
        if width < 10:  # ADDRESS[9:2] is all of the word address
            return high_zero & (end_low <= 1 << (width - 2))
        if width == 10:
            return high_zero & (end_low <= 256)
        return high_zero & ((end_low <= 256) | ~address[10:width].all())

    def _counter_bank(self, m, events):
        """The ``stat_*`` counters, each ``events`` pair (counter name, one-cycle pulse) adding one.

        Seven adders would take a 32-bit carry chain each. Instead an event is remembered (one bit per
        pair) and served within ``len(events)`` cycles, one a cycle, lowest first: a copy of the counters
        in LUT RAM gives the value, one adder the next, which goes back there and to the output register.
        The same event never comes again that soon (characters are 40 cycles apart at least). After a
        reset the copy is cleared (from a word of all ones at the spare address) before events are
        served."""
        width = len(self.stat_frames_ok)
        spare = len(COUNTERS)
        m.submodules.counter_copy = copy = Memory(
            shape=width, depth=spare + 1, init=[0] * spare + [(1 << width) - 1]
        )
        wp = copy.write_port()
        rp = copy.read_port(domain="comb")
        targets = [COUNTERS.index(name) for name, _ in events]
        pending = Signal(len(events))
        serve = Signal(len(events))  # the lowest pending event, one-hot
        clear = Signal(range(spare + 1))  # the counter being cleared; `spare`: all are
        index = Signal(range(spare + 1))
        total = Signal(width)
        clearing = clear != spare
        m.d.comb += [serve.eq(Mux(clearing, 0, pending & -pending)), total.eq(rp.data + 1)]
        m.d.sync += pending.eq(pending & ~serve | Cat(pulse for _, pulse in events))
        for j, target in enumerate(targets):
            with m.If(serve[j]):
                m.d.comb += index.eq(target)
        with m.If(clearing):
            m.d.sync += clear.eq(clear + 1)
            m.d.comb += [rp.addr.eq(spare), wp.addr.eq(clear)]
        with m.Else():
            m.d.comb += [rp.addr.eq(index), wp.addr.eq(index)]
        m.d.comb += [wp.data.eq(total), wp.en.eq(clearing | serve.any())]
        for k, name in enumerate(COUNTERS):
            with m.If(Cat(serve[j] for j, target in enumerate(targets) if target == k).any()):
                m.d.sync += getattr(self, f"stat_{name}").eq(total)

    def elaborate(self, platform):
        m = Module()
        m.submodules.uart_rx = urx = UartRx()
        m.submodules.uart_tx = utx = UartTx()
        m.submodules.decoder = dec = CobsDecoder()
        m.submodules.encoder = enc = CobsEncoder()
        m.d.comb += [urx.rx.eq(self.rx), urx.divisor.eq(self.divisor), utx.divisor.eq(self.divisor)]
        m.d.comb += self.tx.eq(utx.tx)
        wiring.connect(m, urx.data, dec.i)
        wiring.connect(m, enc.o, utx.data)
        # One pulse per event; bad_frame has two sources that may coincide (a frame dropped while
        # another is answered BAD_REQUEST).
        events = {name: Signal(name=f"{name}_event") for name in COUNTERS}
        bad_request = Signal()
        m.d.comb += events["framing_errors"].eq(urx.data.valid & urx.data.payload.framing_error)
        self._counter_bank(m, [*events.items(), ("bad_frame", bad_request)])

        # Registers are updated at the top level from single-purpose controls set by the states, so that
        # Yosys sees plain enables and resets instead of a multiplexer per state.

        # One pointer for the buffer: the word being received, accessed or answered. It saturates at
        # max_words + 2 while receiving (a frame that long fails the length check, however long it is).
        word_limit = self.max_words + 2
        word = Signal(range(word_limit + 1))
        word_next = Signal(len(word) + 1)
        word_clear, word_inc = Signal(), Signal()
        m.d.comb += word_next.eq(word + 1)
        with m.If(word_clear):
            m.d.sync += word.eq(0)
        with m.Elif(word_inc):
            m.d.sync += word.eq(word_next)
        # The buffer holds bytes: the answer reads them as they go out, and only a word read from a bus
        # needs its bytes picked, 8 bits wide. `lane` is the byte within word `word`. Reads never meet
        # writes that matter (see the states), so Yosys needs no collision logic.
        m.submodules.buffer = buffer = Memory(
            shape=8, depth=4 << len(word), init=[], attrs=UNDEFINED_COLLISIONS
        )
        wp = buffer.write_port()
        rp = buffer.read_port()
        lane = Signal(2)  # hpos[1:0], a_pos while the answer reads data
        m.d.comb += [wp.addr.eq(Cat(lane, word)), rp.addr.eq(Cat(lane, word))]
        # The received bytes' CRC is bit-serial: a byte takes 8 cycles, a character on the line 40 at
        # least. The answer's goes 4 bits a cycle: a block of 254 bytes is ready in 508 cycles (bit-serial,
        # 2,032 cycles would be 51 characters at 4 clocks per bit, longer than the driver waits; a byte a
        # cycle would cost about 20 cells more and gain little, as each byte is read from the buffer). Both
        # restart through a reset (ResetInserter), which the flip-flops take as it is, instead of `start`,
        # a multiplexer in front of each.
        rx_restart = Signal()  # the frame has been dealt with: the next one starts from scratch
        answer_start = Signal()
        rx_crc = crc.catalog.CRC32_ISO_HDLC(data_width=1).create()
        tx_crc = crc.catalog.CRC32_ISO_HDLC(data_width=4).create()
        m.submodules.rx_crc = ResetInserter(rx_restart)(rx_crc)
        m.submodules.tx_crc = ResetInserter(answer_start)(tx_crc)

        # -- the request being received
        # bytes so far, modulo 8: the header byte, then (bits 1..0) the byte of a word; also the byte of
        # the word being accessed
        hpos = Signal(3)
        hpos_clear, hpos_inc = Signal(), Signal()
        with m.If(hpos_clear):
            m.d.sync += hpos.eq(0)
        with m.Elif(hpos_inc):
            m.d.sync += hpos.eq(hpos + 1)
        body = Signal()  # the 8 header bytes are in
        len_ok = Signal()  # the last complete word is where CMD and COUNT put the CRC field
        seq = Signal(16)
        cmd = Signal(8)
        count = Signal(8)
        address = Signal(32)
        last4 = Signal(32)  # the last four bytes: the CRC field at the end; the newest goes into rx_crc
        rx_bit = Signal(4, init=8)  # bit of the last byte going into rx_crc; 8: none
        discard = Signal()  # a byte of this frame arrived while the bridge was busy
        listen = Signal()  # the state lets the receiver take bytes
        frame_pending = Signal()  # a complete frame waits for CHECK: later bytes are dropped meanwhile
        receiving = Signal()
        m.d.comb += receiving.eq(listen & ~frame_pending)
        answer_seq = Signal(16)  # the receiver may take the next frame while this answer goes out

        # -- the remembered last write (for retries) and the answer
        last_valid = Signal()
        last_seq = Signal(16)
        last_crc = Signal(32)
        last_status = Signal(8)
        last_done = Signal(8)  # also the answer's DONE, unless it is rejected (DONE 0)
        status = Signal(8)
        rejected = Signal()  # BAD_CRC or BAD_REQUEST
        with_data = Signal()

        m.d.comb += [
            rx_crc.valid.eq(~rx_bit[3]),
            rx_crc.data.eq(last4[24:].bit_select(rx_bit[:3], 1)),
        ]
        with m.If(~rx_bit[3]):
            m.d.sync += rx_bit.eq(rx_bit + 1)
        m.d.comb += lane.eq(hpos[:2])

        item = dec.o.payload
        byte = item.data
        write = cmd[0]
        space = cmd[1]
        rx_byte = Signal()  # a byte of the frame being received
        m.d.comb += rx_byte.eq(dec.o.valid & receiving & ~item.end)
        with m.If(dec.o.valid & ~receiving):
            # Busy: the frame in progress has lost a byte; a frame that ends now is lost whole.
            with m.If(item.end):
                m.d.sync += discard.eq(0)
                m.d.comb += events["bad_frame"].eq(1)
            with m.Else():
                m.d.sync += discard.eq(1)
        with m.If(rx_restart):
            m.d.sync += [body.eq(0), len_ok.eq(0)]
            m.d.comb += hpos_clear.eq(1)
        with m.Elif(rx_byte & (hpos == 7)):
            m.d.sync += body.eq(1)
        with m.If(rx_byte):
            m.d.sync += [last4.eq(Cat(last4[8:], byte)), rx_bit.eq(0)]
            m.d.comb += hpos_inc.eq(1)
            with m.If(~body):
                with m.Switch(hpos):
                    for k, field in enumerate((seq[:8], seq[8:], cmd, count)):
                        with m.Case(k):
                            m.d.sync += field.eq(byte)
                    for k in range(4):
                        with m.Case(4 + k):
                            m.d.sync += address[8 * k : 8 * k + 8].eq(byte)
            with m.Else():
                # the data, then the CRC field
                m.d.comb += [wp.data.eq(byte), wp.en.eq(1)]
                with m.If(hpos[:2] == 3):
                    m.d.comb += word_inc.eq(word != word_limit)
                    m.d.sync += len_ok.eq(Mux(write, word == count, word == 0))
        with m.If(dec.o.valid & receiving & item.end):
            m.d.sync += discard.eq(0)
            # fewer than MIN_REQUEST (12) bytes: not even one word after the header
            with m.If(item.error | discard | (word == 0)):
                m.d.comb += [events["bad_frame"].eq(1), rx_restart.eq(1), word_clear.eq(1)]
            with m.Else():
                m.d.sync += frame_pending.eq(1)

        # -- the accesses
        word_address = Signal(32)
        m.d.comb += word_address.eq(address + (word << 2))
        # The timer starts where its top bit sets after `timeout` - 1 increments: no comparator. It
        # counts in the states that wait for the bus, and restarts elsewhere and at each response.
        timer_bits = ceil_log2(self.timeout - 1)
        timer_start = (1 << timer_bits) - (self.timeout - 1)
        timer = Signal(timer_bits + 1, init=timer_start, reset_less=True)
        waiting, responded = Signal(), Signal()
        with m.If(~waiting | responded):
            m.d.sync += timer.eq(timer_start)
        with m.Else():
            m.d.sync += timer.eq(timer + 1)
        aw_done = Signal()
        w_done = Signal()
        # A word read is kept as each bus gives it (no 32-bit multiplexer), then stored byte by byte; a
        # word to write is gathered from the buffer byte by byte.
        reading = Signal()
        read_words = [Signal(32, name=f"{bus}_rdata") for bus in ("registers", "memory")]
        wdata = Signal(32)
        buses = (self.registers, self.memory)
        sel = {
            name: Mux(space, getattr(self.memory, name), getattr(self.registers, name))
            for name in ("arready", "rvalid", "rresp", "awready", "wready", "bvalid", "bresp")
        }
        arvalid, awvalid, wvalid = Signal(), Signal(), Signal()
        for i, bus in enumerate(buses):
            mine = space == i
            m.d.comb += [
                bus.araddr.eq(word_address),
                bus.awaddr.eq(word_address),
                bus.arprot.eq(0),
                bus.awprot.eq(0),
                bus.wdata.eq(wdata),
                bus.wstrb.eq(0xF),
                bus.arvalid.eq(arvalid & mine),
                bus.awvalid.eq(awvalid & mine),
                bus.wvalid.eq(wvalid & mine),
                # Always ready: a response that comes after its timeout is absorbed.
                bus.rready.eq(1),
                bus.bready.eq(1),
            ]
            with m.If(reading & bus.rvalid):
                m.d.sync += read_words[i].eq(bus.rdata)

        # -- the answer, into the encoder a byte every 2 cycles: each byte is handed over and goes into
        # tx_crc, its low nibble in that cycle, its high nibble (kept in tx_high) in the next, while the
        # next byte is read.
        a_pos = Signal(2)  # byte within the header, data word or CRC of the answer
        high = Signal()  # the cycle of a byte's high nibble
        tx_high = Signal(4)
        answer_byte = Signal(8)
        byte_state = Signal()  # a state that hands bytes over
        crc_phase = Signal()
        handover = Signal()
        m.d.comb += [
            enc.i.payload.data.eq(answer_byte),
            enc.i.valid.eq(byte_state & ~high),
            handover.eq(enc.i.valid & enc.i.ready),
            tx_crc.valid.eq(handover | high),
            # The CRC goes out from tx_crc.crc[:8]: feeding back its own bits (inverted: the register
            # holds the complement) shifts the next byte there, so it needs no byte multiplexer.
            tx_crc.data.eq(Mux(high, tx_high, answer_byte[:4] ^ Mux(crc_phase, 0xF, 0))),
        ]
        with m.If(answer_start):
            m.d.sync += [high.eq(0), a_pos.eq(0)]
        with m.Elif(handover):
            m.d.sync += [
                high.eq(1),
                # inverted now: in the next cycle the state may be past the byte's
                tx_high.eq(answer_byte[4:] ^ Mux(crc_phase, 0xF, 0)),
                a_pos.eq(a_pos + 1),
            ]
        with m.Else():
            m.d.sync += high.eq(0)

        def finish_word(ok_next_state):
            """After word ``word`` completed: the next word, or the end of the request."""
            m.d.comb += [word_inc.eq(1), responded.eq(1)]
            with m.If(word_next == count):
                m.next = "FINISH"
            with m.Else():
                m.next = ok_next_state

        def bus_error(resp):
            m.d.sync += status.eq(Mux(resp == 2, Status.SLVERR, Status.DECERR))
            m.d.comb += events["bus_errors"].eq(1)
            m.next = "FINISH"

        def check_timeout():
            with m.If(timer[-1]):
                m.d.sync += status.eq(Status.TIMEOUT)
                m.d.comb += events["timeouts"].eq(1)
                m.next = "FINISH"

        with m.FSM():
            with m.State("RECEIVE"):
                m.d.comb += listen.eq(1)
                with m.If(frame_pending):
                    m.next = "CHECK"

            with m.State("CHECK"):
                end_low = Signal(9)  # ADDRESS[2:10] + COUNT: the range check's only adder
                m.d.comb += end_low.eq(address[2:10] + count)
                in_range = Mux(
                    space,
                    self._fits(address, end_low, self.mem_addr_width),
                    self._fits(address, end_low, self.reg_addr_width),
                )
                well_formed = (
                    (cmd[2:] == 0)
                    & (count != 0)
                    & (count <= self.max_words)
                    & len_ok
                    & (hpos[:2] == 0)
                    & (address[:2] == 0)
                    & in_range
                )
                repeated = write & last_valid & (last_seq == seq) & (last_crc == last4)
                m.d.comb += [rx_restart.eq(1), word_clear.eq(1), answer_start.eq(1)]
                m.d.sync += [with_data.eq(0), frame_pending.eq(0), answer_seq.eq(seq), rejected.eq(0)]
                with m.If(~rx_crc.match_detected):
                    m.d.sync += [status.eq(Status.BAD_CRC), rejected.eq(1)]
                    m.d.comb += events["bad_crc"].eq(1)
                    m.next = "ANSWER_HEADER"
                with m.Elif(~well_formed):
                    m.d.sync += [status.eq(Status.BAD_REQUEST), rejected.eq(1)]
                    m.d.comb += bad_request.eq(1)
                    m.next = "ANSWER_HEADER"
                with m.Elif(repeated):
                    m.d.sync += status.eq(last_status | REPEATED)
                    m.d.comb += [events["frames_ok"].eq(1), events["repeated"].eq(1)]
                    m.next = "ANSWER_HEADER"
                with m.Else():
                    m.d.sync += [status.eq(Status.OK), with_data.eq(~write)]
                    m.d.comb += events["frames_ok"].eq(1)
                    with m.If(write):
                        m.next = "WRITE_FETCH"
                    with m.Else():
                        m.next = "READ_ADDRESS"

            with m.State("READ_ADDRESS"):
                m.d.comb += [arvalid.eq(1), waiting.eq(1)]
                with m.If(sel["arready"]):
                    m.next = "READ_DATA"
                with m.Else():
                    check_timeout()

            with m.State("READ_DATA"):
                m.d.comb += [waiting.eq(1), reading.eq(1)]
                with m.If(sel["rvalid"]):
                    with m.If(sel["rresp"][1]):
                        bus_error(sel["rresp"])
                    with m.Else():
                        m.next = "READ_STORE"
                with m.Else():
                    check_timeout()

            with m.State("READ_STORE"):
                word_read = Mux(space, read_words[1], read_words[0])
                m.d.comb += [wp.data.eq(word_read.word_select(hpos[:2], 8)), wp.en.eq(1), hpos_inc.eq(1)]
                with m.If(hpos[:2] == 3):
                    m.d.comb += hpos_clear.eq(1)
                    finish_word("READ_ADDRESS")

            with m.State("WRITE_FETCH"):
                # The buffer's read port is synchronous: byte `hpos` is on rp.data a cycle later, so
                # five cycles shift the word's four bytes in.
                m.d.sync += [aw_done.eq(0), w_done.eq(0), wdata.eq(Cat(wdata[8:], rp.data))]
                m.d.comb += hpos_inc.eq(1)
                with m.If(hpos == 4):
                    m.d.comb += hpos_clear.eq(1)
                    m.next = "WRITE"

            with m.State("WRITE"):
                m.d.comb += [awvalid.eq(~aw_done), wvalid.eq(~w_done), waiting.eq(1)]
                aw_now = aw_done | sel["awready"]
                w_now = w_done | sel["wready"]
                m.d.sync += [aw_done.eq(aw_now), w_done.eq(w_now)]
                with m.If(aw_now & w_now):
                    m.next = "WRITE_RESPONSE"
                with m.Else():
                    check_timeout()

            with m.State("WRITE_RESPONSE"):
                m.d.comb += waiting.eq(1)
                with m.If(sel["bvalid"]):
                    with m.If(sel["bresp"][1]):
                        bus_error(sel["bresp"])
                    with m.Else():
                        finish_word("WRITE_FETCH")
                with m.Else():
                    check_timeout()

            with m.State("FINISH"):
                # `word` counts the words that completed: DONE
                m.d.sync += [
                    last_valid.eq(write),
                    last_seq.eq(seq),
                    last_crc.eq(last4),
                    last_status.eq(status),
                    last_done.eq(word),
                ]
                m.d.comb += word_clear.eq(1)
                m.next = "ANSWER_HEADER"

            # -- the answer: header, data (reads), CRC; into the encoder
            with m.State("ANSWER_HEADER"):
                header = Cat(answer_seq, status, Mux(rejected, 0, last_done))
                m.d.comb += [
                    byte_state.eq(1),
                    answer_byte.eq(header.word_select(a_pos, 8)),
                    listen.eq(~with_data),
                ]
                with m.If(handover & (a_pos == 3)):
                    # The data's first byte is read in the next cycle (a_pos 0, word 0).
                    with m.If(with_data & (last_done != 0)):
                        m.next = "ANSWER_DATA"
                    with m.Else():
                        m.next = "ANSWER_CRC"
            with m.State("ANSWER_DATA"):
                # The byte after the one handed over is read while its high nibble goes into the CRC.
                m.d.comb += [lane.eq(a_pos), byte_state.eq(1), answer_byte.eq(rp.data)]
                with m.If(handover & (a_pos == 3)):
                    m.d.comb += word_inc.eq(1)
                    with m.If(word_next == last_done):
                        m.next = "ANSWER_CRC"
            with m.State("ANSWER_CRC"):
                m.d.comb += [
                    byte_state.eq(1),
                    crc_phase.eq(1),
                    enc.i.payload.last.eq(a_pos == 3),
                    answer_byte.eq(tx_crc.crc[:8]),
                    listen.eq(~with_data),
                ]
                with m.If(handover & (a_pos == 3)):
                    m.d.comb += word_clear.eq(with_data)  # the receiver's pointer again
                    m.next = "RECEIVE"
        return m
