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
  * ``w_room``: Out, an octet can be appended this cycle (the ring is not full). Depends on registers
    only.

* ``r``: Out(stream of :class:`~mrcnic.hdl.eth.frame.ByteLayout`): committed octets in order, with
  their end-of-frame flags. ``valid`` and the payload are registers.

Structure: a ``lib.memory`` of ``depth`` 9-bit words (one block RAM per 2048 octets on ECP5), with
three pointers one bit wider than the address: write (``wptr``), commit (``cptr``) and read (``rptr``).
Octets ``[rptr, cptr)`` are readable and ``[cptr, wptr)`` are the frame in progress; the ring is full
when ``wptr - rptr == depth``. The reader fetches through the synchronous read port whenever its output
register is empty or being taken, so once an octet is committed the reader streams one octet per cycle
without a gap until it runs out of committed octets: a committed frame always comes out back to back.
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from .frame import ByteLayout

__all__ = ["PacketRing"]


class PacketRing(wiring.Component):
    """Parameter: ``depth`` (octets, a power of two)."""

    def __init__(self, depth: int):
        self.addr_bits = exact_log2(depth)
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
        bits = self.addr_bits

        m.submodules.memory = mem = memory.Memory(shape=ByteLayout(), depth=self.depth, init=[])
        wr = mem.write_port()
        rd = mem.read_port(domain="sync")

        wptr = Signal(bits + 1)
        cptr = Signal(bits + 1)
        rptr = Signal(bits + 1)
        previous = Signal(8)  # the octet appended last, for w_mark_last

        # Full: same address, different lap.
        m.d.comb += self.w_room.eq(Cat(wptr[:bits] != rptr[:bits], wptr[bits] == rptr[bits]).any())

        append = Signal()
        m.d.comb += append.eq(self.w_en & self.w_room)
        m.d.comb += [
            wr.en.eq(append | self.w_mark_last),
            wr.addr.eq(Mux(self.w_mark_last, wptr - 1, wptr)),
            wr.data.data.eq(Mux(self.w_mark_last, previous, self.w_data)),
            wr.data.last.eq(self.w_mark_last | self.w_last),
        ]
        with m.If(append):
            m.d.sync += previous.eq(self.w_data)
        with m.If(self.w_discard):
            m.d.sync += wptr.eq(cptr)
        with m.Else():
            m.d.sync += wptr.eq(wptr + append)
        with m.If(self.w_commit):
            m.d.sync += cptr.eq(wptr + append)

        # Read side: the read port's output register is the stream's payload register.
        fetch = Signal()
        m.d.comb += [
            fetch.eq(~self.r.valid | self.r.ready),
            rd.en.eq(fetch),
            rd.addr.eq(rptr),
            self.r.payload.eq(rd.data),
        ]
        with m.If(fetch):
            available = rptr != cptr
            m.d.sync += [self.r.valid.eq(available), rptr.eq(rptr + available)]

        return m
