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
registers, its data words in a buffer (``max_words`` + 1 words: the CRC lands there too), the CRC-32 of
every byte. At the delimiter:

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
"""

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import crc, data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mrcnic.driver.uart_protocol import MIN_REQUEST, REPEATED, Status

from .axil import AxiLiteSignature
from .uart import DIVISOR_BITS, UartRx, UartTx, rx_byte_layout

__all__ = ["COUNTERS", "CobsDecoder", "CobsEncoder", "UartBridge"]

COUNTERS = ("frames_ok", "bad_crc", "bad_frame", "framing_errors", "bus_errors", "timeouts", "repeated")


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
        remaining = Signal(8)  # data bytes left in the current block; 0: the next byte is a code byte
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
                        self.o.payload.error.eq(error | (remaining != 0)),
                    ]
                m.d.sync += [remaining.eq(0), zero_pending.eq(0), started.eq(0), error.eq(0)]
            with m.Elif(remaining == 0):
                m.d.sync += [started.eq(1), remaining.eq(byte - 1), zero_pending.eq(byte != 0xFF)]
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

    Bytes are collected in a FIFO until a zero or the 254th non-zero byte closes the block; then the code
    byte and the block go out while ``i`` waits. The final block always follows the last byte (code 0x01
    if it is empty, as :func:`~mrcnic.driver.uart_protocol.cobs_encode` does).
    """

    i: In(stream.Signature(frame_byte_layout()))
    o: Out(stream.Signature(8))

    def elaborate(self, platform):
        m = Module()
        m.submodules.block = block = fifo.SyncFIFOBuffered(width=8, depth=256)
        count = Signal(8)  # non-zero bytes collected in the current block
        code = Signal(8)
        drain = Signal(8)  # bytes of the closed block still to send
        final = Signal()  # the block being sent is the frame's last: the delimiter follows
        more = Signal()  # the last byte closed a block: an empty final block follows

        byte, last = self.i.payload.data, self.i.payload.last
        zero = byte == 0
        collected = Signal(9)
        m.d.comb += collected.eq(count + ~zero)
        with m.FSM():
            with m.State("FILL"):
                m.d.comb += self.i.ready.eq(1)
                with m.If(self.i.valid):
                    m.d.comb += [block.w_data.eq(byte), block.w_en.eq(~zero)]
                    with m.If(zero | (collected == 254)):
                        m.d.sync += [
                            code.eq(Mux(zero, count + 1, 0xFF)),
                            drain.eq(collected),
                            count.eq(0),
                            final.eq(0),
                            more.eq(last),
                        ]
                        m.next = "CODE"
                    with m.Elif(last):
                        m.d.sync += [code.eq(collected + 1), drain.eq(collected), count.eq(0), final.eq(1)]
                        m.next = "CODE"
                    with m.Else():
                        m.d.sync += count.eq(collected)
            with m.State("CODE"):
                m.d.comb += [self.o.valid.eq(1), self.o.payload.eq(code)]
                with m.If(self.o.ready):
                    m.next = "BLOCK"
            with m.State("BLOCK"):
                with m.If(drain == 0):
                    with m.If(final):
                        m.next = "DELIMITER"
                    with m.Elif(more):
                        m.d.sync += [code.eq(1), final.eq(1), more.eq(0)]
                        m.next = "CODE"
                    with m.Else():
                        m.next = "FILL"
                with m.Else():
                    m.d.comb += [
                        self.o.valid.eq(block.r_rdy),
                        self.o.payload.eq(block.r_data),
                        block.r_en.eq(self.o.ready),
                    ]
                    with m.If(self.o.ready & block.r_rdy):
                        m.d.sync += drain.eq(drain - 1)
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
        with m.If(urx.data.valid & urx.data.payload.framing_error):
            m.d.sync += self.stat_framing_errors.eq(self.stat_framing_errors + 1)

        depth = self.max_words + 1
        m.submodules.buffer = buffer = Memory(shape=32, depth=depth, init=[])
        wp = buffer.write_port()
        rp = buffer.read_port()
        m.submodules.rx_crc = rx_crc = crc.catalog.CRC32_ISO_HDLC(data_width=8).create()
        m.submodules.tx_crc = tx_crc = crc.catalog.CRC32_ISO_HDLC(data_width=8).create()

        # -- the request being received
        pos = Signal(range(1024))  # bytes so far (saturates: an overlong frame fails the length check)
        seq = Signal(16)
        cmd = Signal(8)
        count = Signal(8)
        address = Signal(32)
        last4 = Signal(32)  # the last four bytes: the CRC field at the end
        partial = Signal(24)  # the word being assembled
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
        last_done = Signal(8)
        status = Signal(8)
        done = Signal(8)
        with_data = Signal()

        bad_frame_inc = [Signal(name="bad_frame_busy"), Signal(name="bad_frame_rx")]
        m.d.sync += self.stat_bad_frame.eq(self.stat_bad_frame + bad_frame_inc[0] + bad_frame_inc[1])

        item = dec.o.payload
        byte = item.data
        with m.If(dec.o.valid & ~receiving):
            # Busy: the frame in progress has lost a byte; a frame that ends now is lost whole.
            with m.If(item.end):
                m.d.sync += discard.eq(0)
                m.d.comb += bad_frame_inc[0].eq(1)
            with m.Else():
                m.d.sync += discard.eq(1)
        with m.If(dec.o.valid & receiving & ~item.end):
            with m.If(pos != 1023):
                m.d.sync += pos.eq(pos + 1)
            m.d.comb += [rx_crc.valid.eq(1), rx_crc.data.eq(byte), rx_crc.start.eq(pos == 0)]
            m.d.sync += [last4.eq(Cat(last4[8:], byte)), partial.eq(Cat(partial[8:], byte))]
            with m.Switch(pos):
                for k, field in enumerate((seq[:8], seq[8:], cmd, count)):
                    with m.Case(k):
                        m.d.sync += field.eq(byte)
                for k in range(4):
                    with m.Case(4 + k):
                        m.d.sync += address[8 * k : 8 * k + 8].eq(byte)
            slot = (pos >> 2) - 2
            with m.If((pos >= 8) & (pos[:2] == 3) & (slot < depth)):
                m.d.comb += [wp.addr.eq(slot), wp.data.eq(Cat(partial, byte)), wp.en.eq(1)]
        with m.If(dec.o.valid & receiving & item.end):
            m.d.sync += discard.eq(0)
            with m.If(item.error | discard | (pos < MIN_REQUEST)):
                m.d.comb += bad_frame_inc[1].eq(1)
                m.d.sync += pos.eq(0)
            with m.Else():
                m.d.sync += frame_pending.eq(1)

        write = cmd[0]
        space = cmd[1]
        index = Signal(8)  # word being accessed
        word_address = Signal(32)
        m.d.comb += word_address.eq(address + (index << 2))
        timer = Signal(range(self.timeout + 1))
        aw_done = Signal()
        w_done = Signal()
        buses = (self.registers, self.memory)
        sel = {
            name: Mux(space, getattr(self.memory, name), getattr(self.registers, name))
            for name in ("arready", "rvalid", "rdata", "rresp", "awready", "wready", "bvalid", "bresp")
        }
        arvalid, awvalid, wvalid = Signal(), Signal(), Signal()
        for i, bus in enumerate(buses):
            mine = space == i
            m.d.comb += [
                bus.araddr.eq(word_address),
                bus.awaddr.eq(word_address),
                bus.arprot.eq(0),
                bus.awprot.eq(0),
                bus.wdata.eq(rp.data),
                bus.wstrb.eq(0xF),
                bus.arvalid.eq(arvalid & mine),
                bus.awvalid.eq(awvalid & mine),
                bus.wvalid.eq(wvalid & mine),
                # Always ready: a response that comes after its timeout is absorbed.
                bus.rready.eq(1),
                bus.bready.eq(1),
            ]

        a_pos = Signal(2)  # byte within the header, data word or CRC of the answer
        a_word = Signal(8)

        def count_up(counter):
            return counter.eq(counter + 1)

        def finish_word(ok_next_state):
            """After word ``index`` completed: the next word, or the end of the request."""
            m.d.sync += [done.eq(done + 1), index.eq(index + 1), timer.eq(0)]
            with m.If(index + 1 == count):
                m.next = "FINISH"
            with m.Else():
                m.next = ok_next_state

        def bus_error(resp):
            m.d.sync += [
                status.eq(Mux(resp == 2, Status.SLVERR, Status.DECERR)),
                count_up(self.stat_bus_errors),
            ]
            m.next = "FINISH"

        def check_timeout():
            with m.If(timer == self.timeout - 1):
                m.d.sync += [status.eq(Status.TIMEOUT), count_up(self.stat_timeouts)]
                m.next = "FINISH"

        with m.FSM():
            with m.State("RECEIVE"):
                m.d.comb += listen.eq(1)
                with m.If(frame_pending):
                    m.next = "CHECK"

            with m.State("CHECK"):
                expected = Signal(range(1024))
                end_address = Signal(34)
                in_range = Signal()
                m.d.comb += [
                    expected.eq(MIN_REQUEST + Mux(write, count << 2, 0)),
                    end_address.eq(address + (count << 2)),
                    in_range.eq(
                        Mux(
                            space,
                            end_address <= (1 << self.mem_addr_width),
                            end_address <= (1 << self.reg_addr_width),
                        )
                    ),
                ]
                well_formed = (
                    (cmd[2:] == 0)
                    & (count != 0)
                    & (count <= self.max_words)
                    & (pos == expected)
                    & (address[:2] == 0)
                    & in_range
                )
                repeated = write & last_valid & (last_seq == seq) & (last_crc == last4)
                m.d.sync += [pos.eq(0), done.eq(0), index.eq(0), timer.eq(0), with_data.eq(0), a_pos.eq(0)]
                m.d.sync += [frame_pending.eq(0), answer_seq.eq(seq)]
                with m.If(~rx_crc.match_detected):
                    m.d.sync += [status.eq(Status.BAD_CRC), count_up(self.stat_bad_crc)]
                    m.next = "ANSWER_HEADER"
                with m.Elif(~well_formed):
                    m.d.sync += status.eq(Status.BAD_REQUEST)
                    m.d.comb += bad_frame_inc[1].eq(1)
                    m.next = "ANSWER_HEADER"
                with m.Elif(repeated):
                    m.d.sync += [
                        status.eq(last_status | REPEATED),
                        done.eq(last_done),
                        count_up(self.stat_frames_ok),
                        count_up(self.stat_repeated),
                    ]
                    m.next = "ANSWER_HEADER"
                with m.Else():
                    m.d.sync += [status.eq(Status.OK), with_data.eq(~write), count_up(self.stat_frames_ok)]
                    m.next = "ACCESS"

            with m.State("ACCESS"):
                m.d.sync += [aw_done.eq(0), w_done.eq(0), timer.eq(0)]
                with m.If(write):
                    m.next = "WRITE_FETCH"
                with m.Else():
                    m.next = "READ_ADDRESS"

            with m.State("READ_ADDRESS"):
                m.d.comb += arvalid.eq(1)
                m.d.sync += timer.eq(timer + 1)
                with m.If(sel["arready"]):
                    m.next = "READ_DATA"
                with m.Else():
                    check_timeout()

            with m.State("READ_DATA"):
                m.d.sync += timer.eq(timer + 1)
                with m.If(sel["rvalid"]):
                    m.d.comb += [wp.addr.eq(index), wp.data.eq(sel["rdata"]), wp.en.eq(1)]
                    with m.If(sel["rresp"][1]):
                        bus_error(sel["rresp"])
                    with m.Else():
                        finish_word("READ_ADDRESS")
                with m.Else():
                    check_timeout()

            with m.State("WRITE_FETCH"):
                # The buffer's read port is synchronous: the word is on rp.data from the next cycle.
                m.d.sync += [aw_done.eq(0), w_done.eq(0)]
                m.next = "WRITE"

            with m.State("WRITE"):
                m.d.comb += [awvalid.eq(~aw_done), wvalid.eq(~w_done)]
                m.d.sync += timer.eq(timer + 1)
                aw_now = aw_done | sel["awready"]
                w_now = w_done | sel["wready"]
                m.d.sync += [aw_done.eq(aw_now), w_done.eq(w_now)]
                with m.If(aw_now & w_now):
                    m.next = "WRITE_RESPONSE"
                with m.Else():
                    check_timeout()

            with m.State("WRITE_RESPONSE"):
                m.d.sync += timer.eq(timer + 1)
                with m.If(sel["bvalid"]):
                    with m.If(sel["bresp"][1]):
                        bus_error(sel["bresp"])
                    with m.Else():
                        finish_word("WRITE_FETCH")
                with m.Else():
                    check_timeout()

            with m.State("FINISH"):
                m.d.sync += [
                    last_valid.eq(write),
                    last_seq.eq(seq),
                    last_crc.eq(last4),
                    last_status.eq(status),
                    last_done.eq(done),
                    a_pos.eq(0),
                ]
                m.next = "ANSWER_HEADER"

            # -- the answer: header, data (reads), CRC; into the encoder
            answer_byte = Signal(8)
            crc_phase = Signal()
            m.d.comb += [
                enc.i.payload.data.eq(answer_byte),
                tx_crc.data.eq(answer_byte),
                tx_crc.valid.eq(enc.i.valid & enc.i.ready & ~crc_phase),
            ]
            with m.State("ANSWER_HEADER"):
                m.d.comb += [
                    enc.i.valid.eq(1),
                    tx_crc.start.eq(a_pos == 0),
                    answer_byte.eq(Cat(answer_seq, status, done).word_select(a_pos, 8)),
                    listen.eq(~with_data),
                ]
                with m.If(enc.i.ready):
                    m.d.sync += a_pos.eq(a_pos + 1)
                    with m.If(a_pos == 3):
                        m.d.sync += a_word.eq(0)
                        with m.If(with_data & (done != 0)):
                            m.next = "ANSWER_FETCH"
                        with m.Else():
                            m.next = "ANSWER_CRC"
            with m.State("ANSWER_FETCH"):
                m.next = "ANSWER_DATA"
            with m.State("ANSWER_DATA"):
                m.d.comb += [enc.i.valid.eq(1), answer_byte.eq(rp.data.word_select(a_pos, 8))]
                with m.If(enc.i.ready):
                    m.d.sync += a_pos.eq(a_pos + 1)
                    with m.If(a_pos == 3):
                        m.d.sync += a_word.eq(a_word + 1)
                        with m.If(a_word + 1 == done):
                            m.next = "ANSWER_CRC"
                        with m.Else():
                            m.next = "ANSWER_FETCH"
            with m.State("ANSWER_CRC"):
                # The CRC register holds the value over every byte sent: nothing feeds it now.
                m.d.comb += [
                    enc.i.valid.eq(1),
                    enc.i.payload.last.eq(a_pos == 3),
                    answer_byte.eq(tx_crc.crc.word_select(a_pos, 8)),
                    crc_phase.eq(1),
                    listen.eq(~with_data),
                ]
                with m.If(enc.i.ready):
                    m.d.sync += a_pos.eq(a_pos + 1)
                    with m.If(a_pos == 3):
                        m.next = "RECEIVE"

        m.d.comb += rp.addr.eq(Mux(with_data, a_word, index))
        return m
