"""Reference model of the Ethernet MAC for the tests of hdl/eth: what goes on the wire for a frame, what
the receiver must decide about a burst, and the counters that follow.

Written from IEEE Std 802.3-2022 §3.2 and §4.2 independently of the gateware; zlib supplies the CRC-32.
``ETH_SEED=<n>`` fixes the seed of every test that uses :func:`new_rng`.
"""

from __future__ import annotations

import os
import random
import struct
import zlib
from collections import Counter

from mrcnic.hdl.eth.frame import RxOutcome

PREAMBLE = bytes([0x55] * 7)
SFD = bytes([0xD5])
MIN_FRAME = 64
MIN_DATA = 60
IFG = 12


def new_rng(label: str = "") -> random.Random:
    seed = int(os.environ["ETH_SEED"]) if os.environ.get("ETH_SEED") else random.randrange(1 << 31)
    print(f"{label} seed {seed} (ETH_SEED={seed} reproduces)")
    return random.Random(seed)


def fcs(data: bytes) -> bytes:
    """The FCS field: CRC-32 of ``data``, least significant octet first (§3.2.9)."""
    return struct.pack("<L", zlib.crc32(data))


def padded(frame: bytes) -> bytes:
    return frame + bytes(max(0, MIN_DATA - len(frame)))


def with_fcs(frame: bytes) -> bytes:
    """The frame as it follows the SFD on the wire: padded, then its FCS."""
    body = padded(frame)
    return body + fcs(body)


def wire(frame: bytes) -> bytes:
    return PREAMBLE + SFD + with_fcs(frame)


def random_frame(rng: random.Random, size: int) -> bytes:
    return rng.randbytes(size)


def outcome(body: bytes, error: bool, max_frame: int) -> RxOutcome:
    """The receiver's verdict on the octets after an SFD (FCS included), first match wins."""
    if error:
        return RxOutcome.ERROR
    if len(body) > max_frame:
        return RxOutcome.OVERSIZE
    if len(body) < MIN_FRAME:
        return RxOutcome.RUNT
    if fcs(body[:-4]) != body[-4:]:
        return RxOutcome.BAD_FCS
    return RxOutcome.GOOD


RX_COUNTER = {
    RxOutcome.BAD_FCS: "rx_bad_fcs",
    RxOutcome.ERROR: "rx_errors",
    RxOutcome.RUNT: "rx_runts",
    RxOutcome.OVERSIZE: "rx_oversize",
    RxOutcome.OVERFLOW: "rx_overflow",
}
COUNTER_NAMES = (
    "tx_frames",
    "tx_bytes",
    "tx_dropped",
    "rx_frames",
    "rx_bytes",
    "rx_bad_fcs",
    "rx_errors",
    "rx_runts",
    "rx_oversize",
    "rx_overflow",
)


class Counters(Counter):
    """Expected port counters; every name present (0 when nothing happened)."""

    def __init__(self):
        super().__init__({name: 0 for name in COUNTER_NAMES})

    def sent(self, frame: bytes):
        self["tx_frames"] += 1
        self["tx_bytes"] += len(padded(frame))

    def received(self, result: RxOutcome, length: int):
        if result == RxOutcome.GOOD:
            self["rx_frames"] += 1
            self["rx_bytes"] += length
        else:
            self[RX_COUNTER[result]] += 1

    def as_dict(self) -> dict:
        return {name: self[name] & 0xFFFFFFFF for name in COUNTER_NAMES}


def split_bursts(trace):
    """``trace``: per cycle (data, enable, error). Returns the bursts (data octets, error flags) and the
    idle cycles before each burst (the first one's counts from the start of the trace)."""
    bursts, gaps = [], []
    current, errors, idle = None, None, 0
    for data, enable, error in trace:
        if enable:
            if current is None:
                current, errors = bytearray(), []
                gaps.append(idle)
            current.append(data)
            errors.append(error)
        else:
            if current is not None:
                bursts.append((bytes(current), errors))
                current, idle = None, 0
            idle += 1
    assert current is None, "trace ends inside a burst"
    return bursts, gaps
