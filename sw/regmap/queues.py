"""Work queues in host memory: the WQE and CQE formats and their codes (docs/host-interface.md).

One source for the gateware's queue engine, the driver and the model device. All fields little-endian.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "CQE_BYTES",
    "WQE_BYTES",
    "Cqe",
    "CqeKind",
    "CqeStatus",
    "Wqe",
    "WqeOpcode",
    "cqe_phase",
]

WQE_BYTES = 64
CQE_BYTES = 32


class WqeOpcode(enum.IntEnum):
    WRITE = 0
    WRITE_IMM = 1


class CqeKind(enum.IntEnum):
    SEND = 0  # a send-queue WQE completed (acknowledged, failed or flushed)
    RECV_IMM = 1  # a WRITE-with-immediate arrived and consumed a posted receive


class CqeStatus(enum.IntEnum):
    SUCCESS = 0
    REMOTE_INVALID_REQUEST = 1  # AETH NAK 0x61
    REMOTE_ACCESS_ERROR = 2  # AETH NAK 0x62 (R_Key, bounds, rights)
    REMOTE_OPERATION_ERROR = 3  # AETH NAK 0x63 (e.g. no receive posted for a WRITE_IMM)
    RETRY_EXCEEDED = 4  # the retry budget ran out (no answer from the peer)
    FLUSHED = 5  # the QP was in ERROR: the WQE was not executed
    INVALID_WQE = 6  # bad opcode or length 0 / above 2^31: not executed, the QP goes to ERROR
    LOCAL_DMA_ERROR = 7  # reading the WQE or its payload failed


# (name, byte offset, bytes) -- the layout the gateware and the model device both use
WQE_FIELDS = (
    ("opcode", 0, 1),
    ("flags", 1, 1),
    ("length", 4, 4),
    ("wr_id", 8, 8),  # for software: the NIC does not read it
    ("local_addr", 16, 8),
    ("remote_va", 24, 8),
    ("rkey", 32, 4),
    ("imm", 36, 4),
)
CQE_FIELDS = (
    ("index", 0, 2),  # SQ index of the WQE (SEND) or RQ index of the receive (RECV_IMM), mod 2^16
    ("kind", 2, 1),
    ("status", 3, 1),
    ("qp", 4, 2),
    ("msn", 6, 2),  # MSN of the message (SEND) or its RQMSN (RECV_IMM)
    ("byte_len", 8, 4),  # RECV_IMM: bytes of the message
    ("imm", 12, 4),  # RECV_IMM: the immediate
    ("phase", 31, 1),  # bit 0: 1 on the first pass around the ring, 0 on the second, ...
)


def _pack(fields, size: int, values: dict) -> bytes:
    out = bytearray(size)
    for name, offset, n in fields:
        out[offset : offset + n] = int(values.get(name, 0)).to_bytes(n, "little")
    return bytes(out)


def _unpack(fields, raw: bytes) -> dict:
    return {name: int.from_bytes(raw[offset : offset + n], "little") for name, offset, n in fields}


@dataclass
class Wqe:
    opcode: int
    length: int
    local_addr: int
    remote_va: int
    rkey: int
    imm: int = 0
    wr_id: int = 0
    flags: int = 0

    def encode(self) -> bytes:
        return _pack(WQE_FIELDS, WQE_BYTES, vars(self))

    @classmethod
    def decode(cls, raw: bytes) -> Wqe:
        return cls(**_unpack(WQE_FIELDS, raw))


@dataclass
class Cqe:
    index: int
    kind: int
    status: int
    qp: int
    msn: int = 0
    byte_len: int = 0
    imm: int = 0
    phase: int = 1

    def encode(self) -> bytes:
        return _pack(CQE_FIELDS, CQE_BYTES, vars(self))

    @classmethod
    def decode(cls, raw: bytes) -> Cqe:
        values = _unpack(CQE_FIELDS, raw)
        values["phase"] &= 1
        return cls(**values)


def cqe_phase(producer: int, size_log2: int) -> int:
    """The phase bit of CQE number ``producer`` (counted from 0, not wrapped) in a ring of 2^size_log2."""
    return 1 ^ ((producer >> size_log2) & 1)
