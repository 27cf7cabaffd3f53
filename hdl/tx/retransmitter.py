"""Retransmitter: keeps the descriptor of every outstanding PSN and rebuilds it when a retransmit is asked.

Ref: docs/protocol.md §7.7 (only lost or NACKed PSNs are retransmitted; each retransmission has BTH.RTX = 1,
DSCP TRIMMABLE_RETX, a fresh TSETH timestamp and a different slot than the last attempt), §3.2 (the RETH
of every packet carries its own VA, so one packet can be rebuilt on its own).

The payload is not kept: as in RDMA, the source buffer belongs to the work request until it completes,
so a retransmission reads it again from host memory. What is kept is the packet's descriptor (opcode,
sequence numbers, addresses, length), one ``lib.memory`` entry per (QP, PSN mod W). The TX tracker only
asks for PSNs in ``(cack, next_psn)`` and the window limit keeps new PSNs within ``cack + W``, so the entry
of an outstanding PSN is never overwritten before it is released. The stored PSN is compared with the
request anyway: a request whose entry holds another PSN is dropped and counted (``stat_stale``), never
sent with the wrong bytes.

Members (Q = ``qps``, W = ``window``):

* ``store``: In stream :func:`~mrcnic.hdl.tx.layouts.descriptor_layout`, every new packet (always ready).
* ``request``: In stream :func:`~mrcnic.hdl.tx.tracker.retransmit_layout` ``{qp, psn, avoid_slot}``.
* ``descriptor``: Out stream, the stored descriptor with ``rtx`` = 1, ``avoid_slot`` and ``ack_req`` from
  the request.
* ``stat_stale``: Out(32).

Timing: a request is taken in the cycle after the previous descriptor left; its descriptor is valid 2
cycles after the request was taken.
"""

from amaranth import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .layouts import descriptor_layout
from .tracker import retransmit_layout

__all__ = ["Retransmitter"]


class Retransmitter(wiring.Component):
    def __init__(self, *, qps: int, window: int, ev_slots: int, addr_width: int = 64):
        if window & (window - 1):
            raise ValueError(f"window must be a power of two, not {window}")
        self.qps, self.window, self.ev_slots, self.addr_width = qps, window, ev_slots, addr_width
        layout = descriptor_layout(qps, ev_slots, addr_width)
        super().__init__(
            {
                "store": In(stream.Signature(layout)),
                "request": In(stream.Signature(retransmit_layout(qps, ev_slots))),
                "descriptor": Out(stream.Signature(layout)),
                "stat_stale": Out(32),
            }
        )

    def elaborate(self, platform):
        m = Module()
        index_bits = (self.window - 1).bit_length()
        layout = descriptor_layout(self.qps, self.ev_slots, self.addr_width)
        m.submodules.descriptors = table = Memory(shape=layout, depth=self.qps * self.window, init=[])
        wr = table.write_port()
        rd = table.read_port(domain="sync")

        def address(qp, psn):
            return (qp << index_bits) | psn[:index_bits]

        stored = self.store.payload
        m.d.comb += [
            self.store.ready.eq(1),
            wr.en.eq(self.store.valid),
            wr.addr.eq(address(stored.qp, stored.psn)),
            wr.data.eq(stored),
        ]

        asked = Signal.like(self.request.payload)
        with m.If(self.descriptor.ready):
            m.d.sync += self.descriptor.valid.eq(0)
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += [
                    self.request.ready.eq(~self.descriptor.valid),
                    rd.addr.eq(address(self.request.payload.qp, self.request.payload.psn)),
                ]
                with m.If(self.request.valid & self.request.ready):
                    m.d.sync += asked.eq(self.request.payload)
                    m.next = "READ"
            with m.State("READ"):
                entry = rd.data
                with m.If((entry.psn == asked.psn) & (entry.qp == asked.qp)):
                    m.d.sync += [
                        self.descriptor.valid.eq(1),
                        self.descriptor.payload.eq(entry),
                        self.descriptor.payload.rtx.eq(1),
                        self.descriptor.payload.avoid_slot.eq(asked.avoid_slot),
                        self.descriptor.payload.ack_req.eq(asked.ack_req),
                    ]
                with m.Else():
                    m.d.sync += self.stat_stale.eq(self.stat_stale + 1)
                m.next = "IDLE"
        return m
