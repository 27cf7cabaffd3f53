"""Packet ring: a byte memory where a frame becomes readable only once it is committed whole.

Both MAC buffers are store-and-forward: the TX buffer must not start a frame it could underrun, and the
RX buffer can judge a frame only at its end (IEEE Std 802.3-2022 §4.2.4.1.2: the FCS is checked after
the last octet). This ring gives them one mechanism: the writer appends octets to the frame in
progress and then either commits it (it becomes visible to the reader, all at once) or discards it (the
write pointer goes back to the last commit, nothing of the frame is ever read).

Members (one clock domain):

* Write side, all In except ``w_room``:

  * ``w_data``, ``w_last``, ``w_en``: append an octet (with its end-of-frame flag) when ``w_room``.
  * ``w_mark_last``: set the end-of-frame flag of the octet appended last (a rewrite of it; for a
    frame whose end arrives without an octet). Not in the same cycle as ``w_en``.
  * ``w_commit``: everything appended so far, including this cycle's octet, becomes readable.
  * ``w_discard``: everything appended since the last commit, including this cycle's octet, is dropped.
    Not in the same cycle as ``w_commit``.
  * ``w_room``: Out, an octet can be appended this cycle. A register, set when at least two slots were
    free in the cycle before, so a frame of ``depth - 1`` octets always fits an empty ring (one of
    ``depth`` fits only if its last two octets come in consecutive cycles: don't count on it).

* ``r``: Out(stream of :class:`~mrcnic.hdl.eth.frame.ByteLayout`): committed octets in order, with
  their end-of-frame flags. ``valid`` and the payload are registers at the end of a three-stage read
  pipeline (so the RAMs' output delay never reaches the logic behind); an octet committed in one cycle
  can be taken four cycles later.

Structure: ``lib.memory`` banks of 2048 9-bit words (one ECP5 block RAM each), ``depth`` words in all
(a power of two, or any number of whole banks: a ring for one 4242-octet frame takes three block RAMs,
not the four of 8 KiB), with three pointers, each an address and a lap bit (the pointers of a
power-of-two ring are plain binary counters one bit wider than the address; the others wrap at
``depth``): write (``wptr``), commit (``cptr``) and read (``rptr``).
Octets ``[rptr, cptr)`` are readable and ``[cptr, wptr)`` are the frame in progress; ``w_room`` falls once
``wptr - rptr`` has reached ``depth - 1`` (an octet fetched from the RAM is held in the read pipeline, so its
slot is free). The reader fetches whenever its pipeline moves, so once an octet is committed the reader
streams one octet per cycle without a gap until it runs out of committed octets: a committed frame always
comes out back to back.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..tables import UNDEFINED_COLLISIONS
from .frame import ByteLayout

__all__ = ["BANK_DEPTH", "PacketRing", "ring_depth_ok"]

BANK_DEPTH = 2048  # x 9 bits: one ECP5 block RAM (DP16KD)


def ring_depth_ok(depth: int, bank_depth: int = BANK_DEPTH) -> bool:
    """A depth :class:`PacketRing` takes: a power of two, or whole banks."""
    return depth >= 2 and (depth & (depth - 1) == 0 or depth % bank_depth == 0)


class PacketRing(wiring.Component):
    """Parameters: ``depth`` (octets: a power of two, or a multiple of ``bank_depth``), ``bank_depth``
    (octets per memory bank, a power of two; one block RAM's worth by default), ``poison_collisions``
    (tests only: a read of the word being written in the same cycle returns it inverted, one of the
    results the block RAM may give, since read-during-write is left undefined; a ring whose used reads
    never collide passes its tests unchanged)."""

    def __init__(self, depth: int, *, bank_depth: int = BANK_DEPTH, poison_collisions: bool = False):
        self.poison_collisions = poison_collisions
        self.bank_bits = exact_log2(bank_depth)
        if not ring_depth_ok(depth, bank_depth):
            self._MustUse__silence = True  # no "created but never used" warning for a rejected instance
            raise ValueError(f"depth must be a power of two or a multiple of {bank_depth}, not {depth}")
        self.addr_bits = (depth - 1).bit_length()
        self.depth = depth
        super().__init__(
            {
                "w_data": In(8),
                "w_last": In(1),
                "w_en": In(1),
                "w_mark_last": In(1),
                "w_commit": In(1),
                "w_discard": In(1),
                "w_room": Out(1),
                "r": Out(stream.Signature(ByteLayout())),
            }
        )

    def elaborate(self, platform):
        m = Module()
        bits, depth = self.addr_bits, self.depth
        bank_bits = min(bits, self.bank_bits)
        banks = -(-depth >> bank_bits)
        binary = depth == 1 << bits  # pointers wrap by themselves

        def advance(pointer):
            """The pointer one octet on (over the end of the ring: address 0 of the next lap)."""
            if binary:
                return (pointer + 1)[: bits + 1]
            last = pointer[:bits] == depth - 1
            return Mux(last, Cat(Const(0, bits), ~pointer[bits]), (pointer + 1)[: bits + 1])

        def back(pointer):
            """The pointer one octet back."""
            if binary:
                return (pointer - 1)[: bits + 1]
            first = pointer[:bits] == 0
            return Mux(first, Cat(Const(depth - 1, bits), ~pointer[bits]), (pointer - 1)[: bits + 1])

        def distance(ahead, behind):
            """Octets from ``behind`` to ``ahead``."""
            if binary:
                return (ahead - behind)[: bits + 1]
            apart = ahead[:bits] - behind[:bits]  # negative when ``ahead`` is a lap on
            return Mux(ahead[bits] == behind[bits], apart, apart + depth)[: bits + 1]

        # One lib.memory per block RAM's worth, so each RAM's output can be registered before the bank
        # multiplexer (a deep memory would put that multiplexer right after the RAMs' slow outputs).
        # Read-during-write is left undefined: a fetch whose octet is used reads a committed octet, in
        # [rptr, cptr), and the writer writes at wptr, or at wptr - 1 when it marks the end of a frame in
        # progress, both in [cptr, wptr]; the level keeps wptr less than a lap ahead of rptr. Kept, Yosys
        # would copy each written word and put a multiplexer between the RAM and its flip-flop (a LUT and
        # 2 ns of wire after the block RAM's 5.8 ns clock-to-output: the Colorlight's transmit ring).
        writes, reads = [], []
        for k in range(banks):
            m.submodules[f"bank{k}"] = bank = memory.Memory(
                shape=ByteLayout(), depth=1 << bank_bits, init=[], attrs=UNDEFINED_COLLISIONS
            )
            writes.append(bank.write_port())
            reads.append(bank.read_port(domain="sync"))

        wptr = Signal(bits + 1)
        cptr = Signal(bits + 1)
        rptr = Signal(bits + 1)
        previous = Signal(8)  # the octet appended last, for w_mark_last

        # A register, so the writer's ready logic does not start at the pointers' adders: computed one
        # cycle early, it needs two free slots, as one octet may be appended meanwhile (so depth - 1
        # octets always fit, and depth when the last two come back to back).
        level = Signal(bits + 1)
        m.d.comb += level.eq(distance(wptr, rptr))
        m.d.sync += self.w_room.eq(level < self.depth - 1)

        append = Signal()
        address = Signal(bits)
        # Increments computed from the registers alone, selected late by the writer's controls.
        wptr_inc = Signal(bits + 1)
        wptr_dec = Signal(bits + 1)
        m.d.comb += [
            append.eq(self.w_en & self.w_room),
            wptr_inc.eq(advance(wptr)),
            wptr_dec.eq(back(wptr)),
            address.eq(Mux(self.w_mark_last, wptr_dec, wptr)),
        ]
        for k, wr in enumerate(writes):
            m.d.comb += [
                wr.en.eq((append | self.w_mark_last) & (address[bank_bits:] == k)),
                wr.addr.eq(address[:bank_bits]),
                wr.data.data.eq(Mux(self.w_mark_last, previous, self.w_data)),
                wr.data.last.eq(self.w_mark_last | self.w_last),
            ]
        with m.If(append):
            m.d.sync += previous.eq(self.w_data)
        with m.If(self.w_discard):
            m.d.sync += wptr.eq(cptr)
        with m.Elif(append):
            m.d.sync += wptr.eq(wptr_inc)
        with m.If(self.w_commit):
            m.d.sync += cptr.eq(Mux(append, wptr_inc, wptr))

        # Read side: a three-stage pipeline that shifts as a whole whenever the output register is free
        # or being taken: (1) the RAMs' read registers, (2) a flip-flop behind each RAM (the RAM's
        # clock-to-output is about 6 ns on ECP5), (3) the bank multiplexer into the output register.
        shift = Signal()
        fetched = Signal()  # stage 1 holds a committed octet
        banked = Signal()  # stage 2 holds one
        bank1 = Signal(range(banks))
        bank2 = Signal(range(banks))
        held = [Signal(ByteLayout(), name=f"held{k}") for k in range(banks)]
        m.d.comb += shift.eq(~self.r.valid | self.r.ready)
        for rd in reads:
            m.d.comb += [rd.en.eq(shift), rd.addr.eq(rptr[:bank_bits])]
        with m.If(shift):
            available = rptr != cptr
            m.d.sync += [fetched.eq(available), bank1.eq(rptr[bank_bits:bits])]
            with m.If(available):
                m.d.sync += rptr.eq(advance(rptr))
            m.d.sync += [banked.eq(fetched), bank2.eq(bank1)]
            for k, (h, rd) in enumerate(zip(held, reads, strict=True)):
                if self.poison_collisions:
                    collided = Signal(name=f"collided{k}")  # the word in rd.data was read while written
                    m.d.sync += collided.eq(writes[k].en & (writes[k].addr == rd.addr))
                    m.d.sync += h.eq(rd.data.as_value() ^ collided.replicate(len(h.as_value())))
                else:
                    m.d.sync += h.eq(rd.data)
            m.d.sync += self.r.valid.eq(banked)
            if banks == 1:
                m.d.sync += self.r.payload.eq(held[0])
            else:
                with m.Switch(bank2):
                    for k in range(banks):
                        with m.Case(k):
                            m.d.sync += self.r.payload.eq(held[k])

        return m
