"""Header builder: the header stack of a WRITE packet, followed by its payload from the DMA reader.

Ref: docs/protocol.md §2 (header stacks and lengths), §2.5 (IPv6/UDP/Ethernet field values), §3 (BTH,
METH, TSETH, RETH, ImmDt), §5 (EV in UDP source port and flow label), §9 (DSCP, ECN).

For every job (a descriptor with its chosen EV, plane and outer destination) the builder issues one
DMA read command for the payload as soon as the job arrives, so payload reads run ahead of header
emission; then it emits the header bytes (SRv6 mode: Ethernet | outer IPv6 | inner IPv6 | UDP | BTH |
METH | TSETH | RETH [| ImmDt]; single-IPv6 mode without the outer IPv6) and forwards the payload beats.
A PROBE job (§7.8) is Ethernet | [outer IPv6 |] IPv6 | UDP | BTH | PETH with no payload and no DMA read.
The output is *not* packed: the last header beat is partial and payload beats keep their memory lane
offsets; a ``StreamPacker`` follows, then the ICRC inserter. Lengths (IPv6 payload length, UDP length)
include the 4 ICRC bytes the inserter will append.

A job stays at the head of the parked queue until its header has gone out, and each header beat is
picked from the header stack that job gives, by beat index (``mrcnic.hdl.mux.select``): there is no
header register. The send time (TSETH/PETH ``tx_timestamp``) and the addressing mode are taken when the
header starts (``tb/hdl/tx/test_header_builder.py`` checks the time against a clock that moves every
cycle); the other ``config`` registers and the peer's fields are read while it goes out. (Changing
them while packets go out was never atomic: the host writes a GID or a MAC 32 bits at a time.) Without
SRv6 the single-IPv6 stack's first 40 bytes are never sent, so they are not multiplexed either. At 4 bytes
a beat this took 339 logic cells and 888 flip-flops off the builder (1,494 -> 1,155 cells, ``python -m
mrcnic.boards.synth_block mrcnic.hdl.tx.header_builder:HeaderBuilder data_width=4 planes=2 qps=1
ev_slots=4 srv6=False lookahead=2 addr_width=14``).
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from mrcnic.wire.constants import ETHERTYPE_IPV6, IPPROTO_IPV6, IPPROTO_UDP, Dscp, Ecn, Opcode

from .. import headers as hdr
from ..dma.reader import dma_data_layout
from ..mux import select
from ..stream import PacketStream
from .layouts import MAX_CONTROL_FRAME_BYTES, bits_for, control_record_layout, descriptor_layout

__all__ = [
    "HeaderBuilder",
    "job_layout",
    "packet_beats_bound",
    "peer_layout",
    "response_beats",
    "response_job_layout",
    "tx_config_layout",
]

# Largest header stack: Ethernet + 2 x IPv6 + UDP + BTH + METH + TSETH + RETH + ImmDt.
MAX_HEADER_BYTES = 14 + 40 + 40 + 8 + 12 + 4 + 4 + 16 + 4
# Width of a packet's beat count (bound) as carried to the plane demux.
PLANE_BEATS_BITS = 14
# Bytes after the IPv6 header that precedes UDP, apart from the payload: UDP..RETH and the ICRC.
L4_OVERHEAD = 8 + 12 + 4 + 4 + 16 + 4
# A probe after that IPv6 header: UDP, BTH, PETH and the ICRC.
PROBE_L4_LENGTH = 8 + 12 + 16 + 4


def packet_beats_bound(length, data_width: int):
    """Beats a packet with ``length`` payload bytes takes at most, any header stack, ICRC included.

    Works on Python ints and on Amaranth values (``data_width`` is a power of two). Used to reserve room
    in a plane FIFO when the packet's path is chosen, and to release it when the packet has gone in.
    """
    shift = data_width.bit_length() - 1
    return ((length + MAX_HEADER_BYTES + 4 + data_width - 1) >> shift) + 1


def tx_config_layout(planes: int) -> data.StructLayout:
    """NIC-wide transmit registers (docs/protocol.md §2.5, §9)."""
    return data.StructLayout(
        {
            "srv6": 1,  # 1: SRv6 mode (outer IPv6 + uSID container); 0: single-IPv6 mode
            "udp_port": 16,
            "pkey": 16,
            "hop_limit": 8,
            "dscp_data": 6,  # DSCP_TRIMMABLE (or NO_TRIM)
            "dscp_retx": 6,  # DSCP_TRIMMABLE_RETX
            "own_gid": 128,
            "port_mac": data.ArrayLayout(48, planes),
            "next_hop_mac": data.ArrayLayout(48, planes),
            "port_address": data.ArrayLayout(128, planes),  # outer source address per plane
        }
    )


def job_layout(qps: int, ev_slots: int, planes: int, addr_width: int = 64) -> data.StructLayout:
    """A packet ready to build: its descriptor and the path chosen for it. The peer's identity is not
    in it: the builder looks it up by the descriptor's QP (``peer``) when the header is built."""
    return data.StructLayout(
        {
            "descriptor": descriptor_layout(qps, ev_slots, addr_width),
            "ev": 32,
            "slot": bits_for(ev_slots),
            "plane": bits_for(planes),
            "outer_dst": 128,
        }
    )


def response_job_layout(qps: int, planes: int, srv6: bool = True) -> data.StructLayout:
    """A SACK, NACK or ACK to build: the receive engine's record, the plane port it leaves on and the EV
    that addresses it (the answered EV with its plane field naming that port, docs/protocol.md §5.8),
    and in SRv6 mode the outer destination specialised with that EV."""
    return data.StructLayout(
        {
            "record": control_record_layout(qps),
            "plane": bits_for(planes),
            "route_ev": 32,
            **({"outer_dst": 128} if srv6 else {}),
        }
    )


def response_beats(data_width: int) -> int:
    """Beats a response takes in a plane FIFO at most, its ICRC included (packed from lane 0)."""
    return -(-(MAX_CONTROL_FRAME_BYTES + 4) // data_width)


# The QP context fields a header needs: own QPN (PETH.spdcid), the peer's QPN and GID.
peer_layout = data.StructLayout({"qpn": 24, "peer_qpn": 24, "peer_gid": 128})


class HeaderBuilder(wiring.Component):
    """Parameters: ``data_width``, ``qps``, ``ev_slots``, ``planes``, ``lookahead`` (jobs parked while their
    payload is read, the one whose header is going out included), ``addr_width`` (host addresses: the
    payload reads' reach), ``srv6`` (False: a NIC built without SRv6, every header single-IPv6 whatever
    ``config.srv6`` says; the job's ``outer_dst`` is not used). Members:

    * ``job``: In, ``job_layout``.
    * ``peer_qp``: Out, the QP of the job whose header is built; ``peer``: In, ``peer_layout``, that QP's
      context fields, combinationally (a read port of the QP context table). Read while the header goes
      out, so the parked jobs do not hold 176 bits each that are the same for every packet of a QP
      (a QP configured again while its packets are parked would give them its new peer).
    * ``config``: In, ``tx_config_layout`` registers; ``now_ts``: In(16), time in 128 ns units.
    * ``dma_cmd``: Out, ``{addr, length}`` payload reads, one per WRITE job (none for a PROBE), in job order.
    * ``dma_data``: In, the payload beats (memory lane offsets, ``last`` on each command's last beat).
    * ``packet``: Out, header then payload beats of each packet (unpacked).
    * ``packet_plane``: Out, ``{plane, beats}``, one per packet, in the cycle its header is loaded (the
      cycle before its first beat is offered; the packet waits until it is taken); ``beats`` is
      :func:`packet_beats_bound` of the packet, the room reserved for it in the plane's FIFO.
    * ``stat_dma_errors``: Out(32), payload beats whose host-memory read failed.

    With ``responses`` (the receive side's SACKs, NACKs and ACKs are built here too, as header-only
    packets like probes):

    * ``response``: In, :func:`response_job_layout`. The record stays at the head of the stream until its
      header has gone out (the stream's source holds it; its fields are read while the header goes out).
      Frames as ``mrcnic.wire.build.control_frame`` makes them: DSCP ``dscp_control`` and ECN Not-ECT,
      BTH PSN 0 and no flags, the SETH / NETH ``entropy`` the answered EV ``record.ev`` (never the
      ``route_ev`` of the frame's own UDP port and flow label), SPDCID / DPDCID the QP's and its peer's
      QPN, CC_STATE ``ooo_count`` saturated at 0x7FFF; fields of the other opcodes' blocks are ignored.
      A record whose opcode is none of the three is sent with an AETH: the source filters them.
    * ``dscp_control``: In(6), default ``Dscp.CONTROL``.
    * ``response_room``: In(P), default all ones: bit p, plane p's FIFO has room for a response. A
      response starts only when its plane has room (its room is not reserved upstream as a data
      packet's is), and a response waiting for room never holds data jobs back.
    * ``packet_plane.beats`` of a response: :func:`response_beats`; ``packet_plane.response``: the packet
      is a response (its room is claimed as it starts, ``TxPipeline``).
    * ``stat_sacks``, ``stat_nacks``, ``stat_acks``: Out(32), responses sent, wrapping.

    When a response and a data job both wait they take turns.

    The NIC builds its responses here (``TxPipeline(control_in=True)``, since 2026-12-06); the receive
    side only routes them (``ResponseRouter``). The Colorlight's smallest NIC went from 28,999 to 28,196
    logic cells before packing with that (docs/boards.md): the response builder's own header stack,
    shifter and merge in front of the transmit pipeline are gone.
    """

    def __init__(
        self,
        *,
        data_width: int,
        qps: int,
        ev_slots: int,
        planes: int,
        lookahead: int = 4,
        srv6: bool = True,
        addr_width: int = 64,
        responses: bool = False,
    ):
        self.data_width, self.planes, self.srv6 = data_width, planes, srv6
        self.responses = responses
        self._job_layout = job_layout(qps, ev_slots, planes, addr_width)
        response_members = {}
        if responses:
            response_members = {
                "response": In(stream.Signature(response_job_layout(qps, planes, srv6))),
                "dscp_control": In(6, init=Dscp.CONTROL),
                "response_room": In(planes, init=(1 << planes) - 1),
                "stat_sacks": Out(32),
                "stat_nacks": Out(32),
                "stat_acks": Out(32),
            }
        if lookahead < 1:  # a job waits in the queue while its payload is read
            self._MustUse__silence = True  # no "created but never used" warning for a rejected instance
            raise ValueError(f"lookahead must be at least 1, not {lookahead}")
        self.lookahead = lookahead
        super().__init__(
            {
                "job": In(stream.Signature(self._job_layout)),
                "peer_qp": Out(bits_for(qps)),
                "peer": In(peer_layout),
                "config": In(tx_config_layout(planes)),
                "now_ts": In(16),
                "dma_cmd": Out(stream.Signature(data.StructLayout({"addr": addr_width, "length": 16}))),
                "dma_data": In(stream.Signature(dma_data_layout(data_width))),
                "packet": Out(PacketStream(data_width)),
                "packet_plane": Out(
                    stream.Signature(
                        data.StructLayout(
                            {
                                "plane": bits_for(planes),
                                "beats": PLANE_BEATS_BITS,
                                **({"response": 1} if responses else {}),
                            }
                        )
                    )
                ),
                "stat_dma_errors": Out(32),
                **response_members,
            }
        )

    def elaborate(self, platform):
        m = Module()
        w = self.data_width
        cfg = self.config
        # Built without SRv6 (no route templates): every frame is single-IPv6, whatever the register says.
        srv6 = cfg.srv6 if self.srv6 else Const(0, 1)

        # -- 1. payload reads run ahead: issue the DMA command, park the job until its header goes out.
        m.submodules.parked = parked = fifo.SyncFIFOBuffered(
            width=self._job_layout.size, depth=self.lookahead
        )
        job_in = self.job.payload
        probe_in = job_in.descriptor.opcode == Opcode.PROBE
        m.d.comb += [
            self.dma_cmd.payload.addr.eq(job_in.descriptor.local_addr),
            self.dma_cmd.payload.length.eq(job_in.descriptor.length),
            self.dma_cmd.valid.eq(self.job.valid & parked.w_rdy & ~probe_in),
            self.job.ready.eq((self.dma_cmd.ready | probe_in) & parked.w_rdy),
            parked.w_en.eq(self.job.valid & self.job.ready),
            parked.w_data.eq(job_in),
        ]

        # -- 2. the header of the job at the head of the queue, combinationally. The job stays at the head
        # until its header has gone out; the send time and the addressing mode are taken as it starts.
        job = data.View(self._job_layout, parked.r_data)
        d = job.descriptor
        imm = (d.opcode == Opcode.WRITE_LAST_IMM) | (d.opcode == Opcode.WRITE_ONLY_IMM)
        probe = d.opcode == Opcode.PROBE
        sent_ts = Signal(16)
        frame_srv6 = Signal()
        # The header going out is a response's (set as it starts): its fields come from the record.
        resp_on = Signal() if self.responses else Const(0, 1)
        if self.responses:
            response = self.response.payload
            rec = response.record
            resp_plane, resp_ev = response.plane, response.route_ev
            resp_outer_dst = response.outer_dst if self.srv6 else 0
        else:
            rec = Signal(control_record_layout(max(2, 1 << len(self.peer_qp))))  # never used: constant 0
            resp_plane, resp_ev, resp_outer_dst = 0, 0, 0
        is_sack = rec.opcode == Opcode.SACK
        is_nack = rec.opcode == Opcode.NACK
        ext_lengths = hdr.CONTROL_EXTENSION_LENGTHS
        resp_ext_len = Mux(
            is_sack,
            ext_lengths[Opcode.SACK],
            Mux(is_nack, ext_lengths[Opcode.NACK], ext_lengths[Opcode.ACK]),
        )
        plane = Mux(resp_on, resp_plane, job.plane)
        ev = Mux(resp_on, resp_ev, job.ev)
        eth = Signal(hdr.Ethernet)
        outer = Signal(hdr.Ipv6)
        inner = Signal(hdr.Ipv6)
        udp = Signal(hdr.Udp)
        bth = Signal(hdr.Bth)
        meth = Signal(hdr.Meth)
        tseth = Signal(hdr.Tseth)
        reth = Signal(hdr.Reth)
        immdt = Signal(hdr.ImmDt)
        peth = Signal(hdr.Peth)
        l4_length = Signal(16)
        dscp_control = self.dscp_control if self.responses else Dscp.CONTROL
        dscp = Mux(resp_on, dscp_control, Mux(d.rtx, cfg.dscp_retx, cfg.dscp_data))
        ecn = Mux(resp_on, Ecn.NOT_ECT, Ecn.ECT0)
        peer = self.peer
        m.d.comb += self.peer_qp.eq(Mux(resp_on, rec.qp, d.qp))
        m.d.comb += [
            l4_length.eq(
                Mux(
                    resp_on,
                    8 + 12 + resp_ext_len + 4,
                    Mux(probe, PROBE_L4_LENGTH, L4_OVERHEAD + 4 * imm + d.length),
                )
            ),
            eth.dst.eq(cfg.next_hop_mac[plane]),
            eth.src.eq(cfg.port_mac[plane]),
            eth.ethertype.eq(ETHERTYPE_IPV6),
            inner.version.eq(6),
            inner.dscp.eq(dscp),
            inner.ecn.eq(ecn),
            inner.flow_label.eq(ev[16:32]),
            inner.payload_length.eq(l4_length),
            inner.next_header.eq(IPPROTO_UDP),
            inner.hop_limit.eq(cfg.hop_limit),
            inner.src.eq(cfg.own_gid),
            inner.dst.eq(peer.peer_gid),
            outer.version.eq(6),
            outer.dscp.eq(dscp),
            outer.ecn.eq(ecn),
            outer.flow_label.eq(ev[16:32]),
            outer.payload_length.eq(l4_length + 40),
            outer.next_header.eq(IPPROTO_IPV6),
            outer.hop_limit.eq(cfg.hop_limit),
            outer.src.eq(cfg.port_address[plane]),
            outer.dst.eq(Mux(resp_on, resp_outer_dst, job.outer_dst)),
            udp.sport.eq(ev[0:16]),
            udp.dport.eq(cfg.udp_port),
            udp.length.eq(l4_length),
            bth.opcode.eq(Mux(resp_on, rec.opcode, d.opcode)),
            bth.pkey.eq(cfg.pkey),
            bth.dest_qp.eq(peer.peer_qpn),
            # A response has PSN 0 and no flags: control packets carry no sequence number.
            bth.rtx.eq(d.rtx & ~resp_on),
            bth.ack_req.eq(d.ack_req & ~resp_on),
            bth.ts.eq(~probe & ~resp_on),  # a probe's timestamp is in the PETH
            bth.psn.eq(Mux(resp_on, 0, d.psn)),
            meth.rqmsn.eq(d.rqmsn),
            meth.msn.eq(d.msn),
            tseth.tx_timestamp.eq(sent_ts),
            tseth.ftype.eq(1),
            reth.va.eq(d.va),
            reth.rkey.eq(d.rkey),
            reth.dma_length.eq(d.dma_length),
            immdt.imm.eq(d.imm),
            peth.probe_id.eq(d.probe_id),
            peth.spdcid.eq(peer.qpn[:16]),
            peth.dpdcid.eq(peer.peer_qpn[:16]),
            peth.tx_timestamp.eq(sent_ts),
            peth.ftype.eq(1),
        ]
        write_after_ip = Cat(*(hdr.to_wire(h) for h in (udp, bth, meth, tseth, reth, immdt)))
        probe_after_ip = Cat(*(hdr.to_wire(h) for h in (udp, bth, peth)))
        after_ip = Mux(probe, probe_after_ip, write_after_ip)
        largest = MAX_HEADER_BYTES
        if self.responses:
            ext = hdr.control_extension(m, rec, peer.qpn, peer.peer_qpn)
            after_ip = Mux(resp_on, Cat(hdr.to_wire(udp), hdr.to_wire(bth), ext), after_ip)
            largest = max(MAX_HEADER_BYTES, MAX_CONTROL_FRAME_BYTES)
        header_beats = -(-largest // w)  # the largest single-IPv6 header ends there too
        header = Signal(8 * w * header_beats)  # whole beats, so word_select never runs off the end
        m.d.comb += header.eq(hdr.beat_stack(frame_srv6, eth, outer, inner, after_ip, w))
        # Beats before a single-IPv6 header's start are not kept when every header is single-IPv6.
        skipped = 0 if self.srv6 else hdr.single_first_beat(w)
        words = [header.word_select(k, 8 * w) for k in range(skipped, header_beats)]
        first_beat = Mux(srv6, 0, hdr.single_first_beat(w) - skipped)
        header_end = Signal(range(largest + 1))  # byte of the stack after the header
        beat = Signal(range(len(words) + 1))
        header_only = Signal()  # a probe or a response: the header's last beat ends the packet

        # -- 3. emit header beats, then the payload beats of the same packet. The packet's plane is
        # announced as its header loads, so one cycle per packet passes without a beat (docs/benchmarks.md).
        # A response goes first unless the last packet was one and a data job waits too (turns).
        data_first = Signal()
        if self.responses:
            resp_waiting = self.response.valid & self.response_room.bit_select(resp_plane, 1)
        else:
            resp_waiting = Const(0, 1)
        take_resp = resp_waiting & ~(data_first & parked.r_rdy)
        resp_length = Mux(srv6, 14 + 80 + 20, 14 + 40 + 20) + resp_ext_len
        remaining = Signal(range(largest + 1))
        with m.FSM() as fsm:
            # The packet's beat is the header's or the payload's in every state (``valid`` says when):
            # gated by the state, it would cost a gate per bit in front of the packer.
            beat_in = self.dma_data.payload
            in_payload = fsm.ongoing("PAYLOAD")
            m.d.comb += [
                remaining.eq(header_end - beat * w),
                self.packet.payload.data.eq(Mux(in_payload, beat_in.data, select(words, beat))),
                self.packet.payload.keep.eq(
                    Mux(
                        in_payload,
                        beat_in.keep,
                        Mux(remaining >= w, Const((1 << w) - 1, w), (Const(1, w + 1) << remaining) - 1),
                    )
                ),
                self.packet.payload.last.eq(Mux(in_payload, beat_in.last, header_only & (remaining <= w))),
            ]
            with m.State("IDLE"):
                m.d.comb += [
                    self.packet_plane.valid.eq(parked.r_rdy | resp_waiting),
                    self.packet_plane.payload.plane.eq(Mux(take_resp, resp_plane, job.plane)),
                    self.packet_plane.payload.beats.eq(
                        Mux(take_resp, response_beats(w), packet_beats_bound(d.length, w))
                    ),
                ]
                with m.If(self.packet_plane.valid & self.packet_plane.ready):
                    m.d.sync += [
                        sent_ts.eq(self.now_ts),
                        frame_srv6.eq(srv6),
                        header_end.eq(
                            first_beat * w
                            + Mux(
                                take_resp,
                                resp_length,
                                Mux(probe, Mux(srv6, 130, 90), Mux(srv6, 138, 98) + 4 * imm),
                            )
                        ),
                        header_only.eq(probe | take_resp),
                        beat.eq(first_beat),
                    ]
                    if self.responses:
                        m.d.sync += [resp_on.eq(take_resp), data_first.eq(take_resp)]
                    m.next = "HEADER"
                if self.responses:
                    m.d.comb += self.packet_plane.payload.response.eq(take_resp)
            with m.State("HEADER"):
                m.d.comb += self.packet.valid.eq(1)
                with m.If(self.packet.ready):
                    m.d.sync += beat.eq(beat + 1)
                    with m.If(remaining <= w):
                        m.next = "PAYLOAD"
                        with m.If(header_only):
                            m.next = "IDLE"
                        if self.responses:
                            self._response_sent(m, is_sack, is_nack, resp_on, parked)
                        else:
                            m.d.comb += parked.r_en.eq(1)
            with m.State("PAYLOAD"):
                m.d.comb += [
                    self.packet.valid.eq(self.dma_data.valid),
                    self.dma_data.ready.eq(self.packet.ready),
                ]
                with m.If(self.dma_data.valid & self.dma_data.ready):
                    # A failed host-memory read still completes the packet (the pipeline must not
                    # stall); it is counted here. Turning it into an error completion is the host
                    # interface's job (issue 7).
                    with m.If(beat_in.error):
                        m.d.sync += self.stat_dma_errors.eq(self.stat_dma_errors + 1)
                    with m.If(beat_in.last):
                        m.next = "IDLE"
        return m

    def _response_sent(self, m, is_sack, is_nack, resp_on, parked):
        """The last header beat has left: pop the response, or the data job, and count the response."""
        with m.If(resp_on):
            m.d.comb += self.response.ready.eq(1)
            with m.If(is_sack):
                m.d.sync += self.stat_sacks.eq(self.stat_sacks + 1)
            with m.Elif(is_nack):
                m.d.sync += self.stat_nacks.eq(self.stat_nacks + 1)
            with m.Else():
                m.d.sync += self.stat_acks.eq(self.stat_acks + 1)
        with m.Else():
            m.d.comb += parked.r_en.eq(1)
