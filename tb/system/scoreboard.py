"""Reference-model scoreboards of the system tests: what one RTL NIC decides, checked as it happens.

* :class:`PathScoreboard` (issue 6: "the same EV state changes for the same inputs"): every record of
  the NIC's ``path_trace`` (one per feedback event the path selector decided) is replayed into the
  reference model's EV table (:class:`mrcnic.model.ev.EvTable`, the same object that configured the QP),
  which must reach the same outcome (skip, retire in place, replace by the same backup EV, floor guard,
  restore, stale, unchanged). Every data frame the NIC sends must leave on an EV that the model holds as
  a usable slot, or held within ``grace_ps`` (packets chosen before a retirement are still queued).
* :class:`SackScoreboard`: every SACK the NIC sends is checked against the frames the fabric delivered
  to it whole. Sound: each PSN it acknowledges (at or below ``cack``, or a set bitmap bit) was received.
  Complete: each packet that reached the same plane port before the SACK's trigger (so the RX pipeline
  processed it first) is acknowledged when the SACK can represent it. The base follows §7.2
  (:func:`mrcnic.model.receiver.sack_base`). Ordered: on each plane port, a SACK's cack is never behind
  the one before it (across ports it may be: a SACK can wait behind another frame on its port). Every
  TRIMMED NACK names a trimmed arrival.
* :class:`ReceiveModel`: the reference model's receiver (:class:`mrcnic.model.receiver.Receiver`) takes
  the same delivered frames as the RTL NIC; at the end its placed data must be what the RTL wrote into
  host memory, byte for byte, and its counters (placed packets and bytes, duplicates, trims,
  out-of-window, access errors, probes) the RTL's.

Mismatches are collected as strings (``mismatches``) for the test to assert on, with the time and the
record, so one run reports all of them.
"""

from __future__ import annotations

from collections import Counter

from mrcnic import wire
from mrcnic.hdl.tx.layouts import FeedbackEvent
from mrcnic.hdl.tx.path_selector import TraceOutcome
from mrcnic.model.ev import EvTable
from mrcnic.model.memory import MemoryRegion
from mrcnic.model.params import Params
from mrcnic.model.receiver import Receiver, sack_base

__all__ = ["PSN_MOD", "PathScoreboard", "ReceiveModel", "SackScoreboard", "psn_at_or_below"]

PSN_MOD = 1 << 24
PSN_HALF = 1 << 23
PROBE_OKS = (FeedbackEvent.PROBE_OK, FeedbackEvent.PROBE_OK_SKIP)
LOOKBACK = 512  # arrivals per plane checked before a trigger (the window is 256 PSNs)


def psn_at_or_below(a: int, b: int) -> bool:
    """PSN ``a`` is at or below ``b`` (24-bit serial arithmetic)."""
    return (b - a) % PSN_MOD < PSN_HALF


class PathScoreboard:
    def __init__(self, name: str, ev_slots: int, grace_ps: int):
        self.name, self.n, self.grace_ps = name, ev_slots, grace_ps
        self.tables: dict[int, EvTable] = {}
        self.outcomes: Counter = Counter()
        self.changes: list[tuple] = []  # (time_ps, qp, ev, outcome, new_ev) of every state change
        self.mismatches: list[str] = []
        self.left: dict[tuple[int, int], int] = {}  # (qp, ev) -> when it stopped being a usable slot
        self.frames_checked = 0

    def attach(self, qp: int, table: EvTable) -> None:
        """``table`` configured QP ``qp`` of the NIC; from now on the scoreboard keeps it in step."""
        self.tables[qp] = table

    @staticmethod
    def _usable(table: EvTable) -> set[int]:
        return {s.ev for s in table.slots if s.usable}

    def on_trace(self, record, now: int) -> None:
        qp = int(record.qp)
        table = self.tables.get(qp)
        event, ev, target = FeedbackEvent(record.event), int(record.ev), int(record.target)
        got = (TraceOutcome(record.outcome), int(record.new_ev))
        if table is None:
            self.mismatches.append(f"{self.name} {now} ps: feedback on unconfigured QP {qp}: {record}")
            return
        before = self._usable(table)
        want = self._apply(table, event, target, ev, int(record.plane_up))
        after = self._usable(table)
        for gone in before - after:
            self.left[(qp, gone)] = now
        self.outcomes[want[0].name] += 1
        if want[0] in (TraceOutcome.RETIRED, TraceOutcome.REPLACED, TraceOutcome.RESTORED):
            self.changes.append((now, qp, ev, want[0].name, want[1]))
        if (got[0], got[1] if got[0] == TraceOutcome.REPLACED else 0) != want:
            self.mismatches.append(
                f"{self.name} {now} ps: QP {qp} {event.name} target {target} EV {ev:#x}: "
                f"RTL {got[0].name} {got[1]:#x}, model {want[0].name} {want[1]:#x}"
            )

    def _apply(self, table: EvTable, event, target: int, ev: int, plane_up: int):
        """The model's decision for one event (docs/protocol.md §6.4, §6.5, §7.8), applied to ``table``."""
        T = TraceOutcome
        if target >= self.n:  # a reserve entry: only the restore of the EV probed there means anything
            if event in PROBE_OKS and ev in table.probe_list and table.slot_of(ev) is None:
                table.restore(ev)
                return T.RESTORED, 0
            return T.STALE, 0
        if table.by_ev.get(ev) != target:
            return T.STALE, 0
        slot = table.slots[target]
        if event in (FeedbackEvent.ECN, FeedbackEvent.TRIM):
            if not slot.usable:
                return T.UNCHANGED, 0
            table.penalise(ev, 4 if event == FeedbackEvent.TRIM else 1)
            return T.SKIP, 0
        if event == FeedbackEvent.LOSS:
            had_backup = bool(table.backups[slot.plane])
            if table.mark_bad(ev, plane_up=plane_up):
                if had_backup:
                    return T.REPLACED, table.slots[target].ev
                return T.RETIRED, 0
            if slot.usable and (plane_up >> slot.plane) & 1:
                return T.GUARDED, 0
            return T.UNCHANGED, 0
        if event in PROBE_OKS:
            if not slot.bad or slot.denied:
                return T.UNCHANGED, 0
            table.restore(ev)
            slot.skip = int(event == FeedbackEvent.PROBE_OK_SKIP)
            return T.RESTORED, 0
        if event == FeedbackEvent.DENY:
            table.deny(ev)
            return T.HOST, 0
        if event == FeedbackEvent.RESTORE:
            if slot.bad:
                table.restore(ev)
            slot.denied = False
            return T.HOST, 0
        return T.UNCHANGED, 0

    def on_data_frame(self, qp: int, ev: int, now: int) -> None:
        table = self.tables.get(qp)
        if table is None:
            return
        self.frames_checked += 1
        if ev in self._usable(table):
            return
        left = self.left.get((qp, ev))
        if left is None or now - left > self.grace_ps:
            since = "never a slot" if left is None else f"not usable since {left} ps"
            self.mismatches.append(f"{self.name} {now} ps: QP {qp} data frame on EV {ev:#x} ({since})")

    def check_counters(self, counters: dict) -> None:
        """The NIC's path counters against the model's (the model counts since the tables were made)."""
        retired = sum(t.retired for t in self.tables.values())
        restored = sum(t.restored for t in self.tables.values())
        for name, model in (("path_retired", retired), ("path_restored", restored)):
            if counters.get(name) != model:
                self.mismatches.append(f"{self.name}: counter {name} = {counters.get(name)}, model {model}")

    def summary(self) -> dict:
        return {"decisions": sum(self.outcomes.values()), "outcomes": dict(self.outcomes)}


class SackScoreboard:
    def __init__(self, name: str):
        self.name = name
        self.initial: dict[int, int] = {}  # qp -> the peer's first PSN
        self.received: dict[int, set[int]] = {}
        self.trimmed: dict[int, set[tuple[int, int]]] = {}
        # qp -> {plane: the cack of the last SACK out of that plane port}. Each port sends its frames in
        # the order they were made, but a SACK waiting behind another frame on one port can leave after a
        # newer SACK on another (seen when a whole plane failed), so cack is in order per port only.
        self.cack: dict[int, dict[int, int]] = {}
        # per (qp, plane): PSNs in arrival order; per qp: (psn, ev) -> (plane, index) of its first arrival
        self.order: dict[tuple[int, int], list[int]] = {}
        self.last: dict[int, dict[tuple[int, int], tuple[int, int]]] = {}
        self.mismatches: list[str] = []
        self.sacks_checked = 0
        self.nacks_checked = 0

    def attach(self, qp: int, initial_psn: int) -> None:
        self.initial[qp] = initial_psn
        self.received[qp], self.trimmed[qp], self.last[qp] = set(), set(), {}
        self.cack[qp] = {}

    def on_arrival(self, qp: int, plane: int, frame, intact: bool) -> None:
        if qp not in self.received or not intact or not frame.opcode.is_write:
            return
        psn, ev = frame.bth.psn, frame.ev
        if frame.trimmed or frame.network.dscp in (wire.Dscp.TRIMMED, wire.Dscp.TRIMMED_LASTHOP):
            self.trimmed[qp].add((psn, ev))
            return
        self.received[qp].add(psn)
        order = self.order.setdefault((qp, plane), [])
        # The first copy: what reached its port before it was surely processed before any copy of it.
        self.last[qp].setdefault((psn, ev), (plane, len(order)))
        order.append(psn)

    def on_control(self, qp: int, frame, now: int, plane: int = 0) -> None:
        if qp not in self.received:
            return
        if frame.opcode == wire.Opcode.SACK:
            seth = frame[wire.Seth]
            if not seth.pr:
                self._sack(qp, seth, now, plane)
        elif frame.opcode == wire.Opcode.NACK:
            neth = frame[wire.Neth]
            if neth.nack_reason in (wire.NackReason.TRIMMED, wire.NackReason.TRIMMED_LASTHOP):
                self.nacks_checked += 1
                if (neth.nack_psn, neth.entropy) not in self.trimmed[qp]:
                    reason = wire.NackReason(neth.nack_reason).name
                    self.mismatches.append(
                        f"{self.name} {now} ps: QP {qp} NACK {reason} of PSN {neth.nack_psn} "
                        f"EV {neth.entropy:#x}, which never arrived trimmed"
                    )

    def _sack(self, qp: int, seth, now: int, plane: int) -> None:
        self.sacks_checked += 1
        received, cack = self.received[qp], seth.cack_psn
        prev = self.cack[qp].get(plane, (self.initial[qp] - 1) % PSN_MOD)
        where = f"{self.name} {now} ps: QP {qp} SACK cack {cack} (plane {plane})"
        if not psn_at_or_below(prev, cack):
            self.mismatches.append(f"{where}: cack went back from {prev} on the same port")
            return
        # Sound: every PSN it acknowledges arrived.
        missing = [p % PSN_MOD for p in range(prev + 1, prev + 1 + (cack - prev) % PSN_MOD)]
        missing = [p for p in missing if p not in received]
        base = (cack + seth.sack_offset) % PSN_MOD
        bits = seth.sack_bitmap
        for i in range(64):
            p = (base + i) % PSN_MOD
            if (bits >> i) & 1 and not psn_at_or_below(p, cack) and p not in received:
                missing.append(p)
        if missing:
            self.mismatches.append(f"{where}: acknowledges PSNs never received {missing[:8]}")
        self.cack[qp][plane] = cack
        # The base rule (§7.2), in unwrapped PSNs relative to cack.
        trigger_offset = seth.ack_psn_offset
        if sack_base(cack + trigger_offset, cack) - cack != seth.sack_offset:
            self.mismatches.append(
                f"{where}: base offset {seth.sack_offset} for trigger offset {trigger_offset}"
            )
        # Complete: what reached the trigger's plane port before the trigger was processed before it.
        trigger = (cack + trigger_offset) % PSN_MOD
        found = self.last[qp].get((trigger, seth.entropy))
        if found is None:
            self.mismatches.append(f"{where}: trigger PSN {trigger} EV {seth.entropy:#x} never arrived")
            return
        plane, index = found
        order = self.order[(qp, plane)]
        for p in order[max(0, index - LOOKBACK) : index]:
            if psn_at_or_below(p, cack):
                continue
            d = (p - base) % PSN_MOD
            if d < 64 and not (bits >> d) & 1:
                self.mismatches.append(
                    f"{where}: PSN {p} arrived before the trigger {trigger} but is not set"
                )
                return

    def summary(self) -> dict:
        return {"sacks": self.sacks_checked, "trimmed_nacks": self.nacks_checked}


class _CountingReceiver(Receiver):
    """The model's receiver with its answers counted, not sent: the RTL NIC's answers are on the wire."""

    def _control(self, ev, opcode, headers) -> None:
        pass

    def _send_ack(self, now: int) -> None:
        self.last_ack_at = now
        self.ack_dirty = False
        self.c["acks"] += 1


class _ModelQp:
    """What :class:`Receiver` asks of its QP and endpoint; timers are not run (they only pace answers)."""

    def __init__(self, qpn: int, peer_qpn: int, regions: dict):
        self.qpn, self.peer_qpn = qpn, peer_qpn
        self.endpoint = self
        self.regions = regions

    def message_placed(self, qp, msn: int, now: int) -> None:
        pass

    def schedule(self, time: int, fn, *args) -> None:
        pass


# RTL receive counter (``rx_*`` of MrcNic) -> the model receiver's counters that must add up to it
_RX_COUNTERS = {
    "rx_placed": ("rx_pkts",),
    "rx_placed_bytes": ("rx_bytes",),
    "rx_duplicate": ("dups",),
    "rx_trimmed": ("trimmed",),  # the model counts both trim reasons together
    "rx_psn_out_of_window": ("oor",),
    "rx_access_error": ("bad_access",),
    "rx_probes": ("probes",),
}


class ReceiveModel:
    def __init__(self, name: str, window: int):
        self.name = name
        self.params = Params(window=window)
        self.regions: dict[int, MemoryRegion] = {}
        self.receivers: dict[int, Receiver] = {}
        self.mismatches: list[str] = []

    def register(self, rkey: int, base: int, length: int) -> None:
        self.regions[rkey] = MemoryRegion(base, length, buffer=True)

    def attach(self, qp: int, qpn: int, peer_qpn: int, initial_psn: int) -> None:
        receiver = _CountingReceiver(_ModelQp(qpn, peer_qpn, self.regions), self.params)
        receiver.cack = initial_psn - 1  # the model counts PSNs unwrapped from here
        self.receivers[qp] = receiver

    def on_arrival(self, qp: int, frame, now: int) -> None:
        receiver = self.receivers.get(qp)
        if receiver is None:
            return
        if frame.opcode.is_write:
            receiver.on_data(frame, now)
        elif frame.opcode == wire.Opcode.PROBE:
            receiver.on_probe(frame, now)

    def check(self, counters: dict, read) -> None:
        """Compare with the RTL NIC's ``counters`` and its host memory (``read(address, length)``)."""
        model = Counter()
        for receiver in self.receivers.values():
            model.update(receiver.c)
        for name, parts in _RX_COUNTERS.items():
            rtl = counters.get(name, 0) + (
                counters.get("rx_trimmed_lasthop", 0) if name == "rx_trimmed" else 0
            )
            want = sum(model[p] for p in parts)
            if rtl != want:
                self.mismatches.append(f"{self.name}: {name} = {rtl}, model {want}")
        for rkey, region in self.regions.items():
            for start, end in region.coverage():
                if read(region.base + start, end - start) != bytes(region.buffer[start:end]):
                    self.mismatches.append(
                        f"{self.name}: R_Key {rkey:#x} bytes {start}..{end} differ from the model's placement"
                    )

    def summary(self) -> dict:
        placed = sum(r.c["rx_pkts"] for r in self.receivers.values())
        return {"placed": placed, "bytes": sum(r.c["rx_bytes"] for r in self.receivers.values())}
