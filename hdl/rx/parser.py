"""Header parser: one parsed record per received frame, with the verdict of the malformation checks.

Ref: docs/protocol.md §2 (header stacks, SRH skipped on receive, byte offsets), §3 (extension headers by
opcode), §7.5 row 1 (malformed: checks and their order), §9.3 (trimmed packets: headers only). The
Python reference is :func:`mrcnic.wire.decode`; ``ParseStatus`` mirrors its reason codes and the checks
run in its order, so both give the same verdict for any byte string.

The parser takes every beat of a frame (no FCS), keeps its first ``BUFFER_BYTES`` bytes and counts its
length. After the last beat it emits the record on ``header`` (combinational from the buffer) and takes
no new beat until the record is taken. The payload is not forwarded (a store-and-forward buffer next to
the parser holds the frame). An SRH longer than ``MAX_SRH_SEGMENT_BYTES`` is reported as
``BAD_ROUTING_HEADER`` (the only verdict that differs from ``decode()``, which has no bound).
"""

from amaranth import Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from mrcnic.wire.constants import (
    ENDPOINT_QPN,
    ETHERTYPE_IPV6,
    IPPROTO_IPV6,
    IPPROTO_ROUTING,
    IPPROTO_UDP,
    MRC_UDP_PORT,
    MRC_UDP_PORT_ALT,
    Dscp,
    Opcode,
)

from .. import headers as hdr
from ..stream import PacketStream

__all__ = ["BUFFER_BYTES", "MAX_SRH_SEGMENT_BYTES", "HeaderParser", "ParseStatus", "ParsedHeaders"]

MAX_SRH_SEGMENT_BYTES = 64  # hdr_ext_len <= 8: up to four 128-bit segments (uSID containers)
# From the IPv6 header before UDP to the end of the largest extension block (SETH + CC_STATE, EETH).
TAIL_BYTES = 40 + 8 + 12 + 36
EXT_AT = 40 + 8 + 12  # extension headers, from the start of the tail
BUFFER_BYTES = 14 + 40 + 8 + MAX_SRH_SEGMENT_BYTES + TAIL_BYTES


class ParseStatus(enum.Enum, shape=4):
    """Verdict of the parser; names are ``mrcnic.wire.decode`` reason codes in upper case."""

    OK = 0
    TRUNCATED = 1
    NOT_IPV6 = 2
    BAD_IP_VERSION = 3
    BAD_NEXT_HEADER = 4
    BAD_ROUTING_HEADER = 5
    BAD_UDP_PORT = 6
    BAD_LENGTH = 7
    UNKNOWN_OPCODE = 8
    BAD_TRANSPORT_VERSION = 9
    BAD_PAD_COUNT = 10
    BAD_ENDPOINT_QP = 11
    BAD_TRIMMED_OPCODE = 12


class WriteHeaders(data.Struct):
    meth: hdr.Meth
    tseth: hdr.Tseth  # zero when BTH.TS = 0
    reth: hdr.Reth
    imm_dt: hdr.ImmDt  # WRITE_LAST_IMM / WRITE_ONLY_IMM only


class SackHeaders(data.Struct):
    seth: hdr.Seth
    cc_state: hdr.CcState


class ExtHeaders(data.Union):
    """The extension headers after the BTH; which member is meaningful follows from the opcode."""

    write: WriteHeaders
    aeth: hdr.Aeth
    sack: SackHeaders
    neth: hdr.Neth
    peth: hdr.Peth
    erth: hdr.Erth
    eeth: hdr.Eeth


class ExtPresent(data.Struct):
    """Which extension headers the frame carries completely (a trimmed WRITE may lack the last ones)."""

    meth: 1
    tseth: 1
    reth: 1
    imm_dt: 1
    aeth: 1
    seth: 1
    cc_state: 1
    neth: 1
    peth: 1
    erth: 1
    eeth: 1


class ParsedHeaders(data.Struct):
    """One received frame. Fields past the point where a check failed are meaningless."""

    status: ParseStatus
    srv6: 1  # first Next Header 41 or 43: outer IPv6 (+ SRH) before the inner one
    trimmed: 1  # network-header DSCP is TRIMMED or TRIMMED_LASTHOP (lengths were not checked)
    dscp: 6  # network header (the outer one in SRv6 mode)
    ecn: 2  # network header
    ce: 1  # network-header ECN = CE (§9.2)
    outer_dst: 128  # SRv6 mode only
    src: 128  # GIDs: inner IPv6 in SRv6 mode, the only IPv6 otherwise
    dst: 128
    flow_label: 20  # inner / only IPv6: EV[31:16] in bits [15:0]
    sport: 16  # EV[15:0]
    bth: hdr.Bth
    present: ExtPresent
    ext: ExtHeaders
    payload_offset: 16  # frame offset of the first payload byte
    payload_length: 16  # payload bytes the IPv6 payload length claims (stale in a trimmed packet)
    frame_length: 16  # bytes counted (saturates at 65535)


def _ext_length(opcode, ts) -> tuple:
    """(bytes of extension headers, opcode is known) for a BTH opcode."""
    write = 4 + 16 + Mux(ts, 4, 0)
    sizes = {
        Opcode.ACK: 4,
        Opcode.ENDPOINT_REQUEST: 16,
        Opcode.ENDPOINT_RESPONSE: 36,
        Opcode.SACK: 36,
        Opcode.NACK: 20,
        Opcode.PROBE: 16,
    }
    return write, sizes


class HeaderParser(wiring.Component):
    """Members: ``i`` (frames), ``header`` (one ``ParsedHeaders`` per frame), configuration inputs
    ``udp_ports`` (two accepted UDP destination ports), ``dscp_trimmed``, ``dscp_trimmed_lasthop``."""

    def __init__(self, *, data_width: int):
        self.data_width = data_width
        super().__init__(
            {
                "i": In(PacketStream(data_width)),
                "header": Out(stream.Signature(ParsedHeaders)),
                "udp_ports": In(data.ArrayLayout(16, 2), init=[MRC_UDP_PORT, MRC_UDP_PORT_ALT]),
                "dscp_trimmed": In(6, init=Dscp.TRIMMED),
                "dscp_trimmed_lasthop": In(6, init=Dscp.TRIMMED_LASTHOP),
            }
        )

    def elaborate(self, platform):
        m = Module()
        w = self.data_width
        beats = -(-BUFFER_BYTES // w)
        buf = Signal(8 * w * beats)
        beat = Signal(range(beats + 1))  # index of the next beat (saturates past the buffer)
        n = Signal(16)  # frame length so far
        done = Signal()  # whole frame in: the record is on ``header``

        # -- capture ----------------------------------------------------------------------------
        m.d.comb += self.i.ready.eq(~done)
        count = sum(self.i.payload.keep[k] for k in range(w))
        with m.If(self.i.valid & self.i.ready):
            for k in range(beats):
                with m.If(beat == k):
                    m.d.sync += buf[8 * w * k : 8 * w * (k + 1)].eq(self.i.payload.data)
            with m.If(beat < beats):
                m.d.sync += beat.eq(beat + 1)
            total = n + count
            m.d.sync += n.eq(Mux(total > 0xFFFF, 0xFFFF, total))
            with m.If(self.i.payload.last):
                m.d.sync += done.eq(1)
        m.d.comb += self.header.valid.eq(done)
        with m.If(self.header.valid & self.header.ready):
            m.d.sync += [done.eq(0), beat.eq(0), n.eq(0)]

        # The record logic sees the buffer only once the frame is complete (held at zero meanwhile), so
        # it settles once per frame instead of on every beat.
        m.submodules.decode = decode = _Decoder(8 * w * beats)
        m.d.comb += [
            decode.buf.eq(Mux(done, buf, 0)),
            decode.n.eq(Mux(done, n, 0)),
            decode.udp_ports.eq(self.udp_ports),
            decode.dscp_trimmed.eq(self.dscp_trimmed),
            decode.dscp_trimmed_lasthop.eq(self.dscp_trimmed_lasthop),
            self.header.payload.eq(decode.rec),
        ]
        return m


class _Decoder(wiring.Component):
    """The record of a frame from its first bytes (``buf``) and its length (``n``): combinational."""

    def __init__(self, buf_bits: int):
        super().__init__(
            {
                "buf": In(buf_bits),
                "n": In(16),
                "udp_ports": In(data.ArrayLayout(16, 2)),
                "dscp_trimmed": In(6),
                "dscp_trimmed_lasthop": In(6),
                "rec": Out(ParsedHeaders),
            }
        )

    def elaborate(self, platform):
        m = Module()
        buf, n = self.buf, self.n
        # -- parse --------------------------------------------------------------------------------
        eth = hdr.from_wire(hdr.Ethernet, buf[0:])
        first = hdr.from_wire(hdr.Ipv6, buf[8 * 14 :])
        srh = hdr.from_wire(hdr.Srh, buf[8 * 54 :])
        srv6 = (first.next_header == IPPROTO_IPV6) | (first.next_header == IPPROTO_ROUTING)
        has_srh = first.next_header == IPPROTO_ROUTING
        srh_units = MAX_SRH_SEGMENT_BYTES // 8
        srh_too_long = srh.hdr_ext_len > srh_units
        # Start of the IPv6 header before UDP, and the bytes from there on (the "tail").
        ip_at = Signal(9)
        tail = Signal(8 * TAIL_BYTES)
        starts = [14, 54] + [62 + 8 * k for k in range(srh_units + 1)]
        sel = Signal(range(len(starts)))
        with m.If(has_srh):
            m.d.comb += sel.eq(2 + Mux(srh_too_long, 0, srh.hdr_ext_len))
        with m.Elif(srv6):
            m.d.comb += sel.eq(1)
        with m.Switch(sel):
            for k, at in enumerate(starts):
                with m.Case(k):
                    m.d.comb += [ip_at.eq(at), tail.eq(buf[8 * at : 8 * (at + TAIL_BYTES)])]
        ip = hdr.from_wire(hdr.Ipv6, tail[0:])
        udp = hdr.from_wire(hdr.Udp, tail[8 * 40 :])
        bth = hdr.from_wire(hdr.Bth, tail[8 * 48 :])
        ext = tail[8 * EXT_AT :]
        udp_at = ip_at + 40
        bth_end = ip_at + EXT_AT

        trimmed = (first.dscp == self.dscp_trimmed) | (first.dscp == self.dscp_trimmed_lasthop)
        op = bth.opcode
        is_write = (op >= Opcode.WRITE_FIRST) & (op <= Opcode.WRITE_ONLY_IMM)
        has_imm = (op == Opcode.WRITE_LAST_IMM) | (op == Opcode.WRITE_ONLY_IMM)
        write_len, control_len = _ext_length(op, bth.ts)
        ext_len = Signal(6)
        known = Signal()
        with m.If(is_write):
            m.d.comb += [ext_len.eq(write_len + Mux(has_imm, 4, 0)), known.eq(1)]
        for code, size in control_len.items():
            with m.If(op == code):
                m.d.comb += [ext_len.eq(size), known.eq(1)]
        payload_at = bth_end + ext_len
        endpoint_op = (op == Opcode.ENDPOINT_REQUEST) | (op == Opcode.ENDPOINT_RESPONSE)

        rec = self.rec
        # The header stack in decode() order: the first check that fails decides.
        S = ParseStatus
        checks = [
            (n < 14, S.TRUNCATED),
            (eth.ethertype != ETHERTYPE_IPV6, S.NOT_IPV6),
            (n < 54, S.TRUNCATED),
            (first.version != 6, S.BAD_IP_VERSION),
            (srv6 & ~trimmed & (first.payload_length != n - 54), S.BAD_LENGTH),
            (has_srh & (n < 62), S.TRUNCATED),
            (has_srh & (srh.routing_type != 4), S.BAD_ROUTING_HEADER),
            (has_srh & srh_too_long, S.BAD_ROUTING_HEADER),
            (has_srh & (n < ip_at), S.TRUNCATED),
            (has_srh & (srh.next_header != IPPROTO_IPV6), S.BAD_NEXT_HEADER),
            (srv6 & (n < udp_at), S.TRUNCATED),
            (srv6 & (ip.version != 6), S.BAD_IP_VERSION),
            (ip.next_header != IPPROTO_UDP, S.BAD_NEXT_HEADER),
            (~trimmed & (ip.payload_length != n - udp_at), S.BAD_LENGTH),
            (n < udp_at + 8, S.TRUNCATED),
            ((udp.dport != self.udp_ports[0]) & (udp.dport != self.udp_ports[1]), S.BAD_UDP_PORT),
            (~trimmed & (udp.length != n - udp_at), S.BAD_LENGTH),
            (n < bth_end, S.TRUNCATED),
            (~known, S.UNKNOWN_OPCODE),
            (bth.tver != 0, S.BAD_TRANSPORT_VERSION),
            (bth.pad_count != 0, S.BAD_PAD_COUNT),
            (endpoint_op != (bth.dest_qp == ENDPOINT_QPN), S.BAD_ENDPOINT_QP),
            (trimmed & ~is_write & (op != Opcode.PROBE), S.BAD_TRIMMED_OPCODE),
            (~trimmed & (n < payload_at + 4), S.TRUNCATED),
            (~trimmed & ~is_write & (n != payload_at + 4), S.BAD_LENGTH),
        ]
        m.d.comb += rec.status.eq(S.OK)
        for condition, status in reversed(checks):  # later assignments win: first check last
            with m.If(condition):
                m.d.comb += rec.status.eq(status)

        m.d.comb += [
            rec.srv6.eq(srv6),
            rec.trimmed.eq(trimmed),
            rec.dscp.eq(first.dscp),
            rec.ecn.eq(first.ecn),
            rec.ce.eq(first.ecn == 0b11),
            rec.outer_dst.eq(first.dst),
            rec.src.eq(ip.src),
            rec.dst.eq(ip.dst),
            rec.flow_label.eq(ip.flow_label),
            rec.sport.eq(udp.sport),
            rec.bth.eq(bth),
            rec.payload_offset.eq(payload_at),
            rec.payload_length.eq(ip.payload_length - (payload_at - udp_at) - 4),
            rec.frame_length.eq(n),
        ]

        # Extension headers: a header is present if the opcode has it and the frame holds all of it.
        def fits(end):
            return n >= bth_end + end

        def view(layout, at):
            return hdr.from_wire(layout, ext[8 * at :])

        with m.If(is_write):
            ts = bth.ts
            reth_at = Mux(ts, 8, 4)
            m.d.comb += [
                rec.ext.write.meth.eq(view(hdr.Meth, 0)),
                rec.present.meth.eq(fits(4)),
                rec.present.tseth.eq(ts & fits(8)),
                rec.present.reth.eq(fits(reth_at + 16)),
                rec.present.imm_dt.eq(has_imm & fits(reth_at + 20)),
            ]
            with m.If(ts):
                m.d.comb += [
                    rec.ext.write.tseth.eq(view(hdr.Tseth, 4)),
                    rec.ext.write.reth.eq(view(hdr.Reth, 8)),
                    rec.ext.write.imm_dt.eq(view(hdr.ImmDt, 24)),
                ]
            with m.Else():
                m.d.comb += [
                    rec.ext.write.reth.eq(view(hdr.Reth, 4)),
                    rec.ext.write.imm_dt.eq(view(hdr.ImmDt, 20)),
                ]
            with m.If(~has_imm):
                m.d.comb += rec.ext.write.imm_dt.eq(0)
        singles = [
            (Opcode.ACK, "aeth", hdr.Aeth),
            (Opcode.NACK, "neth", hdr.Neth),
            (Opcode.PROBE, "peth", hdr.Peth),
            (Opcode.ENDPOINT_REQUEST, "erth", hdr.Erth),
            (Opcode.ENDPOINT_RESPONSE, "eeth", hdr.Eeth),
        ]
        for code, name, layout in singles:
            with m.If(op == code):
                m.d.comb += [
                    getattr(rec.ext, name).eq(view(layout, 0)),
                    getattr(rec.present, name).eq(fits(hdr.wire_bytes(layout))),
                ]
        with m.If(op == Opcode.SACK):
            m.d.comb += [
                rec.ext.sack.seth.eq(view(hdr.Seth, 0)),
                rec.ext.sack.cc_state.eq(view(hdr.CcState, 28)),
                rec.present.seth.eq(fits(28)),
                rec.present.cc_state.eq(fits(36)),
            ]

        return m
