"""Retransmitter: keeps the descriptor of every outstanding PSN, and is where every descriptor comes from.

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

New packets go through the table too: the segmenter's descriptor is written, then read back like a
retransmission's. So the descriptors that leave come from one place, the table's read port, and no
multiplexer of some 250 bits chooses between a new packet and a retransmission (it cost as many LUTs).

Members (Q = ``qps``, W = ``window``):

* ``store``: In stream :func:`~mrcnic.hdl.tx.layouts.descriptor_layout`, every new packet; it leaves
  ``descriptor`` with ``rtx``, ``avoid_slot`` and ``ack_req`` = 0, whatever its own say.
* ``request``: In stream :func:`~mrcnic.hdl.tx.tracker.retransmit_layout` ``{qp, psn, avoid_slot,
  ack_req}``: it leaves ``descriptor`` with ``rtx`` = 1, ``avoid_slot`` and ``ack_req`` from the request.
* ``descriptor``: Out stream, in the order stored packets and requests were taken. A request is taken
  before a stored packet that waits in the same cycle (retransmissions first, §7.7).
* ``stat_stale``: Out(32).

Timing: a request or a new packet is taken when ``descriptor`` holds nothing. A request's descriptor is
valid 2 cycles after it was taken, a new packet's 3 (the write, then the read). The table is written
only in a cycle that takes a new packet, whose read is not used, so read-during-write is left undefined
(``UNDEFINED_COLLISIONS``: no logic after the block RAM).
"""

from amaranth import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..tables import UNDEFINED_COLLISIONS
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
        m.submodules.descriptors = table = Memory(
            shape=layout, depth=self.qps * self.window, init=[], attrs=UNDEFINED_COLLISIONS
        )
        wr = table.write_port()
        rd = table.read_port(domain="sync")

        def address(qp, psn):
            return (qp << index_bits) | psn[:index_bits]

        stored, request = self.store.payload, self.request.payload
        m.d.comb += [wr.addr.eq(address(stored.qp, stored.psn)), wr.data.eq(stored)]

        # what is being read: (qp, psn), and what the descriptor gets from the request
        asked = Signal(data.StructLayout({"request": retransmit_layout(self.qps, self.ev_slots), "rtx": 1}))
        with m.If(self.descriptor.ready):
            m.d.sync += self.descriptor.valid.eq(0)
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += rd.addr.eq(address(request.qp, request.psn))
                with m.If(~self.descriptor.valid):
                    with m.If(self.request.valid):
                        m.d.comb += self.request.ready.eq(1)
                        m.d.sync += [asked.request.eq(request), asked.rtx.eq(1)]
                        m.next = "READ"
                    with m.Elif(self.store.valid):
                        m.d.comb += [self.store.ready.eq(1), wr.en.eq(1)]
                        m.d.sync += [
                            asked.request.eq(0),
                            asked.request.qp.eq(stored.qp),
                            asked.request.psn.eq(stored.psn),
                            asked.rtx.eq(0),
                        ]
                        m.next = "FETCH"
            with m.State("FETCH"):  # the entry written in the cycle before
                m.d.comb += rd.addr.eq(address(asked.request.qp, asked.request.psn))
                m.next = "READ"
            with m.State("READ"):
                entry, wanted = rd.data, asked.request
                with m.If((entry.psn == wanted.psn) & (entry.qp == wanted.qp)):
                    m.d.sync += [
                        self.descriptor.valid.eq(1),
                        self.descriptor.payload.eq(entry),
                        self.descriptor.payload.rtx.eq(asked.rtx),
                        self.descriptor.payload.avoid_slot.eq(wanted.avoid_slot),
                        self.descriptor.payload.ack_req.eq(wanted.ack_req),
                    ]
                with m.Else():
                    m.d.sync += self.stat_stale.eq(self.stat_stale + 1)
                m.next = "IDLE"
        return m
