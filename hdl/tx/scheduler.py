"""QP scheduler: which packet goes next. Retransmissions first, then round robin over QPs with data.

Ref: docs/protocol.md §7.7 (retransmissions before new data; never send PSN > cack + window; inflight +
packet <= cwnd).

A QP is eligible for a new packet when it has data (``segmenter.has_data``), its next PSN is within its
PSN limit (``psn_limit``, driven by the TX tracker: cack + window) and its congestion window is open
(``cwnd_open``, driven by the congestion controller). The round-robin pointer moves past the QP just
served, so every eligible QP gets a turn before any QP gets a second one.
"""

from amaranth import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .layouts import bits_for, descriptor_layout

__all__ = ["QpScheduler", "psn_within"]


def psn_within(psn, limit):
    """PSN ``psn`` is at or before ``limit`` in 24-bit serial arithmetic (half-range 2^23)."""
    return ((limit - psn) & 0xFFFFFF) < (1 << 23)


class QpScheduler(wiring.Component):
    """Members:

    * ``retransmit``: In, descriptors of packets to send again (served before any new packet).
    * ``has_data``, ``next_psn``: In, from the segmenter.
    * ``psn_limit``: In, per QP: the highest PSN that may be sent now.
    * ``cwnd_open``: In(qps), bit q: the congestion window of QP q has room for one more packet.
    * ``next_packet``: Out, ``{qp}`` to the segmenter; ``new_packet``: In, its descriptors.
    * ``descriptor``: Out, the packets in the order they are to be sent.
    """

    def __init__(self, *, qps: int, ev_slots: int = 16, addr_width: int = 64):
        self.qps = qps
        layout = descriptor_layout(qps, ev_slots, addr_width)
        super().__init__(
            {
                "retransmit": In(stream.Signature(layout)),
                "has_data": In(qps),
                "next_psn": In(data.ArrayLayout(24, qps)),
                "psn_limit": In(data.ArrayLayout(24, qps)),
                "cwnd_open": In(qps),
                "next_packet": Out(stream.Signature(data.StructLayout({"qp": bits_for(qps)}))),
                "new_packet": In(stream.Signature(layout)),
                "descriptor": Out(stream.Signature(layout)),
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

        # The descriptor's payload follows the source being served in every state, not just while it is
        # valid: assigned inside the states, it would be forced to 0 in the others, a gate on each of its
        # ~300 bits in front of the path stage's job register.
        with m.FSM() as fsm:
            m.d.comb += self.descriptor.payload.eq(
                Mux(fsm.ongoing("RETRANSMIT"), self.retransmit.payload, self.new_packet.payload)
            )
            with m.State("PICK"):
                with m.If(self.retransmit.valid):
                    m.next = "RETRANSMIT"
                with m.Elif(any_eligible):
                    m.d.comb += [self.next_packet.valid.eq(1), self.next_packet.payload.qp.eq(chosen)]
                    with m.If(self.next_packet.ready):
                        m.d.sync += last_served.eq(chosen)
                        m.next = "NEW"
            with m.State("RETRANSMIT"):
                m.d.comb += [
                    self.descriptor.valid.eq(self.retransmit.valid),
                    self.retransmit.ready.eq(self.descriptor.ready),
                ]
                with m.If(self.descriptor.valid & self.descriptor.ready):
                    m.next = "PICK"
            with m.State("NEW"):
                m.d.comb += [
                    self.descriptor.valid.eq(self.new_packet.valid),
                    self.new_packet.ready.eq(self.descriptor.ready),
                ]
                with m.If(self.descriptor.valid & self.descriptor.ready):
                    m.next = "PICK"
        return m
