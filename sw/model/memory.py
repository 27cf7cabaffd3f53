"""Host memory for the model: real byte buffers (small tests) or pattern-checked regions (large runs).

Large simulations cannot keep gigabytes: a flow's payload is a slice of one seeded random pattern at an
offset derived from the flow's seed, and the receiving region checks every placed packet against the
same pattern and records which byte ranges were placed (so duplicates and gaps are visible).
"""

from __future__ import annotations

import random

__all__ = ["MemoryRegion", "PatternSource", "pattern_bytes"]

_PATTERN_LEN = 1 << 20
_PATTERN = random.Random(0x4D5243).randbytes(_PATTERN_LEN + 65536)


def pattern_bytes(seed: int, offset: int, length: int) -> bytes:
    """Bytes ``offset .. offset+length`` of the stream named by ``seed``."""
    if length > 65536:
        return b"".join(
            pattern_bytes(seed, offset + o, min(65536, length - o)) for o in range(0, length, 65536)
        )
    start = (seed * 7919 + offset) % _PATTERN_LEN
    return _PATTERN[start : start + length]


class PatternSource:
    """Source data of a message: ``read(offset, length)``."""

    def __init__(self, seed: int, length: int):
        self.seed = seed
        self.length = length

    def read(self, offset: int, length: int) -> bytes:
        return pattern_bytes(self.seed, offset, length)


class BytesSource:
    def __init__(self, data: bytes):
        self.data = bytes(data)
        self.length = len(self.data)

    def read(self, offset: int, length: int) -> bytes:
        return self.data[offset : offset + length]


class MemoryRegion:
    """A registered region ``[base, base+length)``.

    ``buffer`` mode keeps the bytes; ``pattern_seed`` mode checks each write against the pattern stream
    (offset relative to ``base``) instead. Both record placed ranges.
    """

    def __init__(self, base: int, length: int, *, buffer: bool = False, pattern_seed: int | None = None):
        self.base = base
        self.length = length
        self.buffer = bytearray(length) if buffer else None
        self.pattern_seed = pattern_seed
        self.placed: list[tuple[int, int]] = []  # (offset, length) in placement order
        self.placed_bytes = 0
        self.mismatches = 0
        self.overlaps = 0

    def contains(self, va: int, length: int) -> bool:
        return self.base <= va and va + length <= self.base + self.length

    def write(self, va: int, data: bytes) -> None:
        offset = va - self.base
        if self.buffer is not None:
            self.buffer[offset : offset + len(data)] = data
        if self.pattern_seed is not None and data != pattern_bytes(self.pattern_seed, offset, len(data)):
            self.mismatches += 1
        self.placed.append((offset, len(data)))
        self.placed_bytes += len(data)

    def coverage(self) -> list[tuple[int, int]]:
        """Placed byte ranges merged into sorted disjoint [start, end) intervals; counts overlaps."""
        out: list[list[int]] = []
        self.overlaps = 0
        for start, length in sorted(self.placed):
            end = start + length
            if out and start < out[-1][1]:
                self.overlaps += 1
            if out and start <= out[-1][1]:
                out[-1][1] = max(out[-1][1], end)
            else:
                out.append([start, end])
        return [(a, b) for a, b in out]

    def verify(self, length: int | None = None) -> bool:
        """All of ``[0, length)`` placed exactly once and every placed packet matched its pattern."""
        length = self.length if length is None else length
        cov = self.coverage()
        return self.mismatches == 0 and self.overlaps == 0 and cov == ([(0, length)] if length else [])
