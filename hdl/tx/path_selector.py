"""Path selector: which EV slot (path) the next packet of a QP takes, and the per-slot EV state machine.

Ref: docs/protocol.md §6.1 (slots, slot s on plane s mod P), §6.2 (rotation: 16-bit Galois LFSR advanced
16 steps per redraw, candidate = idx XOR mask), §6.3 (the six rules of one transmission), §6.4 (EV state
machine and the ``ev_min_active`` floor guard), §6.5 (stale feedback, losses on down planes).

Members (Q = ``qps``, N = ``ev_slots``, P = ``planes``):

* ``configure``: In, ``{qp, slot, ev, state}``: the host writes one EV slot (skip counter cleared). A
  write whose ``ev`` names another plane than ``slot mod P`` (EV[31:29], §5.1) is dropped and counted
  in ``stat_config_rejected`` (§6.1: the NIC rejects it).
* ``seed``: In, ``{qp, seed}``: register ``ev_lfsr_seed`` and the §6.2 init of that QP's rotation:
  ``lfsr = seed; idx = 0; wrap()``. A zero seed (forbidden by §6.2) is taken as 1 so the LFSR never
  locks up. After reset every QP is in the state of ``seed = 1``.
* ``request``: In, ``{qp, avoid_slot, avoid_valid}``: choose an EV for the next packet of ``qp``.
  ``avoid_valid``: a retransmission; ``avoid_slot`` is the slot of its previous attempt (§6.3 step 5).
* ``response``: Out, ``{qp, found, slot, ev, plane}``, one per request, in request order. ``found = 0``
  when N visits chose nothing; the rotation state and the decremented skip counters are kept.
* ``feedback``: In, ``feedback_layout(qps, ev_slots)`` (``layouts.FeedbackEvent``). Ignored and
  counted in ``stat_stale_feedback`` when the slot no longer holds ``ev``. Host events (DENY,
  RESTORE) carry the EV too and are checked the same way.
* ``plane_ready``: In(P), bit p: the port of plane p can take a packet now (§6.3 step 4).
* ``plane_up``: In(P), bit p: plane p is up, locally and as reported by the peer (§6.3 step 2).
* ``min_active``: In, register ``ev_min_active`` (default N/4).

* ``stat_*``: Out(32), event counters, wrapping modulo 2^32 (software takes differences):
  ``stat_retired`` (GOOD -> ASSUMED_BAD), ``stat_restored`` (ASSUMED_BAD -> GOOD, by PROBE_OK or
  RESTORE), ``stat_guarded`` (losses the floor guard refused), ``stat_stale_feedback``,
  ``stat_skipped_visits`` (visits that decremented a skip counter), ``stat_not_found`` (responses with
  ``found = 0``), ``stat_config_rejected``.

``plane_ready`` and ``plane_up`` are read in every visit of a request; a feedback event reads
``plane_up`` and ``min_active`` in the cycle after its transfer. The N visits of one request continue
the rotation, so when the mask is redrawn part-way they need not cover every slot: a request can find
nothing although a usable, ready slot exists (§6.3 as written; the next request will reach it).

Feedback semantics (§6.4; a slot is *usable* when it is GOOD, any skip, on a plane that is up):

* ECN: GOOD -> skip = min(skip + 1, 15). TRIM: GOOD -> skip = min(skip + 4, 15). No effect otherwise.
* LOSS: GOOD on an up plane -> ASSUMED_BAD (skip 0), unless the usable count would fall below
  ``min_active``; then unchanged (``stat_guarded``). On a down plane, or a slot not GOOD: no change
  (§6.5). Future work: the backup list of §6.4 (a backup EV takes the slot, the bad EV goes to the probe
  list) and the host notification of GOOD <-> ASSUMED_BAD changes are not in this block yet.
* PROBE_OK: ASSUMED_BAD -> GOOD, skip 0. No effect on GOOD or DENIED slots (a late probe answer must
  not undo the host's DENY). §6.4's "skip = 1 if the last answer had M = SKIP_ONCE" is PROBE_OK
  followed by ECN.
* DENY: any -> DENIED, skip 0 (not guarded: the host decides). RESTORE: any -> GOOD, skip 0.

Reset. Every slot is DENIED with EV 0 and every rotation is in the ``seed = 1`` state; the table is
cleared in Q x N cycles after each reset, during which no stream is ready.

Timing and hazards. One state machine owns the EV table, the rotation registers and the usable
counts, and runs one operation at a time, so no two read-modify-writes overlap:

* a request takes 1 cycle to issue the first read, 1 cycle per visited candidate, and a response cycle
  in which the next operation is already accepted: 2 cycles per decision when the first candidate is
  chosen, ``1 + visits`` in general, N + 1 at most (plus backpressure);
* configure/feedback take 2 cycles (read, then decide and write), the second overlapping the next
  accept, so back-to-back updates run at 1 per cycle; a seed takes 1 cycle.

Visits are pipelined: while the candidate read last cycle is decided (and its skip decrement written),
the next candidate is read speculatively; a choice just discards that read. The same slot can be read
in the cycle its decrement is written (at a rotation wrap, e.g. ``... 4 5 | 5 4 ...``, or an operation
accepted while an update writes), so the read port is transparent to the write port. When both updates
(configure, seed, feedback, in that priority) and requests are waiting, they alternate.
"""

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .layouts import FeedbackEvent, bits_for, feedback_layout

__all__ = [
    "LFSR_TAPS",
    "STATS",
    "EvState",
    "PathSelector",
    "configure_layout",
    "entry_layout",
    "lfsr_wrap_matrix",
    "request_layout",
    "response_layout",
    "seed_layout",
]

LFSR_TAPS = 0xB400  # x^16 + x^14 + x^13 + x^11 + 1, Galois form (§6.2)
LFSR_STEPS = 16  # per redraw, so every mask bit is fresh (§6.2)
SKIP_MAX = 15

STATS = (
    "retired",
    "restored",
    "guarded",
    "stale_feedback",
    "skipped_visits",
    "not_found",
    "config_rejected",
)


class EvState(enum.Enum, shape=2):
    """Stored state of an EV slot (§6.1). SKIP is not stored: it is GOOD with skip > 0."""

    GOOD = 0
    ASSUMED_BAD = 1
    DENIED = 2


def entry_layout() -> data.StructLayout:
    return data.StructLayout({"ev": 32, "state": EvState, "skip": 4})


def configure_layout(qps: int, ev_slots: int) -> data.StructLayout:
    return data.StructLayout({"qp": bits_for(qps), "slot": bits_for(ev_slots), "ev": 32, "state": EvState})


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
    """EV slot table, per-QP LFSR rotation and EV state machine (see the module docstring)."""

    def __init__(self, *, qps: int, ev_slots: int, planes: int = 1):
        if ev_slots < 4 or ev_slots > 256 or ev_slots & (ev_slots - 1):
            raise ValueError(f"ev_slots must be a power of two from 4 to 256, not {ev_slots}")
        if planes < 1 or planes > 8 or planes & (planes - 1) or ev_slots % planes:
            raise ValueError(f"planes must be 1, 2, 4 or 8 and divide ev_slots, not {planes}")
        if qps < 1:
            raise ValueError(f"qps must be at least 1, not {qps}")
        self.qps, self.ev_slots, self.planes = qps, ev_slots, planes
        members = {
            "configure": In(stream.Signature(configure_layout(qps, ev_slots))),
            "seed": In(stream.Signature(seed_layout(qps))),
            "request": In(stream.Signature(request_layout(qps, ev_slots))),
            "response": Out(stream.Signature(response_layout(qps, ev_slots, planes))),
            "feedback": In(stream.Signature(feedback_layout(qps, ev_slots))),
            "plane_ready": In(planes, init=(1 << planes) - 1),
            "plane_up": In(planes, init=(1 << planes) - 1),
            "min_active": In(range(ev_slots + 1), init=ev_slots // 4),
        }
        members.update({f"stat_{name}": Out(32) for name in STATS})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        qps, n, planes = self.qps, self.ev_slots, self.planes
        slot_bits = bits_for(n)
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
        u_slot = Signal(slot_bits)
        u_ev = Signal(32)
        u_state = Signal(EvState)
        u_event = Signal(FeedbackEvent)
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
            cfg, sd, fb, req = self.configure, self.seed, self.feedback, self.request
            any_update = cfg.valid | sd.valid | fb.valid
            with m.If(req.valid & ~(any_update & ~last_was_update)):
                q = req.payload.qp
                first = rot_idx[q] ^ rot_mask[q]
                m.d.comb += [req.ready.eq(1), rd.addr.eq(Cat(first, q))]
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
            with m.Elif(cfg.valid):
                m.d.comb += [cfg.ready.eq(1), rd.addr.eq(Cat(cfg.payload.slot, cfg.payload.qp))]
                m.d.sync += [
                    op_qp.eq(cfg.payload.qp),
                    u_config.eq(1),
                    u_slot.eq(cfg.payload.slot),
                    u_ev.eq(cfg.payload.ev),
                    u_state.eq(cfg.payload.state),
                    last_was_update.eq(1),
                ]
                m.next = "UPDATE"
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
            with m.Elif(fb.valid):
                m.d.comb += [fb.ready.eq(1), rd.addr.eq(Cat(fb.payload.slot, fb.payload.qp))]
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

        with m.FSM(init="CLEAR"):
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
                m.d.comb += rd.addr.eq(Cat(nxt, op_qp))
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

            with m.State("UPDATE"):
                # Decide on the entry read last cycle, write it back, then take the next operation.
                plane = plane_of(u_slot)
                is_good = entry.state == EvState.GOOD
                inc, dec = Signal(), Signal()  # GOOD count of (op_qp, plane) +1 / -1
                m.d.comb += wr.addr.eq(Cat(u_slot, op_qp))
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
                    with m.Else():
                        m.d.comb += bump["config_rejected"].eq(1)
                with m.Elif(entry.ev != u_ev):
                    m.d.comb += bump["stale_feedback"].eq(1)
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
                        with m.Case(FeedbackEvent.LOSS):
                            with m.If(is_good & self.plane_up.bit_select(plane, 1)):
                                # The slot is usable, so it would leave usable - 1 (§6.4 guard).
                                with m.If(usable <= self.min_active):
                                    m.d.comb += bump["guarded"].eq(1)
                                with m.Else():
                                    m.d.comb += [
                                        wr.data.state.eq(EvState.ASSUMED_BAD),
                                        wr.data.skip.eq(0),
                                        wr.en.eq(1),
                                        dec.eq(1),
                                        bump["retired"].eq(1),
                                    ]
                        with m.Case(FeedbackEvent.PROBE_OK):
                            with m.If(entry.state == EvState.ASSUMED_BAD):
                                m.d.comb += [
                                    wr.data.state.eq(EvState.GOOD),
                                    wr.data.skip.eq(0),
                                    wr.en.eq(1),
                                    inc.eq(1),
                                    bump["restored"].eq(1),
                                ]
                        with m.Case(FeedbackEvent.DENY):
                            m.d.comb += [
                                wr.data.state.eq(EvState.DENIED),
                                wr.data.skip.eq(0),
                                wr.en.eq(1),
                                dec.eq(is_good),
                            ]
                        with m.Case(FeedbackEvent.RESTORE):
                            m.d.comb += [
                                wr.data.state.eq(EvState.GOOD),
                                wr.data.skip.eq(0),
                                wr.en.eq(1),
                                inc.eq(~is_good),
                                bump["restored"].eq(entry.state == EvState.ASSUMED_BAD),
                            ]
                for q in range(qps):
                    for p in range(planes):
                        with m.If((op_qp == q) & (plane == p)):
                            m.d.sync += good[q][p].eq(good[q][p] + inc - dec)
                accept()

        return m
