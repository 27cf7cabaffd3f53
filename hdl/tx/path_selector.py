"""Path selector: which EV slot (path) the next packet of a QP takes, the per-slot EV state machine, and
the per-plane reserve of backup EVs and probed EVs.

Ref: docs/protocol.md §6.1 (slots, slot s on plane s mod P, backup and probe lists), §6.2 (rotation:
16-bit Galois LFSR advanced 16 steps per redraw, candidate = idx XOR mask), §6.3 (the six rules of one
transmission), §6.4 (EV state machine, "Guard and replacement": the ``ev_min_active`` floor guard and
the backup list), §6.5 (stale feedback, losses on down planes), §7.8 (what is probed, restore).

Members (Q = ``qps``, N = ``ev_slots``, P = ``planes``, B = ``backups``):

* ``configure``: In, ``{qp, slot, ev, state}``: the host writes one EV slot (skip counter cleared). A
  write whose ``ev`` names another plane than ``slot mod P`` (EV[31:29], §5.1) is dropped and counted
  in ``stat_config_rejected`` (§6.1: the NIC rejects it). ``state`` is an :class:`EvState` value; 1
  (SKIP in the register map and the model, never stored here) is taken as GOOD.
* ``slot_read``: In, :func:`slot_read_layout` ``{qp, slot}``, and ``slot_read_answer``: Out,
  :func:`slot_read_answer_layout` ``{ev, state}``: the host reads one EV slot back (the register map's
  ``ev_slot`` COMMAND = 2). One answer per request, in order, one read at a time; the state as stored
  (GOOD also when its skip counter is not 0). A ``qp`` >= Q answers ``{0, DENIED}``. The read uses the
  table's read port only in cycles the operations above leave it free ("Timing and hazards"), so it
  never delays a request or an update.
* ``reserve_configure``: In, :func:`reserve_configure_layout` ``{qp, plane, index, ev, valid}``: the host
  writes reserve entry (plane, index) of ``qp``. ``valid`` = 1: the entry becomes BACKUP with ``ev``,
  the newest of its plane's backups (FIFO order); dropped and counted in ``stat_config_rejected`` when
  EV[31:29] != ``plane``. ``valid`` = 0: the entry becomes EMPTY. Out-of-range qp, plane or index (any
  write when B = 0): dropped and counted the same way. A PROBING entry that is overwritten emits a stop
  record on ``watch``.
* ``seed``: In, ``{qp, seed}``: register ``ev_lfsr_seed`` and the §6.2 init of that QP's rotation:
  ``lfsr = seed; idx = 0; wrap()``. A zero seed (forbidden by §6.2) is taken as 1 so the LFSR never
  locks up. After reset every QP is in the state of ``seed = 1``.
* ``request``: In, ``{qp, avoid_slot, avoid_valid}``: choose an EV for the next packet of ``qp``.
  ``avoid_valid``: a retransmission; ``avoid_slot`` is the slot of its previous attempt (§6.3 step 5).
* ``response``: Out, ``{qp, found, slot, ev, plane}``, one per request, in request order. ``found = 0``
  when N visits chose nothing; the rotation state and the decremented skip counters are kept.
* ``feedback``: In, ``feedback_layout(qps, ev_slots)`` (``layouts.FeedbackEvent``); its ``slot`` is a
  probe target (below). Ignored and counted in ``stat_stale_feedback`` when the target no longer holds
  ``ev``. Host events (DENY, RESTORE) carry the EV too and are checked the same way.
* ``watch``: Out, :func:`watch_layout` ``{qp, target, ev, start}``, to the prober: ``start`` = 1: probe
  ``target`` for ``ev`` from now on (the prober's ``watch``); ``start`` = 0: stop probing ``target``
  (the prober's ``unwatch``; ``ev`` is the EV that was probed there). Records leave in decision order.
* ``decision`` / ``decision_valid``: Out, :func:`trace_layout` ``{qp, target, ev, event, outcome, new_ev,
  plane_up}``, valid for the one cycle in which a feedback event is decided (a strobe: nothing waits for
  it, at most one record per cycle): what the EV state machine did
  with it (:class:`TraceOutcome`; ``new_ev`` = the backup EV that took the slot on ``REPLACED``;
  ``plane_up`` as read for the decision). The observation port for the host's event log and for the
  system scoreboard, which replays the same events through the reference model.
* ``plane_ready``: In(P), bit p: the port of plane p can take a packet now (§6.3 step 4).
* ``plane_up``: In(P), bit p: plane p is up, locally and as reported by the peer (§6.3 step 2).
* ``min_active``: In, register ``ev_min_active`` (default N/4).

* ``stat_*``: Out(32), event counters, wrapping modulo 2^32 (software takes differences):
  ``stat_retired`` (a usable EV retired: GOOD -> ASSUMED_BAD in place, or replaced by a backup),
  ``stat_restored`` (ASSUMED_BAD -> GOOD by PROBE_OK(_SKIP) or RESTORE, or a probed reserve entry back
  to BACKUP), ``stat_guarded`` (losses the floor guard refused), ``stat_stale_feedback``,
  ``stat_skipped_visits`` (visits that decremented a skip counter), ``stat_not_found`` (responses with
  ``found = 0``), ``stat_config_rejected`` (``configure`` and ``reserve_configure``), ``stat_replaced``
  (retirements where a backup took the slot).

``plane_ready`` and ``plane_up`` are read in every visit of a request; a feedback event reads
``plane_up`` and ``min_active`` in the cycle after its transfer. The N visits of one request continue
the rotation, so when the mask is redrawn part-way they need not cover every slot: a request can find
nothing although a usable, ready slot exists (§6.3 as written; the next request will reach it).

Probe targets. Slot s is target s; reserve entry (plane p, index b) is target N + p * B + b (below 2N,
:func:`~mrcnic.hdl.tx.layouts.target_bits`). The prober is built with N + P * B targets.

Reserve. Per (QP, plane), B entries ``{ev, state: EMPTY | BACKUP | PROBING, order}``
(:func:`reserve_entry_layout`, registers). BACKUP entries form the plane's backup list of §6.1:
``order`` is an entry's rank among the BACKUP entries of its (QP, plane), 0 = oldest, so the first
backup is the one with rank 0; an entry that becomes BACKUP (``reserve_configure``, or a restore from the
probe list) takes the last rank, and the ranks above an entry that leaves BACKUP move down by one. This
is the FIFO of the reference model (``mrcnic.model.ev``: ``pop(0)`` on a retirement, ``append`` on a
restore). PROBING entries form the probe list: a retired EV that left its slot.

Feedback semantics (§6.4; a slot is *usable* when it is GOOD, any skip, on a plane that is up):

* ECN: GOOD -> skip = min(skip + 1, 15). TRIM: GOOD -> skip = min(skip + 4, 15). No effect otherwise.
* LOSS on a GOOD slot on an up plane: if the QP has a BACKUP entry on that plane, the oldest one's EV
  takes the slot (GOOD, skip 0; the usable count does not change, so there is no guard), the entry
  becomes PROBING with the bad EV and ``watch`` gets {target = its target, bad EV, start 1}
  (``stat_retired`` and ``stat_replaced`` += 1). Otherwise ASSUMED_BAD in place (skip 0) with ``watch``
  {target = slot, ev, start 1}, unless the usable count would fall below ``min_active``; then unchanged
  (``stat_guarded``). On a down plane, or a slot not GOOD: no change (§6.5).
* PROBE_OK / PROBE_OK_SKIP (the prober's restore after k answers, the last with M = SKIP_ONCE for
  PROBE_OK_SKIP), target = slot: ASSUMED_BAD -> GOOD with skip 0 / skip 1. No effect on GOOD or DENIED
  slots (a late probe answer must not undo the host's DENY). Target = reserve entry: PROBING with that
  EV -> BACKUP, the newest of its plane (§6.4: "goes to the tail of its plane's backup list"); any other
  entry state or EV: stale.
* DENY: any -> DENIED, skip 0 (not guarded: the host decides). RESTORE: any -> GOOD, skip 0.
* Every event other than PROBE_OK / PROBE_OK_SKIP on a target >= N: stale.
* Probing stops (``watch`` {target = slot, old EV, start 0}) when an ASSUMED_BAD slot is overwritten by
  ``configure`` or changed by DENY or RESTORE. A ``configure`` with state ASSUMED_BAD starts no probing
  (the host brings that slot back). A slot restored by PROBE_OK(_SKIP) emits nothing: the prober stopped
  that target itself when it sent the restore.

Reset. Every slot is DENIED with EV 0, every reserve entry EMPTY, and every rotation is in the ``seed =
1`` state; the table is cleared in Q x N cycles after each reset, during which no stream is ready.

Timing and hazards. One state machine owns the EV table, the reserve, the rotation registers and the
usable counts, and runs one operation at a time, so no two read-modify-writes overlap:

* a request takes 1 cycle to issue the first read, 1 cycle per visited candidate, and a response cycle
  in which the next operation is already accepted: 2 cycles per decision when the first candidate is
  chosen, ``1 + visits`` in general, N + 1 at most (plus backpressure);
* configure/reserve_configure/feedback take 2 cycles (read, then decide and write), the second
  overlapping the next accept, so back-to-back updates run at 1 per cycle, a LOSS with a replacement
  included; a seed takes 1 cycle.
* a host read (``slot_read``) is taken in a cycle in which no operation reads the table: no operation
  accepted (idle, a seed, a reserve_configure, a held response), or the last visit of a request (its
  speculative read of the next candidate is discarded anyway). So with requests every cycle a read
  still gets a cycle per decision, without delaying it; only an unbroken run of table updates holds
  reads. The answer leaves two cycles after the request was taken.

``watch`` never drops a record: records go through a 2-entry FIFO, and an update that may emit one
(``configure``, ``reserve_configure``, feedback LOSS / DENY / RESTORE; at most one record each) is only
accepted when the FIFO will have room in its decision cycle. With ``watch`` always ready this never
stalls; while ``watch`` is held, those updates wait (requests, seeds and other feedback go on).

Visits are pipelined: while the candidate read last cycle is decided (and its skip decrement written),
the next candidate is read speculatively; a choice just discards that read. The same slot can be read
in the cycle its decrement is written (at a rotation wrap, e.g. ``... 4 5 | 5 4 ...``, or an operation
accepted while an update writes), so the read port is transparent to the write port. When both updates
(configure, reserve_configure, seed, feedback, in that priority) and requests are waiting, they
alternate.
"""

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .layouts import FeedbackEvent, bits_for, feedback_layout, target_bits

__all__ = [
    "LFSR_TAPS",
    "STATS",
    "EvState",
    "PathSelector",
    "ReserveState",
    "TraceOutcome",
    "configure_layout",
    "entry_layout",
    "lfsr_wrap_matrix",
    "request_layout",
    "reserve_configure_layout",
    "reserve_entry_layout",
    "response_layout",
    "seed_layout",
    "slot_read_answer_layout",
    "slot_read_layout",
    "trace_layout",
    "watch_layout",
]

LFSR_TAPS = 0xB400  # x^16 + x^14 + x^13 + x^11 + 1, Galois form (§6.2)
LFSR_STEPS = 16  # per redraw, so every mask bit is fresh (§6.2)
SKIP_MAX = 15
MAX_BACKUPS = 4

STATS = (
    "retired",
    "restored",
    "guarded",
    "stale_feedback",
    "skipped_visits",
    "not_found",
    "config_rejected",
    "replaced",
)


class EvState(enum.Enum, shape=2):
    """Stored state of an EV slot (§6.1). SKIP is not stored: it is GOOD with skip > 0. The values are
    those of the register map's ``ev_slot`` STATE field and of ``mrcnic.model.ev.EvState`` (where 1 is
    SKIP), so configuration and read-back pass through the register file unchanged."""

    GOOD = 0
    ASSUMED_BAD = 2
    DENIED = 3


class ReserveState(enum.Enum, shape=2):
    """State of a reserve entry (§6.1, §6.4): unused, on the backup list, or on the probe list."""

    EMPTY = 0
    BACKUP = 1
    PROBING = 2


class TraceOutcome(enum.Enum, shape=3):
    """What the EV state machine did with one feedback event (``decision``)."""

    UNCHANGED = 0  # the target holds the EV but the event does not apply in its state (§6.4, §6.5)
    SKIP = 1  # ECN / TRIM on a GOOD slot: skip counter raised (saturating)
    RETIRED = 2  # LOSS: ASSUMED_BAD in place, probed there
    REPLACED = 3  # LOSS: the plane's oldest backup took the slot; the bad EV is probed in the reserve
    GUARDED = 4  # LOSS refused by the ev_min_active floor guard
    RESTORED = 5  # PROBE_OK(_SKIP): slot ASSUMED_BAD -> GOOD, or probed reserve entry -> BACKUP
    STALE = 6  # the target no longer holds the EV (or a non-restore event on a reserve target)
    HOST = 7  # DENY / RESTORE applied


def entry_layout() -> data.StructLayout:
    return data.StructLayout({"ev": 32, "state": EvState, "skip": 4})


def reserve_entry_layout(backups: int) -> data.StructLayout:
    """``order``: rank among the BACKUP entries of the same (QP, plane), 0 = oldest (next to take a slot)."""
    return data.StructLayout({"ev": 32, "state": ReserveState, "order": bits_for(max(backups, 1))})


def configure_layout(qps: int, ev_slots: int) -> data.StructLayout:
    return data.StructLayout({"qp": bits_for(qps), "slot": bits_for(ev_slots), "ev": 32, "state": EvState})


def reserve_configure_layout(qps: int, planes: int, backups: int) -> data.StructLayout:
    return data.StructLayout(
        {
            "qp": bits_for(qps),
            "plane": bits_for(planes),
            "index": bits_for(max(backups, 1)),
            "ev": 32,
            "valid": 1,  # 1: BACKUP with ev; 0: EMPTY
        }
    )


def trace_layout(qps: int, ev_slots: int, planes: int) -> data.StructLayout:
    return data.StructLayout(
        {
            "qp": bits_for(qps),
            "target": target_bits(ev_slots),
            "ev": 32,
            "event": FeedbackEvent,
            "outcome": TraceOutcome,
            "new_ev": 32,
            "plane_up": planes,
        }
    )


def watch_layout(qps: int, ev_slots: int) -> data.StructLayout:
    return data.StructLayout({"qp": bits_for(qps), "target": target_bits(ev_slots), "ev": 32, "start": 1})


def slot_read_layout(qps: int, ev_slots: int) -> data.StructLayout:
    """A host read of one EV slot (``slot_read``)."""
    return data.StructLayout({"qp": bits_for(qps), "slot": bits_for(ev_slots)})


def slot_read_answer_layout() -> data.StructLayout:
    """The answer to a ``slot_read``: the slot's EV and stored state."""
    return data.StructLayout({"ev": 32, "state": EvState})


def seed_layout(qps: int) -> data.StructLayout:
    return data.StructLayout({"qp": bits_for(qps), "seed": 16})


def request_layout(qps: int, ev_slots: int) -> data.StructLayout:
    return data.StructLayout({"qp": bits_for(qps), "avoid_slot": bits_for(ev_slots), "avoid_valid": 1})


def response_layout(qps: int, ev_slots: int, planes: int) -> data.StructLayout:
    return data.StructLayout(
        {"qp": bits_for(qps), "found": 1, "slot": bits_for(ev_slots), "ev": 32, "plane": bits_for(planes)}
    )


def lfsr_wrap_matrix(steps: int = LFSR_STEPS, taps: int = LFSR_TAPS) -> list[int]:
    """Row j: the mask of state bits whose XOR is bit j after ``steps`` LFSR steps (a linear map)."""
    rows = [1 << i for i in range(16)]
    for _ in range(steps):
        out = rows[0]
        rows = rows[1:] + [0]
        rows = [row ^ out if (taps >> i) & 1 else row for i, row in enumerate(rows)]
    return rows


def _lfsr_wrap_int(value: int) -> int:
    return sum(((bin(value & row).count("1") & 1) << j) for j, row in enumerate(lfsr_wrap_matrix()))


class PathSelector(wiring.Component):
    """EV slot table, reserve, per-QP LFSR rotation and EV state machine (see the module docstring)."""

    def __init__(self, *, qps: int, ev_slots: int, planes: int = 1, backups: int = 2):
        if ev_slots < 4 or ev_slots > 256 or ev_slots & (ev_slots - 1):
            raise ValueError(f"ev_slots must be a power of two from 4 to 256, not {ev_slots}")
        if planes < 1 or planes > 8 or planes & (planes - 1) or ev_slots % planes:
            raise ValueError(f"planes must be 1, 2, 4 or 8 and divide ev_slots, not {planes}")
        if qps < 1:
            raise ValueError(f"qps must be at least 1, not {qps}")
        if not 0 <= backups <= MAX_BACKUPS or backups * planes > ev_slots:
            raise ValueError(
                f"backups must be 0 .. {MAX_BACKUPS} with backups * planes <= ev_slots, not {backups}"
            )
        self.qps, self.ev_slots, self.planes, self.backups = qps, ev_slots, planes, backups
        self.targets = ev_slots + planes * backups  # probe targets per QP (the prober's ``targets``)
        members = {
            "configure": In(stream.Signature(configure_layout(qps, ev_slots))),
            "reserve_configure": In(stream.Signature(reserve_configure_layout(qps, planes, backups))),
            "seed": In(stream.Signature(seed_layout(qps))),
            "request": In(stream.Signature(request_layout(qps, ev_slots))),
            "response": Out(stream.Signature(response_layout(qps, ev_slots, planes))),
            "slot_read": In(stream.Signature(slot_read_layout(qps, ev_slots))),
            "slot_read_answer": Out(stream.Signature(slot_read_answer_layout())),
            "feedback": In(stream.Signature(feedback_layout(qps, ev_slots))),
            "watch": Out(stream.Signature(watch_layout(qps, ev_slots))),
            "decision": Out(trace_layout(qps, ev_slots, planes)),
            "decision_valid": Out(1),
            "plane_ready": In(planes, init=(1 << planes) - 1),
            "plane_up": In(planes, init=(1 << planes) - 1),
            "min_active": In(range(ev_slots + 1), init=ev_slots // 4),
        }
        members.update({f"stat_{name}": Out(32) for name in STATS})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        qps, n, planes, nb = self.qps, self.ev_slots, self.planes, self.backups
        slot_bits = bits_for(n)
        plane_bits = (planes - 1).bit_length()  # 0 when P = 1
        wrap_rows = lfsr_wrap_matrix()

        def wrap(lfsr):
            return Cat(*((lfsr & row).xor() for row in wrap_rows))

        # EV table, address {qp, slot}. Slots start DENIED (an unconfigured QP is never sprayed), and are
        # cleared again after every reset (state CLEAR) so they agree with the usable counts.
        denied = {"ev": 0, "state": EvState.DENIED, "skip": 0}
        m.submodules.table = table = Memory(shape=entry_layout(), depth=qps * n, init=[denied] * (qps * n))
        clear_addr = Signal(range(qps * n))
        wr = table.write_port()
        rd = table.read_port(transparent_for=(wr,))
        rd_used = Signal()  # an operation reads the table this cycle; else a host read may

        # Rotation state per QP (registers: Q is small). Reset = the §6.2 init with seed 1.
        lfsr_reset = _lfsr_wrap_int(1)
        rot_lfsr = Array(Signal(16, init=lfsr_reset, name=f"lfsr_{q}") for q in range(qps))
        rot_idx = Array(Signal(slot_bits, name=f"idx_{q}") for q in range(qps))
        rot_mask = Array(Signal(slot_bits, init=lfsr_reset & (n - 1), name=f"mask_{q}") for q in range(qps))

        # GOOD slots per (QP, plane); the usable count of a QP is the sum over its up planes.
        good = [
            [Signal(range(n // planes + 1), name=f"good_{q}_{p}") for p in range(planes)] for q in range(qps)
        ]

        # The operation in progress.
        op_qp = Signal(bits_for(qps))
        w_lfsr = Signal(16)  # rotation state after the visits made so far
        w_idx = Signal(slot_bits)
        w_mask = Signal(slot_bits)
        cand = Signal(slot_bits)  # the candidate whose table entry rd.data holds
        visits = Signal(range(n + 1))
        avoid_slot = Signal(slot_bits)
        avoid_valid = Signal()
        u_config = Signal()  # update: configure (1) or feedback (0)
        u_slot = Signal(target_bits(n))  # a slot, or for feedback a probe target
        u_ev = Signal(32)
        u_state = Signal(EvState)
        u_event = Signal(FeedbackEvent)
        u_rc = Signal(reserve_configure_layout(qps, planes, nb))
        resp = Signal(response_layout(qps, n, planes))
        last_was_update = Signal()

        stats = {name: getattr(self, f"stat_{name}") for name in STATS}
        bump = {name: Signal(name=f"bump_{name}") for name in STATS}
        for name in STATS:
            with m.If(bump[name]):
                m.d.sync += stats[name].eq(stats[name] + 1)

        usable = Signal(range(n + 1))
        m.d.comb += usable.eq(
            sum(Mux(self.plane_up[p], Array(good[q][p] for q in range(qps))[op_qp], 0) for p in range(planes))
        )

        def plane_of(slot):
            return slot[: bits_for(planes)] if planes > 1 else Const(0, 1)

        # Watch records: a 2-entry FIFO, loaded by the decision of an update (at most one record each).
        m.submodules.watch_fifo = watch_fifo = fifo.SyncFIFO(width=watch_layout(qps, n).size, depth=2)
        wl_en = Signal()
        wl = Signal(watch_layout(qps, n))
        m.d.comb += [
            wl.qp.eq(op_qp),
            watch_fifo.w_data.eq(wl.as_value()),
            watch_fifo.w_en.eq(wl_en),
            self.watch.valid.eq(watch_fifo.r_rdy),
            self.watch.payload.eq(watch_fifo.r_data),
            watch_fifo.r_en.eq(self.watch.ready),
        ]
        # An update accepted now decides next cycle: the FIFO must then have room for its record.
        watch_room = Signal()
        drained = watch_fifo.r_rdy & watch_fifo.r_en
        m.d.comb += watch_room.eq(watch_fifo.level + wl_en - drained <= 1)

        def emit(target, ev, start):
            m.d.comb += [wl_en.eq(1), wl.target.eq(target), wl.ev.eq(ev), wl.start.eq(start)]

        # Reserve, registers indexed (QP * P + plane) * B + index; reset = all EMPTY. Every access is to
        # the group (op_qp, g_plane) of the operation being decided.
        g_plane = Signal(range(planes))
        g_base = Signal(range(qps * planes * max(nb, 1) + 1))
        m.d.comb += g_base.eq((Cat(g_plane[:plane_bits], op_qp) if plane_bits else op_qp) * nb)
        res = Signal(data.ArrayLayout(reserve_entry_layout(nb), qps * planes * nb)) if nb else None
        grp = [res[g_base + b] for b in range(nb)]
        is_backup = [e.state == ReserveState.BACKUP for e in grp]
        backups_now = Signal(range(nb + 1))  # BACKUP entries in the group
        m.d.comb += backups_now.eq(sum(is_backup) if nb else 0)
        oldest = Signal(range(max(nb, 1)))  # the BACKUP entry with rank 0 (valid when backups_now > 0)
        for b in reversed(range(nb)):
            with m.If(is_backup[b] & (grp[b].order == 0)):
                m.d.comb += oldest.eq(b)

        # Reserve write (comb control): entry rs_idx of the group := {rs_state, rs_ev}; it leaves the
        # backup FIFO if it was in it, and joins it at the tail when rs_state is BACKUP.
        rs_en = Signal()
        rs_idx = Signal(range(max(nb, 1)))
        rs_state = Signal(ReserveState)
        rs_ev = Signal(32)
        if nb:
            sel = Array(grp)[rs_idx]
            was_backup = sel.state == ReserveState.BACKUP
            with m.If(rs_en):
                for b in range(nb):
                    with m.If(rs_idx == b):
                        m.d.sync += [
                            res[g_base + b].state.eq(rs_state),
                            res[g_base + b].ev.eq(rs_ev),
                            res[g_base + b].order.eq(backups_now - was_backup),
                        ]
                    with m.Elif(was_backup & is_backup[b] & (grp[b].order > sel.order)):
                        m.d.sync += res[g_base + b].order.eq(grp[b].order - 1)

        def reserve_set(index, state, ev):
            m.d.comb += [rs_en.eq(1), rs_idx.eq(index), rs_state.eq(state), rs_ev.eq(ev)]

        def reserve_target(plane, index):
            return n + plane * nb + index

        def advance(lfsr, idx, mask):
            """(lfsr, idx, mask) after one visit: idx + 1, and wrap() when idx comes back to 0."""
            wrapped = idx == n - 1
            new_lfsr = wrap(lfsr)
            return [
                w_lfsr.eq(Mux(wrapped, new_lfsr, lfsr)),
                w_idx.eq(idx + 1),
                w_mask.eq(Mux(wrapped, new_lfsr[:slot_bits], mask)),
            ]

        def accept():
            """Take the next operation (from IDLE, or in the last cycle of the previous one)."""
            cfg, rc, sd, fb, req = (
                self.configure,
                self.reserve_configure,
                self.seed,
                self.feedback,
                self.request,
            )
            # Updates that may emit a watch record wait for room (never a dropped record).
            ev_kind = fb.payload.event
            may_emit = (
                (ev_kind == FeedbackEvent.LOSS)
                | (ev_kind == FeedbackEvent.DENY)
                | (ev_kind == FeedbackEvent.RESTORE)
            )
            cfg_go = cfg.valid & watch_room
            rc_go = rc.valid & watch_room
            fb_go = fb.valid & (watch_room | ~may_emit)
            any_update = cfg_go | rc_go | sd.valid | fb_go
            with m.If(req.valid & ~(any_update & ~last_was_update)):
                q = req.payload.qp
                first = rot_idx[q] ^ rot_mask[q]
                m.d.comb += [req.ready.eq(1), rd.addr.eq(Cat(first, q)), rd_used.eq(1)]
                m.d.sync += [
                    op_qp.eq(q),
                    cand.eq(first),
                    visits.eq(1),
                    avoid_slot.eq(req.payload.avoid_slot),
                    avoid_valid.eq(req.payload.avoid_valid),
                    last_was_update.eq(0),
                ]
                m.d.sync += advance(rot_lfsr[q], rot_idx[q], rot_mask[q])
                m.next = "VISIT"
            with m.Elif(cfg_go):
                m.d.comb += [
                    cfg.ready.eq(1),
                    rd.addr.eq(Cat(cfg.payload.slot, cfg.payload.qp)),
                    rd_used.eq(1),
                ]
                state = cfg.payload.state.as_value()
                m.d.sync += [
                    op_qp.eq(cfg.payload.qp),
                    u_config.eq(1),
                    u_slot.eq(cfg.payload.slot),
                    u_ev.eq(cfg.payload.ev),
                    u_state.as_value().eq(Mux(state == 1, EvState.GOOD, state)),  # SKIP: GOOD
                    last_was_update.eq(1),
                ]
                m.next = "UPDATE"
            with m.Elif(rc_go):
                m.d.comb += rc.ready.eq(1)
                m.d.sync += [op_qp.eq(rc.payload.qp), u_rc.eq(rc.payload), last_was_update.eq(1)]
                m.next = "RESERVE"
            with m.Elif(sd.valid):
                q = sd.payload.qp
                seed = Mux(sd.payload.seed == 0, 1, sd.payload.seed)
                m.d.comb += sd.ready.eq(1)
                m.d.sync += [
                    rot_lfsr[q].eq(wrap(seed)),
                    rot_idx[q].eq(0),
                    rot_mask[q].eq(wrap(seed)[:slot_bits]),
                    last_was_update.eq(1),
                ]
                m.next = "IDLE"
            with m.Elif(fb_go):
                m.d.comb += [
                    fb.ready.eq(1),
                    rd.addr.eq(Cat(fb.payload.slot[:slot_bits], fb.payload.qp)),
                    rd_used.eq(1),
                ]
                m.d.sync += [
                    op_qp.eq(fb.payload.qp),
                    u_config.eq(0),
                    u_slot.eq(fb.payload.slot),
                    u_ev.eq(fb.payload.ev),
                    u_event.eq(fb.payload.event),
                    last_was_update.eq(1),
                ]
                m.next = "UPDATE"
            with m.Else():
                m.next = "IDLE"

        entry = rd.data
        m.d.comb += wr.data.eq(entry)  # default: write back what was read, with the changes below

        with m.FSM(init="CLEAR") as fsm:
            with m.State("CLEAR"):
                m.d.comb += [wr.addr.eq(clear_addr), wr.data.eq(entry_layout().const(denied)), wr.en.eq(1)]
                m.d.sync += clear_addr.eq(clear_addr + 1)
                with m.If(clear_addr == qps * n - 1):
                    m.next = "IDLE"

            with m.State("IDLE"):
                accept()

            with m.State("VISIT"):
                # §6.3 for candidate ``cand``; meanwhile read the next candidate (used only on a pass).
                plane = plane_of(cand)
                is_good = entry.state == EvState.GOOD
                up = self.plane_up.bit_select(plane, 1)
                ready = self.plane_ready.bit_select(plane, 1)
                skipping = is_good & up & (entry.skip != 0)  # steps 1-3
                avoided = avoid_valid & (cand == avoid_slot) & (usable >= 2)  # step 5
                choose = is_good & up & (entry.skip == 0) & ready & ~avoided
                nxt = w_idx ^ w_mask
                # The last visit's speculative read is discarded: a host read may take the port (this
                # puts choose, from rd.data, in front of the read address).
                m.d.comb += [rd.addr.eq(Cat(nxt, op_qp)), rd_used.eq(~(choose | (visits == n)))]
                m.d.sync += cand.eq(nxt)
                with m.If(skipping):
                    m.d.comb += [
                        wr.addr.eq(Cat(cand, op_qp)),
                        wr.data.skip.eq(entry.skip - 1),
                        wr.en.eq(1),
                        bump["skipped_visits"].eq(1),
                    ]
                with m.If(choose | (visits == n)):
                    m.d.sync += [
                        rot_lfsr[op_qp].eq(w_lfsr),
                        rot_idx[op_qp].eq(w_idx),
                        rot_mask[op_qp].eq(w_mask),
                        resp.qp.eq(op_qp),
                        resp.found.eq(choose),
                        resp.slot.eq(cand),
                        resp.ev.eq(entry.ev),
                        resp.plane.eq(plane),
                    ]
                    m.d.comb += bump["not_found"].eq(~choose)
                    m.next = "RESPOND"
                with m.Else():
                    m.d.sync += advance(w_lfsr, w_idx, w_mask)
                    m.d.sync += visits.eq(visits + 1)

            with m.State("RESPOND"):
                m.d.comb += [self.response.valid.eq(1), self.response.payload.eq(resp)]
                with m.If(self.response.ready):
                    accept()

            with m.State("RESERVE"):
                # reserve_configure: registers only; decided here so it never overlaps another reserve
                # write (the next operation is accepted in this cycle and decides in the next).
                rcp = u_rc
                m.d.comb += g_plane.eq(rcp.plane)
                ok = (rcp.qp < qps) & (rcp.plane < planes) & (rcp.index < nb)
                ok &= ~rcp.valid | (rcp.ev[29:32] == rcp.plane)
                if nb:
                    with m.If(ok):
                        old = Array(grp)[rcp.index]
                        new_state = Mux(rcp.valid, ReserveState.BACKUP, ReserveState.EMPTY)
                        reserve_set(rcp.index, new_state, rcp.ev)
                        with m.If(old.state == ReserveState.PROBING):
                            emit(reserve_target(rcp.plane, rcp.index), old.ev, 0)
                    with m.Else():
                        m.d.comb += bump["config_rejected"].eq(1)
                else:
                    m.d.comb += bump["config_rejected"].eq(1)  # no reserve
                accept()

            with m.State("UPDATE"):
                # Decide on the entry read last cycle, write it back, then take the next operation.
                plane = plane_of(u_slot)
                is_good = entry.state == EvState.GOOD
                is_bad = entry.state == EvState.ASSUMED_BAD
                probe_ok = (u_event == FeedbackEvent.PROBE_OK) | (u_event == FeedbackEvent.PROBE_OK_SKIP)
                inc, dec = Signal(), Signal()  # GOOD count of (op_qp, plane) +1 / -1
                m.d.comb += wr.addr.eq(Cat(u_slot[:slot_bits], op_qp))
                m.d.comb += g_plane.eq(plane)
                trace = self.decision
                m.d.comb += [
                    self.decision_valid.eq(~u_config),
                    trace.qp.eq(op_qp),
                    trace.target.eq(u_slot),
                    trace.ev.eq(u_ev),
                    trace.event.eq(u_event),
                    trace.plane_up.eq(self.plane_up),
                ]

                def outcome(value):
                    m.d.comb += trace.outcome.eq(value)

                with m.If(u_config):
                    with m.If(u_ev[29:32] == plane):
                        m.d.comb += [
                            wr.data.ev.eq(u_ev),
                            wr.data.state.eq(u_state),
                            wr.data.skip.eq(0),
                            wr.en.eq(1),
                            inc.eq(u_state == EvState.GOOD),
                            dec.eq(is_good),
                        ]
                        with m.If(is_bad):
                            emit(u_slot, entry.ev, 0)
                    with m.Else():
                        m.d.comb += bump["config_rejected"].eq(1)
                with m.Elif(u_slot[slot_bits]):
                    # A reserve target (>= N): only the prober's restore of a probed EV means something.
                    r_hit = Signal()
                    r_index = Signal(range(max(nb, 1)))
                    with m.Switch(u_slot[:slot_bits]):
                        for p in range(planes):
                            for b in range(nb):
                                with m.Case(p * nb + b):
                                    m.d.comb += [r_hit.eq(1), g_plane.eq(p), r_index.eq(b)]
                    r_entry = Array(grp)[r_index] if nb else None
                    restore = r_hit & probe_ok & (op_qp < qps)
                    if nb:
                        restore &= (r_entry.state == ReserveState.PROBING) & (r_entry.ev == u_ev)
                    with m.If(restore):
                        reserve_set(r_index, ReserveState.BACKUP, u_ev)
                        m.d.comb += bump["restored"].eq(1)
                        outcome(TraceOutcome.RESTORED)
                    with m.Else():
                        m.d.comb += bump["stale_feedback"].eq(1)
                        outcome(TraceOutcome.STALE)
                with m.Elif(entry.ev != u_ev):
                    m.d.comb += bump["stale_feedback"].eq(1)
                    outcome(TraceOutcome.STALE)
                with m.Else():
                    with m.Switch(u_event):
                        with m.Case(FeedbackEvent.ECN, FeedbackEvent.TRIM):
                            amount = Mux(u_event == FeedbackEvent.TRIM, 4, 1)
                            total = entry.skip + amount
                            with m.If(is_good):
                                m.d.comb += [
                                    wr.data.skip.eq(Mux(total > SKIP_MAX, SKIP_MAX, total)),
                                    wr.en.eq(1),
                                ]
                                outcome(TraceOutcome.SKIP)
                        with m.Case(FeedbackEvent.LOSS):
                            with m.If(is_good & self.plane_up.bit_select(plane, 1)):
                                # §6.4 guard and replacement: the oldest backup first (no guard: the
                                # usable count stays), else the floor guard, else retire in place.
                                with m.If(backups_now != 0):
                                    m.d.comb += [
                                        wr.data.ev.eq(Array(grp)[oldest].ev if nb else 0),
                                        wr.data.state.eq(EvState.GOOD),
                                        wr.data.skip.eq(0),
                                        wr.en.eq(1),
                                        bump["retired"].eq(1),
                                        bump["replaced"].eq(1),
                                    ]
                                    reserve_set(oldest, ReserveState.PROBING, u_ev)
                                    emit(reserve_target(plane, oldest), u_ev, 1)
                                    outcome(TraceOutcome.REPLACED)
                                    m.d.comb += trace.new_ev.eq(Array(grp)[oldest].ev if nb else 0)
                                with m.Elif(usable <= self.min_active):
                                    # The slot is usable, so it would leave usable - 1.
                                    m.d.comb += bump["guarded"].eq(1)
                                    outcome(TraceOutcome.GUARDED)
                                with m.Else():
                                    m.d.comb += [
                                        wr.data.state.eq(EvState.ASSUMED_BAD),
                                        wr.data.skip.eq(0),
                                        wr.en.eq(1),
                                        dec.eq(1),
                                        bump["retired"].eq(1),
                                    ]
                                    emit(u_slot, u_ev, 1)
                                    outcome(TraceOutcome.RETIRED)
                        with m.Case(FeedbackEvent.PROBE_OK, FeedbackEvent.PROBE_OK_SKIP):
                            with m.If(is_bad):
                                m.d.comb += [
                                    wr.data.state.eq(EvState.GOOD),
                                    wr.data.skip.eq(u_event == FeedbackEvent.PROBE_OK_SKIP),
                                    wr.en.eq(1),
                                    inc.eq(1),
                                    bump["restored"].eq(1),
                                ]
                                outcome(TraceOutcome.RESTORED)
                        with m.Case(FeedbackEvent.DENY):
                            outcome(TraceOutcome.HOST)
                            m.d.comb += [
                                wr.data.state.eq(EvState.DENIED),
                                wr.data.skip.eq(0),
                                wr.en.eq(1),
                                dec.eq(is_good),
                            ]
                            with m.If(is_bad):
                                emit(u_slot, u_ev, 0)
                        with m.Case(FeedbackEvent.RESTORE):
                            outcome(TraceOutcome.HOST)
                            m.d.comb += [
                                wr.data.state.eq(EvState.GOOD),
                                wr.data.skip.eq(0),
                                wr.en.eq(1),
                                inc.eq(~is_good),
                                bump["restored"].eq(is_bad),
                            ]
                            with m.If(is_bad):
                                emit(u_slot, u_ev, 0)
                for q in range(qps):
                    for p in range(planes):
                        with m.If((op_qp == q) & (plane == p)):
                            m.d.sync += good[q][p].eq(good[q][p] + inc - dec)
                accept()

        # -- host reads: the table's read port in a cycle no operation uses (module docstring)
        sr, sa = self.slot_read, self.slot_read_answer
        reading = Signal()  # a read was issued last cycle: rd.data holds its entry
        read_oob = Signal()  # ... for a QP that does not exist
        answer = Signal(slot_read_answer_layout())
        m.d.comb += sa.payload.eq(answer)
        m.d.sync += reading.eq(0)
        with m.If(sa.valid & sa.ready):
            m.d.sync += sa.valid.eq(0)
        with m.If(~rd_used & ~fsm.ongoing("CLEAR") & ~reading & ~sa.valid):
            m.d.comb += [sr.ready.eq(1), rd.addr.eq(Cat(sr.payload.slot, sr.payload.qp))]
            m.d.sync += [reading.eq(sr.valid), read_oob.eq(sr.payload.qp >= qps)]
        with m.If(reading):
            m.d.sync += [sa.valid.eq(1), answer.ev.eq(entry.ev), answer.state.eq(entry.state)]
            with m.If(read_oob):
                m.d.sync += [answer.ev.eq(0), answer.state.eq(EvState.DENIED)]
        return m
