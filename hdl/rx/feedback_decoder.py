"""Feedback decoder: SACK, NACK and ACK packets for our sending side become feedback records.

Ref: docs/protocol.md §6.4-§6.5 (what feedback does to an EV's path state), §7.2 (SETH and CC_STATE
fields: trigger PSN = cack_psn + ack_psn_offset, unless PR = 1 or the offset saturated at -32768), §7.3
(NACK codes: retryable, implicates the path, sender reaction), §7.4 (AETH: ACK or NAK syndromes), §7.8
(probe answers carry the probe id in ``ack_psn_offset``).

The validator has already checked the packet (well formed, ICRC, addressed to us, known QP, from its
peer). This block interprets it once, so the sender's tracker (issue 6) reads ready-made fields:

* ``kind``: SACK / NACK / ACK (:class:`FeedbackKind`);
* ``ev``: the echoed entropy (SETH/NETH ``entropy``) that names the path the feedback is about, and
  ``path_event``/``has_path_event``: the :class:`~mrcnic.hdl.tx.layouts.FeedbackEvent` it implies for
  that EV (SACK M = SKIP_ONCE: ECN; M = ALWAYS_SKIP: LOSS; NACK TRIMMED: TRIM; nothing else touches the
  path), to be applied only after the sender has attributed it to a slot (§6.5);
* ``trigger_psn``/``trigger_valid`` (SACK, not a probe answer), ``probe_id`` (probe answers);
* the SACK's cumulative PSN, bitmap (``sack_base`` = cack_psn + sack_offset, 24-bit) and CC_STATE;
* NACK: ``nack_psn``, ``nack_reason``, ``retryable``, ``retransmit_now`` (trims: front of the queue,
  §7.3) versus after base_rtt (the others), ``unknown_reason`` (counted, handled as NO_RESOURCE);
* ACK: ``msn`` (16 bits), ``nak`` and ``syndrome``.

The value fields of the other kinds are don't-care (they hold whatever the header's bits there say);
the flags (``trigger_valid``, ``probe_answer``, ``has_path_event``, ``retryable``, ``retransmit_now``,
``unknown_reason``, ``nak``) are 0 in the kinds they do not belong to.

One record per packet, one cycle per packet, registered output.
"""

from amaranth import Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from mrcnic.wire.constants import AethSyndrome, NackReason, Opcode, SackVerdict

from ..tx.layouts import FeedbackEvent, bits_for
from .validator import verdict_layout

__all__ = ["FeedbackDecoder", "FeedbackKind", "feedback_packet_layout"]


class FeedbackKind(enum.Enum, shape=2):
    SACK = 0
    NACK = 1
    ACK = 2


def feedback_packet_layout(qps: int) -> data.StructLayout:
    return data.StructLayout(
        {
            "qp": bits_for(qps),
            "kind": FeedbackKind,
            "ev": 32,
            "has_path_event": 1,
            "path_event": FeedbackEvent,
            "ce": 1,  # the feedback packet itself arrived with ECN CE (reverse path congested)
            # SACK
            "probe_answer": 1,  # PR = 1
            "probe_id": 16,
            "trigger_valid": 1,
            "trigger_psn": 24,
            "cack_psn": 24,
            "sack_base": 24,
            "sack_bitmap": 64,
            "tx_timestamp": 16,  # CC_STATE (SACK) or NETH (NACK) echo
            "ooo_count": 15,
            "rcvd_bytes": 24,
            # NACK
            "nack_psn": 24,
            "nack_reason": 8,
            "retryable": 1,
            "retransmit_now": 1,
            "unknown_reason": 1,
            # ACK
            "msn": 16,
            "nak": 1,
            "syndrome": 8,
        }
    )


class FeedbackDecoder(wiring.Component):
    """Members: ``i`` (validator verdicts with action FEEDBACK), ``o`` (:func:`feedback_packet_layout`),
    counters ``stat_sacks``, ``stat_nacks``, ``stat_acks``, ``stat_naks``, ``stat_unknown_nack``."""

    def __init__(self, *, qps: int = 4, destinations: int = 4):
        self.qps = qps
        super().__init__(
            {
                "i": In(stream.Signature(verdict_layout(qps, destinations))),
                "o": Out(stream.Signature(feedback_packet_layout(qps))),
                "stat_sacks": Out(32),
                "stat_nacks": Out(32),
                "stat_acks": Out(32),
                "stat_naks": Out(32),
                "stat_unknown_nack": Out(32),
            }
        )

    def elaborate(self, platform):
        m = Module()
        h = self.i.payload.header
        op = h.bth.opcode
        seth, cc = h.ext.sack.seth, h.ext.sack.cc_state
        neth, aeth = h.ext.neth, h.ext.aeth

        f = Signal(feedback_packet_layout(self.qps))
        is_nack = op == Opcode.NACK
        # The value fields carry their header's bits whatever the kind: each kind's readers (tracker,
        # prober) read its own fields only, and zeroing the others would gate every bit. The flags are
        # 0 for the kinds they do not belong to.
        m.d.comb += [
            f.qp.eq(self.i.payload.qp),
            f.ce.eq(h.ce),
            f.ev.eq(Mux(is_nack, neth.entropy, seth.entropy)),
            f.probe_id.eq(seth.ack_psn_offset.as_unsigned()),
            f.trigger_psn.eq(seth.cack_psn + seth.ack_psn_offset),
            f.cack_psn.eq(seth.cack_psn),
            f.sack_base.eq(seth.cack_psn + seth.sack_offset),
            f.sack_bitmap.eq(seth.sack_bitmap),
            f.tx_timestamp.eq(Mux(is_nack, neth.tx_timestamp, cc.tx_timestamp)),
            f.ooo_count.eq(cc.ooo_count),
            f.rcvd_bytes.eq(cc.rcvd_bytes),
            f.nack_psn.eq(neth.nack_psn),
            f.nack_reason.eq(neth.nack_reason),
            f.msn.eq(aeth.msn[:16]),
            f.syndrome.eq(aeth.syndrome),
        ]
        with m.If(op == Opcode.SACK):
            m.d.comb += [
                f.kind.eq(FeedbackKind.SACK),
                f.probe_answer.eq(seth.pr),
                f.trigger_valid.eq(~seth.pr & (seth.ack_psn_offset != -32768)),
            ]
            with m.If(seth.m == SackVerdict.SKIP_ONCE):
                m.d.comb += [f.has_path_event.eq(1), f.path_event.eq(FeedbackEvent.ECN)]
            with m.Elif(seth.m == SackVerdict.ALWAYS_SKIP):
                m.d.comb += [f.has_path_event.eq(1), f.path_event.eq(FeedbackEvent.LOSS)]
        with m.Elif(is_nack):
            reason = neth.nack_reason
            known = Signal()
            m.d.comb += known.eq(0)
            for code in NackReason:
                with m.If(reason == code):
                    m.d.comb += known.eq(1)
            trim = (reason == NackReason.TRIMMED) | (reason == NackReason.TRIMMED_LASTHOP)
            m.d.comb += [
                f.kind.eq(FeedbackKind.NACK),
                f.retryable.eq(reason != NackReason.UNEXP_EVENT),
                f.retransmit_now.eq(trim),
                f.unknown_reason.eq(~known),
                f.has_path_event.eq(reason == NackReason.TRIMMED),
                f.path_event.eq(FeedbackEvent.TRIM),
            ]
        with m.Else():
            m.d.comb += [f.kind.eq(FeedbackKind.ACK), f.nak.eq(aeth.syndrome != AethSyndrome.ACK)]

        full = Signal()
        m.d.comb += [self.o.valid.eq(full), self.i.ready.eq(~full | self.o.ready)]
        with m.If(self.o.ready):
            m.d.sync += full.eq(0)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [self.o.payload.eq(f), full.eq(1)]
            m.d.sync += [
                self.stat_sacks.eq(self.stat_sacks + (f.kind == FeedbackKind.SACK)),
                self.stat_nacks.eq(self.stat_nacks + (f.kind == FeedbackKind.NACK)),
                self.stat_acks.eq(self.stat_acks + (f.kind == FeedbackKind.ACK)),
                self.stat_naks.eq(self.stat_naks + ((f.kind == FeedbackKind.ACK) & f.nak)),
                self.stat_unknown_nack.eq(
                    self.stat_unknown_nack + ((f.kind == FeedbackKind.NACK) & f.unknown_reason)
                ),
            ]
        return m
