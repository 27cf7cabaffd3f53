"""A stream queue between two clock domains, built for timing: every signal it gives either side comes
from a flip-flop, and its RAM's read address is a flip-flop too.

Why not ``amaranth.lib.fifo.AsyncFIFOBuffered``: its write side's ready is a Gray-code comparison, and
its RAM's read address is the next read pointer, an adder after the empty flag. On the Colorlight
5A-75B, whose block RAMs sit 29 columns from the logic that drives them, that read path was the MAC TX
domain's critical path at 76 MHz against 125 (docs/boards.md, "Colorlight 5A-75B: routed, timing not
met"). Here both flags and the address are registers, at the price of a few cycles of latency.

Pointers cross the domains in Gray code (Clifford E. Cummings, "Simulation and Synthesis Techniques for
Asynchronous FIFO Design", SNUG 2002, style #2), one bit more than the RAM's address so that full and
empty differ. Each side's Gray register moves in the same cycle as its pointer: with the RAM write
(the read side sees it two cycles later, when the word is long in the RAM) and with the RAM read (whose
address register has already taken the word's address).

::

    w domain                                     │ r domain
    i ─► RAM write (addr = produce) ─────────────┼─► RAM read (addr = consume, every cycle)
    produce ─► Gray register ────────────────────┼─► 2 FFs ─► Gray compare ─► register ─► fetch?
    i.ready ◄ register ◄ level ◄ binary ◄ 2 FFs ◄┼── Gray register ◄ consume
                                                 │   RAM data [─► register] ─► main / skid ─► o

Read side: a word is fetched (the read address moves on) when one is in the RAM and the output stage
will have room for it when it arrives a cycle later. The fetch decision is one LUT level behind the
reader's ready and registers: "a word is in the RAM" is a register, kept a cycle ahead from both
possible next read pointers (themselves registers: the pointer's increment is computed before it is
needed), and the room is a test of the output stage's flags without an adder. The output stage holds
two words (the one offered on ``o`` and a skid), so a reader that is always ready gets a word every
cycle.

Capacity: ``depth`` words in the RAM and two in the output stage.

Reset: the write domain's reset empties the queue (as ``AsyncFIFO``'s). It reaches the read side
through an ``AsyncFFSynchronizer``, which discards the output stage and sets the read pointer to 0, as
the reset sets the write pointer; the write side takes no word until the read side's reset has ended
(a second synchronizer brings that back), so none written after the reset is lost. The read side's
state has no reset of its own: a reset of the read domain alone keeps the words queued.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, ResetSignal, Signal
from amaranth.lib import memory, stream, wiring
from amaranth.lib.cdc import AsyncFFSynchronizer, FFSynchronizer
from amaranth.lib.wiring import In, Out

__all__ = ["ClockCrossingFifo"]


def _gray_encode(value):
    return value ^ value[1:]


def _gray_decode(gray):
    bits = [gray[-1]]
    for k in reversed(range(len(gray) - 1)):
        bits.insert(0, bits[0] ^ gray[k])
    return Cat(*bits)


class ClockCrossingFifo(wiring.Component):
    """Stream ``i`` in domain ``w_domain``, stream ``o`` in ``r_domain``, in order and whole.

    Parameters: ``shape`` (the payload), ``depth`` (words in the RAM: a power of two, at least 2),
    ``w_domain`` / ``r_domain`` (clock domain names), ``ram_register`` (a flip-flop stage between the
    RAM's output and the output stage, for a fast read clock: an ECP5 block RAM's clock-to-output is
    about 6 ns, and the RAM may sit far from the reader; the read side then moves at most two words
    every three cycles, as the output stage's two places are shared by one more word in flight).

    Latency from a word taken on ``i`` to the same word on ``o``: the write pointer's register and two
    synchronizer stages (read clocks after the write clock), the "word in the RAM" register, then the
    fetch, the RAM (and its register) and the output register: one write cycle and five read cycles
    (six).

    Throughput: a word every cycle of the slower clock if ``depth`` covers the pointers' round trip
    (about nine cycles with equal clocks), less with ``ram_register``.
    """

    def __init__(self, shape, depth: int, *, w_domain: str, r_domain: str, ram_register: bool = False):
        if depth < 2 or depth & (depth - 1):
            raise ValueError(f"depth must be a power of two of at least 2, not {depth}")
        self.shape, self.depth, self.ram_register = shape, depth, ram_register
        self.w_domain, self.r_domain = w_domain, r_domain
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        w, r = self.w_domain, self.r_domain
        bits = self.depth.bit_length()  # a pointer: the RAM address and one bit more
        m.submodules.storage = storage = memory.Memory(shape=self.shape, depth=self.depth, init=[])
        w_port = storage.write_port(domain=w)
        r_port = storage.read_port(domain=r)

        # -- write side -------------------------------------------------------------------------------
        produce = Signal(bits)
        produce_gray = Signal(bits)  # moves with ``produce``: the read side sees it two cycles later
        consume_w = Signal(bits)  # the read pointer, decoded in a register
        ready = Signal()
        # On from the write domain's reset until the read side has finished its own (below) and two
        # cycles more: no word is written while the read side might still discard it.
        read_side_resetting = Signal()
        write = Signal()
        level = Signal(bits)
        m.d.comb += [
            self.i.ready.eq(ready),
            write.eq(self.i.valid & ready),
            w_port.addr.eq(produce[:-1]),
            w_port.data.eq(self.i.payload),
            w_port.en.eq(write),
            level.eq(produce - consume_w),
        ]
        consume_gray_w = Signal(bits)
        m.d[w] += [
            produce.eq(produce + write),
            produce_gray.eq(_gray_encode((produce + write)[:bits])),
            consume_w.eq(_gray_decode(consume_gray_w)),
            # Room next cycle, from registers and ``write`` only: ``level`` ignores words read since
            # ``consume_w`` was taken, so it can only be too high (and a stale ``consume_w`` just after
            # a reset, which the pointers' one extra bit keeps from ever reading as room that is not).
            ready.eq(~read_side_resetting & Mux(write, level < self.depth - 1, level < self.depth)),
        ]

        # -- read side: no reset of its own (see the module's docstring) ------------------------------
        consume = Signal(bits, reset_less=True)
        consume_gray = Signal(bits, reset_less=True)  # moves with ``consume``, after the RAM read
        produce_gray_r = Signal(bits)
        m.submodules.produce_cdc = FFSynchronizer(produce_gray, produce_gray_r, o_domain=r)
        m.submodules.consume_cdc = FFSynchronizer(consume_gray, consume_gray_w, o_domain=w)

        in_ram = Signal(reset_less=True)  # the RAM's output this cycle is a fetched word
        # Where fetched words come from into the output stage: the RAM, or the register behind it.
        if self.ram_register:
            arriving = Signal(reset_less=True)
            arriving_word = Signal(self.shape, reset_less=True)
            m.d[r] += arriving_word.eq(r_port.data)
        else:
            arriving, arriving_word = in_ram, r_port.data
        main_valid = Signal(reset_less=True)
        skid_valid = Signal(reset_less=True)
        skid = Signal(self.shape, reset_less=True)
        main = Signal(self.shape, reset_less=True)
        take = Signal()
        fetch = Signal()
        # The fetch decision meets only the reader's ready: everything else it needs is a register or one
        # LUT behind registers (no pointer comparison or adder after ``o.ready``).
        # ``unfetched``: the RAM holds a word not yet fetched. Kept a cycle ahead from the synchronised
        # write pointer and both next read pointers, so it may lag a new word by a cycle, never lead.
        unfetched = Signal(reset_less=True)
        consume_next = Signal(bits, reset_less=True)  # consume + 1, and its Gray code
        consume_gray_next = Signal(bits, reset_less=True)
        # The words the output stage will hold (those in flight, main, skid) must fit its two places, less
        # the one taken now. They never exceed two, so a take always leaves room; without one, at most
        # one may be held. Tested without an adder.
        held = [in_ram, main_valid, skid_valid] + ([arriving] if self.ram_register else [])
        at_most_one = Signal()
        m.d.comb += [
            r_port.addr.eq(consume[:-1]),
            r_port.en.eq(1),
            self.o.valid.eq(main_valid),
            self.o.payload.eq(main),
            take.eq(main_valid & self.o.ready),
            at_most_one.eq(~Cat(*(a & b for k, a in enumerate(held) for b in held[k + 1 :])).any()),
            fetch.eq(unfetched & (take | at_most_one)),
        ]

        # The write domain's reset, on the read side: three stages, so that when it ends the write
        # pointer's synchronizer has held the reset pointer (0) for a whole read cycle, whatever the two
        # clocks; the write side, held back meanwhile, writes nothing that this could discard.
        reset_r = Signal()
        m.submodules.reset_cdc = AsyncFFSynchronizer(
            ResetSignal(w, allow_reset_less=True), reset_r, o_domain=r, stages=3
        )
        m.submodules.reset_ack_cdc = AsyncFFSynchronizer(reset_r, read_side_resetting, o_domain=w)
        with m.If(reset_r):
            m.d[r] += [
                consume.eq(0),
                consume_gray.eq(0),
                consume_next.eq(1),
                consume_gray_next.eq(_gray_encode(Const(1, bits))),
                unfetched.eq(0),
                in_ram.eq(0),
                arriving.eq(0),  # (``in_ram`` itself without ``ram_register``)
                main_valid.eq(0),
                skid_valid.eq(0),
            ]
        with m.Else():
            m.d[r] += [
                in_ram.eq(fetch),
            ]
            with m.If(fetch):
                m.d[r] += [
                    consume.eq(consume_next),
                    consume_gray.eq(consume_gray_next),
                    consume_next.eq(consume_next + 1),
                    consume_gray_next.eq(_gray_encode((consume_next + 1)[:bits])),
                    unfetched.eq(produce_gray_r != consume_gray_next),
                ]
            with m.Else():
                m.d[r] += unfetched.eq(produce_gray_r != consume_gray)
            if self.ram_register:
                m.d[r] += arriving.eq(in_ram)
            # The output stage: a two-word queue whose head is ``main`` (a SkidBuffer's two places, kept
            # here because only the write domain's reset, not the read domain's, may clear them).
            with m.If(~main_valid | take):
                with m.If(skid_valid):
                    m.d[r] += [main.eq(skid), skid_valid.eq(0)]
                    with m.If(arriving):
                        m.d[r] += [skid.eq(arriving_word), skid_valid.eq(1)]
                with m.Else():
                    m.d[r] += [main.eq(arriving_word), main_valid.eq(arriving)]
            with m.Elif(arriving):
                m.d[r] += [skid.eq(arriving_word), skid_valid.eq(1)]
        return m
