"""Receive validator: the stateless and table checks of docs/protocol.md §7.5, one verdict per frame.

Ref: docs/protocol.md §5.5 (receive match rule), §7.5 rows 1-5, 9 and 10 (malformed, ICRC, not for us,
unknown QP / QP not ready, wrong source, DMA-length rules, R_Key and MR bounds), §9.3 (trimmed packets:
no length and no ICRC check). Rows 6-8 (trimmed, beyond window, duplicate) need the receive window and
are decided after this block by the SACK tracker; rows 11-12 by the completion tracker.

Tables (``lib.memory``, written through configure streams, read once per frame):

* QP context, ``qps`` entries indexed by ``dest_qp[:bits]``: ``{connected, qpn, peer_gid, pd,
  pmtu_log2}`` of the configured :func:`qp_entry_layout` (its ``peer_qpn`` and ``dest`` address answers:
  the response builder keeps those). A frame's QP exists if its entry is connected and holds exactly
  ``dest_qp``.
* Memory regions, ``mrs`` entries indexed by ``rkey[:bits]`` (the low R_Key bits name the entry, the
  rest is a tag, as InfiniBand keys do): ``{valid, rkey, pd, remote_write, base, length}``. The whole
  32-bit R_Key must match.

Input ``i``: ``{header: ParsedHeaders, icrc_ok, oversize}`` (the parser's record joined with the frame
buffer's). Output ``o``: one :func:`verdict_layout` record per frame, in order (its ``header`` drops the
addresses checked here). ``qp_error`` (a bit per QP, from the completion tracker) marks QPs that sent a
NAK: their WRITEs are refused (row 4).

Timing: 1 cycle to read the tables, 1 to decide, 1 on the output register; one frame per 2 cycles at
most (frames are far longer).
"""

from amaranth import Cat, Module, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mrcnic.wire.constants import Opcode

from ..compare import above, at_most
from ..tables import small_table_attrs
from ..tx.layouts import bits_for
from .completion_tracker import RxError
from .parser import ParsedHeaders, ParseStatus

__all__ = [
    "DROP_COUNTERS",
    "Action",
    "Drop",
    "RxError",
    "Validator",
    "VerdictHeaders",
    "mr_entry_layout",
    "qp_entry_layout",
    "verdict_layout",
]

MAX_DMA_LENGTH = 1 << 31


class Action(enum.Enum, shape=2):
    """What the receive engine does with a frame that passed the checks of this block."""

    DROP = 0  # counted under ``drop``; the frame is discarded
    WRITE = 1  # a data packet: window classification, then placement (unless ``error``)
    PROBE = 2  # a reliability probe: answered with a PR = 1 SACK
    FEEDBACK = 3  # SACK, NACK or ACK for our sending side


class Drop(enum.Enum, shape=4):
    """Why a frame was dropped (§7.5); each has a counter."""

    NONE = 0
    MALFORMED = 1  # row 1 (and frames longer than the buffer)
    BAD_ICRC = 2  # row 2
    NOT_FOR_US = 3  # row 3
    UNKNOWN_QP = 4  # row 4
    QP_NOT_READY = 5  # row 4: WRITE on a QP in ERROR
    BAD_SOURCE = 6  # row 5
    ENDPOINT = 7  # endpoint operations: not handled by the RX pipeline yet (host interface, issue 7)


DROP_COUNTERS = tuple(d.name.lower() for d in Drop if d is not Drop.NONE)


def qp_entry_layout(destinations: int) -> data.StructLayout:
    return data.StructLayout(
        {
            "connected": 1,
            "qpn": 24,  # own QPN (the BTH dest_qp of arriving packets)
            "peer_qpn": 24,
            "peer_gid": 128,
            "dest": bits_for(destinations),  # route-template index of the peer (for answers)
            "pd": 8,  # protection domain
            "pmtu_log2": 4,  # 8 (256 B) .. 12 (4096 B)
        }
    )


mr_entry_layout = data.StructLayout(
    {"valid": 1, "rkey": 32, "pd": 8, "remote_write": 1, "base": 64, "length": 64}
)


# The parser's fields that only this block reads (the address checks) do not travel with the verdict:
# 145 bits fewer in every register, FIFO and multiplexer the verdict passes through after here.
_CHECKED_HERE = ("for_us", "src", "frame_length")
VerdictHeaders = data.StructLayout(
    {name: field.shape for name, field in data.Layout.cast(ParsedHeaders) if name not in _CHECKED_HERE}
)


# What the QP table keeps of a configured entry: the fields the checks read.
_QP_CHECKED = ("connected", "qpn", "peer_gid", "pd", "pmtu_log2")


def verdict_layout(qps: int, destinations: int) -> data.StructLayout:
    """One frame's verdict. ``destinations`` does not change it (the peer's addressing stays in the
    response builder); it is taken so every RX record layout has the same signature."""
    del destinations
    return data.StructLayout(
        {
            "action": Action,
            "drop": Drop,
            "qp": bits_for(qps),
            "header": VerdictHeaders,  # ParsedHeaders without the addresses checked here
            "ev": 32,  # the packet's EV: UDP sport | flow label[15:0] << 16
            "error": RxError,  # WRITE only
            "ends_message": 1,
            "has_imm": 1,
        }
    )


class Validator(wiring.Component):
    """Parameters: ``qps``, ``mrs`` (memory regions), ``destinations`` (route-template index width of
    the QP entries), ``addr_width`` (host addresses: the DMA's reach, 12..64).

    Configuration: ``qp_configure`` ``{qp, entry}``, ``mr_configure`` ``{index, entry}`` (streams, one
    cycle each). A region that does not lie below ``2**addr_width`` (``base + length`` above it) is
    stored invalid: every access to it fails row 10, so a VA the DMA cannot reach is never placed, and
    the table keeps ``addr_width`` bits of base and length instead of 64. Row 3 (not for us) is the
    parser's ``for_us``: it compares the addresses with the GID and the port addresses, so they need not
    travel in the record.
    """

    def __init__(self, *, qps: int = 4, mrs: int = 8, destinations: int = 4, addr_width: int = 64):
        self.qps, self.mrs, self.destinations, self.addr_width = qps, mrs, destinations, addr_width
        self._verdict = verdict_layout(qps, destinations)
        super().__init__(
            {
                "i": In(
                    stream.Signature(
                        data.StructLayout({"header": ParsedHeaders, "icrc_ok": 1, "oversize": 1})
                    )
                ),
                "o": Out(stream.Signature(self._verdict)),
                "qp_configure": In(
                    stream.Signature(
                        data.StructLayout({"qp": bits_for(qps), "entry": qp_entry_layout(destinations)})
                    )
                ),
                "mr_configure": In(
                    stream.Signature(data.StructLayout({"index": bits_for(mrs), "entry": mr_entry_layout}))
                ),
                "qp_error": In(qps),
            }
        )

    def elaborate(self, platform):
        m = Module()
        qb, mb = bits_for(self.qps), bits_for(self.mrs)

        entry_layout = qp_entry_layout(self.destinations)
        checked_layout = data.StructLayout({name: entry_layout[name].shape for name in _QP_CHECKED})
        m.submodules.qp_table = qp_table = Memory(
            shape=checked_layout,
            depth=self.qps,
            init=[],
            attrs=small_table_attrs(self.qps),
        )
        aw = self.addr_width
        # Base and length on aw bits (a length of 2^aw: the whole reach, base 0).
        region_layout = data.StructLayout(
            {"valid": 1, "rkey": 32, "pd": 8, "remote_write": 1, "base": aw, "length": aw + 1}
        )
        m.submodules.mr_table = mr_table = Memory(shape=region_layout, depth=self.mrs, init=[])
        qp_wr, mr_wr = qp_table.write_port(), mr_table.write_port()
        qp_rd = qp_table.read_port(transparent_for=(qp_wr,))
        mr_rd = mr_table.read_port(transparent_for=(mr_wr,))

        m.d.comb += [
            self.qp_configure.ready.eq(1),
            qp_wr.addr.eq(self.qp_configure.payload.qp),
            *(qp_wr.data[name].eq(self.qp_configure.payload.entry[name]) for name in _QP_CHECKED),
            qp_wr.en.eq(self.qp_configure.valid),
            self.mr_configure.ready.eq(1),
            mr_wr.addr.eq(self.mr_configure.payload.index),
            mr_wr.en.eq(self.mr_configure.valid),
        ]
        region = self.mr_configure.payload.entry
        region_end = Signal(aw + 2)
        m.d.comb += region_end.eq(region.base[:aw] + region.length[: aw + 1])
        within_reach = at_most(region_end, 1 << aw) & ~region.base[aw:].any() & ~region.length[aw + 1 :].any()
        m.d.comb += [
            *(mr_wr.data[name].eq(region[name]) for name in ("rkey", "pd", "remote_write", "base", "length")),
            mr_wr.data.valid.eq(region.valid & within_reach),
        ]

        # -- stage 1: take the frame, read both tables ----------------------------------------------
        # The frame's record stays on ``i`` until its verdict is loaded (no copy of its 623 bits here);
        # the tables are read at its keys from the cycle it appears.
        cur = self.i.payload
        busy = Signal()  # the table entries of ``cur`` are on the read ports
        out_full = Signal()
        with m.If(self.i.valid & ~busy):
            m.d.sync += busy.eq(1)
        m.d.comb += [
            qp_rd.addr.eq(cur.header.bth.dest_qp[:qb]),
            mr_rd.addr.eq(cur.header.ext.write.reth.rkey[:mb]),
        ]

        # -- stage 2: decide ------------------------------------------------------------------------
        h = cur.header
        qp, mr = qp_rd.data, mr_rd.data
        op = h.bth.opcode
        is_write = (op >= Opcode.WRITE_FIRST) & (op <= Opcode.WRITE_ONLY_IMM)
        is_probe = op == Opcode.PROBE
        is_feedback = (op == Opcode.SACK) | (op == Opcode.NACK) | (op == Opcode.ACK)
        is_endpoint = (op == Opcode.ENDPOINT_REQUEST) | (op == Opcode.ENDPOINT_RESPONSE)

        qp_index = h.bth.dest_qp[:qb]
        qp_exists = qp.connected & (qp.qpn == h.bth.dest_qp)
        qp_failed = Signal()
        m.d.comb += qp_failed.eq((self.qp_error >> qp_index)[0])

        drop = Signal(Drop)
        S = [
            ((h.status != ParseStatus.OK) | cur.oversize, Drop.MALFORMED),
            (~h.trimmed & ~cur.icrc_ok, Drop.BAD_ICRC),
            (~h.for_us, Drop.NOT_FOR_US),
            (is_endpoint, Drop.ENDPOINT),
            (~qp_exists, Drop.UNKNOWN_QP),
            (is_write & qp_failed, Drop.QP_NOT_READY),
            (h.src != qp.peer_gid, Drop.BAD_SOURCE),
        ]
        m.d.comb += drop.eq(Drop.NONE)
        for condition, reason in reversed(S):  # the first failing check decides
            with m.If(condition):
                m.d.comb += drop.eq(reason)

        # Row 9: lengths (§3.2). ``length`` is the payload the IPv6 length claims (checked against the
        # frame by the parser for non-trimmed packets).
        w = h.ext.write
        length = h.payload_length
        dma = w.reth.dma_length
        pmtu = Signal(13)
        m.d.comb += pmtu.eq(1 << qp.pmtu_log2)
        first_or_middle = (op == Opcode.WRITE_FIRST) | (op == Opcode.WRITE_MIDDLE)
        last = (op == Opcode.WRITE_LAST) | (op == Opcode.WRITE_LAST_IMM)
        only = (op == Opcode.WRITE_ONLY) | (op == Opcode.WRITE_ONLY_IMM)
        # The PMTU is below 2^13 and the length below 2^16: the order comparisons with the 32-bit DMA
        # length take its low bits in a carry chain and its high bits as "any set" (half the carry cells).
        low = len(pmtu)
        last_length = (((dma[:low] - 1) & (pmtu - 1)) + 1)[:low]
        bad_length = (
            (dma == 0)
            | above(dma, MAX_DMA_LENGTH)
            | (~dma[len(length) :].any() & (length > dma[: len(length)]))
            | (first_or_middle & (length != pmtu))
            | ((first_or_middle | last) & ~dma[low:].any() & (dma[:low] <= pmtu))
            | (last & (length != last_length))
            | (only & (length != dma))
        )
        # Row 10: the region, from the VA's offset into it: at or above the base (the subtraction does
        # not borrow) and with room for the payload from there (base <= VA and VA + length <= base +
        # region length, VA + length past 2^64 included). Two subtractions and a 16-bit compare instead
        # of two 65-bit sums and two 64/65-bit compares: about 60 carry cells fewer. A stored region
        # lies below 2^aw, so a VA with bits above aw set is outside it.
        offset = Signal(aw + 1)  # bit aw: VA below the base
        room = Signal(aw + 2)  # bytes from the VA to the region's end; top bit: the VA is past the end
        m.d.comb += [offset.eq(w.reth.va[:aw] - mr.base), room.eq(mr.length - offset[:aw])]
        short = min(len(length), aw + 1)
        little_room = ~room[short : aw + 1].any()  # under 2^16 bytes: compare it with the length
        bad_access = (
            ~mr.valid
            | (mr.rkey != w.reth.rkey)
            | (mr.pd != qp.pd)
            | ~mr.remote_write
            | w.reth.va[aw:].any()
            | offset[aw]
            | room[aw + 1]
            | (little_room & (room[:short] < length))
        )

        v = Signal(self._verdict)
        m.d.comb += [
            v.drop.eq(drop),
            v.qp.eq(qp_index),
            *(v.header[name].eq(h[name]) for name, _ in VerdictHeaders),
            v.ev.eq(Cat(h.sport, h.flow_label[:16])),
            v.ends_message.eq(last | only),
            v.has_imm.eq((op == Opcode.WRITE_LAST_IMM) | (op == Opcode.WRITE_ONLY_IMM)),
        ]
        with m.If(drop != Drop.NONE):
            m.d.comb += v.action.eq(Action.DROP)
        with m.Elif(is_write):
            m.d.comb += v.action.eq(Action.WRITE)
            # A trimmed packet carries no trustworthy lengths and is never placed (row 6).
            with m.If(~h.trimmed & bad_length):
                m.d.comb += v.error.eq(RxError.INVALID_REQUEST)
            with m.Elif(~h.trimmed & bad_access):
                m.d.comb += v.error.eq(RxError.REMOTE_ACCESS)
        with m.Elif(is_probe):
            m.d.comb += v.action.eq(Action.PROBE)
        with m.Elif(is_feedback):
            m.d.comb += v.action.eq(Action.FEEDBACK)

        # -- stage 3: output register -------------------------------------------------------------
        m.d.comb += self.o.valid.eq(out_full)
        with m.If(self.o.ready):
            m.d.sync += out_full.eq(0)
        m.d.comb += self.i.ready.eq(busy & (~out_full | self.o.ready))
        with m.If(self.i.ready):
            m.d.sync += [self.o.payload.eq(v), out_full.eq(1), busy.eq(0)]
        return m
