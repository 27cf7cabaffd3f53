"""Segmenter: RDMA WRITE work requests become packet descriptors of at most PMTU payload bytes.

Ref: docs/protocol.md §3.2 (segmentation, per-packet RETH VA), §3.3 (PSN, MSN, RQMSN).

Each QP holds one work request in progress (its *slot*, in a ``lib.memory`` table); ``slot_free`` tells
the work-queue fetcher which QPs can take the next one. The scheduler asks for the next packet of a QP
through ``next_packet``; the segmenter answers with one descriptor on ``descriptor`` and advances that
QP's offset, PSN and, at message start, MSN/RQMSN. Work requests of length 0 or above 2^31 are refused
(consumed, counted in ``stat_rejected``), as §3.2 says.

A QP in ERROR (``halt``) sends nothing more (§7.4): its work request in progress is abandoned and the
ones handed over later are consumed without a packet (counted in ``stat_flushed``; the host interface
completes them FLUSHED). Connecting the QP again (``configure``, after the error clears) resumes it.
"""

from amaranth import Array, Const, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from mrcnic.wire.constants import Opcode

from ..tables import small_table_attrs
from .layouts import MAX_PMTU, WriteKind, bits_for, descriptor_layout, work_request_layout

__all__ = ["Segmenter"]


class Segmenter(wiring.Component):
    """Parameters: ``qps`` (number of QPs), ``ev_slots`` (only sizes ``descriptor.avoid_slot``).

    Members:

    * ``work_request``: In, a work request for ``qp``; taken when that QP's slot is free.
    * ``slot_free``: Out(qps), bit q: QP q can take a work request now.
    * ``has_data``: Out(qps), bit q: QP q has payload left to segment.
    * ``next_psn``: Out, per-QP PSN the next new packet will take (for the scheduler's window gate).
    * ``next_packet``: In, ``{qp}``: produce the next packet of this QP (it must have data).
    * ``descriptor``: Out, the packet (``descriptor_layout``).
    * ``configure``: In, ``{qp, psn, msn, rqmsn}``: set a QP's sequence numbers (connect time).
    * ``pmtu_log2``: In(4), register: 8..12 for PMTU 256..4096.
    * ``halt``: In(qps), bit q: QP q is in ERROR.
    * ``stat_rejected``: Out(32), refused work requests; ``stat_flushed``: Out(32), work requests dropped
      (taken while their QP was in ERROR, or abandoned in progress when it went there).
    """

    def __init__(self, *, qps: int, ev_slots: int = 16, addr_width: int = 64):
        self.qps, self.ev_slots, self.addr_width = qps, ev_slots, addr_width
        qp_bits = bits_for(qps)
        super().__init__(
            {
                "work_request": In(stream.Signature(work_request_layout(qps, addr_width))),
                "slot_free": Out(qps),
                "has_data": Out(qps),
                "next_psn": Out(data.ArrayLayout(24, qps)),
                "next_packet": In(stream.Signature(data.StructLayout({"qp": qp_bits}))),
                "descriptor": Out(stream.Signature(descriptor_layout(qps, ev_slots, addr_width))),
                "configure": In(
                    stream.Signature(data.StructLayout({"qp": qp_bits, "psn": 24, "msn": 16, "rqmsn": 16}))
                ),
                "pmtu_log2": In(4, init=12),
                "halt": In(qps),
                "stat_rejected": Out(32),
                "stat_flushed": Out(32),
            }
        )

    def elaborate(self, platform):
        m = Module()
        qps = self.qps
        wr_layout = work_request_layout(qps, self.addr_width)

        # Work request in progress per QP, with the message's sequence numbers and the bytes sent so far.
        slot_layout = data.StructLayout({"wr": wr_layout, "offset": 32, "msn": 16, "rqmsn": 16})
        m.submodules.slots = slots = memory.Memory(
            shape=slot_layout, depth=qps, init=[], attrs=small_table_attrs(qps)
        )
        rd = slots.read_port(domain="sync")
        wr = slots.write_port()

        busy = Signal(qps)  # slot holds a work request with bytes left
        next_psn = Array(Signal(24, name=f"next_psn_{q}") for q in range(qps))
        next_msn = Array(Signal(16, name=f"next_msn_{q}") for q in range(qps))
        next_rqmsn = Array(Signal(16, name=f"next_rqmsn_{q}") for q in range(qps))
        for q in range(qps):
            m.d.comb += self.next_psn[q].eq(next_psn[q])
        m.d.comb += [self.has_data.eq(busy & ~self.halt), self.slot_free.eq(~busy | self.halt)]
        # A QP going to ERROR abandons its work request in progress (one packet already asked for may
        # still leave: the FSM below is past the point of no return for it).
        abandoned = Signal(qps)
        flushed_now = Signal()  # a work request taken for a QP in ERROR (the FSM below)
        m.d.comb += abandoned.eq(busy & self.halt)
        m.d.sync += [
            busy.eq(busy & ~self.halt),
            self.stat_flushed.eq(self.stat_flushed + flushed_now + sum(abandoned[q] for q in range(qps))),
        ]

        pmtu = Signal(range(MAX_PMTU + 1))
        m.d.comb += pmtu.eq(Const(1, 13) << self.pmtu_log2)

        # Configuration and work-request intake share the idle state with packet production, so the
        # single write port of the slot table never sees two writers. Intake (one cycle) goes before
        # packet production: with QPs always eligible, production alone would starve the intake.
        request = self.work_request.payload
        request_ok = (request.length != 0) & (request.length <= (1 << 31))
        current = Signal(self.descriptor.payload.shape())
        # The register is the descriptor in every state (only ``valid`` says when it is one): gated by the
        # state, each of its bits would take a LUT.
        m.d.comb += self.descriptor.payload.eq(current)
        pending_qp = Signal(bits_for(qps))

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.configure.valid):
                    cfg = self.configure.payload
                    m.d.comb += self.configure.ready.eq(1)
                    m.d.sync += [
                        next_psn[cfg.qp].eq(cfg.psn),
                        next_msn[cfg.qp].eq(cfg.msn),
                        next_rqmsn[cfg.qp].eq(cfg.rqmsn),
                    ]
                with m.Elif(self.work_request.valid & self.halt.bit_select(request.qp, 1)):
                    m.d.comb += [self.work_request.ready.eq(1), flushed_now.eq(1)]
                with m.Elif(self.work_request.valid & ~busy.bit_select(request.qp, 1)):
                    m.d.comb += self.work_request.ready.eq(1)
                    with m.If(request_ok):
                        is_imm = request.kind == WriteKind.WRITE_IMM
                        m.d.comb += [
                            wr.addr.eq(request.qp),
                            wr.en.eq(1),
                            wr.data.wr.eq(request),
                            wr.data.offset.eq(0),
                            wr.data.msn.eq(next_msn[request.qp]),
                            wr.data.rqmsn.eq(next_rqmsn[request.qp]),
                        ]
                        m.d.sync += [
                            busy.bit_select(request.qp, 1).eq(1),
                            next_msn[request.qp].eq(next_msn[request.qp] + 1),
                            next_rqmsn[request.qp].eq(next_rqmsn[request.qp] + is_imm),
                        ]
                    with m.Else():
                        m.d.sync += self.stat_rejected.eq(self.stat_rejected + 1)

                with m.Elif(self.next_packet.valid):
                    m.d.comb += [self.next_packet.ready.eq(1), rd.addr.eq(self.next_packet.payload.qp)]
                    m.d.sync += pending_qp.eq(self.next_packet.payload.qp)
                    m.next = "SEGMENT"
            with m.State("SEGMENT"):
                slot = rd.data
                remaining = Signal(32)
                length = Signal(range(MAX_PMTU + 1))
                first = slot.offset == 0
                last = remaining <= pmtu
                imm = slot.wr.kind == WriteKind.WRITE_IMM
                opcode = Signal(8)
                m.d.comb += [
                    remaining.eq(slot.wr.length - slot.offset),
                    length.eq(Mux(last, remaining, pmtu)),
                ]
                with m.If(first & last):
                    m.d.comb += opcode.eq(Mux(imm, Opcode.WRITE_ONLY_IMM, Opcode.WRITE_ONLY))
                with m.Elif(first):
                    m.d.comb += opcode.eq(Opcode.WRITE_FIRST)
                with m.Elif(last):
                    m.d.comb += opcode.eq(Mux(imm, Opcode.WRITE_LAST_IMM, Opcode.WRITE_LAST))
                with m.Else():
                    m.d.comb += opcode.eq(Opcode.WRITE_MIDDLE)
                m.d.sync += [
                    current.qp.eq(pending_qp),
                    current.opcode.eq(opcode),
                    current.psn.eq(next_psn[pending_qp]),
                    current.msn.eq(slot.msn),
                    current.rqmsn.eq(slot.rqmsn),
                    current.local_addr.eq(slot.wr.local_addr + slot.offset),
                    current.va.eq(slot.wr.remote_va + slot.offset),
                    current.rkey.eq(slot.wr.rkey),
                    current.dma_length.eq(slot.wr.length),
                    current.length.eq(length),
                    current.imm.eq(slot.wr.imm),
                    current.rtx.eq(0),
                    current.avoid_slot.eq(0),
                    next_psn[pending_qp].eq(next_psn[pending_qp] + 1),
                ]
                m.d.comb += [
                    wr.addr.eq(pending_qp),
                    wr.en.eq(1),
                    wr.data.eq(slot),
                    wr.data.offset.eq(slot.offset + length),
                ]
                with m.If(last):
                    m.d.sync += busy.bit_select(pending_qp, 1).eq(0)
                m.next = "EMIT"

            with m.State("EMIT"):
                m.d.comb += self.descriptor.valid.eq(1)
                with m.If(self.descriptor.ready):
                    m.next = "IDLE"
        return m
