"""Records that travel between the TX blocks (work requests, packet descriptors, feedback events).

Ref: docs/protocol.md §3 (opcodes, PSN/MSN/RQMSN, RETH per packet), §6 (EV slots and feedback).
Layouts depend on the NIC's size parameters (QP count, EV slots), so they are built by functions.
"""

from amaranth import signed
from amaranth.lib import data, enum

from ..headers import Aeth

__all__ = [
    "FeedbackEvent",
    "WriteKind",
    "bits_for",
    "control_record_layout",
    "descriptor_layout",
    "feedback_layout",
    "target_bits",
    "work_request_layout",
]

MAX_PMTU = 4096
PMTUS = (256, 512, 1024, 2048, 4096)  # the path MTUs a QP may use (pmtu_log2 8..12)


def bits_for(count: int) -> int:
    """Bits needed to number ``count`` things (at least 1)."""
    return max(1, (count - 1).bit_length())


# The largest control frame without its ICRC: an SRv6 SACK (docs/protocol.md §2.3: 154 bytes with it).
MAX_CONTROL_FRAME_BYTES = 14 + 40 + 40 + 8 + 12 + 28 + 8


def control_record_layout(qps: int) -> data.StructLayout:
    """One SACK, NACK or ACK to send, as the receive engine decides it (docs/protocol.md §7.2-§7.4):
    ``opcode`` (``Opcode.SACK`` / ``NACK`` / ``ACK``) says which of the blocks the frame carries (SACK:
    ``seth`` + ``cc``; NACK: ``neth``; ACK: ``aeth``); ``ev`` is the EV answered, echoed in the
    SETH / NETH ``entropy`` field; ``qp`` names the QP whose peer is answered. The blocks of the other
    opcodes are don't-care: the builder does not read them, and the receive engine leaves them as they
    were (clearing them would put a gate on each of their bits)."""
    return data.StructLayout(
        {
            "opcode": 8,
            "ev": 32,
            "qp": bits_for(qps),
            "seth": data.StructLayout(
                {
                    "m": 2,
                    "pr": 1,
                    "ack_psn_offset": signed(16),  # PR = 1: the probe id's 16 bits
                    "cack_psn": 24,
                    "sack_offset": signed(16),
                    "sack_bitmap": 64,
                }
            ),
            "cc": data.StructLayout({"tx_timestamp": 16, "ooo_count": 16, "rcvd_bytes": 24}),
            "neth": data.StructLayout({"nack_reason": 8, "nack_psn": 24, "tx_timestamp": 16}),
            "aeth": Aeth,
        }
    )


def control_frame_layout(data_width: int, planes: int) -> data.StructLayout:
    """A beat of a control frame (SACK, NACK, ACK) with the plane port it goes out on; the receive
    side's response builder makes them, the transmit pipeline may finish and send them."""
    return data.StructLayout(
        {"data": 8 * data_width, "keep": data_width, "last": 1, "plane": bits_for(planes)}
    )


class WriteKind(enum.Enum, shape=1):
    WRITE = 0
    WRITE_IMM = 1


class FeedbackEvent(enum.Enum, shape=3):
    """What the peer's answer (or the lack of one) says about the path of one EV slot (§6.4)."""

    ECN = 0  # SACK with M = SKIP_ONCE: skip + 1
    TRIM = 1  # NACK TRIMMED: skip + 4
    LOSS = 2  # time rule / timeout / M = ALWAYS_SKIP: ASSUMED_BAD (guarded)
    PROBE_OK = 3  # k answered probes: GOOD, skip 0 (slot) or back to the backups (reserve entry)
    DENY = 4  # host: DENIED
    RESTORE = 5  # host: GOOD, skip 0
    PROBE_OK_SKIP = 6  # k answered probes, the last with M = SKIP_ONCE: GOOD, skip 1


def work_request_layout(qps: int, addr_width: int = 64) -> data.StructLayout:
    """An RDMA WRITE / WRITE-with-immediate work request for one QP. ``addr_width``: the host address width
    (the NIC's DMA reach, ``MrcNic``'s parameter); the queue engine completes a WQE whose buffer lies
    beyond it with an error, so its local address is never cut short here."""
    return data.StructLayout(
        {
            "qp": bits_for(qps),
            "kind": WriteKind,
            "local_addr": addr_width,  # source of the payload in host memory
            "remote_va": 64,  # destination VA of the first byte (RETH.va of the first packet)
            "rkey": 32,
            "length": 32,  # bytes, 1 .. 2^31
            "imm": 32,  # immediate data (WRITE_IMM only)
        }
    )


def descriptor_layout(qps: int, ev_slots: int, addr_width: int = 64) -> data.StructLayout:
    """One packet to build: everything the header builder and the payload DMA need except addressing."""
    return data.StructLayout(
        {
            "qp": bits_for(qps),
            "opcode": 8,  # MRC BTH opcode (WRITE_FIRST .. WRITE_ONLY_IMM)
            "psn": 24,
            "msn": 16,
            "rqmsn": 16,
            "local_addr": addr_width,  # payload source of this packet
            "va": 64,  # RETH.va of this packet = message VA + k * PMTU
            "rkey": 32,
            "dma_length": 32,  # message length, same in every packet
            "length": bits_for(MAX_PMTU + 1),  # payload bytes of this packet, 1 .. PMTU
            "imm": 32,
            "rtx": 1,  # a retransmission: BTH.RTX, DSCP_TRIMMABLE_RETX, a different EV slot
            "avoid_slot": bits_for(ev_slots),  # retransmission: slot of the previous attempt
            "probe_id": 16,  # PROBE (no payload, no PSN): PETH.probe_id (§7.8)
            "ack_req": 1,  # BTH.A: asks the responder for its current AETH (§7.4, lost ACK)
        }
    )


def target_bits(ev_slots: int) -> int:
    """Width of a *probe target*: an EV slot (0 .. N-1) or a reserve entry (N + plane * B + index, < 2N)."""
    return bits_for(2 * ev_slots)


def feedback_layout(qps: int, ev_slots: int) -> data.StructLayout:
    """Path feedback for one EV slot of one QP (§6.4, §6.5). Stale if the slot no longer holds ``ev``.

    ``slot`` is a probe target (:func:`target_bits`): PROBE_OK / PROBE_OK_SKIP from the prober may name a
    reserve entry (an EV on the probe list); every other event names a slot below N.
    """
    return data.StructLayout(
        {
            "qp": bits_for(qps),
            "slot": target_bits(ev_slots),
            "ev": 32,
            "event": FeedbackEvent,
        }
    )
