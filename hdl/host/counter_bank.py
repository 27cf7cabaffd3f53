"""Counter bank: the NIC's 32-bit event counters kept in block RAM, fed by narrow counters in the blocks.

Ref: docs/registers.md ("Counters").

Every block of the NIC counts its events in a register of its own (``stat_*``: 32 bits in the block's
interface, wrapping). A 32-bit counter costs 32 flip-flops and 16 carry cells wherever it is, and the
register file's read multiplexer had a 32-bit input for each: some 80 counters took about 3 k of the
ECP5's logic cells. The bank samples only the low ``sample_width`` bits of each counter; synthesis then
drops the upper bits and their adders from the blocks (nothing reads them any more), and the totals sit
in one block RAM.

How a total follows its counter. A *visit* of counter ``i`` reads its total ``T`` and writes back
``T + ((s - T) mod 2^n)``, where ``s`` is the counter's current low ``n = sample_width`` bits. So the low
``n`` bits of a total always equal the counter's low bits at the last visit, and the difference mod
``2^n`` is what the counter grew by since then: exact as long as it grows by less than ``2^n`` between two
visits. A scan visits the counters in turn, one a cycle; a host read is a visit too (it takes the scan's
cycle, the scan waits), and its answer is the updated total, so **a read is exact**: it counts every event
up to the cycle of the request (a slow counter's, below, up to the cycle before). With host reads at least
``read_interval`` cycles apart (2 at the most often; the register file's are 4 apart: a counter read holds
its bus until the answer has been taken), the scan moves on in all but one cycle of every
``read_interval``, so a counter is visited again within ``L`` cycles, the fewest with
``L - ceil(L / read_interval) >= count``: ``2 * count`` for reads every other cycle, about
``4 / 3 * count`` for reads every fourth (``revisit_cycles``). ``sample_width`` is sized so that a counter
growing by up to ``max_step`` a cycle stays below ``2^n`` over ``L + 2`` cycles (``sample_width_for``; the
2 cover a visit that reads the total its predecessor is still writing: see stage 2). For the Colorlight's
NIC (92 counters, 2 at most a cycle) that is 8 bits with reads 4 apart, where every other cycle would need
9. Most counters grow by at most one a cycle and need a bit fewer (``slow_width``, 7 there): the first
``fast`` counters are sampled with ``sample_width`` bits, the others with ``slow_width``, and a visit
takes the growth modulo the visited counter's own width. Each bit fewer is a bit less in the samples'
multiplexer and in every block's counter.

Slow counters are counted again in the bank, in a cheaper code. A counter that grows by at most one a
cycle flips its bit 0 at every event, so the bank reads only that bit: the block's counter shrinks in
synthesis to one flip-flop and one LUT. The bank notices each flip (a flip-flop holding the bit's last
value, an XOR) and steps a ``slow_width``-bit *de Bruijn counter*: a shift register whose new bit is an
XOR of taps of a maximal-length LFSR (:data:`LFSR_TAPS`), corrected so that the all-zero state is part
of the cycle (``de_bruijn_step``). It runs through all ``2^n`` states, like a binary counter, but the
next state costs two LUT4s instead of a carry chain or about nine LUT4s: on the Colorlight's NIC (89
slow counters) 540 logic cells fewer after packing (docs/boards.md). The sampled state becomes the
count modulo ``2^n`` through one shared table (``de_bruijn_positions``, a ROM in LUTs), and from there a
visit works as for any counter. Seeing a flip takes a cycle, so a slow counter's total lags its block's
counter by one cycle more than a fast one's.

After a reset the blocks' counters restart at 0 and so must the totals, although block RAM keeps its
contents: the first scan after a reset writes each sample as the total. ``ready`` rises when that scan
is complete; reads must wait for it (the register file holds its bus until then).

Members:

* ``sample``: In(``ArrayLayout(sample_width, count)``): the low bits of every counter (of a slow one, only
  bit 0 is read).
* ``read_addr``: In(range(count)), ``read_en``: In(1): a host read (``read_en`` at least
  ``read_interval`` cycles apart, a parameter: 2 by default). ``read_valid``: Out(1), high two cycles
  after the request, with the total in ``read_data``: Out(total_width), in that cycle only. The total
  counts a fast counter's events up to the cycle of the request, a slow counter's up to the cycle
  before.
* ``ready``: Out(1).
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..mux import select

__all__ = [
    "LFSR_TAPS",
    "CounterBank",
    "de_bruijn_positions",
    "de_bruijn_step",
    "revisit_cycles",
    "sample_width_for",
]

# Taps of a maximal-length Fibonacci LFSR of each width (the exponents of a primitive polynomial: Xilinx
# XAPP052's table); bit t - 1 of the state is tap t.
LFSR_TAPS = {
    3: (3, 2),
    4: (4, 3),
    5: (5, 3),
    6: (6, 5),
    7: (7, 6),
    8: (8, 6, 5, 4),
    9: (9, 5),
    10: (10, 7),
    11: (11, 9),
    12: (12, 6, 4, 1),
    13: (13, 4, 3, 1),
    14: (14, 5, 3, 1),
    15: (15, 14),
    16: (16, 15, 13, 4),
}


def de_bruijn_step(state, width: int):
    """The state after ``state`` (an int, or an Amaranth value of ``width`` bits): shifted up by one, the
    new bit 0 the XOR of the taps, inverted when the bits below the top one are all 0. That inversion
    splices the all-zero state into the LFSR's cycle (between 10...0 and 0...01), so the cycle has all
    ``2**width`` states."""
    taps = LFSR_TAPS[width]
    if isinstance(state, int):
        new = sum(state >> (t - 1) & 1 for t in taps) & 1
        new ^= (state & ((1 << (width - 1)) - 1)) == 0
        return (state << 1 | new) & ((1 << width) - 1)
    new = state[taps[0] - 1]
    for t in taps[1:]:
        new = new ^ state[t - 1]
    new = new ^ (state[: width - 1] == 0)
    return Cat(new, state[: width - 1])


def de_bruijn_positions(width: int) -> list[int]:
    """``positions[state]``: how many steps from 0 (the reset state) reach ``state``."""
    positions = [0] * (1 << width)
    state = 0
    for step in range(1 << width):
        positions[state] = step
        state = de_bruijn_step(state, width)
    return positions


def revisit_cycles(count: int, read_interval: int = 2) -> int:
    """The longest span between two visits of a counter: the fewest cycles ``T`` in which the scan
    makes a whole lap of ``max(count, 2)`` steps although host reads (at least ``read_interval``
    cycles apart, so at most ``ceil(T / read_interval)`` of them) take some of its cycles."""
    period, cycles = max(count, 2), max(count, 2)
    while cycles - -(-cycles // read_interval) < period:
        cycles += 1
    return cycles


def sample_width_for(count: int, max_step: int, read_interval: int = 2) -> int:
    """Bits each counter must keep: its growth over the longest span between two visits and two
    cycles more (see the module docstring) at ``max_step`` a cycle stays below ``2**bits``."""
    return ((revisit_cycles(count, read_interval) + 2) * max_step).bit_length()


class CounterBank(wiring.Component):
    """Parameters: ``count`` counters, of which the first ``fast`` (default: all) grow by up to
    ``max_step`` a cycle and the others by at most 1; ``total_width``; ``read_interval``. A slow
    counter's sample is only its low ``slow_width`` bits (a bit fewer when ``max_step`` is 2 or more:
    the bits above are not read, so synthesis drops them in the blocks too)."""

    def __init__(
        self,
        *,
        count: int,
        max_step: int = 1,
        total_width: int = 32,
        read_interval: int = 2,
        fast: int | None = None,
    ):
        self.count, self.max_step, self.total_width = count, max_step, total_width
        self.read_interval = read_interval
        self.fast = count if fast is None else fast
        valid = count >= 1 and max_step >= 1 and read_interval >= 2 and 0 <= self.fast <= count
        self.sample_width = sample_width_for(count, max_step, read_interval) if valid else 0
        self.slow_width = sample_width_for(count, 1, read_interval) if valid else 0
        if not 0 <= self.fast <= count:
            self._MustUse__silence = True
            raise ValueError(f"{self.fast} fast counters of {count}")
        if valid and self.fast < count and self.slow_width not in LFSR_TAPS:
            self._MustUse__silence = True
            raise ValueError(f"{count} counters need {self.slow_width}-bit slow counters: at most 16")
        if not 1 <= self.sample_width <= total_width:
            self._MustUse__silence = True  # no "created but never used" warning for a rejected instance
            if read_interval < 2:
                raise ValueError(f"host reads must be at least 2 cycles apart, not {read_interval}")
            if count < 1 or max_step < 1:
                raise ValueError("a counter bank needs at least one counter, growing by at least 1")
            raise ValueError(f"{self.sample_width}-bit samples do not fit {total_width}-bit totals")
        self.period = max(count, 2)
        super().__init__(
            {
                "sample": In(data.ArrayLayout(self.sample_width, count)),
                "read_addr": In(range(count)),
                "read_en": In(1),
                "read_valid": Out(1),
                "read_data": Out(total_width),
                "ready": Out(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        n, period = self.sample_width, self.period

        m.submodules.totals = totals = Memory(shape=self.total_width, depth=period, init=[])
        total_read = totals.read_port()
        total_write = totals.write_port()

        # Stage 0: pick the counter to visit next (a host read first). Registered, so the samples'
        # multiplexer below is selected by a flip-flop, not by the bus address decoder.
        index = Signal(range(period))  # the scan's next counter
        first_scan = Signal(init=1)  # the totals are not set up yet: write the samples as they are
        visit = Signal(range(period))
        visit_fresh = Signal(init=1)
        visit_for_host = Signal()
        m.d.sync += [
            visit.eq(Mux(self.read_en, self.read_addr, index)),
            visit_fresh.eq(first_scan & ~self.read_en),
            visit_for_host.eq(self.read_en),
        ]
        with m.If(~self.read_en):
            m.d.sync += index.eq(Mux(index == period - 1, 0, index + 1))
            with m.If(index == period - 1):
                m.d.sync += first_scan.eq(0)

        # The slow counters' events, counted again here in de Bruijn code (see the module docstring).
        slow = self.slow_width
        samples = [self.sample[i][:n] for i in range(self.fast)]
        for i in range(self.fast, self.count):
            flips = self.sample[i][0]
            flips_seen = Signal(name=f"flips_seen_{i}")
            events = Signal(slow, name=f"events_{i}")
            m.d.sync += flips_seen.eq(flips)
            with m.If(flips ^ flips_seen):
                m.d.sync += events.eq(de_bruijn_step(events, slow))
            samples.append(events)
        samples += [0] * (period - self.count)

        # Stage 1: sample the counter (a slow one's count from its de Bruijn state), read its total.
        sampled = Signal(n)
        visited = Signal(range(period))
        visited_fresh = Signal(init=1)
        visited_for_host = Signal()
        visited_fast = Signal()
        chosen = Signal(n)
        m.d.comb += chosen.eq(select(samples, visit))  # a Switch here took 1.7 times the LUT4s
        if self.fast < self.count:
            m.submodules.positions = positions = Memory(
                shape=slow, depth=1 << slow, init=de_bruijn_positions(slow)
            )
            position = positions.read_port(domain="comb")
            m.d.comb += position.addr.eq(chosen[:slow])
            m.d.sync += sampled.eq(Mux(visit < self.fast, chosen, position.data))
        else:
            m.d.sync += sampled.eq(chosen)
        m.d.sync += [
            visited.eq(visit),
            visited_fresh.eq(visit_fresh),
            visited_for_host.eq(visit_for_host),
            visited_fast.eq(visit < self.fast),
        ]
        m.d.comb += [total_read.addr.eq(visit), total_read.en.eq(1)]

        # Stage 2: the total grows by what the counter grew since the last visit (mod 2^n). A visit of
        # the word being written reads the total before it: still exact, the growth then spans two
        # visits (sample_width allows for it).
        total = total_read.data
        grown = Signal(n)
        updated = Signal(self.total_width)
        difference = Signal(n)
        m.d.comb += [
            difference.eq(sampled - total[:n]),
            # a slow counter's growth is modulo 2^slow: its sample has no bits above
            grown.eq(Mux(visited_fast, difference, difference[:slow])),
            updated.eq(Mux(visited_fresh, sampled, total + grown)),
            total_write.addr.eq(visited),
            total_write.data.eq(updated),
            total_write.en.eq(1),
            self.ready.eq(~first_scan & ~visit_fresh & ~visited_fresh),
        ]
        m.d.comb += [self.read_valid.eq(visited_for_host), self.read_data.eq(updated)]
        return m
