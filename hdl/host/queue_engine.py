"""Queue engine: send queues and receive credits in, work requests to the core, completions out to the CQ.

Ref: docs/host-interface.md "Work queues" (SQ rings, doorbells, the WQE and CQE formats, the completion
rules and statuses; the formats come from :mod:`mrcnic.regmap.queues`: ``WQE_FIELDS`` / ``CQE_FIELDS``
give every field offset here); docs/protocol.md §3.3 (MSN: +1 per message mod 2^16, at most 2^15 - 1
outstanding, hence the serial compares), §7.4 (a WR completes only on an AETH: ACK msn >= m completes every
WR <= m; a NAK for m: earlier WRs SUCCESS, m by syndrome, later ones FLUSHED, the QP goes to ERROR),
§7.6 (WRITE-with-immediate consumes one posted receive), §7.7 (retry budget: RETRY_EXCEEDED, rest FLUSHED).

Members (Q = ``qps``; every index and counter below is mod 2^16 unless it says otherwise):

* Registers in (the register file drives them; names are the register map's bindings):
  ``sq_base``, ``sq_size_log2`` (0: SQ off), ``sq_producer``, ``rq_producer``: per QP
  (``data.ArrayLayout(.., Q)``); ``cq_base``, ``cq_size_log2`` (0: no CQE is written), ``cq_consumer``.
  The low 6 bits of ``sq_base`` and the low 5 of ``cq_base`` are ignored (the rings are aligned).
* ``addr_width``: host addresses the NIC reaches (``m_axi``'s). A WQE slot, a CQE slot or a payload
  buffer that does not lie below ``2**addr_width`` is never accessed with its address cut short: the
  access fails as an AXI error would (below), without a transaction.
* Status out: ``sq_consumer`` (WQEs read), ``sq_completed`` (SEND CQEs written), ``rq_consumer`` (RECV_IMM
  CQEs written), ``qp_status`` ([0] QP in ERROR, [1] SQ stopped by a doorbell overrun), ``cq_producer``;
  the counters ``stat_host_<name>`` of ``HOST_COUNTERS`` (Out(32), wrapping).
* ``work_request``: Out(:func:`~mrcnic.hdl.tx.layouts.work_request_layout`), one per valid WQE.
* ``post_receive``: Out, ``{qp}``: one per receive the host posted; QP q has
  ``d = rq_producer[q] - posts made`` to post when ``0 < d < 2^15`` (a producer written *behind* the posts
  made, e.g. reset to ``rq_consumer`` while receives are outstanding, posts nothing until it passes them).
* ``connect``: In (:func:`~mrcnic.hdl.nic.connect_layout`), a copy of every connect record the core takes;
  always ready. The QP becomes connected, its ERROR bit clears, its next MSN = ``msn``.
* ``ack`` (:func:`~mrcnic.hdl.tx.tracker.ack_out_layout`), ``send_error`` ({qp, psn}),
  ``receive_completion`` (:func:`~mrcnic.hdl.rx.completion_tracker.receive_completion_layout`): In; taken
  only when the engine can act on them, so they wait (never dropped) while the CQ is full.
* ``m_axi``: Out(:class:`~mrcnic.hdl.dma.axi.Axi4Signature`): the read channels of a
  :class:`~mrcnic.hdl.dma.reader.DmaReader` (WQE reads) and the write channels of a
  :class:`~mrcnic.hdl.dma.writer.DmaWriter` (CQE writes), ARID = AWID = 0.

Behaviour.

* **Fetch** (one WQE at a time). A QP is eligible when its SQ is on, not stopped, ``sq_producer !=
  sq_consumer``, no WQE of it is parked and it has no stale WQEs (both below). The eligible QPs are served
  round-robin. If ``sq_producer - sq_consumer > 2^sq_size_log2`` the SQ stops (``qp_status[1]``,
  ``stat_host_doorbell_overruns`` + 1, once: a stopped SQ is not eligible); the stop clears while
  ``sq_size_log2`` is 0 (turning the SQ off and on again restarts it; ``sq_consumer`` keeps its value).
  Otherwise the 64 bytes at ``sq_base + (sq_consumer mod 2^n) * 64`` are read, ``sq_consumer`` + 1,
  ``stat_host_wqes_fetched`` + 1, and the WQE (SQ index = ``sq_consumer`` before the increment) is
  decided, by the QP's state at the end of the read:

  - not connected, in ERROR, or stale: FLUSHED (the read error, if any, still counts in
    ``stat_host_dma_errors``: the WQE is not needed);
  - the read returned an AXI error, or the WQE slot is beyond the reach (not read): LOCAL_DMA_ERROR, the
    QP goes to ERROR, ``stat_host_dma_errors`` + 1;
  - the payload buffer ``[local_addr, local_addr + length)`` is beyond the reach: LOCAL_DMA_ERROR, the
    QP goes to ERROR, ``stat_host_dma_errors`` + 1;
  - opcode not WRITE / WRITE_IMM, length 0 or above 2^31: INVALID_WQE, the QP goes to ERROR,
    ``stat_host_invalid_wqes`` + 1;
  - else ``work_request`` {qp, kind, local_addr, remote_va, rkey, length, imm} and the WQE is *in flight*
    with the QP's next MSN (then next MSN + 1). It counts as in flight from this decision, while
    ``work_request`` still waits for the core (a NAK or send_error in that window flushes it).

  A WQE decided FLUSHED / LOCAL_DMA_ERROR / INVALID_WQE is *parked* (one per QP: the QP is not fetched
  meanwhile) until the QP has nothing in flight, then its CQE (msn 0) is written. So the CQEs of a QP are
  always in SQ order: in-flight WQEs are completed from the oldest, and the QP's next fetch waits for the
  parked one. (While the CQ is full or off, a QP can thus have one CQE waiting in the CQE register and
  one more WQE parked behind it.)
* **In flight**, per QP: consecutive SQ indices with consecutive MSNs (oldest: ``head_index``, ``head_msn``,
  count ``inflight``): on a QP that is connected and not in ERROR every fetched WQE is sent or parked.
* **ack** {qp, msn, nak = 0}: with ``d = msn - head_msn``, if ``d < 2^15`` the ``min(d + 1, inflight)``
  oldest WQEs complete SUCCESS; an ACK that completes nothing is ignored. {nak = 1, msn = m}: if ``d <
  2^15``, the ``min(d, inflight)`` oldest complete SUCCESS and, if ``d < inflight``, the next one by syndrome
  (0x61 REMOTE_INVALID_REQUEST, 0x62 REMOTE_ACCESS_ERROR, anything else REMOTE_OPERATION_ERROR); the rest
  in flight FLUSHED; the QP goes to ERROR (always, also when m is not in flight).
* **send_error** {qp}: the oldest in-flight WQE completes RETRY_EXCEEDED, the rest FLUSHED, the QP goes to
  ERROR (also with nothing in flight).
* **receive_completion** {qp, status, imm, byte_len, rqmsn}: a RECV_IMM CQE {index = ``rq_consumer[qp]``,
  status SUCCESS if the record's status is 0 else REMOTE_OPERATION_ERROR, qp, msn = rqmsn, byte_len, imm}.
* **connect** while WQEs are in flight: they belong to the old connection (the core restarted its
  scoreboard, no answer will come) and are *stale*: they complete FLUSHED, before any ``ack`` /
  ``send_error`` / ``receive_completion`` is taken and before the QP is fetched again; a WQE whose read
  was under way at the connect completes FLUSHED too (parked behind them).
* **CQ writer** (one CQE at a time). While ``cq_size_log2`` is 0 nothing is written and completions wait
  (no stall is counted). While ``cq_producer - cq_consumer >= 2^cq_size_log2`` the CQ is full: the CQE
  waits and every such cycle counts in ``stat_host_cq_full_stalls``. Else the 32-byte CQE goes to
  ``cq_base + (cq_producer mod 2^n) * 32`` with phase ``1 ^ ((cq_producer >> n) & 1)``; when the write is
  done (its B response arrived), ``cq_producer`` + 1 and ``sq_completed[qp]`` (SEND) or ``rq_consumer[qp]``
  (RECV_IMM) + 1, and ``stat_host_cqes_written`` + 1, or ``stat_host_dma_errors`` + 1 if the write failed
  or the slot is beyond the reach (not written; the CQE is lost; the indices still advance, so they stay
  consistent with each other).
* ``stat_host_flushed`` counts every FLUSHED CQE, when it is decided (before it is written).
* Completion sources, one at a time into the CQE register: an ongoing multi-CQE job (ACK, NAK,
  send_error, stale flush) first, then parked WQEs ready to go, then stale flushes, then the ``send_error``
  / ``ack`` / ``receive_completion`` inputs, round-robin among them.
* Reset: every index, counter and state bit 0; no QP connected.

Timing (one WQE read and one CQE write at a time, the two overlap). Per WQE: pick, read command, the
DmaReader's AR and 64 / W R beats, decision, ``work_request`` handshake: 64 / W + 8 cycles with a memory
that answers in the next cycle (16 at W = 8), plus any further read latency. Per CQE: decision, write
command, max(1, 32 / W) W beats, B response and the DmaWriter's ``done``: max(1, 32 / W) + 9 cycles with
a memory that answers in the next cycle (13 at W = 8), plus any further write latency. A connect record
takes one cycle (always ready) and holds the WQE decision and the completion sources in that cycle.
"""

from __future__ import annotations

from amaranth import Array, Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from mrcnic.regmap import HOST_COUNTERS
from mrcnic.regmap.queues import CQE_BYTES, CQE_FIELDS, WQE_BYTES, WQE_FIELDS, CqeKind, CqeStatus, WqeOpcode
from mrcnic.wire import AethSyndrome

from ..compare import at_most
from ..dma.axi import Axi4Signature
from ..dma.reader import DmaReader
from ..dma.writer import DmaWriter
from ..nic import connect_layout
from ..rx.completion_tracker import receive_completion_layout
from ..tx.layouts import bits_for, work_request_layout
from ..tx.tracker import ack_out_layout, error_layout

__all__ = ["CompletionStatus", "QueueEngine"]


class CompletionStatus(enum.Enum, shape=8):
    """The CQE status codes (``mrcnic.regmap.CqeStatus``, docs/host-interface.md)."""

    SUCCESS = CqeStatus.SUCCESS.value
    REMOTE_INVALID_REQUEST = CqeStatus.REMOTE_INVALID_REQUEST.value
    REMOTE_ACCESS_ERROR = CqeStatus.REMOTE_ACCESS_ERROR.value
    REMOTE_OPERATION_ERROR = CqeStatus.REMOTE_OPERATION_ERROR.value
    RETRY_EXCEEDED = CqeStatus.RETRY_EXCEEDED.value
    FLUSHED = CqeStatus.FLUSHED.value
    INVALID_WQE = CqeStatus.INVALID_WQE.value
    LOCAL_DMA_ERROR = CqeStatus.LOCAL_DMA_ERROR.value


_WQE = {name: (offset, size) for name, offset, size in WQE_FIELDS}
# The WQE bytes the engine reads (wr_id and flags are the host's): only these are kept, 29 of 64.
_WQE_READ = ("opcode", "length", "local_addr", "remote_va", "rkey", "imm")


def _wqe_field(raw, name: str):
    offset, size = _WQE[name]
    return raw[8 * offset : 8 * (offset + size)]


def _pack(fields, size: int, values: dict):
    """The ``size``-byte image of a record laid out by ``fields`` ((name, offset, bytes), no overlaps)."""
    parts, at = [], 0
    for name, offset, n in sorted(fields, key=lambda f: f[1]):
        value = Value.cast(values[name])
        assert len(value) <= 8 * n, name
        parts += [Const(0, 8 * (offset - at)), value, Const(0, 8 * n - len(value))]
        at = offset + n
    parts.append(Const(0, 8 * (size - at)))
    return Cat(*parts)


def _round_robin(m: Module, requests, pointer, count: int, name: str):
    """The first request at or after ``pointer`` (else the lowest one): (any request, its index)."""
    pick = Signal(range(count), name=f"{name}_pick")
    found = Signal(name=f"{name}_any")
    m.d.comb += found.eq(requests.any())
    for i in reversed(range(count)):  # the lowest request wins ...
        with m.If(requests[i]):
            m.d.comb += pick.eq(i)
    for i in reversed(range(count)):  # ... unless one sits at or after the pointer
        with m.If(requests[i] & (pointer <= i)):
            m.d.comb += pick.eq(i)
    return found, pick


def _next(pick, count: int):
    """The round-robin pointer after serving ``pick``."""
    return Mux(pick == count - 1, 0, pick + 1)


class QueueEngine(wiring.Component):
    """Parameters: ``qps``, ``data_width`` (bytes per AXI beat, a power of two, 1..128), ``addr_width``,
    ``id_width`` (of ``m_axi``)."""

    def __init__(self, *, qps: int = 4, data_width: int = 8, addr_width: int = 64, id_width: int = 4):
        problem = None
        if not isinstance(qps, int) or not 1 <= qps <= 1 << 16:
            problem = f"qps must be in 1..65536, not {qps!r}"
        elif not isinstance(data_width, int) or not 1 <= data_width <= 128 or data_width & (data_width - 1):
            problem = f"data_width must be a power of two in 1..128, not {data_width!r}"
        if problem:
            self._MustUse__silence = True  # no "created but never used" warning for a rejected instance
            raise ValueError(problem)
        self.qps, self.data_width, self.addr_width, self.id_width = qps, data_width, addr_width, id_width
        per_qp = lambda width: data.ArrayLayout(width, qps)  # noqa: E731
        qp_bits = bits_for(qps)
        members = {
            "sq_base": In(per_qp(64)),
            "sq_size_log2": In(per_qp(4)),
            "sq_producer": In(per_qp(16)),
            "rq_producer": In(per_qp(16)),
            "cq_base": In(64),
            "cq_size_log2": In(4),
            "cq_consumer": In(16),
            "sq_consumer": Out(per_qp(16)),
            "sq_completed": Out(per_qp(16)),
            "rq_consumer": Out(per_qp(16)),
            "qp_status": Out(per_qp(2)),
            "cq_producer": Out(16),
        }
        for name, _doc in HOST_COUNTERS:
            members[f"stat_host_{name}"] = Out(32)
        members.update(
            {
                "work_request": Out(stream.Signature(work_request_layout(qps, addr_width))),
                "post_receive": Out(stream.Signature(data.StructLayout({"qp": qp_bits}))),
                "connect": In(stream.Signature(connect_layout(qps))),
                "ack": In(stream.Signature(ack_out_layout(qps))),
                "send_error": In(stream.Signature(error_layout(qps))),
                "receive_completion": In(stream.Signature(receive_completion_layout(qps))),
                "m_axi": Out(
                    Axi4Signature(addr_width=addr_width, data_width_bytes=data_width, id_width=id_width)
                ),
            }
        )
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        Q, W = self.qps, self.data_width
        qp_bits = bits_for(Q)

        m.submodules.reader = reader = DmaReader(
            data_width=W, addr_width=self.addr_width, max_length=WQE_BYTES, max_outstanding=2,
            id_width=self.id_width,
        )  # fmt: skip
        m.submodules.writer = writer = DmaWriter(
            data_width=W, addr_width=self.addr_width, max_length=CQE_BYTES, max_outstanding=2,
            id_width=self.id_width,
        )  # fmt: skip
        for name, member in self.m_axi.signature.members.items():
            side = reader.axi if name.startswith(("ar", "r")) else writer.axi
            port, mine = getattr(side, name), getattr(self.m_axi, name)
            m.d.comb += mine.eq(port) if member.flow == Out else port.eq(mine)

        # -- counters: each event is a 1-cycle strobe; dma_errors has two sources (WQE read, CQE write)
        events = {name: [] for name, _ in HOST_COUNTERS}

        def count(name):
            strobe = Signal(name=f"count_{name}_{len(events[name])}")
            events[name].append(strobe)
            return strobe

        # -- per-QP state (Q is small: plain registers)
        def regs(name, width=1):
            return [Signal(width, name=f"{name}_{q}") for q in range(Q)]

        connected, error, stopped = regs("connected"), regs("error"), regs("stopped")
        stale = regs("stale")  # in-flight WQEs of a previous connection: they complete FLUSHED
        parked, parked_index = regs("parked"), regs("parked_index", 16)
        parked_status = regs("parked_status", 8)  # a CompletionStatus
        inflight, head_index, head_msn = regs("inflight", 16), regs("head_index", 16), regs("head_msn", 16)
        next_msn = regs("next_msn", 16)
        sq_consumer, sq_completed = regs("sq_consumer", 16), regs("sq_completed", 16)
        rq_consumer, rq_posted = regs("rq_consumer", 16), regs("rq_posted", 16)
        cq_producer = Signal(16)
        for q in range(Q):
            m.d.comb += [
                self.sq_consumer[q].eq(sq_consumer[q]),
                self.sq_completed[q].eq(sq_completed[q]),
                self.rq_consumer[q].eq(rq_consumer[q]),
                self.qp_status[q].eq(Cat(error[q], stopped[q])),
            ]
            with m.If(self.sq_size_log2[q] == 0):
                m.d.sync += stopped[q].eq(0)
        m.d.comb += self.cq_producer.eq(cq_producer)
        A = Array
        a_connected, a_error, a_stale, a_parked = A(connected), A(error), A(stale), A(parked)
        a_inflight, a_head_index, a_head_msn, a_next_msn = (
            A(inflight),
            A(head_index),
            A(head_msn),
            A(next_msn),
        )
        a_parked_index, a_parked_status = A(parked_index), A(parked_status)
        a_sq_consumer, a_sq_completed = A(sq_consumer), A(sq_completed)
        a_rq_consumer, a_rq_posted = A(rq_consumer), A(rq_posted)

        # -- connect: always taken; it owns the per-QP state in its cycle
        conn = self.connect
        m.d.comb += conn.ready.eq(1)
        with m.If(conn.valid):
            conn_qp = conn.payload.qp
            m.d.sync += [
                a_connected[conn_qp].eq(1),
                a_error[conn_qp].eq(0),
                a_next_msn[conn_qp].eq(conn.payload.msn),
                a_stale[conn_qp].eq(a_inflight[conn_qp] != 0),
            ]

        # -- fetch ------------------------------------------------------------------------------------
        sq_size = A(self.sq_size_log2[q] for q in range(Q))
        sq_base = A(self.sq_base[q] for q in range(Q))
        sq_producer = A(self.sq_producer[q] for q in range(Q))
        eligible = Cat(
            (self.sq_size_log2[q] != 0)
            & ~stopped[q]
            & (self.sq_producer[q] != sq_consumer[q])
            & ~parked[q]
            & ~stale[q]
            for q in range(Q)
        )
        fetch_ptr = Signal(range(Q))
        any_fetch, fq_pick = _round_robin(m, eligible, fetch_ptr, Q, "fetch")

        f_qp = Signal(qp_bits)
        f_index = Signal(16)
        aw = self.addr_width
        f_addr = Signal(aw)
        f_error = Signal()
        f_unreachable = Signal()  # the WQE slot lies beyond 2^aw: not read, decided LOCAL_DMA_ERROR
        raw = Signal(8 * WQE_BYTES)  # the WQE, byte 0 in bits [7:0]; only the bytes of _WQE_READ are kept
        r_beat = Signal(range(max(1, WQE_BYTES // W)))  # the beat of the WQE being read (W <= 64)
        decode = Signal()  # the decision cycle: it owns the per-QP state (not while connect does)

        ahead = Signal(16)
        ring = Signal(17)
        slot = Signal(16)
        wqe_addr = Signal(aw + 1)  # the top bit: past 2^aw (64-byte slots: then the whole WQE is)
        m.d.comb += [
            ahead.eq(sq_producer[fq_pick] - a_sq_consumer[fq_pick]),
            ring.eq(Const(1, 17) << sq_size[fq_pick]),
            slot.eq(a_sq_consumer[fq_pick] & (ring - 1)),
            wqe_addr.eq(Cat(Const(0, 6), sq_base[fq_pick][6:aw] + slot)),
        ]

        wr = self.work_request
        with m.If(wr.ready):
            m.d.sync += wr.valid.eq(0)

        opcode = _wqe_field(raw, "opcode")
        length = _wqe_field(raw, "length")
        bad_opcode = opcode > max(int(op) for op in WqeOpcode)
        bad_length = (length == 0) | (length > (1 << 31))
        # The payload must lie below 2^aw: its reads are never cut short (a length above 2^31 is refused
        # first, as INVALID_WQE).
        local_addr = _wqe_field(raw, "local_addr")
        payload_end = Signal(max(aw, 32) + 1)
        m.d.comb += payload_end.eq(local_addr[:aw] + length)
        payload_unreachable = local_addr[aw:].any() | ~at_most(payload_end, 1 << aw)

        with m.FSM(name="fetch"):
            with m.State("IDLE"):
                with m.If(any_fetch):
                    m.d.sync += fetch_ptr.eq(_next(fq_pick, Q))
                    with m.If(ahead > ring):
                        m.d.sync += A(stopped)[fq_pick].eq(1)
                        m.d.comb += count("doorbell_overruns").eq(1)
                    with m.Else():
                        m.d.sync += [
                            f_qp.eq(fq_pick),
                            f_index.eq(a_sq_consumer[fq_pick]),
                            f_addr.eq(wqe_addr[:aw]),
                            f_unreachable.eq(wqe_addr[aw] | sq_base[fq_pick][aw:].any()),
                            a_sq_consumer[fq_pick].eq(a_sq_consumer[fq_pick] + 1),
                        ]
                        m.d.comb += count("wqes_fetched").eq(1)
                        m.next = "ISSUE"
            with m.State("ISSUE"):
                with m.If(f_unreachable):
                    m.d.sync += f_error.eq(1)
                    m.next = "DECODE"
                m.d.comb += [
                    reader.cmd.valid.eq(~f_unreachable),
                    reader.cmd.payload.addr.eq(f_addr),
                    reader.cmd.payload.length.eq(WQE_BYTES),
                ]
                with m.If(reader.cmd.ready & ~f_unreachable):
                    m.next = "READ"
            with m.State("READ"):
                beat = reader.data.payload
                m.d.comb += reader.data.ready.eq(1)
                with m.If(reader.data.valid):
                    if W <= WQE_BYTES:  # 64 / W beats, in address order: each byte read is stored in place
                        m.d.sync += r_beat.eq(r_beat + 1)
                        for name in _WQE_READ:
                            offset, size = _WQE[name]
                            for byte in range(offset, offset + size):
                                with m.If(r_beat == byte // W):
                                    m.d.sync += raw.word_select(byte, 8).eq(
                                        beat.data.word_select(byte % W, 8)
                                    )
                    else:  # one beat holding the WQE in lanes 0..63 or 64..127
                        m.d.sync += raw.eq(
                            Mux(beat.keep[0], beat.data[: 8 * WQE_BYTES], beat.data[8 * WQE_BYTES :])
                        )
                    with m.If(beat.last):
                        m.d.sync += [f_error.eq(beat.error), r_beat.eq(0)]
                        m.next = "DECODE"
            with m.State("DECODE"):
                with m.If(~conn.valid):
                    m.d.comb += decode.eq(1)
                    flush = ~a_connected[f_qp] | a_error[f_qp] | a_stale[f_qp]
                    status = Signal(CompletionStatus)
                    send = Signal()
                    with m.If(flush):
                        m.d.comb += status.eq(CompletionStatus.FLUSHED)
                    with m.Elif(f_error):
                        m.d.comb += status.eq(CompletionStatus.LOCAL_DMA_ERROR)
                    with m.Elif(bad_opcode | bad_length):
                        m.d.comb += [status.eq(CompletionStatus.INVALID_WQE), count("invalid_wqes").eq(1)]
                    with m.Elif(payload_unreachable):
                        m.d.comb += [status.eq(CompletionStatus.LOCAL_DMA_ERROR), count("dma_errors").eq(1)]
                    with m.Else():
                        m.d.comb += send.eq(1)
                    m.d.comb += count("dma_errors").eq(f_error)
                    with m.If(send):
                        with m.If(a_inflight[f_qp] == 0):
                            m.d.sync += [
                                a_head_index[f_qp].eq(f_index),
                                a_head_msn[f_qp].eq(a_next_msn[f_qp]),
                            ]
                        m.d.sync += [
                            a_inflight[f_qp].eq(a_inflight[f_qp] + 1),
                            a_next_msn[f_qp].eq(a_next_msn[f_qp] + 1),
                            wr.valid.eq(1),
                            wr.payload.qp.eq(f_qp),
                            wr.payload.kind.eq(opcode[0]),
                            wr.payload.local_addr.eq(local_addr[:aw]),
                            wr.payload.remote_va.eq(_wqe_field(raw, "remote_va")),
                            wr.payload.rkey.eq(_wqe_field(raw, "rkey")),
                            wr.payload.length.eq(length),
                            wr.payload.imm.eq(_wqe_field(raw, "imm")),
                        ]
                        m.next = "SEND"
                    with m.Else():
                        m.d.sync += [
                            a_parked[f_qp].eq(1),
                            a_parked_index[f_qp].eq(f_index),
                            a_parked_status[f_qp].eq(status),
                        ]
                        with m.If(~flush):
                            m.d.sync += a_error[f_qp].eq(1)
                        m.next = "IDLE"
            with m.State("SEND"):
                with m.If(wr.ready):
                    m.next = "IDLE"

        # -- post_receive: one record per receive posted, round-robin -----------------------------------
        post = self.post_receive
        to_post = Cat(
            ((self.rq_producer[q] - rq_posted[q])[:16] != 0) & ~(self.rq_producer[q] - rq_posted[q])[15]
            for q in range(Q)
        )
        post_ptr = Signal(range(Q))
        any_post, post_pick = _round_robin(m, to_post, post_ptr, Q, "post")
        with m.If(post.ready):
            m.d.sync += post.valid.eq(0)
        with m.If(any_post & (~post.valid | post.ready)):
            m.d.sync += [
                post.valid.eq(1),
                post.payload.qp.eq(post_pick),
                a_rq_posted[post_pick].eq(a_rq_posted[post_pick] + 1),
                post_ptr.eq(_next(post_pick, Q)),
            ]

        # -- the CQE register, filled by the completion sources, emptied by the CQ writer --------------
        c_valid = Signal()
        c_index = Signal(16)
        c_kind = Signal()
        c_status = Signal(CompletionStatus)
        c_qp = Signal(qp_bits)
        c_msn = Signal(16)
        c_byte_len = Signal(32)
        c_imm = Signal(32)

        def emit(*, index, kind, status, qp, msn, byte_len=0, imm=0):
            m.d.sync += [
                c_valid.eq(1),
                c_index.eq(index),
                c_kind.eq(kind),
                c_status.eq(status),
                c_qp.eq(qp),
                c_msn.eq(msn),
                c_byte_len.eq(byte_len),
                c_imm.eq(imm),
            ]

        def complete_oldest(qp, status):
            """The oldest in-flight WQE of ``qp`` completes ``status``."""
            emit(index=a_head_index[qp], kind=int(CqeKind.SEND), status=status, qp=qp, msn=a_head_msn[qp])
            m.d.sync += [
                a_inflight[qp].eq(a_inflight[qp] - 1),
                a_head_index[qp].eq(a_head_index[qp] + 1),
                a_head_msn[qp].eq(a_head_msn[qp] + 1),
            ]
            with m.If(a_inflight[qp] == 1):
                m.d.sync += a_stale[qp].eq(0)

        # A job: complete `ok` WQEs SUCCESS, then (fail) one with `status`, then (flush) the rest FLUSHED.
        job_active = Signal()
        job_qp = Signal(qp_bits)
        job_ok = Signal(16)
        job_fail = Signal()
        job_status = Signal(CompletionStatus)
        job_flush = Signal()

        def start_job(qp, *, ok=0, fail=0, status=CompletionStatus.RETRY_EXCEEDED, flush=0):
            m.d.sync += [
                job_active.eq(1),
                job_qp.eq(qp),
                job_ok.eq(ok),
                job_fail.eq(fail),
                job_status.eq(status),
                job_flush.eq(flush),
            ]

        releasable = Cat(parked[q] & (inflight[q] == 0) for q in range(Q))
        stale_left = Cat(stale[q] & (inflight[q] != 0) for q in range(Q))
        release_ptr = Signal(range(Q))
        any_release, release_pick = _round_robin(m, releasable, release_ptr, Q, "release")
        any_stale, stale_pick = _round_robin(m, stale_left, Const(0, range(Q)), Q, "stale")
        inputs = Cat(self.send_error.valid, self.ack.valid, self.receive_completion.valid)
        input_ptr = Signal(range(3))
        any_input, input_pick = _round_robin(m, inputs, input_ptr, 3, "input")

        # ACK / NAK arithmetic for the QP of the offered ack record.
        ack = self.ack.payload
        aq = ack.qp
        ack_d = Signal(16)
        m.d.comb += ack_d.eq(ack.msn - a_head_msn[aq])
        # msn at or after the oldest in flight (16-bit serial). No input is taken while a QP has stale WQEs
        # (they are flushed first), so head_msn is always the current connection's here.
        ack_reach = ~ack_d[15]
        ack_ok = Signal(16)
        with m.If(ack_reach):
            with m.If(ack.nak):
                m.d.comb += ack_ok.eq(Mux(ack_d < a_inflight[aq], ack_d, a_inflight[aq]))
            with m.Else():
                m.d.comb += ack_ok.eq(Mux(ack_d < a_inflight[aq], ack_d + 1, a_inflight[aq]))
        nak_status = Signal(CompletionStatus)
        with m.Switch(ack.syndrome):
            with m.Case(int(AethSyndrome.NAK_INVALID_REQUEST)):
                m.d.comb += nak_status.eq(CompletionStatus.REMOTE_INVALID_REQUEST)
            with m.Case(int(AethSyndrome.NAK_REMOTE_ACCESS)):
                m.d.comb += nak_status.eq(CompletionStatus.REMOTE_ACCESS_ERROR)
            with m.Default():
                m.d.comb += nak_status.eq(CompletionStatus.REMOTE_OPERATION_ERROR)

        rc = self.receive_completion.payload
        se_qp = self.send_error.payload.qp

        with m.If(~c_valid & ~conn.valid & ~decode):
            with m.If(job_active):
                with m.If(job_ok != 0):
                    complete_oldest(job_qp, CompletionStatus.SUCCESS)
                    m.d.sync += job_ok.eq(job_ok - 1)
                with m.Elif(job_fail):
                    complete_oldest(job_qp, job_status)
                    m.d.sync += job_fail.eq(0)
                with m.Elif(job_flush & (a_inflight[job_qp] != 0)):
                    complete_oldest(job_qp, CompletionStatus.FLUSHED)
                    m.d.comb += count("flushed").eq(1)
                with m.Else():
                    m.d.sync += job_active.eq(0)
            with m.Elif(any_release):
                q = release_pick
                emit(index=a_parked_index[q], kind=int(CqeKind.SEND), status=a_parked_status[q], qp=q, msn=0)
                m.d.sync += [a_parked[q].eq(0), release_ptr.eq(_next(q, Q))]
                m.d.comb += count("flushed").eq(a_parked_status[q] == CompletionStatus.FLUSHED)
            with m.Elif(any_stale):
                start_job(stale_pick, flush=1)
            with m.Elif(any_input):
                m.d.sync += input_ptr.eq(_next(input_pick, 3))
                with m.Switch(input_pick):
                    with m.Case(0):  # the retry budget ran out: the QP is in ERROR in the core
                        m.d.comb += self.send_error.ready.eq(1)
                        m.d.sync += a_error[se_qp].eq(1)
                        fail = a_inflight[se_qp] != 0
                        start_job(se_qp, fail=fail, status=CompletionStatus.RETRY_EXCEEDED, flush=1)
                    with m.Case(1):
                        m.d.comb += self.ack.ready.eq(1)
                        with m.If(ack.nak):
                            m.d.sync += a_error[aq].eq(1)
                            fail = ack_reach & (ack_d < a_inflight[aq])
                            start_job(aq, ok=ack_ok, fail=fail, status=nak_status, flush=1)
                        with m.Elif(ack_ok != 0):
                            start_job(aq, ok=ack_ok)
                    with m.Case(2):
                        m.d.comb += self.receive_completion.ready.eq(1)
                        emit(
                            index=a_rq_consumer[rc.qp],
                            kind=int(CqeKind.RECV_IMM),
                            status=Mux(
                                rc.status == 0,
                                CompletionStatus.SUCCESS,
                                CompletionStatus.REMOTE_OPERATION_ERROR,
                            ),
                            qp=rc.qp,
                            msn=rc.rqmsn,
                            byte_len=rc.byte_len,
                            imm=rc.imm,
                        )

        # -- CQ writer ----------------------------------------------------------------------------------
        cq_size = self.cq_size_log2
        cq_ring = Signal(17)
        cq_used = Signal(16)
        m.d.comb += [
            cq_ring.eq(Const(1, 17) << cq_size),
            cq_used.eq(cq_producer - self.cq_consumer),
        ]
        w_addr = Signal(self.addr_width)
        cqe_addr = Signal(
            self.addr_width + 1
        )  # the top bit: past 2^aw (32-byte slots: then the whole CQE is)
        w_phase = Signal()
        image = _pack(
            CQE_FIELDS,
            CQE_BYTES,
            {
                "index": c_index,
                "kind": c_kind,
                "status": c_status,
                "qp": c_qp,
                "msn": c_msn,
                "byte_len": c_byte_len,
                "imm": c_imm,
                "phase": w_phase,
            },
        )
        beats = max(1, CQE_BYTES // W)
        w_beat = Signal(range(beats))

        def written(error):
            """The CQE is done (written, or failed): the indices advance either way."""
            m.d.sync += [c_valid.eq(0), cq_producer.eq(cq_producer + 1)]
            with m.If(c_kind == int(CqeKind.SEND)):
                m.d.sync += a_sq_completed[c_qp].eq(a_sq_completed[c_qp] + 1)
            with m.Else():
                m.d.sync += a_rq_consumer[c_qp].eq(a_rq_consumer[c_qp] + 1)
            with m.If(error):
                m.d.comb += count("dma_errors").eq(1)
            with m.Else():
                m.d.comb += count("cqes_written").eq(1)
            m.next = "IDLE"

        with m.FSM(name="cq_writer"):
            with m.State("IDLE"):
                with m.If(c_valid & (cq_size != 0)):
                    with m.If(cq_used >= cq_ring):
                        m.d.comb += count("cq_full_stalls").eq(1)
                    with m.Else():
                        cq_slot = cq_producer & (cq_ring - 1)
                        m.d.comb += cqe_addr.eq(Cat(Const(0, 5), self.cq_base[5:aw] + cq_slot[:16]))
                        m.d.sync += [
                            w_addr.eq(cqe_addr[:aw]),
                            w_phase.eq(~(cq_producer >> cq_size)[0]),
                            w_beat.eq(0),
                        ]
                        with m.If(cqe_addr[aw] | self.cq_base[aw:].any()):
                            written(error=True)  # beyond the reach: not written, as a failed write
                        with m.Else():
                            m.next = "CMD"
            with m.State("CMD"):
                m.d.comb += [
                    writer.cmd.valid.eq(1),
                    writer.cmd.payload.addr.eq(w_addr),
                    writer.cmd.payload.length.eq(CQE_BYTES),
                ]
                with m.If(writer.cmd.ready):
                    m.next = "DATA"
            with m.State("DATA"):
                out = writer.data.payload
                m.d.comb += writer.data.valid.eq(1)
                if W < CQE_BYTES:
                    m.d.comb += [
                        out.data.eq(image.word_select(w_beat, 8 * W)),
                        out.keep.eq((1 << W) - 1),
                        out.last.eq(w_beat == beats - 1),
                    ]
                else:
                    m.d.comb += [out.data.eq(image), out.keep.eq((1 << CQE_BYTES) - 1), out.last.eq(1)]
                with m.If(writer.data.ready):
                    m.d.sync += w_beat.eq(w_beat + 1)
                    with m.If(out.last):
                        m.next = "DONE"
            with m.State("DONE"):
                m.d.comb += writer.done.ready.eq(1)
                with m.If(writer.done.valid):
                    written(error=writer.done.payload.error)

        for name, strobes in events.items():
            counter = getattr(self, f"stat_host_{name}")
            m.d.sync += counter.eq(counter + sum(strobes) if strobes else counter)
        return m
