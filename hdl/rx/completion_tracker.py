"""Completion tracker: per-QP message completion in PSN order, AETH values and WRITE-with-immediate
receive completions.

Ref: docs/protocol.md §3.2-§3.3 (a message is a contiguous PSN range ending at its Last/Only packet;
MSN and RQMSN), §7.1 (cack, serial arithmetic on 24-bit PSNs), §7.4 (AETH: ACK 0x1F and the NAK
syndromes 0x61/0x62/0x63, NAK for the lowest failed MSN, nothing more after a NAK, the current AETH
answers a duplicate message-ending packet with A = 1), §7.5 rows 9-12, §7.6 (a message completes when
cack reaches its ending PSN; WRITE_IMM consumes the head receive WR, in RQMSN order).

The SACK tracker decides which WRITE packets are NEW and moves cack; this block is told about every NEW
packet (after validation) and releases completions when cack passes message ends.

Members (Q = ``qps``, W = ``window``, a power of two, 2 <= W <= 2^15; P = ``post_bits``, default 16):

* ``configure``: In, ``{qp, initial_psn, initial_rqmsn}``: the QP is connected: walked position
  (the cack up to which messages were examined) = ``initial_psn - 1``, no message completed
  (``query_result.valid`` = 0), next expected RQMSN = ``initial_rqmsn``, no receive WR posted, no error
  in progress, state RECEIVING (``qp_error`` bit cleared).
* ``post_receive``: In, ``{qp}``: one receive WR posted. The per-QP count saturates at 2^P - 1; posts
  beyond that are refused (dropped) and counted in ``stat_post_refused``.
* ``arrival``: In, ``{qp, psn, cack, msn, rqmsn, ends_message, has_imm, imm, dma_length, error}``, one
  per NEW packet in the order the SACK tracker processed them; ``cack`` is the QP's cack after that
  packet, ``error`` (:class:`RxError`) the §7.5 row 9/10 outcome of its validation. The record
  ``{msn, ends_message, has_imm, imm, dma_length, rqmsn, error}`` is stored at (qp, psn mod W). Then, if
  d = (cack - walked) mod 2^24 is in [1, 2^23), every PSN walked + 1 .. cack is examined in order (the
  SACK tracker guarantees d <= W and that each of them was a NEW arrival since the configure, so each
  slot holds that PSN's record). Per QP the first error among the packets of the message being walked
  is kept across walks. At a message end (message m = the record's msn):

  - QP in ERROR: nothing (no completion after a NAK, §7.4);
  - the message had an error: ``ack`` NAK_INVALID_REQUEST (row 9) or NAK_REMOTE_ACCESS (row 10), msn m;
  - WRITE_IMM and no receive WR posted: ``ack`` NAK_REMOTE_OPERATION, msn m (row 11);
  - WRITE_IMM and rqmsn != next expected RQMSN: ``ack`` NAK_INVALID_REQUEST, msn m (row 12);
  - WRITE_IMM otherwise: one WR consumed, next RQMSN + 1 (mod 2^16), ``receive_completion``
    ``{qp, status 0, imm, byte_len = dma_length, rqmsn}`` and ``ack`` ACK msn m (both loaded in the same
    cycle; the streams are independent);
  - plain WRITE: ``ack`` ACK msn m.

  A NAK puts the QP in ERROR. The QP's current AETH becomes (syndrome, m) after every ``ack`` record.
* ``ack``: Out, ``{qp, syndrome, msn, tag}`` (``tag``: that of the arrival whose walk released it)
  (:class:`Syndrome`), one per completed message (the scheduler
  coalesces ACKs; never dropped, the walk waits for the consumer).
* ``receive_completion``: Out, ``{qp, status, imm, byte_len, rqmsn}``; ``status`` is always 0 (errors
  produce a NAK and no receive completion, §7.6).
* ``query``: In, ``{qp}`` -> ``query_result``: Out, ``{qp, valid, syndrome, msn}``: the QP's current
  AETH (valid = 0, syndrome = msn = 0 when no message completed since the configure; after a NAK, the
  NAK). A query is answered after every earlier accepted input has been fully processed.
* ``qp_error``: Out(Q), bit q set while QP q is in ERROR (the validator stops placing WRITEs on it).
* ``idle``: Out(1), no operation in progress: every accepted input has been fully processed.
* ``stat_messages`` (ACK records), ``stat_imm_completions``, ``stat_naks``, ``stat_no_receive_wr``
  (row 11), ``stat_rqmsn_mismatch`` (row 12), ``stat_post_refused``: Out(32), wrapping modulo 2^32.

State. Records: one ``lib.memory.Memory`` of Q*W entries of 100 bits (address ``qp * W + psn mod W``;
e.g. 16 QPs x 256 = 400 kbit of block RAM), a write port and a synchronous read port for the walk.
Per QP: one ``lib.memory.Memory`` of Q entries ``{walked, cur_err, error, next_rqmsn, posted, acked,
syndrome, ack_msn}``; a walk works on a register copy and writes it back at the end. ``qp_error`` is a
Q-bit register. After reset every QP behaves as one configured with ``initial_psn = 1``,
``initial_rqmsn = 0``.

Timing. One input operation at a time; ``configure`` > ``post_receive`` > ``query`` > ``arrival``
(accepted only when idle, so every input sees the effect of all earlier ones).

* configure: 1 cycle (a plain write).
* post_receive: 2 cycles (read, write).
* query: 2 cycles + the result transfer (read, result register, transfer).
* arrival: 2 cycles (accept + record write + state read, compare) when cack does not move; walking n
  PSNs adds n + 2 cycles (one PSN per cycle through the 1-cycle record read, plus the read latency and
  the write-back), i.e. 5 cycles per in-order arrival. A message end stalls the walk only while the
  ``ack`` (and, for a WRITE_IMM completion, ``receive_completion``) output register is still full.
"""

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..tables import UNDEFINED_COLLISIONS, small_table_attrs
from ..tx.layouts import bits_for

__all__ = [
    "STATS",
    "CompletionTracker",
    "RxError",
    "Syndrome",
    "ack_layout",
    "arrival_layout",
    "configure_layout",
    "post_layout",
    "query_layout",
    "query_result_layout",
    "receive_completion_layout",
]

PSN_BITS = 24
HALF = 1 << (PSN_BITS - 1)

STATS = ("messages", "imm_completions", "naks", "no_receive_wr", "rqmsn_mismatch", "post_refused")


class RxError(enum.Enum, shape=2):
    """Validation outcome of a NEW packet that is marked received (§7.5)."""

    NONE = 0
    INVALID_REQUEST = 1  # row 9: lengths inconsistent
    REMOTE_ACCESS = 2  # row 10: R_Key / MR / bounds


class Syndrome(enum.Enum, shape=8):
    """AETH syndrome (§7.4)."""

    ACK = 0x1F
    NAK_INVALID_REQUEST = 0x61
    NAK_REMOTE_ACCESS = 0x62
    NAK_REMOTE_OPERATION = 0x63


def configure_layout(qps: int) -> data.StructLayout:
    return data.StructLayout({"qp": bits_for(qps), "initial_psn": PSN_BITS, "initial_rqmsn": 16})


def post_layout(qps: int) -> data.StructLayout:
    return data.StructLayout({"qp": bits_for(qps)})


def query_layout(qps: int) -> data.StructLayout:
    return data.StructLayout({"qp": bits_for(qps)})


TAG_BITS = 40


def arrival_layout(qps: int) -> data.StructLayout:
    return data.StructLayout(
        {
            "qp": bits_for(qps),
            "psn": PSN_BITS,
            "cack": PSN_BITS,
            "msn": 16,
            "rqmsn": 16,
            "ends_message": 1,
            "has_imm": 1,
            "imm": 32,
            "dma_length": 32,
            "error": RxError,
            "tag": TAG_BITS,  # opaque: copied to the ``ack`` records this arrival's walk releases
        }
    )


def ack_layout(qps: int) -> data.StructLayout:
    return data.StructLayout({"qp": bits_for(qps), "syndrome": 8, "msn": 16, "tag": TAG_BITS})


def receive_completion_layout(qps: int) -> data.StructLayout:
    return data.StructLayout({"qp": bits_for(qps), "status": 8, "imm": 32, "byte_len": 32, "rqmsn": 16})


def query_result_layout(qps: int) -> data.StructLayout:
    return data.StructLayout({"qp": bits_for(qps), "valid": 1, "syndrome": 8, "msn": 16})


# What the walk needs of each packet (the arrival minus qp, psn, cack).
record_layout = data.StructLayout(
    {
        "msn": 16,
        "rqmsn": 16,
        "ends_message": 1,
        "has_imm": 1,
        "imm": 32,
        "dma_length": 32,
        "error": RxError,
    }
)


def qp_state_layout(post_bits: int) -> data.StructLayout:
    return data.StructLayout(
        {
            "walked": PSN_BITS,
            "cur_err": RxError,  # first error among the walked packets of the unfinished message
            "error": 1,
            "next_rqmsn": 16,
            "posted": post_bits,
            "acked": 1,
            "syndrome": 8,
            "ack_msn": 16,
        }
    )


class CompletionTracker(wiring.Component):
    def __init__(self, qps: int, window: int = 256, post_bits: int = 16):
        if window & (window - 1) or not 2 <= window <= 1 << 15:
            raise ValueError(f"window must be a power of two in [2, 2^15], not {window}")
        if qps < 1:
            raise ValueError("qps must be at least 1")
        if not 1 <= post_bits <= 16:
            raise ValueError("post_bits must be in [1, 16]")
        self.qps = qps
        self.window = window
        self.post_bits = post_bits
        super().__init__(
            {
                "configure": In(stream.Signature(configure_layout(qps))),
                "post_receive": In(stream.Signature(post_layout(qps))),
                "arrival": In(stream.Signature(arrival_layout(qps))),
                "query": In(stream.Signature(query_layout(qps))),
                "ack": Out(stream.Signature(ack_layout(qps))),
                "receive_completion": Out(stream.Signature(receive_completion_layout(qps))),
                "query_result": Out(stream.Signature(query_result_layout(qps))),
                "qp_error": Out(qps),
                "idle": Out(1),  # no operation in progress (every accepted input fully processed)
                **{f"stat_{name}": Out(32) for name in STATS},
            }
        )

    def elaborate(self, platform):
        m = Module()
        W = self.window
        wb = max(1, (W - 1).bit_length())  # PSN bits of a record address
        qb = bits_for(self.qps)
        st_layout = qp_state_layout(self.post_bits)
        post_max = (1 << self.post_bits) - 1

        # written only in IDLE, read only in WALK: no read-during-write to keep
        m.submodules.records = records = Memory(
            shape=record_layout, depth=self.qps * W, init=[], attrs=UNDEFINED_COLLISIONS
        )
        rec_wr = records.write_port()
        rec_rd = records.read_port()
        m.submodules.states = states = Memory(
            shape=st_layout, depth=self.qps, init=[], attrs=small_table_attrs(self.qps)
        )
        st_wr = states.write_port()
        st_rd = states.read_port()

        cfg, post, arr, qry = self.configure, self.post_receive, self.arrival, self.query
        ack, rc, qres = self.ack, self.receive_completion, self.query_result

        def rec_addr(qp, psn):
            return Cat(psn[:wb], qp[:qb])

        qp = Signal(qb)  # the QP of the operation in progress
        cack = Signal(PSN_BITS)  # the arrival's cack: where the walk ends
        tag = Signal(TAG_BITS)  # the arrival's tag, for the ACK records of its walk
        st = Signal(st_layout)  # working copy of the QP state during a walk
        a_psn = Signal(PSN_BITS)  # next PSN to read
        a_left = Signal(PSN_BITS)  # PSNs still to read
        b_valid = Signal()  # rec_rd.data holds the record of the PSN read last cycle (a_psn - 1)
        qp_error = Signal(self.qps)
        m.d.comb += [self.qp_error.eq(qp_error), rec_rd.addr.eq(rec_addr(qp, a_psn)), rec_rd.en.eq(0)]

        # Output registers: a new record may be loaded when the register is empty or being emptied.
        ack_free = ~ack.valid | ack.ready
        rc_free = ~rc.valid | rc.ready
        with m.If(ack.valid & ack.ready):
            m.d.sync += ack.valid.eq(0)
        with m.If(rc.valid & rc.ready):
            m.d.sync += rc.valid.eq(0)

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.idle.eq(1)
                with m.If(cfg.valid):
                    init = Signal(st_layout)
                    m.d.comb += [
                        cfg.ready.eq(1),
                        init.walked.eq((cfg.payload.initial_psn - 1)[:PSN_BITS]),
                        init.next_rqmsn.eq(cfg.payload.initial_rqmsn),
                        st_wr.addr.eq(cfg.payload.qp),
                        st_wr.data.eq(init),
                        st_wr.en.eq(1),
                    ]
                    m.d.sync += qp_error.bit_select(cfg.payload.qp, 1).eq(0)
                with m.Elif(post.valid):
                    m.d.comb += [post.ready.eq(1), st_rd.addr.eq(post.payload.qp)]
                    m.d.sync += qp.eq(post.payload.qp)
                    m.next = "POST"
                with m.Elif(qry.valid):
                    m.d.comb += [qry.ready.eq(1), st_rd.addr.eq(qry.payload.qp)]
                    m.d.sync += qp.eq(qry.payload.qp)
                    m.next = "QUERY"
                with m.Elif(arr.valid):
                    a = arr.payload
                    rec = Signal(record_layout)
                    m.d.comb += [
                        arr.ready.eq(1),
                        rec.msn.eq(a.msn),
                        rec.rqmsn.eq(a.rqmsn),
                        rec.ends_message.eq(a.ends_message),
                        rec.has_imm.eq(a.has_imm),
                        rec.imm.eq(a.imm),
                        rec.dma_length.eq(a.dma_length),
                        rec.error.eq(a.error),
                        rec_wr.addr.eq(rec_addr(a.qp, a.psn)),
                        rec_wr.data.eq(rec),
                        rec_wr.en.eq(1),
                        st_rd.addr.eq(a.qp),
                    ]
                    m.d.sync += [qp.eq(a.qp), cack.eq(a.cack), tag.eq(a.tag)]
                    m.next = "CHECK"

            with m.State("POST"):
                s = st_rd.data
                full = s.posted == post_max
                new = Signal(st_layout)
                m.d.comb += [
                    new.eq(s),
                    new.posted.eq(Mux(full, s.posted, s.posted + 1)),
                    st_wr.addr.eq(qp),
                    st_wr.data.eq(new),
                    st_wr.en.eq(1),
                ]
                m.d.sync += self.stat_post_refused.eq(self.stat_post_refused + full)
                m.next = "IDLE"

            with m.State("QUERY"):
                s = st_rd.data
                m.d.sync += [
                    qres.payload.qp.eq(qp),
                    qres.payload.valid.eq(s.acked),
                    qres.payload.syndrome.eq(s.syndrome),
                    qres.payload.msn.eq(s.ack_msn),
                    qres.valid.eq(1),
                ]
                m.next = "QUERY_OUT"

            with m.State("QUERY_OUT"):
                with m.If(qres.ready):
                    m.d.sync += qres.valid.eq(0)
                    m.next = "IDLE"

            with m.State("CHECK"):
                s = st_rd.data
                d = (cack - s.walked)[:PSN_BITS]
                m.d.sync += [st.eq(s), a_psn.eq((s.walked + 1)[:PSN_BITS]), a_left.eq(d), b_valid.eq(0)]
                with m.If((d != 0) & (d < HALF)):
                    m.next = "WALK"
                with m.Else():
                    m.next = "IDLE"

            with m.State("WALK"):
                r = rec_rd.data
                err = Mux(st.cur_err != RxError.NONE, st.cur_err, r.error)
                completes = b_valid & r.ends_message & ~st.error
                has_err = err != RxError.NONE
                imm_ok = r.has_imm & ~has_err & (st.posted != 0) & (r.rqmsn == st.next_rqmsn)
                stall = completes & (~ack_free | (imm_ok & ~rc_free))

                # a stall holds the read port (en = 0), so the record stays on its data
                m.d.comb += rec_rd.en.eq(~stall & (a_left != 0))
                with m.If(~stall):
                    # read stage: the next PSN's record arrives next cycle
                    with m.If(a_left != 0):
                        m.d.sync += [a_psn.eq(a_psn + 1), a_left.eq(a_left - 1)]
                    with m.Else():
                        m.next = "WRITEBACK"  # the last record is processed this cycle
                    m.d.sync += b_valid.eq(a_left != 0)

                    # process stage: the record of the PSN read last cycle
                    with m.If(b_valid):
                        with m.If(~r.ends_message):
                            m.d.sync += st.cur_err.eq(err)
                        with m.Else():
                            m.d.sync += st.cur_err.eq(RxError.NONE)
                    with m.If(completes):
                        syndrome = Signal(Syndrome, init=Syndrome.ACK)
                        with m.If(err == RxError.INVALID_REQUEST):
                            m.d.comb += syndrome.eq(Syndrome.NAK_INVALID_REQUEST)
                        with m.Elif(err == RxError.REMOTE_ACCESS):
                            m.d.comb += syndrome.eq(Syndrome.NAK_REMOTE_ACCESS)
                        with m.Elif(r.has_imm & (st.posted == 0)):
                            m.d.comb += syndrome.eq(Syndrome.NAK_REMOTE_OPERATION)
                        with m.Elif(r.has_imm & (r.rqmsn != st.next_rqmsn)):
                            m.d.comb += syndrome.eq(Syndrome.NAK_INVALID_REQUEST)
                        with m.Else():
                            m.d.comb += syndrome.eq(Syndrome.ACK)
                        nak = syndrome != Syndrome.ACK
                        m.d.sync += [
                            ack.payload.qp.eq(qp),
                            ack.payload.syndrome.eq(syndrome),
                            ack.payload.msn.eq(r.msn),
                            ack.payload.tag.eq(tag),
                            ack.valid.eq(1),
                            st.acked.eq(1),
                            st.syndrome.eq(syndrome),
                            st.ack_msn.eq(r.msn),
                            self.stat_messages.eq(self.stat_messages + ~nak),
                            self.stat_naks.eq(self.stat_naks + nak),
                        ]
                        with m.If(nak):
                            m.d.sync += [st.error.eq(1), qp_error.bit_select(qp, 1).eq(1)]
                        with m.If(r.has_imm & ~has_err):
                            m.d.sync += [
                                self.stat_no_receive_wr.eq(self.stat_no_receive_wr + (st.posted == 0)),
                                self.stat_rqmsn_mismatch.eq(
                                    self.stat_rqmsn_mismatch + ((st.posted != 0) & (r.rqmsn != st.next_rqmsn))
                                ),
                            ]
                        with m.If(imm_ok):
                            m.d.sync += [
                                st.posted.eq(st.posted - 1),
                                st.next_rqmsn.eq(st.next_rqmsn + 1),
                                rc.payload.qp.eq(qp),
                                rc.payload.status.eq(0),
                                rc.payload.imm.eq(r.imm),
                                rc.payload.byte_len.eq(r.dma_length),
                                rc.payload.rqmsn.eq(r.rqmsn),
                                rc.valid.eq(1),
                                self.stat_imm_completions.eq(self.stat_imm_completions + 1),
                            ]

            with m.State("WRITEBACK"):
                new = Signal(st_layout)
                m.d.comb += [
                    new.eq(st),
                    new.walked.eq(cack),
                    st_wr.addr.eq(qp),
                    st_wr.data.eq(new),
                    st_wr.en.eq(1),
                ]
                m.next = "IDLE"

        return m
