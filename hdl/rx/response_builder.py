"""Response builder: one SACK, NACK or transport-ACK record in, the complete control frame out.

Ref: docs/protocol.md §2.1/§2.2 (header stacks), §2.3 (control frame lengths), §2.5 (IPv6/UDP/Ethernet
values on transmit), §4 (SETH, CC_STATE, NETH, AETH field tables), §5.1 (EV in UDP sport and flow
label), §5.3 (route-template specialisation), §5.8 (reverse-path rule), §7.2 (SACK fields, probe
answers with PR = 1), §7.3 (NETH fields), §7.4 (AETH), §8 (ICRC), §9.1 (DSCP CONTROL, ECN Not-ECT).
The Python definition is ``mrcnic.wire.build.control_frame`` (every frame is byte-identical to it).

Another block decides *when* to answer and *what*; this one turns the record into bytes:

    Ethernet | [outer IPv6] | IPv6 | UDP | BTH (PSN 0) | SETH + CC_STATE  /  NETH  /  AETH | ICRC

Members (W = ``data_width`` bytes per beat, P = ``planes``):

* ``response``: In, :func:`response_layout` ``{opcode, ev, qp, seth, cc, neth, aeth}``. ``opcode`` is
  ``Opcode.SACK``, ``NACK`` or ``ACK``; only the blocks of that opcode are used (SACK: ``seth`` + ``cc``;
  NACK: ``neth``; ACK: ``aeth``). ``ev`` is the EV being answered, echoed unchanged in the SETH/NETH
  ``entropy`` field. ``qp`` names the QP whose peer is addressed (``peer_configure``). CC type/flags,
  MPR, vendor info, restore_cwnd and rcv_cwnd_pen are 0; CC_STATE ``ooo_count`` (16 bits in) saturates
  at 0x7FFF (§7.2). A record with any other opcode is dropped and counted (``stat_bad_opcode``).
* ``peer_configure``: In, ``{qp, peer: peer_layout}``: the QP's peer addressing, written when the QP is
  connected. ``peer`` is ``{dest, peer_qpn, peer_gid, own_qpn}``: ``dest`` indexes this block's
  route-template table (SRv6 mode only); SPDCID/DPDCID = ``own_qpn[15:0]`` / ``peer_qpn[15:0]``. Kept
  here, once per QP, so the records on their way from the receive engine do not carry 176 bits that
  are the same for every answer to a QP. A write waits while a record is held (so every frame has the
  addressing in force when its record was taken) and takes priority over the next record.
* ``config``: In, ``tx_config_layout(P)`` (``srv6``, ``udp_port``, ``pkey``, ``hop_limit``,
  ``own_gid``, ``port_mac[p]``, ``next_hop_mac[p]``, ``port_address[p]``; ``dscp_data``/``dscp_retx``
  are not used). ``dscp_control``: In(6), default ``Dscp.CONTROL``. ``port_up``: In(P), default all up.
* ``route_configure``: In, ``{dest, template: RouteTemplateLayout}``: writes one route template (same
  meaning as ``SourceRouter.configure``; none when built without SRv6). Writes take priority over records.
* ``o``: Out, ``{data, keep, last, plane}``: the frame with its ICRC (without it when built with
  ``append_icrc=False``), packed (every beat full but the last), ``plane`` constant over a frame. Frames
  leave in record order.
* ``stat_sacks``, ``stat_nacks``, ``stat_acks`` (frames built), ``stat_no_plane`` (records dropped
  because no port was up), ``stat_bad_opcode``: Out(32), wrapping.

Reverse-path rule (§5.8). The plane the EV names is ``ev[31:29] mod P`` (P is 1, 2 or 4, so these are
the low bits of the field; an EV naming plane >= P from a peer with more planes lands on a port this
NIC has). If ``port_up`` has that port down, the lowest-numbered up port is used instead; if none is
up, the record is dropped and counted. The EV that addresses the frame - the route specialisation and
the UDP sport / flow label - is ``ev`` with its plane field replaced by the port actually used, so the
frame's own EV always names its plane (it equals ``ev`` whenever ``ev[31:29]`` is an up port < P).
SRv6 mode: outer SA = ``port_address[plane]``, outer DA = the template of ``dest`` specialised with
that EV, inner SA/DA = ``own_gid`` / ``peer_gid``. Single mode: SA/DA = ``own_gid`` / ``peer_gid``.
Ethernet src/dst = ``port_mac[plane]`` / ``next_hop_mac[plane]``. ``port_up`` is sampled when the
record is taken.

Timing. A record is taken into a one-entry stage (:class:`~mrcnic.hdl.rx.response_router.ResponseRouter`,
which applies the reverse-path rule) while its template is read (one cycle); the header is
then built combinationally and loaded into a shift register that emits W bytes per beat: from its byte
0 in SRv6 mode, from its byte 40 in single-IPv6 mode, so the inner IPv6 header and what follows sit at
the same place in both modes and only 14 bytes of the load depend on the mode. (Picking each
beat by beat index instead left the ECPIX-5 unroutable at 8 bytes a beat: its multiplexer (1,216 bits
into 64) stalled router2 at a few hundred overused wires with two seeds; the shifter's wires are local.
At 4 bytes a beat the shifter is also the smallest: the builder without SRv6 and ICRC took 1,340 logic
cells, against 1,706 picking each beat from a registered header and 1,481 picking it from the record's
fields, as the TX header builder does (``python -m mrcnic.boards.synth_block
mrcnic.hdl.rx.response_builder:ResponseBuilder data_width=4 planes=2 qps=1 destinations=0
append_icrc=0``, 2026-12-06). The latter needs 867 flip-flops fewer.) The next header loads in the
cycle the previous one's last beat leaves, so the emitter has no gaps, and the next record is taken in
that same cycle. An ``IcrcInserter`` appends the ICRC (skip 54 in SRv6 mode, 14 in single mode; it may
add one beat), and a FIFO of ``plane_fifo_depth`` entries carries each frame's plane from header load to
the frame's last output beat (enough frames in flight to cover the inserter's latency with 3-beat frames
at W = 32). Measured with records back to back and the
output always ready: after the first frame (whose tail waits once for the ICRC engine), 0 idle cycles
between frames at W = 8 and W = 32, both modes (``test_back_to_back_frames_have_few_idle_cycles``).
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from mrcnic.wire.constants import ETHERTYPE_IPV6, IPPROTO_IPV6, IPPROTO_UDP, Dscp, Ecn, Opcode

from .. import headers as hdr
from ..stream import PacketStream
from ..tables import small_table_attrs
from ..tx.header_builder import tx_config_layout
from ..tx.icrc_inserter import IcrcInserter
from ..tx.layouts import MAX_CONTROL_FRAME_BYTES, bits_for, control_frame_layout, control_record_layout
from ..tx.source_router import route_configure_members
from .response_router import ResponseRouter, peer_layout

__all__ = ["MAX_FRAME_BYTES", "ResponseBuilder", "output_layout", "peer_layout", "response_layout"]

# Extension bytes after the BTH: SETH + CC_STATE (28 + 8), NETH (20), AETH (4).
EXT_BYTES = hdr.CONTROL_EXTENSION_LENGTHS
# Largest frame without ICRC: SRv6 SACK (§2.3: 154 bytes with the ICRC).
MAX_FRAME_BYTES = 14 + 40 + 40 + 8 + 12 + max(EXT_BYTES.values())
assert MAX_FRAME_BYTES == MAX_CONTROL_FRAME_BYTES


def response_layout(qps: int, destinations: int) -> data.StructLayout:
    """One control packet to send (:func:`~mrcnic.hdl.tx.layouts.control_record_layout`; see the module
    docstring for which fields each opcode uses).

    ``destinations`` does not change the layout (the peer's addressing is looked up by ``qp``); it is
    taken so every RX record layout has the same signature.
    """
    del destinations
    return control_record_layout(qps)


def output_layout(data_width: int, planes: int) -> data.StructLayout:
    """A frame beat with the plane port it goes out on."""
    return control_frame_layout(data_width, planes)


class ResponseBuilder(wiring.Component):
    """Parameters: ``data_width`` (bytes per beat, a power of two >= 4: the ICRC inserter's minimum),
    ``planes`` (1, 2 or 4), ``qps``, ``destinations`` (route-template table size; 0: built without SRv6,
    every frame is single-IPv6 and there is no ``route_configure``), ``plane_fifo_depth`` (frames
    between header load and output), ``append_icrc`` (False: ``o`` carries each frame without its ICRC
    and there is no ICRC inserter, for a NIC whose transmit pipeline appends it: ``mrcnic.hdl.nic``).
    Members: see the module docstring."""

    def __init__(
        self,
        *,
        data_width: int,
        planes: int,
        qps: int,
        destinations: int,
        plane_fifo_depth=8,
        append_icrc: bool = True,
    ):
        if planes not in (1, 2, 4):
            raise ValueError(f"planes must be 1, 2 or 4, not {planes}")
        self.data_width, self.planes, self.qps, self.destinations = data_width, planes, qps, destinations
        self.plane_fifo_depth = plane_fifo_depth
        self.append_icrc = append_icrc
        self.srv6 = destinations > 0
        self._response_layout = response_layout(qps, destinations)
        super().__init__(
            {
                "response": In(stream.Signature(self._response_layout)),
                "peer_configure": In(
                    stream.Signature(
                        data.StructLayout({"qp": bits_for(qps), "peer": peer_layout(destinations)})
                    )
                ),
                "config": In(tx_config_layout(planes)),
                "dscp_control": In(6, init=Dscp.CONTROL),
                "port_up": In(planes, init=(1 << planes) - 1),
                **route_configure_members(destinations),
                "o": Out(stream.Signature(output_layout(data_width, planes))),
                "stat_sacks": Out(32),
                "stat_nacks": Out(32),
                "stat_acks": Out(32),
                "stat_no_plane": Out(32),
                "stat_bad_opcode": Out(32),
            }
        )

    def elaborate(self, platform):
        m = Module()
        w, planes = self.data_width, self.planes
        cfg = self.config
        plane_bits = bits_for(planes)
        # Built without SRv6 (no route templates): every frame is single-IPv6, whatever the register says.
        srv6 = cfg.srv6 if self.srv6 else Const(0, 1)

        # -- 1.-2. the reverse-path rule and the route template: the router holds the record, its port,
        # the EV naming it and (SRv6) the outer destination until the header loads.
        m.submodules.router = router = ResponseRouter(
            planes=planes, qps=self.qps, destinations=self.destinations
        )
        wiring.connect(m, wiring.flipped(self.response), router.response)
        if self.srv6:
            wiring.connect(m, wiring.flipped(self.route_configure), router.route_configure)
        m.d.comb += [
            router.port_up.eq(self.port_up),
            self.stat_no_plane.eq(router.stat_no_plane),
            self.stat_bad_opcode.eq(router.stat_bad_opcode),
        ]
        # The peers, read for the held record's header. A write waits while a record is held (the
        # router's rule), so every frame has the addressing in force when its record was taken.
        m.submodules.peers = peers = memory.Memory(
            shape=peer_layout(self.destinations), depth=self.qps, init=[], attrs=small_table_attrs(self.qps)
        )
        peer_write = peers.write_port()
        peer_read = peers.read_port(domain="comb")
        pc = self.peer_configure
        m.d.comb += [
            router.peer_configure.payload.eq(pc.payload),
            router.peer_configure.valid.eq(pc.valid),
            pc.ready.eq(router.peer_configure.ready),
            peer_write.addr.eq(pc.payload.qp),
            peer_write.data.eq(pc.payload.peer),
            peer_write.en.eq(pc.valid & pc.ready),
        ]
        job = router.o.payload
        rec, plane, route_ev = job.record, job.plane, job.route_ev
        held = router.o.valid
        load = Signal()
        m.d.comb += router.o.ready.eq(load)

        # -- 3. the header stack of the held record, combinationally (§2.5, §4, §7.2-§7.4).
        m.d.comb += peer_read.addr.eq(rec.qp)
        peer = peer_read.data
        is_sack = rec.opcode == Opcode.SACK
        is_nack = rec.opcode == Opcode.NACK
        ext_len = Signal(range(MAX_FRAME_BYTES + 1))
        with m.If(is_sack):
            m.d.comb += ext_len.eq(EXT_BYTES[Opcode.SACK])
        with m.Elif(is_nack):
            m.d.comb += ext_len.eq(EXT_BYTES[Opcode.NACK])
        with m.Else():
            m.d.comb += ext_len.eq(EXT_BYTES[Opcode.ACK])
        l4_length = Signal(16)
        m.d.comb += l4_length.eq(8 + 12 + ext_len + 4)  # UDP .. extension headers + ICRC (§2.1)

        eth = Signal(hdr.Ethernet)
        outer = Signal(hdr.Ipv6)
        inner = Signal(hdr.Ipv6)
        udp = Signal(hdr.Udp)
        bth = Signal(hdr.Bth)
        if self.srv6:
            m.d.comb += outer.dst.eq(job.outer_dst)
        m.d.comb += [
            eth.dst.eq(cfg.next_hop_mac[plane]),
            eth.src.eq(cfg.port_mac[plane]),
            eth.ethertype.eq(ETHERTYPE_IPV6),
            outer.version.eq(6),
            outer.dscp.eq(self.dscp_control),
            outer.ecn.eq(Ecn.NOT_ECT),
            outer.flow_label.eq(route_ev[16:32]),
            outer.payload_length.eq(l4_length + 40),
            outer.next_header.eq(IPPROTO_IPV6),
            outer.hop_limit.eq(cfg.hop_limit),
            outer.src.eq(cfg.port_address[plane]),
            inner.version.eq(6),
            inner.dscp.eq(self.dscp_control),
            inner.ecn.eq(Ecn.NOT_ECT),
            inner.flow_label.eq(route_ev[16:32]),
            inner.payload_length.eq(l4_length),
            inner.next_header.eq(IPPROTO_UDP),
            inner.hop_limit.eq(cfg.hop_limit),
            inner.src.eq(cfg.own_gid),
            inner.dst.eq(peer.peer_gid),
            udp.sport.eq(route_ev[:16]),
            udp.dport.eq(cfg.udp_port),
            udp.length.eq(l4_length),
            bth.opcode.eq(rec.opcode),
            bth.pkey.eq(cfg.pkey),
            bth.dest_qp.eq(peer.peer_qpn),  # PSN 0, no flags: control packets carry no sequence number
        ]
        ext = hdr.control_extension(m, rec, peer.own_qpn, peer.peer_qpn)
        # SRv6 frames start at byte 0 of the stack, single-IPv6 frames at byte 40 (hdr.both_modes_stack).
        after_ip = Cat(hdr.to_wire(udp), hdr.to_wire(bth), ext)
        loaded = hdr.both_modes_stack(srv6, eth, outer, inner, after_ip)
        single = hdr.SINGLE_IPV6_START
        frame_length = Mux(srv6, 14 + 80 + 20, 14 + 40 + 20) + ext_len

        # -- 4. emit: a shift register of whole beats, W bytes out per beat, every beat full but the last.
        # A frame's beat is taken at byte 0 of the register (SRv6) or at byte 40 (single IPv6).
        header_beats = -(-MAX_FRAME_BYTES // w)  # the largest single-IPv6 frame ends there too
        shifter = Signal(8 * w * header_beats)
        frame_srv6 = Signal()  # the mode of the frame in the register
        remaining = Signal(range(MAX_FRAME_BYTES + 1))  # bytes still to send; 0 = idle
        if self.append_icrc:
            m.submodules.icrc = icrc = IcrcInserter(data_width=w)
            m.d.comb += icrc.skip.eq(Mux(frame_srv6, 54, 14))  # the outer IPv6 header is not covered (§8)
            beat_out, framed = icrc.i, icrc.o
        else:
            beat_out = framed = PacketStream(w).create(path=("frame",))
        last_beat = remaining <= w
        m.d.comb += [
            beat_out.valid.eq(remaining != 0),
            beat_out.payload.data.eq(
                Mux(frame_srv6, shifter[: 8 * w], shifter[8 * single : 8 * (single + w)])
            ),
            beat_out.payload.keep.eq(Mux(last_beat, (Const(1, w + 1) << remaining) - 1, (1 << w) - 1)),
            beat_out.payload.last.eq(last_beat),
        ]
        with m.If(beat_out.valid & beat_out.ready):
            m.d.sync += [
                shifter.eq(shifter >> (8 * w)),
                remaining.eq(Mux(last_beat, 0, remaining - w)),
            ]

        # Each frame's plane rides in a FIFO from header load to the frame's last output beat.
        m.submodules.planes = plane_fifo = fifo.SyncFIFO(width=plane_bits, depth=self.plane_fifo_depth)
        emitter_free = (remaining == 0) | (beat_out.valid & beat_out.ready & last_beat)
        m.d.comb += [
            load.eq(held & emitter_free & plane_fifo.w_rdy),
            plane_fifo.w_en.eq(load),
            plane_fifo.w_data.eq(plane),
        ]
        with m.If(load):  # after the shift above: the new frame wins in the cycle the old one ends
            m.d.sync += [
                shifter.eq(loaded),
                frame_srv6.eq(srv6),
                remaining.eq(frame_length),
            ]
            with m.If(is_sack):
                m.d.sync += self.stat_sacks.eq(self.stat_sacks + 1)
            with m.Elif(is_nack):
                m.d.sync += self.stat_nacks.eq(self.stat_nacks + 1)
            with m.Else():
                m.d.sync += self.stat_acks.eq(self.stat_acks + 1)

        # -- 5. output: the ICRC inserter's beats (or the emitter's) with the plane of their frame.
        m.d.comb += [
            self.o.valid.eq(framed.valid & plane_fifo.r_rdy),
            self.o.payload.data.eq(framed.payload.data),
            self.o.payload.keep.eq(framed.payload.keep),
            self.o.payload.last.eq(framed.payload.last),
            self.o.payload.plane.eq(plane_fifo.r_data),
            framed.ready.eq(self.o.ready & plane_fifo.r_rdy),
            plane_fifo.r_en.eq(self.o.valid & self.o.ready & framed.payload.last),
        ]
        return m
