"""TX tracker: the sender's scoreboard, inflight, release, loss inference, retransmit requests.

Ref: docs/protocol.md §6.4-§6.5 (feedback -> path events, attribution through the scoreboard entry of
the trigger / NACKed PSN, looked up before the SACK releases anything), §7.2 (SACK fields), §7.3 (NACK
reactions), §7.7 (scoreboard, inflight, release, time rule, timeout, retransmission, retry budget,
window limit, RTT samples). Serial arithmetic on 24-bit PSNs (§3.3) and on 32-bit cycle times.

Parameters: ``qps`` (Q), ``window`` (W, a power of two, default 256), ``ev_slots`` (N).

State.

* Records, one ``lib.memory.Memory`` of Q * W entries at address ``qp * W + psn mod W``:
  ``{slot, ev, send_time, rtx_count, state (TrackState), req, length}``. ``req`` marks a QUEUED entry
  whose retransmit request has been emitted. A record is *outstanding* iff its PSN lies in
  ``(cack_s, next_psn)``; the window limit (new PSNs only up to ``cack_s + W``, ``psn_limit``) makes
  the index of an outstanding PSN unique, so records outside the range are simply ignored (configure
  does not have to clear them; a new PSN overwrites its record).
  A QP that was never configured behaves as one configured with ``initial_psn = 1``.
* Per QP (registers): ``cack_s``, ``next_psn``, ``inflight``, ``rack_time`` + ``rack_valid``,
  ``rack_top``, error.

Members.

* ``configure``: In stream ``{qp, initial_psn}``: cack_s = initial_psn - 1, next_psn = initial_psn,
  inflight 0, rack_time invalid, error cleared.
* ``now``: In(32), time in cycles; ``now_ts``: In(16), the TSETH timestamp clock (for RTT samples);
  ``rto_cycles``, ``reorder_cycles`` (Δ of the time rule): In(32); ``retry_budget``: In(3).
* ``sent``: In stream ``{qp, psn, slot, ev, length, rtx}``, one per transmitted data packet. rtx = 0:
  a new PSN (must be ``next_psn``): record {IN_FLIGHT, rtx_count 0, send_time = ``now`` in the cycle
  the record is taken}, next_psn += 1.
  rtx = 1: a retransmission of an outstanding PSN (ignored otherwise): rtx_count += 1, new slot, ev,
  send_time, IN_FLIGHT. Both: inflight += length.
* ``feedback``: In stream :func:`~mrcnic.hdl.rx.feedback_decoder.feedback_packet_layout`.

  - SACK: (1) trigger (trigger_valid, not a probe answer): if the trigger PSN is outstanding (before
    release), its ``ev`` equals the echoed ev and the SACK carries a path event (ECN, or LOSS for
    M = ALWAYS_SKIP), emit ``path_event`` {qp, slot, ev, event}; RTT valid iff outstanding with
    rtx_count 0. (2) release: if cack_psn is in ``(cack_s, next_psn)`` the PSNs cack_s+1 .. cack_psn
    are walked and freed (a cack_psn at or below cack_s, or beyond the highest PSN sent (§7.5 row 13),
    releases nothing). (3) bitmap: every set bit i whose PSN sack_base + i is in the (new) range
    ``(cack_s, next_psn)`` makes its record SACKED (from IN_FLIGHT or QUEUED). Every IN_FLIGHT entry
    released or SACKed: inflight -= length, newly_acked += length, rack_time = max(rack_time,
    send_time). ``rack_top``, the highest PSN reported on since rack_time moved, becomes the SACK's
    window top (sack_base + 63) if this SACK moved rack_time, else the later of the two. (4) one
    ``cc_event`` {SACK, newly_acked, rtt_valid, rtt = now_ts - tx_timestamp, ecn} per SACK (probe
    answers too, with rtt_valid 0).
  - NACK: if nack_psn is outstanding and IN_FLIGHT or QUEUED (else ``stat_stale_feedback`` += 1):
    UNEXP_EVENT (not retryable) puts the QP in ERROR (``error`` {qp, psn}); otherwise the entry becomes
    QUEUED (inflight -= length if it was IN_FLIGHT). TRIMMED / TRIMMED_LASTHOP: the retransmit request
    is emitted at once (front), ``cc_event`` TRIM, and for TRIMMED (has_path_event) with a matching ev
    a ``path_event`` TRIM. Other codes: the request is left to the background scan; "no earlier than
    base_rtt" (§7.3) is not enforced, the scan's delay stands in for it.
  - ACK: ``ack_out`` {qp, msn, nak, syndrome} (work-request completion is the host interface's).
* Background scan (whenever nothing else is pending), one record per cycle over all Q * W records,
  skipping QPs in ERROR:

  - an outstanding IN_FLIGHT entry with ``send_time + reorder_cycles <= rack_time`` and a PSN at or
    below ``rack_top`` (time rule, if a rack_time exists; counted first) or with ``now - send_time >=
    rto_cycles`` (timeout) is lost: QUEUED, inflight -= length, ``path_event`` LOSS, ``cc_event``
    LOSS, ``stat_lost_time_rule`` / ``stat_timeouts`` += 1, and its retransmit request at once;
  - an outstanding QUEUED entry without a request gets one.

  A request for an entry whose rtx_count already equals ``retry_budget`` puts the QP in ERROR
  instead: ``qp_error`` bit, one ``error`` {qp, psn}, ``stat_retry_exceeded`` += 1, and nothing more
  is requested or declared lost on that QP (until it is configured again).
* ``retransmit``: Out stream {qp, psn, avoid_slot}; the entry stays QUEUED until its ``sent`` (rtx = 1).
* ``path_event``: Out stream :func:`~mrcnic.hdl.tx.layouts.feedback_layout` (to ``PathSelector.feedback``,
  which drops it if the slot no longer holds the ev).
* ``cc_event``: Out stream {qp, kind (CcKind), newly_acked, rtt_valid, rtt, ecn}; ``newly_acked`` is
  don't-care in LOSS and TRIM events, ``rtt`` without ``rtt_valid`` (the congestion controller reads
  neither then, and clearing them would gate every bit).
* ``error``: Out stream {qp, psn}.
* ``psn_limit`` (ArrayLayout(24, Q), cack_s + W), ``inflight`` (ArrayLayout(32, Q)), ``qp_error`` (Q).
* ``idle``: Out(1), the FSM is scanning with no output pending (for tests and status); the Python
  attribute ``scan_ptr`` (not a port) is the record the scan looks at next, for white-box tests.
* A QP in ERROR still processes SACKs and NACKs (release, inflight, states), but gets no requests, no
  loss declarations and no further ``error`` records; UNEXP_EVENT does not count as retry exceeded.
* Counters Out(32): ``stat_lost_time_rule``, ``stat_timeouts``, ``stat_retransmit_requests``,
  ``stat_stale_feedback``, ``stat_retry_exceeded``.

Timing. One operation at a time; priority configure > sent > feedback > scan; an operation starts only
when the output records of the previous one have been taken, except ``sent``, which makes no output and
is taken meanwhile (the TX pipeline waits for ``sent`` and also drains ``retransmit``: without this the
two could wait for each other). configure: 1 cycle. sent: 2 cycles (one
record every 2 cycles back to back). NACK / ACK: 2 cycles, outputs valid in the cycle after. SACK: from
acceptance to ``cc_event`` valid 5 + (PSNs released) + (set bitmap bits) cycles (both walks pipelined,
one record per cycle; bits that are 0 cost nothing), at most W + 69 (measured with W = 256: 197 cycles
for 128 released + 64 SACKed, 69 for 64 SACKed only). Loss detection delay (time rule or timeout): at
most one scan pass, Q * W cycles, plus the cycles spent meanwhile on operations and output backpressure.
Times compare serially (differences below 2^31 cycles).
"""

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mrcnic.wire.constants import NackReason

from ..rx.feedback_decoder import FeedbackKind, feedback_packet_layout
from ..tables import UNDEFINED_COLLISIONS
from .layouts import MAX_PMTU, FeedbackEvent, bits_for, feedback_layout
from .scheduler import psn_within

__all__ = [
    "STATS",
    "CcKind",
    "TrackState",
    "TxTracker",
    "ack_out_layout",
    "cc_event_layout",
    "error_layout",
    "record_layout",
    "retransmit_layout",
    "sent_layout",
    "tracker_configure_layout",
]

PSN_BITS = 24
PSN_MASK = (1 << PSN_BITS) - 1
STATS = ("lost_time_rule", "timeouts", "retransmit_requests", "stale_feedback", "retry_exceeded")


class TrackState(enum.Enum, shape=2):
    FREE = 0
    IN_FLIGHT = 1
    SACKED = 2
    QUEUED = 3


class CcKind(enum.Enum, shape=2):
    SACK = 0
    LOSS = 1
    TRIM = 2


def record_layout(ev_slots: int) -> data.StructLayout:
    return data.StructLayout(
        {
            "slot": bits_for(ev_slots),
            "ev": 32,
            "send_time": 32,
            "rtx_count": 3,
            "state": TrackState,
            "req": 1,
            "length": bits_for(MAX_PMTU + 1),
        }
    )


def tracker_configure_layout(qps: int) -> data.StructLayout:
    return data.StructLayout({"qp": bits_for(qps), "initial_psn": PSN_BITS})


def sent_layout(qps: int, ev_slots: int) -> data.StructLayout:
    """A data packet has gone to the header builder. ``msn`` / ``end`` (the packet ends its message) are
    for the ACK watchdog; the tracker does not use them."""
    return data.StructLayout(
        {
            "qp": bits_for(qps),
            "psn": PSN_BITS,
            "slot": bits_for(ev_slots),
            "ev": 32,
            "length": bits_for(MAX_PMTU + 1),
            "rtx": 1,
            "msn": 16,
            "end": 1,
        }
    )


def retransmit_layout(qps: int, ev_slots: int) -> data.StructLayout:
    """Send PSN ``psn`` again, not on ``avoid_slot``; ``ack_req``: as the ACK watchdog's request for a lost
    AETH (BTH.A = 1, not tracked as a retransmission). The tracker's requests have ack_req = 0."""
    return data.StructLayout(
        {"qp": bits_for(qps), "psn": PSN_BITS, "avoid_slot": bits_for(ev_slots), "ack_req": 1}
    )


def cc_event_layout(qps: int) -> data.StructLayout:
    return data.StructLayout(
        {"qp": bits_for(qps), "kind": CcKind, "newly_acked": 32, "rtt_valid": 1, "rtt": 16, "ecn": 1}
    )


def error_layout(qps: int) -> data.StructLayout:
    return data.StructLayout({"qp": bits_for(qps), "psn": PSN_BITS})


def ack_out_layout(qps: int) -> data.StructLayout:
    return data.StructLayout({"qp": bits_for(qps), "msn": 16, "nak": 1, "syndrome": 8})


class _OutReg:
    """A registered output stream: ``load`` sets payload and valid, valid drops when taken."""

    def __init__(self, m, port):
        self.port = port
        with m.If(port.ready):
            m.d.sync += port.valid.eq(0)

    def load(self, m, **fields):
        m.d.sync += self.port.valid.eq(1)
        for k, v in fields.items():
            m.d.sync += getattr(self.port.payload, k).eq(v)


class TxTracker(wiring.Component):
    def __init__(self, *, qps: int = 4, window: int = 256, ev_slots: int = 16):
        if window & (window - 1) or not 64 <= window <= 1 << 15:
            raise ValueError(f"window must be a power of two in [64, 2^15], not {window}")
        self.qps = qps
        self.window = window
        self.ev_slots = ev_slots
        super().__init__(
            {
                "configure": In(stream.Signature(tracker_configure_layout(qps))),
                "now": In(32),
                "now_ts": In(16),
                "rto_cycles": In(32),
                "reorder_cycles": In(32),
                "retry_budget": In(3, init=7),
                "sent": In(stream.Signature(sent_layout(qps, ev_slots))),
                "feedback": In(stream.Signature(feedback_packet_layout(qps))),
                "retransmit": Out(stream.Signature(retransmit_layout(qps, ev_slots))),
                "path_event": Out(stream.Signature(feedback_layout(qps, ev_slots))),
                "cc_event": Out(stream.Signature(cc_event_layout(qps))),
                "error": Out(stream.Signature(error_layout(qps))),
                "ack_out": Out(stream.Signature(ack_out_layout(qps))),
                "psn_limit": Out(data.ArrayLayout(PSN_BITS, qps)),
                "inflight": Out(data.ArrayLayout(32, qps)),
                "qp_error": Out(qps),
                "idle": Out(1),
                **{f"stat_{name}": Out(32) for name in STATS},
            }
        )
        # scan pointer (record address), visible to white-box tests
        self.scan_ptr = Signal(bits_for(qps) + bits_for(window), name="scan_ptr")

    def elaborate(self, platform):
        m = Module()
        Q, W = self.qps, self.window
        wb = (W - 1).bit_length()
        rec_l = record_layout(self.ev_slots)

        # No record is used that was read in a cycle writing it: the scan and the operations read only in
        # cycles without a write (``sv`` / ``wv`` say when the data is one), and the walks write the record
        # read the cycle before while reading the next. So the read port is not transparent and
        # read-during-write is left undefined (no copy and multiplexer after the block RAM).
        m.submodules.records = mem = Memory(shape=rec_l, depth=Q * W, init=[], attrs=UNDEFINED_COLLISIONS)
        wr = mem.write_port()
        rd = mem.read_port()
        rrec = rd.data

        # per-QP registers
        cack = Signal(data.ArrayLayout(PSN_BITS, Q))
        nxt = Signal(data.ArrayLayout(PSN_BITS, Q), init=[1] * Q)  # as if configured with PSN 1
        # Inflight bytes, and the bytes one SACK acknowledges, are at most W packets of the largest
        # length: that many bits (19 at W = 64), not 32, for their adders (``inflight`` is 32 bits).
        count_bits = (W * MAX_PMTU).bit_length()
        infl = Signal(data.ArrayLayout(count_bits, Q))
        rack = Signal(data.ArrayLayout(32, Q))
        rack_ok = Signal(Q)
        # The highest PSN the SACKs since rack_time last moved have reported on (window top, base + 63):
        # the time rule declares nothing above it, which no SACK since then could show as received.
        rack_top = Signal(data.ArrayLayout(PSN_BITS, Q))
        err = Signal(Q)
        for q in range(Q):
            m.d.comb += [self.psn_limit[q].eq(cack[q] + W), self.inflight[q].eq(infl[q])]
        m.d.comb += self.qp_error.eq(err)

        def addr(qp, psn):
            return Cat(psn[:wb], qp) if Q > 1 else psn[:wb]

        def in_range(q, psn):
            # psn in (cack_s, next_psn), serially
            return ((psn - cack[q] - 1)[:PSN_BITS]) < ((nxt[q] - cack[q] - 1)[:PSN_BITS])

        def later(a, b):  # a after b, serial 32-bit
            return (a - b)[:32].as_signed() > 0

        o_rtx = _OutReg(m, self.retransmit)
        o_pe = _OutReg(m, self.path_event)
        o_cc = _OutReg(m, self.cc_event)
        o_err = _OutReg(m, self.error)
        o_ack = _OutReg(m, self.ack_out)
        pending = Cat(
            p.valid for p in (self.retransmit, self.path_event, self.cc_event, self.error, self.ack_out)
        ).any()

        def bump(name):
            c = getattr(self, f"stat_{name}")
            m.d.sync += c.eq(c + 1)

        def request(qp, psn, r, waddr, *, write=True):
            """Retransmit request for QUEUED record r, or QP error when its budget is spent. ``write``:
            the request marks the record (``req``) here; without it the caller writes the record."""
            with m.If(r.rtx_count >= self.retry_budget):
                with m.If(~err.bit_select(qp, 1)):
                    m.d.sync += err.bit_select(qp, 1).eq(1)
                    o_err.load(m, qp=qp, psn=psn)
                    bump("retry_exceeded")
            with m.Else():
                o_rtx.load(m, qp=qp, psn=psn, avoid_slot=r.slot)
                bump("retransmit_requests")
                if write:
                    nr = Signal(rec_l)
                    m.d.comb += [nr.eq(r), nr.state.eq(TrackState.QUEUED), nr.req.eq(1)]
                    m.d.comb += [wr.addr.eq(waddr), wr.data.eq(nr), wr.en.eq(1)]

        cfg, snt, fb = self.configure, self.sent, self.feedback
        s = Signal(sent_layout(Q, self.ev_slots))
        s_time = Signal(32)  # now when the sent record was taken
        f = Signal(feedback_packet_layout(Q))
        sp = self.scan_ptr
        sv = Signal()  # rd.data holds record sp
        # walks
        wp = Signal(PSN_BITS)  # next PSN to read
        wcnt = Signal(PSN_BITS)  # PSNs left to read (release walk)
        wv = Signal()  # rd.data holds record of wq
        wq = Signal(PSN_BITS)
        mask = Signal(64)
        acc = Signal(count_bits)
        rk = Signal(32)
        rk_ok = Signal()
        rk_up = Signal()  # this SACK moved rack_time
        new_cack = Signal(PSN_BITS)
        rtt_valid = Signal()

        fq = f.qp
        cur_cack, cur_nxt = cack[fq], nxt[fq]

        def walk_take(psn_ok):
            """Process rd.data (record of wq) during a walk: IN_FLIGHT -> released/SACKed."""
            r = rrec
            with m.If(wv & psn_ok):
                with m.If(r.state == TrackState.IN_FLIGHT):
                    m.d.sync += acc.eq(acc + r.length)
                    with m.If(~rk_ok | later(r.send_time, rk)):
                        m.d.sync += [rk.eq(r.send_time), rk_ok.eq(1), rk_up.eq(1)]

        with m.FSM():
            with m.State("IDLE"):
                sq = sp[wb:] if Q > 1 else 0
                sidx = sp[:wb]
                # the PSN this index stands for: the one in (cack_s, cack_s + W]
                spsn = Signal(PSN_BITS)
                m.d.comb += spsn.eq(cack[sq] + 1 + ((sidx - cack[sq] - 1)[:wb]))
                r = rrec
                live = sv & in_range(sq, spsn) & ~err.bit_select(sq, 1)
                infl_ = r.state == TrackState.IN_FLIGHT
                # Both rules compare the record's send time with a value computed from registers while the
                # records RAM is read, so one carry chain follows the RAM's output (the sums before were
                # two chains in series after it: the core clock's critical path on the Colorlight).
                # Time rule: send_time + Δ <= rack_time  <=>  send_time <= rack_time - Δ, serially.
                rack_edge = Signal(32)
                # Timeout: (now - send_time) mod 2^32 >= rto_cycles. With edge = (now - rto) mod 2^32: a
                # send time not after now must be at most the edge (and now >= rto); one after now (now
                # has wrapped since) must be at most the edge if now < rto, and always times out if not.
                rto_edge = Signal(32)
                rto_wraps = Signal()  # now < rto_cycles
                m.d.comb += [
                    rack_edge.eq(rack[sq] - self.reorder_cycles),
                    rto_edge.eq(self.now - self.rto_cycles),
                    rto_wraps.eq(self.now < self.rto_cycles),
                ]
                # ... and only for a PSN a SACK since rack_time moved could have reported (spsn <= rack_top).
                by_rule = (
                    infl_
                    & rack_ok.bit_select(sq, 1)
                    & psn_within(spsn, rack_top[sq])
                    & ~later(r.send_time, rack_edge)
                )
                within_edge = r.send_time <= rto_edge
                by_rto = infl_ & Mux(
                    r.send_time <= self.now, ~rto_wraps & within_edge, ~rto_wraps | within_edge
                )
                ask = (r.state == TrackState.QUEUED) & ~r.req
                act = live & (by_rule | by_rto | ask)
                m.d.comb += self.idle.eq(~pending & ~act)
                nsp = Signal.like(sp)
                m.d.comb += nsp.eq(Mux(sp == Q * W - 1, 0, sp + 1))
                # The only record this state writes is the scanned one, declared lost or given its
                # request; its address, data and the next read address do not depend on ``act``, which
                # comes late (after the records RAM and a comparison), so ``act`` only enables the write.
                lost = Signal(rec_l)  # QUEUED, with a request unless its retransmission budget is spent
                nxt_sp = Mux(sv, nsp, sp)
                m.d.comb += [
                    lost.eq(r),
                    lost.state.eq(TrackState.QUEUED),
                    lost.req.eq(r.req | (r.rtx_count < self.retry_budget)),
                    wr.addr.eq(sp),
                    wr.data.eq(lost),
                    rd.addr.eq(nxt_sp),  # read again after any other branch (which clears ``sv``)
                ]
                # ``sent`` produces no output, so it is taken even while an output waits: the TX pipeline
                # that feeds it is also what drains ``retransmit`` (no deadlock between the two).
                with m.If(cfg.valid & ~pending):
                    m.d.comb += cfg.ready.eq(1)
                    c = cfg.payload
                    m.d.sync += [
                        cack[c.qp].eq(c.initial_psn - 1),
                        nxt[c.qp].eq(c.initial_psn),
                        infl[c.qp].eq(0),
                        rack_ok.bit_select(c.qp, 1).eq(0),
                        err.bit_select(c.qp, 1).eq(0),
                        sv.eq(0),
                    ]
                with m.Elif(snt.valid):
                    m.d.comb += [snt.ready.eq(1), rd.addr.eq(addr(snt.payload.qp, snt.payload.psn))]
                    m.d.sync += [s.eq(snt.payload), s_time.eq(self.now), sv.eq(0)]
                    m.next = "SENT"
                with m.Elif(pending):
                    m.d.sync += sv.eq(0)
                with m.Elif(fb.valid):
                    m.d.comb += fb.ready.eq(1)
                    p = fb.payload
                    m.d.comb += rd.addr.eq(
                        addr(p.qp, Mux(p.kind == FeedbackKind.NACK, p.nack_psn, p.trigger_psn))
                    )
                    m.d.sync += [f.eq(p), sv.eq(0)]
                    m.next = "FB"
                with m.Elif(act):
                    m.d.sync += [sv.eq(0), sp.eq(nsp)]
                    with m.If(infl_):
                        m.d.sync += infl[sq].eq(infl[sq] - r.length)
                        o_pe.load(m, qp=sq, slot=r.slot, ev=r.ev, event=FeedbackEvent.LOSS)
                        o_cc.load(m, qp=sq, kind=CcKind.LOSS, rtt_valid=0, ecn=0)
                        with m.If(by_rule):
                            bump("lost_time_rule")
                        with m.Else():
                            bump("timeouts")
                    # Without a request (budget spent) the entry is still QUEUED (lost), left for good.
                    request(sq, spsn, r, sp, write=False)
                    m.d.comb += wr.en.eq(1)
                with m.Else():
                    m.d.sync += [sp.eq(nxt_sp), sv.eq(1)]

            with m.State("SENT"):
                r = rrec
                nr = Signal(rec_l)
                sq = s.qp
                m.d.comb += [
                    nr.slot.eq(s.slot),
                    nr.ev.eq(s.ev),
                    nr.send_time.eq(s_time),
                    nr.state.eq(TrackState.IN_FLIGHT),
                    nr.req.eq(0),
                    nr.length.eq(s.length),
                    nr.rtx_count.eq(Mux(s.rtx, r.rtx_count + 1, 0)),
                    wr.addr.eq(addr(sq, s.psn)),
                    wr.data.eq(nr),
                ]
                with m.If(~s.rtx):
                    m.d.comb += wr.en.eq(1)
                    m.d.sync += [nxt[sq].eq(nxt[sq] + 1), infl[sq].eq(infl[sq] + s.length)]
                with m.Elif(in_range(sq, s.psn)):
                    m.d.comb += wr.en.eq(1)
                    m.d.sync += infl[sq].eq(infl[sq] + s.length)
                m.next = "IDLE"

            with m.State("FB"):
                r = rrec
                with m.If(f.kind == FeedbackKind.ACK):
                    o_ack.load(m, qp=fq, msn=f.msn, nak=f.nak, syndrome=f.syndrome)
                    m.next = "IDLE"
                with m.Elif(f.kind == FeedbackKind.NACK):
                    waddr = addr(fq, f.nack_psn)
                    ok = in_range(fq, f.nack_psn) & (
                        (r.state == TrackState.IN_FLIGHT) | (r.state == TrackState.QUEUED)
                    )
                    trim = f.retransmit_now
                    with m.If(~ok):
                        bump("stale_feedback")
                    with m.Elif(f.nack_reason == NackReason.UNEXP_EVENT):
                        with m.If(~err.bit_select(fq, 1)):
                            m.d.sync += err.bit_select(fq, 1).eq(1)
                            o_err.load(m, qp=fq, psn=f.nack_psn)
                    with m.Else():
                        with m.If(r.state == TrackState.IN_FLIGHT):
                            m.d.sync += infl[fq].eq(infl[fq] - r.length)
                        nr = Signal(rec_l)
                        m.d.comb += [nr.eq(r), nr.state.eq(TrackState.QUEUED)]
                        m.d.comb += [nr.req.eq(Mux(r.state == TrackState.QUEUED, r.req, 0))]
                        m.d.comb += [wr.addr.eq(waddr), wr.data.eq(nr), wr.en.eq(1)]
                        with m.If(trim):
                            o_cc.load(m, qp=fq, kind=CcKind.TRIM, rtt_valid=0, ecn=0)
                            with m.If(f.has_path_event & (r.ev == f.ev)):
                                o_pe.load(m, qp=fq, slot=r.slot, ev=r.ev, event=f.path_event)
                            with m.If(~err.bit_select(fq, 1) & ~nr.req):
                                request(fq, f.nack_psn, nr, waddr)
                    m.next = "IDLE"
                with m.Else():
                    # SACK: trigger attribution (before release), then set up the release walk
                    out = f.trigger_valid & ~f.probe_answer & in_range(fq, f.trigger_psn)
                    m.d.sync += rtt_valid.eq(out & (r.rtx_count == 0))
                    with m.If(out & f.has_path_event & (r.ev == f.ev)):
                        o_pe.load(m, qp=fq, slot=r.slot, ev=r.ev, event=f.path_event)
                    adv = in_range(fq, f.cack_psn)
                    m.d.sync += [
                        wp.eq(cur_cack + 1),
                        wcnt.eq(Mux(adv, (f.cack_psn - cur_cack)[:PSN_BITS], 0)),
                        new_cack.eq(Mux(adv, f.cack_psn, cur_cack)),
                        wv.eq(0),
                        acc.eq(0),
                        rk.eq(rack[fq]),
                        rk_ok.eq(rack_ok.bit_select(fq, 1)),
                        rk_up.eq(0),
                        mask.eq(f.sack_bitmap),
                    ]
                    m.next = "RELEASE"

            with m.State("RELEASE"):
                walk_take(1)
                with m.If(wv):
                    fr = Signal(rec_l)
                    m.d.comb += [fr.eq(rrec), fr.state.eq(TrackState.FREE)]
                    m.d.comb += [wr.addr.eq(addr(fq, wq)), wr.data.eq(fr), wr.en.eq(1)]
                with m.If(wcnt != 0):
                    m.d.comb += rd.addr.eq(addr(fq, wp))
                    m.d.sync += [wq.eq(wp), wp.eq(wp + 1), wcnt.eq(wcnt - 1), wv.eq(1)]
                with m.Else():
                    m.d.sync += [wv.eq(0), cack[fq].eq(new_cack)]
                    m.next = "BITMAP"

            with m.State("BITMAP"):
                ok = ((wq - cur_cack - 1)[:PSN_BITS]) < ((cur_nxt - cur_cack - 1)[:PSN_BITS])
                walk_take(ok)
                with m.If(wv & ok & (rrec.state != TrackState.FREE)):
                    sr = Signal(rec_l)
                    m.d.comb += [sr.eq(rrec), sr.state.eq(TrackState.SACKED), sr.req.eq(0)]
                    m.d.comb += [wr.addr.eq(addr(fq, wq)), wr.data.eq(sr), wr.en.eq(1)]
                low = Signal(range(64))
                for i in reversed(range(64)):
                    with m.If(mask[i]):
                        m.d.comb += low.eq(i)
                with m.If(mask != 0):
                    bpsn = (f.sack_base + low)[:PSN_BITS]
                    m.d.comb += rd.addr.eq(addr(fq, bpsn))
                    m.d.sync += [wq.eq(bpsn), mask.eq(mask & (mask - 1)), wv.eq(1)]
                with m.Else():
                    m.d.sync += wv.eq(0)
                    m.next = "SACK_DONE"

            with m.State("SACK_DONE"):
                m.d.sync += [
                    infl[fq].eq(infl[fq] - acc),
                    rack[fq].eq(rk),
                    rack_ok.bit_select(fq, 1).eq(rk_ok),
                ]
                # A SACK that moved rack_time replaces the reported range with its own window (an earlier
                # SACK's window says nothing about packets that arrived after it was made); one that did
                # not extends it (it was made after the one that did).
                top = (f.sack_base + 63)[:PSN_BITS]
                with m.If(rk_up | ~psn_within(top, rack_top[fq])):
                    m.d.sync += rack_top[fq].eq(top)
                ecn = f.has_path_event & (f.path_event == FeedbackEvent.ECN)
                o_cc.load(
                    m,
                    qp=fq,
                    kind=CcKind.SACK,
                    newly_acked=acc,
                    rtt_valid=rtt_valid,
                    rtt=self.now_ts - f.tx_timestamp,
                    ecn=ecn,
                )
                m.next = "IDLE"
        return m
