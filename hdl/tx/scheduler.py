"""QP scheduler: which QP's new packet goes next. Round robin over QPs with data, after retransmissions.

Ref: docs/protocol.md §7.7 (retransmissions before new data; never send PSN > cack + window; inflight +
packet <= cwnd).

A QP is eligible for a new packet when it has data (``segmenter.has_data``), its next PSN is within its
PSN limit (``psn_limit``, driven by the TX tracker: cack + window) and its congestion window is open
(``cwnd_open``, driven by the congestion controller). The round-robin pointer moves past the QP just
served, so every eligible QP gets a turn before any QP gets a second one.
"""

from amaranth import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .layouts import bits_for

__all__ = ["QpScheduler", "psn_within"]


def psn_within(psn, limit):
    """PSN ``psn`` is at or before ``limit`` in 24-bit serial arithmetic (half-range 2^23)."""
    return ((limit - psn) & 0xFFFFFF) < (1 << 23)


class QpScheduler(wiring.Component):
    """Members:

    * ``retransmit_waiting``: In(1), a retransmission is asked for (the retransmitter's ``request.valid``):
      no new packet is started meanwhile.
    * ``has_data``, ``next_psn``: In, from the segmenter.
    * ``psn_limit``: In, per QP: the highest PSN that may be sent now.
    * ``cwnd_open``: In(qps), bit q: the congestion window of QP q has room for one more packet.
    * ``next_packet``: Out, ``{qp}`` to the segmenter, whose descriptor goes to the retransmitter's table
      and from there to the path stage.
    * ``new_packet_taken``: In(1), that descriptor (``rtx`` = 0) left the retransmitter: the next QP is
      picked only then, so the next choice sees the windows with the previous packet counted.
    """

    def __init__(self, *, qps: int):
        self.qps = qps
        super().__init__(
            {
                "retransmit_waiting": In(1),
                "has_data": In(qps),
                "next_psn": In(data.ArrayLayout(24, qps)),
                "psn_limit": In(data.ArrayLayout(24, qps)),
                "cwnd_open": In(qps),
                "next_packet": Out(stream.Signature(data.StructLayout({"qp": bits_for(qps)}))),
                "new_packet_taken": In(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        qps = self.qps

        eligible = Signal(qps)
        for q in range(qps):
            m.d.comb += eligible[q].eq(
                self.has_data[q] & self.cwnd_open[q] & psn_within(self.next_psn[q], self.psn_limit[q])
            )

        # Round robin: the first eligible QP after the one served last (wrapping around).
        last_served = Signal(range(qps), init=qps - 1)
        chosen = Signal(range(qps))
        any_eligible = eligible.any()
        for offset in reversed(range(1, qps + 1)):
            q = Signal(range(qps), name=f"candidate_{offset}")
            m.d.comb += q.eq((last_served + offset) % qps)
            with m.If(eligible.bit_select(q, 1)):
                m.d.comb += chosen.eq(q)

        with m.FSM():
            with m.State("PICK"):
                with m.If(any_eligible & ~self.retransmit_waiting):
                    m.d.comb += [self.next_packet.valid.eq(1), self.next_packet.payload.qp.eq(chosen)]
                    with m.If(self.next_packet.ready):
                        m.d.sync += last_served.eq(chosen)
                        m.next = "NEW"
            with m.State("NEW"):
                with m.If(self.new_packet_taken):
                    m.next = "PICK"
        return m
