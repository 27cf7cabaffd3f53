"""Receive engine: acts on every validated frame and decides what the NIC answers, and when.

Ref: docs/protocol.md §7.1 (window classes), §7.2 (SACK triggers, coalescing by ACK_GEN bytes and
ACK_GEN_TIME), §7.3 (NACK TRIMMED / TRIMMED_LASTHOP / PSN_OOR_WINDOW, at most one PSN_OOR_WINDOW per QP
per base_rtt), §7.4 (transport ACK when AETH.msn advances, at most one per ack_interval, NAKs not
delayed; a duplicate message-ending packet with BTH.A = 1 is answered with the current AETH), §7.5 rows
6-10 (trimmed, beyond window, duplicate, invalid request, access error), §7.6 (completions), §7.8
(probes answered with a PR = 1 SACK), §5.8 (the EV a response answers).

Owns the :class:`~.sack_tracker.SackTracker` and the :class:`~.completion_tracker.CompletionTracker`.
Per frame (``verdict`` from the :class:`~.validator.Validator`, in frame order), one sequence:

    DROP      -> release(discard), count
    FEEDBACK  -> ``feedback`` (to the FeedbackDecoder), release(discard)
    PROBE     -> SACK tracker (PROBE) -> release(discard) -> SACK with PR = 1 [, current AETH]
    WRITE     -> SACK tracker (MARK, or CLASSIFY when trimmed) ->
                 beyond window: release(discard), NACK PSN_OOR_WINDOW (rate-limited)
                 duplicate:     release(discard), SACK [, current AETH if message end with A = 1]
                 new, trimmed:  release(discard), NACK TRIMMED / TRIMMED_LASTHOP
                 new, error:    release(discard), completion tracker (the message will NAK)
                 new:           release(payload range) + ``dma_cmd`` (VA, length), completion tracker,
                                SACK now (a §7.2 trigger, or ACK_GEN bytes reached) or kept pending

Responses leave on ``response`` (to the ResponseBuilder). A coalesced SACK waits per QP with the
latest arrival as its trigger until ACK_GEN_TIME after the first un-SACKed arrival; any SACK of the QP
clears it. ACK records from the completion tracker are *fenced*: each waits until every DMA write
issued before it has completed (``dma_done``), so an AETH or a receive completion never overtakes the
data it covers; then ACKs are paced per QP by ``ack_interval`` (the one sent when the interval ends
carries the then-latest MSN) and NAKs go out at once. The ACK's EV is that of the QP's latest new data
packet that moved cack (§5.8 says: the latest packet that advanced AETH.msn; the two differ only when a
packet moves cack inside a message, and either path is a valid reverse path).

Timers count cycles of ``now``, a free-running counter one bit wider than the timer registers
(``timer_width`` bits, in cycles). A stamp counts only while its flag says it is live, and the scan
ages each QP's stamps every ``qps`` cycles: a flag falls (ACK interval over, out-of-window NACK
allowed again) or rises (coalesced SACK due) within ``qps`` cycles of the time (at the time itself for
the QP the scan is at), before ``now`` can wrap past the stamp, however long the QP was idle or the
output stalled. A zero interval paces nothing.
Throughput: about 13 cycles per data frame when no output stalls (the SACK tracker takes 5; the completion
tracker's walk overlaps the next frame), far below a 4 KiB frame's beats at any supported width.
"""

from amaranth import Array, Cat, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from mrcnic.wire.constants import Dscp, NackReason, Opcode, SackVerdict

from ..dma.writer import dma_write_command_layout
from ..tx.layouts import bits_for
from .completion_tracker import CompletionTracker, Syndrome, receive_completion_layout
from .frame_buffer import ReleaseLayout
from .response_builder import response_layout
from .sack_tracker import ArrivalMode, SackTracker, Verdict
from .validator import Action, Drop, RxError, verdict_layout

__all__ = ["STATS", "ReceiveEngine", "connect_layout"]

STATS = (
    "placed",
    "placed_bytes",
    "duplicate",
    "psn_out_of_window",
    "oor_nack_suppressed",
    "trimmed",
    "trimmed_lasthop",
    "invalid_request",
    "access_error",
    "probes",
    "feedback",
    "sacks",
    "nacks",
    "acks",
    "naks",
    "dma_errors",
) + tuple(f"drop_{d.name.lower()}" for d in Drop if d is not Drop.NONE)


def connect_layout(qps: int) -> data.StructLayout:
    """A QP enters the receiving state: window and completion state reset."""
    return data.StructLayout({"qp": bits_for(qps), "initial_psn": 24, "initial_rqmsn": 16})


_FENCE_BITS = 16


class ReceiveEngine(wiring.Component):
    """Parameters: ``qps``, ``window`` (PSNs), ``destinations``, ``clock_hz`` (for register defaults),
    ``timer_width`` (bits of the three timer registers; 16 spans 2.6 ms at 25 MHz).

    Registers (inputs, in cycles or bytes): ``ack_gen_bytes`` (16 KiB), ``ack_gen_cycles`` (2 us),
    ``ack_interval_cycles`` (1 us), ``base_rtt_cycles`` (10 us), ``dscp_trimmed_lasthop``.
    """

    def __init__(
        self,
        *,
        qps: int = 4,
        window: int = 256,
        destinations: int = 4,
        clock_hz: float = 250e6,
        addr_width: int = 64,
        timer_width: int = 32,
    ):
        self.qps, self.window, self.destinations = qps, window, destinations
        self.addr_width, self.timer_width = addr_width, timer_width
        us = round(clock_hz / 1e6)
        defaults = {"ack_gen_cycles": 2 * us, "ack_interval_cycles": us, "base_rtt_cycles": 10 * us}
        for name, cycles in defaults.items():
            if cycles >> timer_width:
                raise ValueError(f"{name}'s default {cycles} does not fit timer_width {timer_width}")
        self._response = response_layout(qps, destinations)
        super().__init__(
            {
                "connect": In(stream.Signature(connect_layout(qps))),
                "post_receive": In(stream.Signature(data.StructLayout({"qp": bits_for(qps)}))),
                "verdict": In(stream.Signature(verdict_layout(qps, destinations))),
                "release": Out(stream.Signature(ReleaseLayout)),
                "dma_cmd": Out(stream.Signature(dma_write_command_layout(addr_width))),
                "dma_done": In(stream.Signature(data.StructLayout({"error": 1}))),
                "feedback": Out(stream.Signature(verdict_layout(qps, destinations))),
                "response": Out(stream.Signature(self._response)),
                "receive_completion": Out(stream.Signature(receive_completion_layout(qps))),
                "qp_error": Out(qps),
                "ack_gen_bytes": In(32, init=16384),
                **{name: In(timer_width, init=cycles) for name, cycles in defaults.items()},
                "dscp_trimmed_lasthop": In(6, init=Dscp.TRIMMED_LASTHOP),
                **{f"stat_{name}": Out(32) for name in STATS},
            }
        )

    def elaborate(self, platform):
        m = Module()
        Q = self.qps
        m.submodules.sack = sack = SackTracker(Q, self.window)
        m.submodules.completion = comp = CompletionTracker(Q, self.window)
        m.d.comb += self.qp_error.eq(comp.qp_error)

        # One bit more than the registers: a live stamp is at most a register's span plus a scan old.
        time_width = self.timer_width + 1
        now = Signal(time_width)
        m.d.sync += now.eq(now + 1)

        def stat(name, inc=1):
            counter = getattr(self, f"stat_{name}")
            m.d.sync += counter.eq(counter + inc)

        def elapsed(since, cycles):
            """``now`` is at least ``cycles`` after ``since`` (wrapping time; live stamps only)."""
            return (now - since)[:time_width] >= cycles

        # -- per-QP state (registers: Q is small) --------------------------------------------------
        def per_qp(shape, name):
            return Array(Signal(shape, name=f"{name}_{q}") for q in range(Q))

        sack_pending = per_qp(1, "sack_pending")
        sack_since = per_qp(time_width, "sack_since")  # time of the first un-SACKed arrival
        sack_due = per_qp(1, "sack_due")  # ACK_GEN_TIME has passed since then (the scan sets it)
        # A response names its QP (the builder holds each QP's peer addressing) and says the rest.
        sack_layout = data.StructLayout({f: self._response[f].shape for f in ("ev", "seth", "cc")})
        sack_record = per_qp(sack_layout, "sack_record")  # SACK for the latest arrival (EV, SETH, CC)
        unsacked = per_qp(32, "unsacked")  # new payload bytes since the last SACK
        oor_recent = per_qp(1, "oor_recent")  # an out-of-window NACK less than a base RTT ago
        oor_at = per_qp(time_width, "oor_at")
        ack_pending = per_qp(1, "ack_pending")
        ack_msn = per_qp(16, "ack_msn")
        ack_recent = per_qp(1, "ack_recent")  # an ACK or NAK less than ACK_INTERVAL ago
        ack_at = per_qp(time_width, "ack_at")

        # -- the scan ages one QP's stamps a cycle (first, so that a new stamp in the same cycle wins)
        scan = Signal(range(Q))
        m.d.sync += scan.eq(Mux(scan == Q - 1, 0, scan + 1))
        ack_interval_over = Signal()  # for QP ``scan``, as the three below
        oor_interval_over = Signal()
        sack_time_reached = Signal()
        m.d.comb += [
            ack_interval_over.eq(elapsed(ack_at[scan], self.ack_interval_cycles)),
            oor_interval_over.eq(elapsed(oor_at[scan], self.base_rtt_cycles)),
            sack_time_reached.eq(elapsed(sack_since[scan], self.ack_gen_cycles)),
        ]
        with m.If(ack_interval_over):
            m.d.sync += ack_recent[scan].eq(0)
        with m.If(oor_interval_over):
            m.d.sync += oor_recent[scan].eq(0)
        with m.If(sack_pending[scan] & sack_time_reached):
            m.d.sync += sack_due[scan].eq(1)
        # A zero interval paces nothing: not even the scan's cycles of lag.
        no_ack_pacing = self.ack_interval_cycles == 0
        no_oor_pacing = self.base_rtt_cycles == 0

        # -- connect: both trackers and the engine's own state ---------------------------------------
        cfg_sack_done, cfg_comp_done = Signal(), Signal()
        c = self.connect.payload
        m.d.comb += [
            sack.configure.payload.qp.eq(c.qp),
            sack.configure.payload.initial_psn.eq(c.initial_psn),
            sack.configure.valid.eq(self.connect.valid & ~cfg_sack_done),
            comp.configure.payload.eq(c),
            comp.configure.valid.eq(self.connect.valid & ~cfg_comp_done),
        ]
        sack_ok = cfg_sack_done | sack.configure.ready
        comp_ok = cfg_comp_done | comp.configure.ready
        m.d.comb += self.connect.ready.eq(sack_ok & comp_ok)
        with m.If(self.connect.valid):
            with m.If(self.connect.ready):
                m.d.sync += [cfg_sack_done.eq(0), cfg_comp_done.eq(0)]
            with m.Else():
                m.d.sync += [cfg_sack_done.eq(sack_ok), cfg_comp_done.eq(comp_ok)]
        wiring.connect(m, wiring.flipped(self.post_receive), comp.post_receive)

        # -- DMA fence: placements issued vs completed --------------------------------------------
        issued = Signal(_FENCE_BITS)
        completed = Signal(_FENCE_BITS)
        m.d.comb += self.dma_done.ready.eq(1)
        with m.If(self.dma_done.valid):
            m.d.sync += completed.eq(completed + 1)
            with m.If(self.dma_done.payload.error):
                stat("dma_errors")
        with m.If(self.dma_cmd.valid & self.dma_cmd.ready):
            m.d.sync += issued.eq(issued + 1)

        def fenced(source, layout, name):
            """``source`` records wait in a FIFO with the ``issued`` count at their arrival; the head
            leaves once ``completed`` has caught up with it."""
            entry = data.StructLayout({"record": layout, "fence": _FENCE_BITS})
            q = fifo.SyncFIFOBuffered(width=entry.size, depth=8)
            m.submodules[name] = q
            head = data.View(entry, q.r_data)
            behind = (head.fence - completed)[:_FENCE_BITS]
            out = stream.Signature(layout).create(path=(name, "out"))
            tail = Signal(entry, name=f"{name}_tail")
            m.d.comb += [
                tail.record.eq(source.payload),
                tail.fence.eq(issued),
                q.w_data.eq(tail),
                q.w_en.eq(source.valid),
                source.ready.eq(q.w_rdy),
                out.payload.eq(head.record),
                out.valid.eq(q.r_rdy & ((behind == 0) | (behind >= 1 << (_FENCE_BITS - 1)))),
                q.r_en.eq(out.valid & out.ready),
            ]
            return out, q

        ack_ev = per_qp(32, "ack_ev")  # EV of the latest new packet that moved cack (§5.8)
        pending_ev = per_qp(32, "pending_ev")  # ... when the pending ACK's record was made
        pending_tag = per_qp(8, "pending_tag")  # walk that made the pending ACK
        walk_tag = Signal(8)  # counts arrivals handed to the completion tracker: one walk each
        acks, ack_fence = fenced(comp.ack, comp.ack.payload.shape(), "ack_fence")
        completions, _ = fenced(comp.receive_completion, receive_completion_layout(Q), "completion_fence")
        wiring.connect(m, completions, wiring.flipped(self.receive_completion))

        # -- responses: the frame sequencer's and the pacer's, merged --------------------------------
        main_resp = stream.Signature(self._response).create(path=("main_resp",))
        timer_resp = stream.Signature(self._response).create(path=("timer_resp",))
        with m.If(main_resp.valid):
            m.d.comb += [self.response.payload.eq(main_resp.payload), self.response.valid.eq(1)]
            m.d.comb += main_resp.ready.eq(self.response.ready)
        with m.Else():
            m.d.comb += [
                self.response.payload.eq(timer_resp.payload),
                self.response.valid.eq(timer_resp.valid),
            ]
            m.d.comb += timer_resp.ready.eq(self.response.ready)
        with m.If(self.response.valid & self.response.ready):
            op = self.response.payload.opcode
            with m.If(op == Opcode.SACK):
                stat("sacks")
            with m.Elif(op == Opcode.NACK):
                stat("nacks")
            with m.Elif(self.response.payload.aeth.syndrome == Syndrome.ACK):
                stat("acks")
            with m.Else():
                stat("naks")

        # -- frame sequencer ------------------------------------------------------------------------
        # The verdict stays on ``verdict`` until its sequence ends (taken in QUERY): no copy of its
        # 700 bits here.
        v = self.verdict.payload
        # The feedback stream carries the verdict in every state (``valid`` says when): gated by the state,
        # it would cost a gate per bit.
        m.d.comb += self.feedback.payload.eq(v)
        t = Signal(sack.verdict.payload.shape())
        h = v.header
        w = h.ext.write
        qp = v.qp
        trimmed_lasthop = h.dscp == self.dscp_trimmed_lasthop
        place = Signal()  # this frame's payload goes to memory
        complete = Signal()  # this frame is reported to the completion tracker
        respond = Signal()  # ``main_resp`` holds a response for this frame
        query = Signal()  # answer with the current AETH as well
        resp = Signal(self._response)
        m.d.comb += [main_resp.payload.eq(resp)]

        base = Signal(self._response)  # the fields every response to this frame shares
        m.d.comb += [base.ev.eq(v.ev), base.qp.eq(qp)]
        timestamp = Mux(h.bth.ts & h.present.tseth, w.tseth.tx_timestamp, 0)

        sack_resp = Signal(self._response)  # SACK with the tracker's verdict ``t`` as trigger
        m.d.comb += [
            sack_resp.eq(base),
            sack_resp.opcode.eq(Opcode.SACK),
            sack_resp.seth.m.eq(Mux(h.ce, SackVerdict.SKIP_ONCE, SackVerdict.NONE)),
            sack_resp.seth.ack_psn_offset.eq(t.ack_psn_offset),
            sack_resp.seth.cack_psn.eq(t.cack),
            sack_resp.seth.sack_offset.eq(t.sack_offset),
            sack_resp.seth.sack_bitmap.eq(t.sack_bitmap),
            sack_resp.cc.tx_timestamp.eq(timestamp),
            sack_resp.cc.ooo_count.eq(t.ooo_count),
            sack_resp.cc.rcvd_bytes.eq(t.rcvd_bytes),
        ]

        def nack(reason):
            r = Signal(self._response, name=f"nack_{reason.name.lower()}")
            m.d.comb += [
                r.eq(base),
                r.opcode.eq(Opcode.NACK),
                r.neth.nack_reason.eq(reason),
                r.neth.nack_psn.eq(h.bth.psn),
                r.neth.tx_timestamp.eq(timestamp),
            ]
            return r

        def load(target, record, opcode):
            """``target`` takes ``record``'s opcode, EV, QP and the blocks of ``opcode`` only: the other
            blocks are don't-care (``control_record_layout``), and clearing them would gate every bit."""
            blocks = {Opcode.SACK: ("seth", "cc"), Opcode.NACK: ("neth",), Opcode.ACK: ("aeth",)}
            return [target[name].eq(record[name]) for name in ("opcode", "ev", "qp", *blocks[opcode])]

        def respond_now(record, opcode):
            m.d.sync += [*load(resp, record, opcode), respond.eq(1)]

        def sack_now():
            """A SACK for ``t`` now; the QP's coalescing state restarts."""
            respond_now(sack_resp, Opcode.SACK)
            m.d.sync += [sack_pending[qp].eq(0), unsacked[qp].eq(0)]

        self_release = self.release.payload
        # ACK records of one walk may still be on their way to the pacer: it waits before sending.
        walking = Signal()
        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.verdict.valid):
                    m.d.sync += [place.eq(0), complete.eq(0), respond.eq(0), query.eq(0)]
                    a = v.action
                    with m.If(a == Action.DROP):
                        for d in Drop:
                            if d is not Drop.NONE:
                                with m.If(v.drop == d):
                                    stat(f"drop_{d.name.lower()}")
                        m.next = "RELEASE"
                    with m.Elif(a == Action.FEEDBACK):
                        stat("feedback")
                        m.next = "FEEDBACK"
                    with m.Else():
                        m.next = "TRACK"

            with m.State("FEEDBACK"):
                m.d.comb += self.feedback.valid.eq(1)
                with m.If(self.feedback.ready):
                    m.next = "RELEASE"

            with m.State("TRACK"):
                a = sack.arrival.payload
                m.d.comb += [
                    a.qp.eq(qp),
                    a.psn.eq(h.bth.psn),
                    a.length.eq(Mux(h.trimmed, 0, h.payload_length)),
                    a.mode.eq(
                        Mux(
                            v.action == Action.PROBE,
                            ArrivalMode.PROBE,
                            Mux(h.trimmed, ArrivalMode.CLASSIFY, ArrivalMode.MARK),
                        )
                    ),
                    sack.arrival.valid.eq(1),
                ]
                with m.If(sack.arrival.ready):
                    m.next = "TRACKED"

            with m.State("TRACKED"):
                m.d.comb += sack.verdict.ready.eq(1)
                with m.If(sack.verdict.valid):
                    tv = sack.verdict.payload
                    m.d.sync += t.eq(tv)
                    m.next = "DECIDE"

            with m.State("DECIDE"):
                m.next = "RELEASE"
                with m.If(v.action == Action.PROBE):
                    stat("probes")
                    probe = Signal(self._response)
                    trimmed_probe = h.trimmed & ~trimmed_lasthop
                    m.d.comb += [
                        probe.eq(sack_resp),
                        probe.seth.pr.eq(1),
                        probe.seth.ack_psn_offset.eq(h.ext.peth.probe_id),
                        probe.seth.m.eq(Mux(h.ce | trimmed_probe, SackVerdict.SKIP_ONCE, SackVerdict.NONE)),
                        probe.cc.tx_timestamp.eq(h.ext.peth.tx_timestamp),
                    ]
                    respond_now(probe, Opcode.SACK)
                    m.d.sync += query.eq(1)  # and the current AETH, so a lost AETH or a NAK is repeated
                with m.Elif(t.kind == Verdict.OUT_OF_WINDOW):
                    stat("psn_out_of_window")
                    with m.If(~oor_recent[qp] | no_oor_pacing):
                        m.d.sync += [oor_recent[qp].eq(1), oor_at[qp].eq(now)]
                        respond_now(nack(NackReason.PSN_OOR_WINDOW), Opcode.NACK)
                    with m.Else():
                        stat("oor_nack_suppressed")
                with m.Elif(t.kind == Verdict.DUPLICATE):
                    stat("duplicate")
                    sack_now()
                    m.d.sync += query.eq(h.bth.ack_req & v.ends_message)
                with m.Elif(h.trimmed):
                    with m.If(trimmed_lasthop):
                        stat("trimmed_lasthop")
                        respond_now(nack(NackReason.TRIMMED_LASTHOP), Opcode.NACK)
                    with m.Else():
                        stat("trimmed")
                        respond_now(nack(NackReason.TRIMMED), Opcode.NACK)
                with m.Else():  # new and marked received
                    m.d.sync += complete.eq(1)
                    with m.If(v.error == RxError.INVALID_REQUEST):
                        stat("invalid_request")
                    with m.Elif(v.error == RxError.REMOTE_ACCESS):
                        stat("access_error")
                    with m.Else():
                        m.d.sync += place.eq(1)
                        stat("placed")
                        stat("placed_bytes", h.payload_length)
                    # remember where ACKs for this QP go (§5.8): the latest packet that moved cack
                    with m.If((t.cack - t.psn)[:24] < 1 << 23):
                        m.d.sync += ack_ev[qp].eq(v.ev)
                    total = unsacked[qp] + h.payload_length
                    trigger = (h.ce | h.bth.ack_req | v.ends_message | t.opened_hole | t.advanced_run) | (
                        total >= self.ack_gen_bytes
                    )
                    with m.If(trigger):
                        sack_now()
                    with m.Else():
                        pending = Signal(sack_layout)
                        m.d.comb += [pending.ev.eq(sack_resp.ev), pending.seth.eq(sack_resp.seth)]
                        m.d.comb += pending.cc.eq(sack_resp.cc)
                        m.d.sync += [unsacked[qp].eq(total), sack_record[qp].eq(pending)]
                        with m.If(~sack_pending[qp]):
                            m.d.sync += [sack_pending[qp].eq(1), sack_since[qp].eq(now), sack_due[qp].eq(0)]

            with m.State("RELEASE"):
                m.d.comb += [
                    self.release.valid.eq(1),
                    self_release.discard.eq(~place),
                    self_release.offset.eq(h.payload_offset),
                    self_release.length.eq(Mux(place, h.payload_length, 0)),
                ]
                with m.If(self.release.ready):
                    m.next = "DMA"

            with m.State("DMA"):
                m.d.comb += [
                    self.dma_cmd.valid.eq(place),
                    # the validator's region check keeps a placed VA below 2^addr_width
                    self.dma_cmd.payload.addr.eq(w.reth.va[: self.addr_width]),
                    self.dma_cmd.payload.length.eq(h.payload_length),
                ]
                with m.If(~place | self.dma_cmd.ready):
                    m.next = "COMPLETE"

            with m.State("COMPLETE"):
                a = comp.arrival.payload
                m.d.comb += [
                    comp.arrival.valid.eq(complete),
                    a.qp.eq(qp),
                    a.psn.eq(t.psn),
                    a.cack.eq(t.cack),
                    a.msn.eq(w.meth.msn),
                    a.rqmsn.eq(w.meth.rqmsn),
                    a.ends_message.eq(v.ends_message),
                    a.has_imm.eq(v.has_imm),
                    a.imm.eq(w.imm_dt.imm),
                    a.dma_length.eq(w.reth.dma_length),
                    a.error.eq(v.error),
                    # the ACKs its walk releases go on the path of the latest packet that moved cack
                    a.tag.eq(Cat(ack_ev[qp], walk_tag)),
                ]
                with m.If(~complete | comp.arrival.ready):
                    m.d.sync += walk_tag.eq(walk_tag + complete)
                    m.next = "RESPOND"

            with m.State("RESPOND"):
                m.d.comb += main_resp.valid.eq(respond)
                with m.If(~respond | main_resp.ready):
                    m.next = "QUERY"

            with m.State("QUERY"):
                m.d.comb += [comp.query.valid.eq(query), comp.query.payload.qp.eq(qp)]
                with m.If(~query):
                    m.d.comb += self.verdict.ready.eq(1)
                    m.next = "IDLE"
                with m.Elif(comp.query.ready):
                    m.next = "QUERY_RESULT"

            with m.State("QUERY_RESULT"):
                m.d.comb += comp.query_result.ready.eq(1)
                with m.If(comp.query_result.valid):
                    r = comp.query_result.payload
                    again = Signal(self._response)
                    m.d.comb += [
                        again.eq(base),
                        again.opcode.eq(Opcode.ACK),
                        again.aeth.syndrome.eq(r.syndrome),
                        again.aeth.msn.eq(r.msn),
                    ]
                    m.d.sync += [*load(resp, again, Opcode.ACK), respond.eq(r.valid), query.eq(0)]
                    m.next = "RESPOND"

        # -- pacer: fenced ACKs, ACK interval, coalesced SACK timers -------------------------------
        # The held response: what differs between responses (the builder adds the QP's addressing).
        held = Signal()  # ``timer_resp`` holds a response
        held_qp = Signal(range(Q))
        held_sack = Signal()  # the QP's coalesced SACK (else an ACK or NAK)
        held_part = Signal(sack_layout)  # EV; SETH and CC of a SACK
        held_aeth = Signal(self._response["aeth"].shape)  # of an ACK or NAK
        timer_out = timer_resp.payload
        m.d.comb += [
            timer_resp.valid.eq(held),
            timer_out.opcode.eq(Mux(held_sack, Opcode.SACK, Opcode.ACK)),
            timer_out.ev.eq(held_part.ev),
            timer_out.seth.eq(held_part.seth),
            timer_out.cc.eq(held_part.cc),
            timer_out.aeth.eq(held_aeth),
            timer_out.qp.eq(held_qp),
        ]
        with m.If(timer_resp.ready):
            m.d.sync += held.eq(0)
        free = ~held | timer_resp.ready

        # As in ``load``: an ACK leaves the SACK blocks as they were, a SACK the AETH.
        def hold_ack(q, ev, syndrome, msn):
            m.d.sync += [held.eq(1), held_qp.eq(q), held_sack.eq(0), held_part.ev.eq(ev)]
            m.d.sync += [held_aeth.syndrome.eq(syndrome), held_aeth.msn.eq(msn)]

        def hold_sack(q):
            m.d.sync += [held.eq(1), held_qp.eq(q), held_sack.eq(1), held_part.eq(sack_record[q])]

        ack_head = acks.payload
        aq = ack_head.qp
        # ``level`` counts a record from the cycle it is written (``r_rdy`` only once it reaches the read
        # port), so there is no gap in which a walk's last record is invisible.
        m.d.comb += walking.eq(~comp.idle | comp.ack.valid | (ack_fence.level != 0))
        ack_due_head = ~ack_recent[aq] | no_ack_pacing
        # ACK records only update the QP's pending AETH, so one walk that completes several messages
        # yields one ACK (AETH.msn advanced once, §7.4); a record of a later walk (another tag) first
        # sends the pending one. The scan sends a pending ACK once no record is on its way (tracker idle,
        # fenced queue empty) and the interval allows. NAKs go out at once and supersede the pending ACK.
        with m.If(acks.valid):
            with m.If(ack_head.syndrome != Syndrome.ACK):
                with m.If(free):
                    m.d.comb += acks.ready.eq(1)
                    hold_ack(aq, ack_head.tag[:32], ack_head.syndrome, ack_head.msn)
                    m.d.sync += ack_pending[aq].eq(0)
                    m.d.sync += [ack_recent[aq].eq(1), ack_at[aq].eq(now)]
            with m.Elif(ack_pending[aq] & (pending_tag[aq] != ack_head.tag[32:]) & ack_due_head):
                # a later walk: the pending ACK of the earlier one goes first (one ACK per advance)
                with m.If(free):
                    m.d.comb += acks.ready.eq(1)
                    hold_ack(aq, pending_ev[aq], Syndrome.ACK, ack_msn[aq])
                    m.d.sync += [ack_recent[aq].eq(1), ack_at[aq].eq(now)]
                    m.d.sync += [ack_msn[aq].eq(ack_head.msn), pending_ev[aq].eq(ack_head.tag[:32])]
                    m.d.sync += pending_tag[aq].eq(ack_head.tag[32:])
            with m.Else():
                m.d.comb += acks.ready.eq(1)
                m.d.sync += [ack_pending[aq].eq(1), ack_msn[aq].eq(ack_head.msn)]
                m.d.sync += [pending_ev[aq].eq(ack_head.tag[:32]), pending_tag[aq].eq(ack_head.tag[32:])]
        with m.Elif(free):
            with m.If(ack_pending[scan] & (~ack_recent[scan] | ack_interval_over) & ~walking):
                hold_ack(scan, pending_ev[scan], Syndrome.ACK, ack_msn[scan])
                m.d.sync += ack_pending[scan].eq(0)
                m.d.sync += [ack_recent[scan].eq(1), ack_at[scan].eq(now)]
            with m.Elif(sack_pending[scan] & (sack_due[scan] | sack_time_reached)):
                hold_sack(scan)
                m.d.sync += [sack_pending[scan].eq(0), unsacked[scan].eq(0)]

        # A connect resets the engine's state of the QP (after the pacer, so it wins).
        with m.If(self.connect.valid & self.connect.ready):
            q = c.qp
            m.d.sync += [sack_pending[q].eq(0), unsacked[q].eq(0), oor_recent[q].eq(0)]
            m.d.sync += [ack_pending[q].eq(0), ack_recent[q].eq(0)]
        return m
