"""Header parser: one parsed record per received frame, with the verdict of the malformation checks.

Ref: docs/protocol.md §2 (header stacks, SRH skipped on receive, byte offsets), §3 (extension headers by
opcode), §7.5 row 1 (malformed: checks and their order) and row 3 (the destination addresses, compared
here so they need not travel with the record: ``for_us``), §9.3 (trimmed packets: headers only). The
Python reference is :func:`mrcnic.wire.decode`; ``ParseStatus`` mirrors its reason codes and the checks
run in its order, so both give the same verdict for any byte string.

The parser takes every beat of a frame (no FCS) and counts its length. After the last beat it emits the
record on ``header`` (combinational from the captured bytes; valid from the cycle after the last beat is
taken, for W >= 64 from the cycle after that) and takes no new beat until the record is taken.
``i.ready`` depends on registers only (not on ``i.valid``). The payload is not forwarded (a
store-and-forward buffer next to the parser holds the frame). An SRH longer than ``MAX_SRH_SEGMENT_BYTES``
is reported as ``BAD_ROUTING_HEADER`` (the only verdict that differs from ``decode()``, which has no
bound).

Capture, while the frame streams in (W = ``data_width``):

* **Head**: the few bytes the first checks read, each at its fixed beat and lane: the Ethertype (bytes
  12-13), the first IPv6 header's first 8 bytes and its destination (bytes 14-21, 38-53), and the SRH's
  Next Header, Hdr Ext Len and Routing Type (bytes 54-56).
* **Tail**: ``TAIL_BYTES`` from the IPv6 header before UDP onward (``ip_at``: 14, 54 without SRH, or
  62 + 8 * Hdr Ext Len), in a buffer aligned to ``ip_at``. Each beat from the tail's first
  (``ip_at // W``) on is rotated by ``ip_at % W`` lanes and written to row ``beat - ip_at // W`` of the
  buffer, its lanes ahead of ``ip_at % W`` to the row before. Every start has the same residue for
  W <= 8, so the rotation is wiring there; above, it is a switch over the few residues (2 for W = 16,
  4 for W = 32).
* **Where the tail starts** is a guess, refined as the bytes arrive: 14 (no outer header) until byte 20
  (first Next Header) is taken, then 54 (41) or 62 (43: an empty SRH) until byte 55 (Hdr Ext Len) is,
  then 62 + 8 * Hdr Ext Len. Each beat's place (its tail row, the rotation) is in registers, set when the
  beat before is taken, so no arithmetic sits in front of the write enables. For W <= 32 every start is
  known before the beat it falls in (20 // W < 54 // W, 55 // W < 70 // W, and the empty-SRH guess is
  right for 62 though byte 55 may share its beat). For W >= 64 it is not (bytes 20, 54 and 62 share beat
  0), so there each beat is written the cycle after it is taken, placed by its own bytes too, and the
  record comes a cycle later. A guess only ever moves the start later, and the true start's rows are all
  written from its first beat on, so rows written under a wrong guess are written again or lie past the
  frame's end. Nothing is cleared between frames either: every check that reads a byte comes after the
  length check that guarantees the byte is there (``decode()``'s order), so stale bytes decide nothing
  (record fields past a failed check are meaningless).
"""

from amaranth import C, Cat, Module, Mux, Signal, signed
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
from ..compare import above
from ..stream import PacketStream

__all__ = ["BUFFER_BYTES", "MAX_SRH_SEGMENT_BYTES", "HeaderParser", "ParseStatus", "ParsedHeaders"]

MAX_SRH_SEGMENT_BYTES = 64  # hdr_ext_len <= 8: up to four 128-bit segments (uSID containers)
# From the IPv6 header before UDP to the end of the largest extension block (SETH + CC_STATE, EETH).
TAIL_BYTES = 40 + 8 + 12 + 36
EXT_AT = 40 + 8 + 12  # extension headers, from the start of the tail
SRH_UNITS = MAX_SRH_SEGMENT_BYTES // 8
# Where the tail can start: no outer header, outer IPv6 only, outer IPv6 + SRH of 0..SRH_UNITS units.
IP_STARTS = (14, 54, *(62 + 8 * k for k in range(SRH_UNITS + 1)))
BUFFER_BYTES = max(IP_STARTS) + TAIL_BYTES  # the parser reads no byte of a frame past this many
HEAD_BYTES = 57  # Ethernet, first IPv6, SRH up to its Routing Type
HEAD_KEPT = (*range(12, 22), *range(38, 57))  # the head bytes the checks and the record read


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
    # §7.5 row 3: the destination GID is ours and, in SRv6 mode, the outer destination is the GID or one
    # of the port addresses. Decided here, so the two 128-bit addresses travel no further.
    for_us: 1
    src: 128  # source GID: inner IPv6 in SRv6 mode, the only IPv6 otherwise (checked against the QP)
    flow_label: 20  # inner / only IPv6: EV[31:16] in bits [15:0]
    sport: 16  # EV[15:0]
    bth: hdr.Bth
    present: ExtPresent
    ext: ExtHeaders
    payload_offset: 16  # frame offset of the first payload byte
    payload_length: 16  # payload bytes the IPv6 payload length claims (stale in a trimmed packet)
    frame_length: 16  # bytes counted (saturates at 65535)


class _ExtForm(enum.Enum, shape=4):
    """The layouts the extension-header union can take."""

    NONE = 0
    ACK = 1
    SACK = 2
    NACK = 3
    PROBE = 4
    REQUEST = 5
    RESPONSE = 6
    WRITE = 8
    WRITE_IMM = 9
    WRITE_TS = 10
    WRITE_TS_IMM = 11


_CONTROL_FORMS = {
    Opcode.ACK: _ExtForm.ACK,
    Opcode.SACK: _ExtForm.SACK,
    Opcode.NACK: _ExtForm.NACK,
    Opcode.PROBE: _ExtForm.PROBE,
    Opcode.ENDPOINT_REQUEST: _ExtForm.REQUEST,
    Opcode.ENDPOINT_RESPONSE: _ExtForm.RESPONSE,
}

_WRITE_FORMS = {  # (BTH.TS, the opcode carries ImmDt)
    (0, 0): _ExtForm.WRITE,
    (0, 1): _ExtForm.WRITE_IMM,
    (1, 0): _ExtForm.WRITE_TS,
    (1, 1): _ExtForm.WRITE_TS_IMM,
}


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
    """Parameters: ``data_width``, ``planes`` (port addresses), ``port_addresses`` (False: a NIC built
    without SRv6, whose ``port_address`` inputs are not used: an SRv6 frame is ours when its outer
    destination is the GID).

    Members: ``i`` (frames), ``header`` (one ``ParsedHeaders`` per frame), configuration inputs
    ``udp_ports`` (two accepted UDP destination ports), ``dscp_trimmed``, ``dscp_trimmed_lasthop``,
    ``gid`` (own GID) and ``port_address`` (one per plane: SRv6 outer destinations), which decide
    ``for_us``."""

    def __init__(self, *, data_width: int, planes: int = 1, port_addresses: bool = True):
        self.data_width, self.planes, self.port_addresses = data_width, planes, port_addresses
        super().__init__(
            {
                "i": In(PacketStream(data_width)),
                "header": Out(stream.Signature(ParsedHeaders)),
                "udp_ports": In(data.ArrayLayout(16, 2), init=[MRC_UDP_PORT, MRC_UDP_PORT_ALT]),
                "dscp_trimmed": In(6, init=Dscp.TRIMMED),
                "dscp_trimmed_lasthop": In(6, init=Dscp.TRIMMED_LASTHOP),
                "gid": In(128),
                "port_address": In(data.ArrayLayout(128, planes)),
            }
        )

    def elaborate(self, platform):
        m = Module()
        w = self.data_width
        shifts = sorted({at % w for at in IP_STARTS})  # lane of the tail's first byte in its beat
        rows = -(-TAIL_BYTES // w)
        lag = _lag(w)
        beats = max(IP_STARTS) // w + rows + 1  # no beat from this index on holds a byte we keep
        head = Signal(8 * HEAD_BYTES)  # bytes outside HEAD_KEPT stay zero (and vanish in synthesis)
        tail = Signal(8 * TAIL_BYTES)  # byte t: frame byte ip_at + t
        beat = Signal(range(beats + 1))  # index of the next beat (saturates past the kept bytes)
        n = Signal(16)  # frame length so far
        done = Signal()  # whole frame in: the record is on ``header``
        data_in = self.i.payload.data
        take = self.i.valid & self.i.ready

        # -- capture ----------------------------------------------------------------------------
        count = sum(self.i.payload.keep[k] for k in range(w))
        with m.If(take):
            for k in sorted({b // w for b in HEAD_KEPT}):
                with m.If(beat == k):
                    for b in HEAD_KEPT:
                        if b // w == k:
                            m.d.sync += head.word_select(b, 8).eq(data_in.word_select(b % w, 8))
            with m.If(beat < beats):
                m.d.sync += beat.eq(beat + 1)
            total = n + count
            m.d.sync += n.eq(Mux(above(total, 0xFFFF), 0xFFFF, total))

        # Where the beat to be written goes (see "Where the tail starts" above): ``index``, the tail row
        # its lanes from ``ip_at % W`` on belong to (the lanes ahead of that one: the row before), and
        # ``which``, the position of ``ip_at % W`` in ``shifts``. Set when a beat is taken, for the next
        # beat (``lag`` 0) or for this one, then written a cycle later (``lag`` 1). Only the beats that
        # hold byte 20 or 55 change the guess; each start it can give is a constant here.
        index = Signal(range(-beats, rows + 2), init=-lag - 14 // w)
        which = Signal(range(len(shifts)), init=shifts.index(14 % w))

        def as_of(b, told):
            """Byte ``b`` while beat ``told`` is taken: its lane, its copy in the head, or None (later)."""
            if b // w > told:
                return None
            return data_in.word_select(b % w, 8) if b // w == told else head.word_select(b, 8)

        with m.If(take):
            with m.If(index <= rows):
                m.d.sync += index.eq(index + 1)
            for told in sorted({20 // w, 55 // w}):
                with m.If(beat == told):
                    start = Signal(range(len(IP_STARTS)), name=f"start_{told}")
                    m.d.comb += start.eq(_start(as_of(20, told), as_of(55, told)))
                    with m.Switch(start):
                        for k, at in enumerate(IP_STARTS):
                            with m.Case(k):
                                m.d.sync += [
                                    index.eq(told + 1 - lag - at // w),
                                    which.eq(shifts.index(at % w)),
                                ]
        if lag:
            pending = Signal()  # a taken beat still to be written
            pending_last = Signal()
            pending_data = Signal.like(data_in)
            m.d.sync += pending.eq(take)
            with m.If(take):
                m.d.sync += [pending_data.eq(data_in), pending_last.eq(self.i.payload.last)]
            write, written, last = pending, pending_data, pending_last
            m.d.comb += self.i.ready.eq(~done & ~(pending & pending_last))
        else:
            write, written, last = take, data_in, self.i.payload.last
            m.d.comb += self.i.ready.eq(~done)

        rotated = Signal(8 * w)
        late = Signal(w)
        with m.Switch(which):
            for k, s in enumerate(shifts):
                with m.Case(k) if s != shifts[-1] else m.Default():
                    m.d.comb += [
                        rotated.eq(Cat(written[8 * s :], written[: 8 * s])),
                        late.eq(((1 << w) - 1) ^ ((1 << (w - s)) - 1)),
                    ]
        at_row = Signal(rows + 1)
        m.d.comb += at_row.eq(Cat(index == r for r in range(rows + 1)))
        with m.If(write):
            for t in range(TAIL_BYTES):
                row, lane = divmod(t, w)
                with m.If(Mux(late[lane], at_row[row + 1], at_row[row])):
                    m.d.sync += tail.word_select(t, 8).eq(rotated.word_select(lane, 8))
            with m.If(last):
                m.d.sync += done.eq(1)

        m.d.comb += self.header.valid.eq(done)
        with m.If(self.header.valid & self.header.ready):
            m.d.sync += [done.eq(0), beat.eq(0), n.eq(0), index.eq(index.init), which.eq(which.init)]

        m.submodules.decode = decode = _Decoder(planes=self.planes, port_addresses=self.port_addresses)
        m.d.comb += [
            decode.head.eq(head),
            decode.tail.eq(tail),
            decode.n.eq(n),
            decode.udp_ports.eq(self.udp_ports),
            decode.dscp_trimmed.eq(self.dscp_trimmed),
            decode.dscp_trimmed_lasthop.eq(self.dscp_trimmed_lasthop),
            decode.gid.eq(self.gid),
            decode.port_address.eq(self.port_address),
            self.header.payload.eq(decode.rec),
        ]
        return m


def _lag(w: int) -> int:
    """1 if, at ``w`` bytes per beat, some tail starts in (or before) the beat holding a byte that tells
    where it starts: Next Header (byte 20) for every outer header, Hdr Ext Len (byte 55) for an SRH with
    segments (the guesses before those bytes, 14 and an empty SRH, need none)."""
    told = {54: 20, 62: 20, **{at: 55 for at in IP_STARTS if at > 62}}
    return int(any(at // w <= byte // w for at, byte in told.items()))


def _is_srv6(next_header):
    """First Next Header announces an outer IPv6 header (IPv6-in-IPv6, possibly behind an SRH)."""
    return (next_header == IPPROTO_IPV6) | (next_header == IPPROTO_ROUTING)


def _start(next_header, hdr_ext_len):
    """Which of ``IP_STARTS`` the IPv6 header before UDP is at, from the first Next Header and the SRH's
    Hdr Ext Len (None: not known yet, taken as 0; an SRH too long to skip counts as empty)."""
    units = 0 if hdr_ext_len is None else Mux(hdr_ext_len > SRH_UNITS, 0, hdr_ext_len)
    return Mux(next_header == IPPROTO_ROUTING, 2 + units, Mux(next_header == IPPROTO_IPV6, 1, 0))


class _Decoder(wiring.Component):
    """The record of a frame from its captured bytes (``head``: the frame's first ``HEAD_BYTES``,
    ``tail``: ``TAIL_BYTES`` from ``ip_at`` on) and its length (``n``): combinational."""

    def __init__(self, *, planes: int, port_addresses: bool):
        self.port_addresses = port_addresses
        super().__init__(
            {
                "head": In(8 * HEAD_BYTES),
                "tail": In(8 * TAIL_BYTES),
                "n": In(16),
                "udp_ports": In(data.ArrayLayout(16, 2)),
                "dscp_trimmed": In(6),
                "dscp_trimmed_lasthop": In(6),
                "gid": In(128),
                "port_address": In(data.ArrayLayout(128, planes)),
                "rec": Out(ParsedHeaders),
            }
        )

    def elaborate(self, platform):
        m = Module()
        head, tail, n = self.head, self.tail, self.n

        # -- parse --------------------------------------------------------------------------------
        # Each header as a signal of its own: wiring in hardware, and the simulator then evaluates the
        # byte order conversion once per change instead of once per field read.
        def wire(name, layout, at, vector):
            view = Signal(layout, name=name)
            m.d.comb += view.eq(hdr.from_wire(layout, vector[8 * at :]))
            return view

        eth = wire("eth", hdr.Ethernet, 0, head)
        first = wire("first", hdr.Ipv6, 14, head)
        srh = wire("srh", hdr.Srh, 54, Cat(head, C(0, 8 * 5)))  # its first 3 bytes are kept
        srv6 = _is_srv6(first.next_header)
        has_srh = first.next_header == IPPROTO_ROUTING
        srh_too_long = srh.hdr_ext_len > SRH_UNITS
        ip_at = Signal(range(BUFFER_BYTES))  # the start _start() picks, as a byte offset
        units = Mux(srh_too_long, 0, srh.hdr_ext_len)
        m.d.comb += ip_at.eq(Mux(has_srh, IP_STARTS[2] + 8 * units, Mux(srv6, IP_STARTS[1], IP_STARTS[0])))
        ip = wire("ip", hdr.Ipv6, 0, tail)
        udp = wire("udp", hdr.Udp, 40, tail)
        bth = wire("bth", hdr.Bth, 48, tail)
        ext = tail[8 * EXT_AT :]
        # Bytes from the tail's start to the frame's end: every later length check compares this one
        # difference with a constant (or the extension length) instead of n with a sum.
        rest = Signal(signed(17))
        m.d.comb += rest.eq(n - ip_at)
        # Those constants are all below 128 (and the Ethernet/IPv6/SRH bounds on n below 64), so the
        # order comparisons look at the low bits and one "further than that" flag, not 17-bit carries.
        far = Signal()
        m.d.comb += far.eq(~rest[16] & rest[7:].any())

        def rest_below(bound):
            return rest[16] | (~far & (rest[:7] < bound))

        def n_below(bound):
            return ~n[6:].any() & (n[:6] < bound)

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
        ext_end = EXT_AT + ext_len  # from the tail's start
        endpoint_op = (op == Opcode.ENDPOINT_REQUEST) | (op == Opcode.ENDPOINT_RESPONSE)

        rec = self.rec
        outer_ok = first.dst == self.gid
        if self.port_addresses:
            outer_ok |= Cat(first.dst == a for a in self.port_address).any()
        m.d.comb += rec.for_us.eq((ip.dst == self.gid) & (~srv6 | outer_ok))

        # The header stack in decode() order: the first check that fails decides.
        S = ParseStatus
        checks = [
            (n_below(14), S.TRUNCATED),
            (eth.ethertype != ETHERTYPE_IPV6, S.NOT_IPV6),
            (n_below(54), S.TRUNCATED),
            (first.version != 6, S.BAD_IP_VERSION),
            (srv6 & ~trimmed & (first.payload_length != n - 54), S.BAD_LENGTH),
            (has_srh & n_below(62), S.TRUNCATED),
            (has_srh & (srh.routing_type != 4), S.BAD_ROUTING_HEADER),
            (has_srh & srh_too_long, S.BAD_ROUTING_HEADER),
            (has_srh & (rest < 0), S.TRUNCATED),
            (has_srh & (srh.next_header != IPPROTO_IPV6), S.BAD_NEXT_HEADER),
            (srv6 & rest_below(40), S.TRUNCATED),
            (srv6 & (ip.version != 6), S.BAD_IP_VERSION),
            (ip.next_header != IPPROTO_UDP, S.BAD_NEXT_HEADER),
            (~trimmed & (ip.payload_length != rest - 40), S.BAD_LENGTH),
            (rest_below(48), S.TRUNCATED),
            ((udp.dport != self.udp_ports[0]) & (udp.dport != self.udp_ports[1]), S.BAD_UDP_PORT),
            (~trimmed & (udp.length != rest - 40), S.BAD_LENGTH),
            (rest_below(EXT_AT), S.TRUNCATED),
            (~known, S.UNKNOWN_OPCODE),
            (bth.tver != 0, S.BAD_TRANSPORT_VERSION),
            (bth.pad_count != 0, S.BAD_PAD_COUNT),
            (endpoint_op != (bth.dest_qp == ENDPOINT_QPN), S.BAD_ENDPOINT_QP),
            (trimmed & ~is_write & (op != Opcode.PROBE), S.BAD_TRIMMED_OPCODE),
            (~trimmed & rest_below(ext_end + 4), S.TRUNCATED),
            (~trimmed & ~is_write & (rest[16] | far | (rest[:7] != ext_end + 4)), S.BAD_LENGTH),
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
            rec.src.eq(ip.src),
            rec.flow_label.eq(ip.flow_label),
            rec.sport.eq(udp.sport),
            rec.bth.eq(bth),
            rec.payload_offset.eq(ip_at + ext_end),
            rec.payload_length.eq(ip.payload_length - (ext_end - 40) - 4),
            rec.frame_length.eq(n),
        ]

        # Extension headers: a header is present if the opcode has it and the frame holds all of it.
        def fits(end):
            return ~rest_below(EXT_AT + end)

        def view(layout, at):
            return hdr.from_wire(layout, ext[8 * at :])

        # Which headers fill the union: one case per layout, so each record bit is one small multiplexer
        # (the union is zero where the opcode has no header, as for an unknown opcode).
        form = Signal(_ExtForm)
        for (ts, imm), kind in _WRITE_FORMS.items():
            with m.If(is_write & (bth.ts == ts) & (has_imm == imm)):
                m.d.comb += form.eq(kind)
        for code, kind in _CONTROL_FORMS.items():
            with m.If(op == code):
                m.d.comb += form.eq(kind)
        meth = view(hdr.Meth, 0)
        with m.Switch(form):
            for (ts, imm), kind in _WRITE_FORMS.items():
                with m.Case(kind):
                    reth_at = 8 if ts else 4
                    write = rec.ext.write
                    m.d.comb += [
                        write.meth.eq(meth),
                        write.tseth.eq(view(hdr.Tseth, 4) if ts else 0),
                        write.reth.eq(view(hdr.Reth, reth_at)),
                        write.imm_dt.eq(view(hdr.ImmDt, reth_at + 16) if imm else 0),
                        rec.present.meth.eq(fits(4)),
                        rec.present.tseth.eq(fits(8) if ts else 0),
                        rec.present.reth.eq(fits(reth_at + 16)),
                        rec.present.imm_dt.eq(fits(reth_at + 20) if imm else 0),
                    ]
            for kind, name, layout in [
                (_ExtForm.ACK, "aeth", hdr.Aeth),
                (_ExtForm.NACK, "neth", hdr.Neth),
                (_ExtForm.PROBE, "peth", hdr.Peth),
                (_ExtForm.REQUEST, "erth", hdr.Erth),
                (_ExtForm.RESPONSE, "eeth", hdr.Eeth),
            ]:
                with m.Case(kind):
                    m.d.comb += [
                        getattr(rec.ext, name).eq(view(layout, 0)),
                        getattr(rec.present, name).eq(fits(hdr.wire_bytes(layout))),
                    ]
            with m.Case(_ExtForm.SACK):
                m.d.comb += [
                    rec.ext.sack.seth.eq(view(hdr.Seth, 0)),
                    rec.ext.sack.cc_state.eq(view(hdr.CcState, 28)),
                    rec.present.seth.eq(fits(28)),
                    rec.present.cc_state.eq(fits(36)),
                ]

        return m
