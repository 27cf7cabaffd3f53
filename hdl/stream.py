"""Packet streams: the one convention every block of the datapath uses.

Inside the core a packet stream is an ``amaranth.lib.stream`` whose payload is
``{data, keep, last}``: ``data`` holds ``data_width`` bytes with byte 0 (first on the wire) in bits
[7:0], ``keep`` marks valid bytes (contiguous from byte 0; all ones except possibly on the last beat),
``last`` marks the final beat of a packet. At top-level boundaries the same stream is exposed with
AXI-stream names (``tdata/tkeep/tlast/tvalid/tready``) so cocotbext-axi binds to it directly.

A stream may carry ``user`` bits besides (``user_width``, AXI's ``tuser``): per-packet sideband that is
meaningful on the ``last`` beat, such as the Ethernet port's ICRC verdict (:mod:`mrcnic.hdl.eth.octet_icrc`).

Any stream's payload is meaningful only while ``valid`` is high. A source drives it outside its FSM states
(or other conditions) where it can: a comb assignment inside a state is 0 in the others, a gate on every
bit, and where one gated payload feeds another the gates stack (the TX descriptor path lost about 350
logic cells to this, docs/boards.md). The same holds within a record: where a field means something only
for some kinds (a SACK's SETH, a NACK's NETH), it is don't-care for the others, and the source leaves it
as it is rather than clearing it (the receive engine's responses and the feedback decoder's records were
about 700 logic cells smaller so).
"""

from __future__ import annotations

from amaranth import Cat, Const, Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = [
    "AxiStreamSignature",
    "PacketLayout",
    "PacketStream",
    "axis_to_stream",
    "kept_bytes",
    "low_lanes",
    "stream_to_axis",
]


class PacketLayout(data.StructLayout):
    def __init__(self, data_width: int, user_width: int = 0):
        if data_width < 1 or data_width & (data_width - 1):
            raise ValueError(f"data_width must be a power of two number of bytes, not {data_width}")
        self.data_width, self.user_width = data_width, user_width
        user = {"user": user_width} if user_width else {}
        super().__init__({"data": 8 * data_width, "keep": data_width, "last": 1, **user})


def PacketStream(data_width: int, user_width: int = 0) -> stream.Signature:
    """A packet stream of ``data_width`` bytes per beat (and ``user_width`` sideband bits)."""
    return stream.Signature(PacketLayout(data_width, user_width))


class AxiStreamSignature(wiring.Signature):
    """AXI4-Stream (source side) with byte-granular ``tkeep`` and ``tlast`` (and ``tuser`` when
    ``user_width`` > 0)."""

    def __init__(self, data_width: int, user_width: int = 0):
        self.data_width, self.user_width = data_width, user_width
        super().__init__(
            {
                "tdata": Out(8 * data_width),
                "tkeep": Out(data_width),
                "tlast": Out(1),
                **({"tuser": Out(user_width)} if user_width else {}),
                "tvalid": Out(1),
                "tready": In(1),
            }
        )

    def __eq__(self, other):
        return (
            isinstance(other, AxiStreamSignature)
            and other.data_width == self.data_width
            and other.user_width == self.user_width
        )

    def __repr__(self):
        user = f", user_width={self.user_width}" if self.user_width else ""
        return f"AxiStreamSignature({self.data_width}{user})"


def axis_to_stream(m: Module, axis, packets) -> None:
    """Drive the packet stream ``packets`` (sink side of the block) from AXI-stream port ``axis``."""
    m.d.comb += [
        packets.payload.data.eq(axis.tdata),
        packets.payload.keep.eq(axis.tkeep),
        packets.payload.last.eq(axis.tlast),
        packets.valid.eq(axis.tvalid),
        axis.tready.eq(packets.ready),
    ]
    if axis.signature.user_width:
        m.d.comb += packets.payload.user.eq(axis.tuser)


def stream_to_axis(m: Module, packets, axis) -> None:
    """Drive AXI-stream port ``axis`` from the packet stream ``packets``."""
    m.d.comb += [
        axis.tdata.eq(packets.payload.data),
        axis.tkeep.eq(packets.payload.keep),
        axis.tlast.eq(packets.payload.last),
        axis.tvalid.eq(packets.valid),
        packets.ready.eq(axis.tready),
    ]
    if axis.signature.user_width:
        m.d.comb += axis.tuser.eq(packets.payload.user)


def low_lanes(count, width: int):
    """``width`` keep bits with lanes ``0 .. count-1`` set (``count`` in ``0..width``)."""
    return ((Const(1, width + 1) << count) - 1)[:width]


def kept_bytes(keep):
    """The byte count of a ``keep`` whose set lanes start at lane 0 (a packet stream's beat): the lane
    where it falls from 1 to 0, plus one, as one-hot edges OR-ed per bit of the count (no adder)."""
    width = len(keep)
    edges = [keep[lane] & ~(keep[lane + 1] if lane + 1 < width else 0) for lane in range(width)]
    return Cat(
        Cat(e for lane, e in enumerate(edges) if (lane + 1) >> bit & 1).any()
        for bit in range(width.bit_length())
    )
