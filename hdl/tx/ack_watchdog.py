"""ACK watchdog: asks the responder again for a transport ACK that did not come (lost AETH).

Ref: docs/protocol.md §7.4 "AETH loss": when every PSN sent is released (all SACKed) but a message still
has no AETH covering it after RTO, the requester sends that message's last packet again with BTH.A = 1
and BTH.RTX = 1; the responder answers the duplicate with its SACK and its current AETH. This repeats
every RTO, up to the retry budget, then the QP goes to ERROR (RETRY_EXCEEDED). Only the newest
message-ending packet is ever asked again: an ACK for it completes every earlier message too (§7.4), and
since no later PSN was sent, its descriptor is still in the retransmitter.

Per QP (registers, Q is small): the last new PSN sent, the newest message end (PSN, MSN), whether it is
unacknowledged, the highest MSN acknowledged, when the wait began, the attempts so far, and a stop bit.

Members:

* ``sent``: In stream :func:`~mrcnic.hdl.tx.tracker.sent_layout` (a tap of the tracker's input: always
  ready). New packets (rtx = 0) set the last PSN sent; a message end (``end``) makes (psn, msn) the newest
  unacknowledged message end.
* ``ack``: In stream :func:`~mrcnic.hdl.tx.tracker.ack_out_layout` (a tap, always ready). An ACK with
  ``msn`` at or after the newest end's MSN clears "unacknowledged"; any ACK or NAK resets the attempts; a
  NAK stops the QP (it is in ERROR).
* ``configure``: In stream ``{qp}``: the QP was (re)connected: everything cleared.
* ``cack``: In(ArrayLayout(24, Q)), the tracker's cumulative ACK per QP.
* ``now``, ``rto_cycles``: In(32); ``retry_budget``: In(3).
* ``request``: Out stream :func:`~mrcnic.hdl.tx.tracker.retransmit_layout` with ``ack_req`` = 1.
* ``error``: Out stream :func:`~mrcnic.hdl.tx.tracker.error_layout` (retry budget exhausted).
* ``stat_ack_requests``, ``stat_retry_exceeded``: Out(32).

Timing: QPs are looked at round robin, one per cycle; a request or error leaves at most Q cycles after
its RTO ran out (plus output backpressure).
"""

from amaranth import Array, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .layouts import bits_for
from .tracker import ack_out_layout, error_layout, retransmit_layout, sent_layout

__all__ = ["AckWatchdog"]


def _later_or_equal(a, b, bits):
    """a is at or after b in serial arithmetic of ``bits`` bits."""
    return ((a - b) & ((1 << bits) - 1)) < (1 << (bits - 1))


class AckWatchdog(wiring.Component):
    def __init__(self, *, qps: int, ev_slots: int):
        self.qps = qps
        super().__init__(
            {
                "sent": In(stream.Signature(sent_layout(qps, ev_slots))),
                "ack": In(stream.Signature(ack_out_layout(qps))),
                "configure": In(stream.Signature(data.StructLayout({"qp": bits_for(qps)}))),
                "cack": In(data.ArrayLayout(24, qps)),
                "now": In(32),
                "rto_cycles": In(32),
                "retry_budget": In(3, init=7),
                "request": Out(stream.Signature(retransmit_layout(qps, ev_slots))),
                "error": Out(stream.Signature(error_layout(qps))),
                "stat_ack_requests": Out(32),
                "stat_retry_exceeded": Out(32),
            }
        )

    def elaborate(self, platform):
        m = Module()
        qps = self.qps

        def per_qp(name, width):
            return Array(Signal(width, name=f"{name}_{q}") for q in range(qps))

        last_sent = per_qp("last_sent", 24)
        end_psn = per_qp("end_psn", 24)
        end_msn = per_qp("end_msn", 16)
        unacked = per_qp("unacked", 1)
        stopped = per_qp("stopped", 1)
        wait_since = per_qp("wait_since", 32)
        tries = per_qp("tries", 3)

        m.d.comb += [self.sent.ready.eq(1), self.ack.ready.eq(1), self.configure.ready.eq(1)]
        with m.If(self.request.ready):
            m.d.sync += self.request.valid.eq(0)
        with m.If(self.error.ready):
            m.d.sync += self.error.valid.eq(0)

        # The scan: one QP per cycle. Written before the taps so that their updates win in this cycle.
        q = Signal(range(max(qps, 2)))
        m.d.sync += q.eq(q + 1)
        with m.If(q == qps - 1):
            m.d.sync += q.eq(0)
        cack = Array(self.cack[k] for k in range(qps))[q]
        waiting = unacked[q] & ~stopped[q] & (cack == last_sent[q])
        expired = (self.now - wait_since[q]) >= self.rto_cycles
        busy = self.request.valid | self.error.valid
        with m.If(~waiting):
            m.d.sync += wait_since[q].eq(self.now)
        with m.Elif(expired & ~busy):
            m.d.sync += wait_since[q].eq(self.now)
            with m.If(tries[q] == self.retry_budget):
                m.d.sync += [
                    stopped[q].eq(1),
                    self.error.valid.eq(1),
                    self.error.payload.qp.eq(q),
                    self.error.payload.psn.eq(end_psn[q]),
                    self.stat_retry_exceeded.eq(self.stat_retry_exceeded + 1),
                ]
            with m.Else():
                m.d.sync += [
                    tries[q].eq(tries[q] + 1),
                    self.request.valid.eq(1),
                    self.request.payload.qp.eq(q),
                    self.request.payload.psn.eq(end_psn[q]),
                    self.request.payload.avoid_slot.eq(0),
                    self.request.payload.ack_req.eq(1),
                    self.stat_ack_requests.eq(self.stat_ack_requests + 1),
                ]

        s = self.sent.payload
        with m.If(self.sent.valid & ~s.rtx):
            m.d.sync += last_sent[s.qp].eq(s.psn)
            with m.If(s.end):
                m.d.sync += [end_psn[s.qp].eq(s.psn), end_msn[s.qp].eq(s.msn), unacked[s.qp].eq(1)]

        a = self.ack.payload
        new_end_now = self.sent.valid & ~s.rtx & s.end & (s.qp == a.qp)  # this ACK predates that end
        with m.If(self.ack.valid):
            m.d.sync += tries[a.qp].eq(0)
            with m.If(a.nak):
                m.d.sync += stopped[a.qp].eq(1)
            with m.Elif(_later_or_equal(a.msn, end_msn[a.qp], 16) & ~new_end_now):
                m.d.sync += unacked[a.qp].eq(0)

        c = self.configure.payload
        with m.If(self.configure.valid):
            m.d.sync += [unacked[c.qp].eq(0), stopped[c.qp].eq(0), tries[c.qp].eq(0)]
        return m
