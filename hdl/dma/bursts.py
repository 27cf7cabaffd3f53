"""Burst cursor: splits a DMA command's words into AXI4 INCR bursts, shared by the reader and the writer.

Ref: ARM IHI 0022 §A3.4.1 (an INCR burst has at most 256 beats and never crosses a 4 KiB boundary).

The next word to request is kept as (4 KiB page, word offset in the page) plus the words left to the page
end. A burst that does not end its command is always ``limit`` long (to the page end, or 256 beats), so
everything advanced after it depends on registers only, never on the burst-length comparison; ``final``
(the next burst ends the command) is registered one burst ahead, so no comparison sits in front of the
address register, and the page increment needs no carry chain behind that comparison either.
"""

from amaranth import Cat, Const, Mux, Signal

__all__ = ["AXI_BOUNDARY", "AXI_MAX_BURST", "BurstCursor", "check_dma_params"]

AXI_MAX_BURST = 256  # beats (§A3.4.1)
AXI_BOUNDARY = 4096  # bytes; a burst must not cross it (§A3.4.1)


def check_dma_params(max_length: int, max_outstanding: int) -> None:
    """The limits the DMA reader and writer share: a 16-bit length field, at least two bursts in flight."""
    if not 1 <= max_length < 1 << 16:
        raise ValueError(f"max_length must be in 1..65535 (16-bit length field), not {max_length}")
    if max_outstanding < 2:
        raise ValueError(f"max_outstanding must be at least 2, not {max_outstanding}")


class BurstCursor:
    """Registers and logic of the burst splitter, added to module ``m``.

    * ``address``: byte address of the next burst (word aligned); ``burst``: its length in beats.
    * ``final``: the next burst is the command's last.
    * :meth:`load` (statements for ``m.d.sync`` when a command enters) and :meth:`advance` (statements
      for ``m.d.sync`` when a burst is issued; only meaningful after a non-final burst: a final one is
      followed by a :meth:`load` or by nothing).
    """

    def __init__(self, m, *, addr_width: int, data_width: int, max_length: int):
        self.lane_bits = lane_bits = data_width.bit_length() - 1
        self.data_width = data_width
        word_bits = addr_width - lane_bits
        self.beats_per_boundary = beats_per_boundary = AXI_BOUNDARY // data_width
        self.boundary_bits = boundary_bits = beats_per_boundary.bit_length() - 1
        self.max_burst = max_burst = min(AXI_MAX_BURST, beats_per_boundary)
        max_beats = (data_width - 1 + max_length + data_width - 1) // data_width

        self.page = Signal(word_bits - boundary_bits, name="burst_page")
        self.offset = Signal(boundary_bits, name="burst_offset")
        self.to_boundary = Signal(range(1, beats_per_boundary + 1), name="burst_to_boundary")
        self.beats = Signal(range(max_beats + 1), name="burst_beats_left")
        self.final = Signal(name="burst_final")
        self.reaches_boundary = Signal(name="burst_reaches_boundary")  # a `limit`-long burst ends the page
        self.limit = Signal(range(max_burst + 1), name="burst_limit")  # longest burst allowed from here
        self.burst = Signal(range(max_burst + 1), name="burst_length")
        m.d.comb += [
            self.reaches_boundary.eq(self.to_boundary <= max_burst),
            self.limit.eq(Mux(self.reaches_boundary, self.to_boundary, max_burst)),
            self.burst.eq(Mux(self.final, self.beats, self.limit)),
        ]
        self.address = Cat(Const(0, lane_bits), self.offset, self.page)

    def _limit_of(self, to_boundary):
        return Mux(to_boundary <= self.max_burst, to_boundary, self.max_burst)

    def load(self, addr, span):
        """A command whose first byte is at ``addr`` and that covers ``span`` bytes from the lane 0 of
        its first word (``addr % W + length``)."""
        offset = addr[self.lane_bits :][: self.boundary_bits]
        to_boundary = self.beats_per_boundary - offset
        beats = (span + self.data_width - 1) >> self.lane_bits
        return [
            self.offset.eq(offset),
            self.page.eq(addr[self.lane_bits :][self.boundary_bits :]),
            self.to_boundary.eq(to_boundary),
            self.beats.eq(beats),
            self.final.eq(beats <= self._limit_of(to_boundary)),
        ]

    def advance(self):
        to_boundary_after = Mux(
            self.reaches_boundary, self.beats_per_boundary, self.to_boundary - self.max_burst
        )
        beats_after = self.beats - self.limit
        return [
            self.offset.eq(self.offset + self.limit),  # wraps to 0 at the page end
            self.page.eq(Mux(self.reaches_boundary, self.page + 1, self.page)),
            self.to_boundary.eq(to_boundary_after),
            self.beats.eq(beats_after),
            # any width: a page may hold fewer than 256 beats (W > 16) or more than two bursts (W < 8)
            self.final.eq(beats_after <= self._limit_of(to_boundary_after)),
        ]
