"""The event-driven core: a heap of (time_ps, seq, fn, args); ``fn(now, *args)`` runs at ``time_ps``."""

from __future__ import annotations

import heapq

__all__ = ["EventLoop"]


class EventLoop:
    def __init__(self):
        self.now = 0
        self._heap: list = []
        self._seq = 0
        self.events = 0
        self.stopped = False  # set by a callback to end run() after the current event

    def at(self, time: int, fn, *args) -> None:
        if time < self.now:
            time = self.now
        self._seq += 1
        heapq.heappush(self._heap, (time, self._seq, fn, args))

    def after(self, delay: int, fn, *args) -> None:
        self.at(self.now + delay, fn, *args)

    def run(self, until: int | None = None, stop=None, progress=None, progress_every: int = 100_000) -> None:
        """Run events until the heap is empty, ``until`` (ps) is passed, or ``stop()`` is true."""
        heap = self._heap
        pop = heapq.heappop
        n = 0
        self.stopped = False
        while heap and not self.stopped:
            time, _, fn, args = heap[0]
            if until is not None and time > until:
                self.now = until
                break
            pop(heap)
            self.now = time
            fn(time, *args)
            n += 1
            if n % progress_every == 0:
                if progress is not None:
                    progress(time)
                if stop is not None and stop():
                    break
        self.events += n

    def __len__(self) -> int:
        return len(self._heap)
