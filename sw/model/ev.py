"""The per-QP EV table: slots, backups, the LFSR-masked rotation and the EV state machine.

Algorithm (identical in the gateware):

* ``n`` slots (power of two), slot ``i`` on plane ``i mod planes``, uplink drawn at QP creation from a
  seeded RNG over the fabric's uplink count, salt = slot index; ``backups`` extra EVs per plane. The draw
  deals from a shuffled deck per plane (every uplink once before any repeats), so the slots of a plane
  cover the uplinks evenly: slots in order 0, 1, ... take plane ``i mod planes`` and the next card of that
  plane's deck; backup ``b`` of plane ``p`` (salt ``n + p + planes*b``) takes the next cards after them.
* Rotation (docs/protocol.md §6.2): index ``idx`` in ``0..n-1``; the candidate slot is ``idx ^ mask``,
  ``mask = lfsr & (n-1)``; at QP creation and each time ``idx`` wraps to 0 the 16-bit Galois LFSR (shift
  right, xor taps when the shifted-out bit was 1) advances 16 steps and the mask is redrawn. Each
  transmission opportunity visits up to ``n`` candidates (every visit advances ``idx``, §6.3):
  ASSUMED_BAD/DENIED -> pass; plane down -> pass; skip counter > 0 -> decrement, pass; plane port busy
  -> pass, counter untouched; the EV to avoid (retransmission) -> pass; else choose.
* States: GOOD, SKIP (skip counter > 0), ASSUMED_BAD, DENIED (host API only).
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass

from ..wire import ev_fields, make_ev

__all__ = ["EvSlot", "EvState", "EvTable", "lfsr_step", "lfsr_wrap"]


class EvState(enum.IntEnum):
    GOOD = 0
    SKIP = 1
    ASSUMED_BAD = 2
    DENIED = 3


LFSR_WRAP_STEPS = 16  # a redraw advances the LFSR a whole word, so every mask bit is fresh


def lfsr_wrap(value: int, taps: int = 0xB400) -> int:
    """The LFSR advanced by one redraw (16 steps)."""
    for _ in range(LFSR_WRAP_STEPS):
        value = lfsr_step(value, taps)
    return value


def lfsr_step(value: int, taps: int = 0xB400) -> int:
    """One step of the 16-bit Galois LFSR: shift right; xor ``taps`` if the shifted-out bit was 1."""
    out = value & 1
    value >>= 1
    if out:
        value ^= taps
    return value


@dataclass
class EvSlot:
    ev: int
    bad: bool = False  # ASSUMED_BAD
    denied: bool = False
    skip: int = 0

    @property
    def plane(self) -> int:
        return self.ev >> 29

    @property
    def state(self) -> EvState:
        if self.denied:
            return EvState.DENIED
        if self.bad:
            return EvState.ASSUMED_BAD
        return EvState.SKIP if self.skip else EvState.GOOD

    @property
    def usable(self) -> bool:
        return not (self.bad or self.denied)


class EvTable:
    def __init__(
        self,
        n: int,
        planes: int,
        uplinks: int,
        *,
        seed: int,
        backups: int = 2,
        min_active: int = 4,
        taps: int = 0xB400,
        skip_max: int = 15,
        lfsr_seed: int | None = None,
    ):
        if n <= 0 or n & (n - 1):
            raise ValueError(f"EV count {n} is not a power of two")
        rng = random.Random(seed)
        self.n = n
        self.planes = planes
        self.taps = taps
        self.skip_max = skip_max
        self.min_active = min_active
        decks: list[list[int]] = [[] for _ in range(planes)]

        def deal(plane: int) -> int:
            if not decks[plane]:
                decks[plane] = list(range(uplinks))
                rng.shuffle(decks[plane])
            return decks[plane].pop()

        self.slots = [EvSlot(make_ev(i % planes, deal(i % planes), i)) for i in range(n)]
        self.backups: list[list[int]] = [
            [make_ev(p, deal(p), n + p + planes * b) for b in range(backups)] for p in range(planes)
        ]
        seed_value = (lfsr_seed if lfsr_seed is not None else rng.randrange(1, 1 << 16)) & 0xFFFF or 1
        self.lfsr_seed = seed_value
        self.lfsr = lfsr_wrap(seed_value, taps)  # §6.2 init: lfsr = seed; idx = 0; wrap()
        self.mask = self.lfsr & (n - 1)
        self.idx = 0
        self.by_ev = {s.ev: i for i, s in enumerate(self.slots)}
        self.probe_list: list[int] = []  # EVs that are ASSUMED_BAD and out of the slots
        self.retired = 0
        self.restored = 0
        self.skip_events = 0

    # -- rotation ---------------------------------------------------------------------------------
    def _advance(self) -> None:
        self.idx += 1
        if self.idx == self.n:
            self.idx = 0
            self.lfsr = lfsr_wrap(self.lfsr, self.taps)
            self.mask = self.lfsr & (self.n - 1)

    def select(self, plane_ok: int, avoid: int | None = None, plane_up: int = -1) -> int | None:
        """The EV for one transmission, or None (docs/protocol.md §6.3).

        ``plane_ok``: bit p set = the port of plane p can take a packet now; ``plane_up``: bit p set = plane
        p is up (a down plane is passed before its skip counters are touched). ``avoid``: an EV not to use
        (a retransmission's previous EV), passed like a busy plane.
        """
        slots = self.slots
        for _ in range(self.n):
            slot = slots[self.idx ^ self.mask]
            self._advance()
            if slot.bad or slot.denied:
                continue
            plane = slot.ev >> 29
            if not (plane_up >> plane) & 1:
                continue
            if slot.skip:
                slot.skip -= 1
                continue
            if not (plane_ok >> plane) & 1 or slot.ev == avoid:
                continue
            return slot.ev
        return None

    def candidates(self, count: int) -> list[int]:
        """The next ``count`` candidate slot indices of the rotation, without changing any state."""
        idx, lfsr, mask, out = self.idx, self.lfsr, self.mask, []
        for _ in range(count):
            out.append(idx ^ mask)
            idx += 1
            if idx == self.n:
                idx = 0
                lfsr = lfsr_wrap(lfsr, self.taps)
                mask = lfsr & (self.n - 1)
        return out

    # -- state machine ----------------------------------------------------------------------------
    def slot_of(self, ev: int) -> EvSlot | None:
        i = self.by_ev.get(ev)
        return None if i is None else self.slots[i]

    def usable_count(self, plane_up: int = -1) -> int:
        """Usable slots on up planes (the floor guard's count, §6.4)."""
        return sum(1 for s in self.slots if s.usable and (plane_up >> s.plane) & 1)

    def penalise(self, ev: int, amount: int) -> None:
        """Skip-counter penalty (ECN echo +1, trim NACK +4), saturating."""
        slot = self.slot_of(ev)
        if slot is not None and slot.usable:
            if slot.skip == 0:
                self.skip_events += 1
            slot.skip = min(slot.skip + amount, self.skip_max)

    def mark_bad(self, ev: int, plane_up: int = -1) -> bool:
        """Loss on ``ev`` (or SACK ALWAYS_SKIP): ASSUMED_BAD unless that breaks the floor.

        Returns True when the EV was retired. A GOOD backup of the same plane takes the slot if one exists
        (the bad EV then goes to the probe list); otherwise the slot stays, ASSUMED_BAD, and is probed.
        ``plane_up``: bit p set = plane p is up; a loss on a down plane changes nothing (§6.5), and the
        floor counts the usable slots of up planes (§6.4).
        """
        i = self.by_ev.get(ev)
        if i is None:
            return False
        slot = self.slots[i]
        if not slot.usable:
            return False
        plane = slot.plane
        if not (plane_up >> plane) & 1:
            return False
        if self.backups[plane]:
            new = self.backups[plane].pop(0)
            del self.by_ev[ev]
            self.slots[i] = EvSlot(new)
            self.by_ev[new] = i
        else:
            if self.usable_count(plane_up) - 1 < self.min_active:
                return False
            slot.bad = True
            slot.skip = 0
        self.probe_list.append(ev)
        self.retired += 1
        return True

    def restore(self, ev: int) -> None:
        """Probes succeeded: the EV is GOOD again (back in its slot, or into the backup pool)."""
        if ev in self.probe_list:
            self.probe_list.remove(ev)
        slot = self.slot_of(ev)
        if slot is not None:
            slot.bad = False
            slot.skip = 0
        else:
            self.backups[ev_fields(ev)[0]].append(ev)
        self.restored += 1

    def deny(self, ev: int, denied: bool = True) -> None:
        slot = self.slot_of(ev)
        if slot is not None:
            slot.denied = denied

    def states(self) -> list[EvState]:
        return [s.state for s in self.slots]
