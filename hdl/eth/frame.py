"""Ethernet frame format constants and the records the MAC blocks exchange.

Ref: IEEE Std 802.3-2022 §3.1.1 and §3.2 (MAC frame: preamble, SFD, addresses, length/type, data, pad,
FCS), §3.2.9 (FCS: CRC-32, complemented, sent least significant bit first), §4.2.3.3 and §4.4.2
(``minFrameSize`` 64 octets from destination address to FCS inclusive, interPacketGap 96 bit times =
12 octets at 1 Gb/s), §4.2.4.2.2 (a received frame shorter than ``minFrameSize`` is discarded).

Lengths in this package count octets from the first octet of the destination address, as the core sees a
frame. ``max_frame`` is counted *with* the FCS, like the 64-octet minimum: the longest frame the core may
send or receive has ``max_frame - 4`` octets.
"""

from __future__ import annotations

from amaranth.lib import data, enum

__all__ = [
    "DEFAULT_IFG",
    "DEFAULT_MAX_FRAME",
    "FCS_BYTES",
    "FCS_RESIDUE",
    "LENGTH_BITS",
    "MIN_FRAME",
    "PREAMBLE",
    "PREAMBLE_BYTES",
    "SFD",
    "ByteLayout",
    "RxBeatLayout",
    "RxOutcome",
    "RxStatusLayout",
    "TxStatusLayout",
    "check_max_frame",
]

PREAMBLE = 0x55  # §3.2.1: 10101010 on the wire, LSB first
PREAMBLE_BYTES = 7
SFD = 0xD5  # §3.2.2: 10101011 on the wire
FCS_BYTES = 4
MIN_FRAME = 64  # with FCS; the data + pad field is at least 60 - 14 = 46 octets
DEFAULT_MAX_FRAME = 9216  # with FCS; a common jumbo limit. The NIC's largest frame is 4238 + 4.
DEFAULT_IFG = 12  # octets of idle between frames (96 bit times)
LENGTH_BITS = 16  # of every length field below; max_frame is limited to fit

# The raw CRC-32 register (no final complement) after a frame *and* its FCS: constant for every frame
# whose FCS is right (§3.2.9 e: the receiver's remainder check).
FCS_RESIDUE = 0xDEBB20E3


def check_max_frame(max_frame: int) -> int:
    if not MIN_FRAME <= max_frame < (1 << LENGTH_BITS) - 1:
        raise ValueError(f"max_frame must be in {MIN_FRAME}..{(1 << LENGTH_BITS) - 2}, not {max_frame}")
    return max_frame


class ByteLayout(data.StructLayout):
    """One byte of a frame; ``last`` marks the frame's final byte; ``user`` (``user_width`` > 0 only): the
    frame's sideband bits, meaningful on its ``last`` byte (the ICRC verdict on the receive side)."""

    def __init__(self, user_width: int = 0):
        self.user_width = user_width
        super().__init__({"data": 8, "last": 1, **({"user": user_width} if user_width else {})})


class RxOutcome(enum.Enum, shape=3):
    """What became of a received frame (one per frame that had an SFD). When several apply, the first in
    this order wins: a coding error makes the rest meaningless, and a frame that would be dropped anyway
    is not counted as an overflow."""

    GOOD = 0
    ERROR = 1  # RX_ER during the frame (§35.2.2.9)
    OVERSIZE = 2  # longer than max_frame
    RUNT = 3  # shorter than 64 octets (§4.2.4.2.2)
    BAD_FCS = 4  # §3.2.9
    OVERFLOW = 5  # good, but the RX buffer had no room for it


class RxBeatLayout(data.StructLayout):
    """What the RX MAC emits: the frame's bytes without the FCS, one per beat; the ``last`` beat carries
    the verdict and the frame's length (octets without FCS). A frame too short to have a data byte still
    ends with one ``last`` beat (its ``data`` is meaningless and its outcome is never ``GOOD``)."""

    def __init__(self):
        super().__init__({"data": 8, "last": 1, "outcome": RxOutcome, "length": LENGTH_BITS})


class RxStatusLayout(data.StructLayout):
    """One record per received frame: its outcome and length (octets without FCS, saturating)."""

    def __init__(self):
        super().__init__({"outcome": RxOutcome, "length": LENGTH_BITS})


class TxStatusLayout(data.StructLayout):
    """TX events of one cycle: ``sent``: a frame of ``length`` octets (with padding, without FCS) has
    gone out; ``dropped``: a frame from the core was not sent (empty, or longer than ``max_frame - 4``)."""

    def __init__(self):
        super().__init__({"sent": 1, "dropped": 1, "length": LENGTH_BITS})
