"""The transmit pipeline of the NIC: work requests in, MRC packets out, one AXI-stream per plane.

Ref: docs/protocol.md §2-§9; DESIGN.md "Gateware architecture".

    work_request ► Segmenter ◄── QpScheduler
                        │ descriptor
                        ▼
                  Retransmitter ◄── retransmit {qp, psn}
     (every descriptor is written to its table and read back from it, retransmissions first)
                        │ descriptor
                        ▼
    PathSelector (EV slot, plane) ► QP context (destination) ► SourceRouter (outer DA)
      (probes skip it: their EV is given) │ job                 ► sent (to the tracker)
                        ▼
    HeaderBuilder ◄─► DmaReader (AXI4 reads of the payload) ► StreamPacker ► [IcrcInserter]
      (and ◄── QP context: peer QPN and GID, read as each header is built;
       ◄── ``control``: the receive side's SACKs, NACKs and ACKs, with ``control_in``)
                        ► PlaneDemux ► m_axis[p], one per plane

This is the data path. The closed loop around it (``mrcnic.hdl.nic``) drives ``retransmit`` and
``psn_limit`` from the TX tracker, ``cwnd_open`` from the congestion controller, ``probe`` from the
prober, and ``feedback`` (path events) from the tracker and the prober; ``sent`` reports every data packet
to the tracker, ``watch`` the EVs to probe to the prober, ``path_trace`` every EV state-machine decision
(the path selector's ``decision``). Until the host interface exists (issue 7),
configuration enters through the ``*_configure`` streams and the register inputs.

Control frames (``control_in=True``, as in the NIC). ``control`` (In,
:func:`~mrcnic.hdl.tx.header_builder.response_job_layout`) takes the receive side's SACK, NACK and ACK
records, routed (plane, addressing EV, SRv6 outer destination: ``mrcnic.hdl.rx.response_router``). The
header builder builds them as header-only packets between data packets (``HeaderBuilder(responses=True)``:
one header builder and one ICRC path for every frame the NIC sends), with ``dscp_control`` (In(6)). A
control frame starts only when its plane's FIFO has room for it beyond every claim and a maximum-size
packet (``PlaneDemux.control_room``) and claims that room as it starts, so the demux never waits on a
full FIFO and a blocked port holds back nothing for the others. ``plane_queue_beats`` does not hold
control frames back (it bounds how long data waits, whose send time is stamped as it is built), though
the room they take counts against data. When data and control frames both wait they take turns.
``stat_control_frames`` counts them, ``stat_sacks`` / ``stat_nacks`` / ``stat_acks`` each kind.

``ev_read`` (In, ``{qp, slot}``) / ``ev_read_answer`` (Out, ``{ev, state}``): the host reads one EV slot
back, answered in order, one at a time (the path selector's ``slot_read`` / ``slot_read_answer``: it
uses the EV table only in cycles the packets leave free, so it never delays one).
"""

from amaranth import Const, Module, Mux, Signal
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from mrcnic.wire.constants import Dscp, Opcode

from ..dma.axi import Axi4ReadSignature
from ..dma.reader import DmaReader
from ..stream import AxiStreamSignature, stream_to_axis
from ..stream_packer import StreamPacker
from ..tables import small_table_attrs
from .header_builder import (
    MAX_HEADER_BYTES,
    HeaderBuilder,
    job_layout,
    packet_beats_bound,
    peer_layout,
    response_job_layout,
    tx_config_layout,
)
from .icrc_inserter import IcrcInserter
from .layouts import (
    MAX_CONTROL_FRAME_BYTES,
    MAX_PMTU,
    bits_for,
    feedback_layout,
    work_request_layout,
)
from .path_selector import STATS as PATH_STATS
from .path_selector import PathSelector, configure_layout, seed_layout
from .plane_demux import PlaneDemux
from .retransmitter import Retransmitter
from .scheduler import QpScheduler
from .segmenter import Segmenter
from .source_router import SourceRouter, route_configure_members
from .tracker import retransmit_layout, sent_layout

__all__ = ["TxPipeline", "probe_request_layout", "qp_context_layout"]


def probe_request_layout(qps: int) -> data.StructLayout:
    """A reliability probe to send now: the QP, the EV it probes (its plane is EV[31:29]), its id (§7.8)."""
    return data.StructLayout({"qp": bits_for(qps), "ev": 32, "probe_id": 16})


def qp_context_layout(destinations: int) -> data.StructLayout:
    """What the transmit side knows about the peer of a QP (set at connect time)."""
    return data.StructLayout(
        {"qpn": 24, "peer_qpn": 24, "peer_gid": 128, "dest": bits_for(destinations)}  # qpn: own (PETH)
    )


class TxPipeline(wiring.Component):
    """Parameters: ``data_width`` (bytes per beat), ``planes``, ``qps``, ``ev_slots``, ``backups`` (reserve
    EVs per QP and plane), ``window`` (PSNs a QP may have outstanding: the Retransmitter's depth per QP),
    ``destinations`` (route templates; 0: built without SRv6, every packet is single-IPv6, no source
    router and no ``route_configure``), ``plane_fifo_packets`` (maximum-size packets each
    plane FIFO holds, besides one control frame with ``control_in``),
    ``retry_cycles`` (wait before asking the path selector again when no EV was usable), ``lookahead``
    (packets whose payload read is issued while they wait for their header: ``HeaderBuilder``'s; 2 keeps
    the queue in flip-flops instead of LUT RAM, enough for on-chip host memory), ``addr_width`` (host
    addresses, ``m_axi``'s: local addresses are that wide in every descriptor), ``control_in`` (True:
    ``control`` takes the receive side's control records, built and sent with the data packets; see
    "Control frames" in the module docstring), ``append_icrc`` (False:
    frames leave without their ICRC, for Ethernet ports that append it, ``mrcnic.hdl.eth.octet_icrc``;
    no ICRC inserter is built), ``max_pmtu`` (the largest packet payload: the plane FIFOs are sized for
    it; ``pmtu_log2`` must not exceed it, ``MrcNic`` caps it).
    """

    def __init__(
        self,
        *,
        data_width: int = 8,
        planes: int = 4,
        qps: int = 4,
        ev_slots: int = 16,
        backups: int = 2,
        window: int = 256,
        destinations: int = 4,
        plane_fifo_packets: int = 2,
        retry_cycles: int = 16,
        lookahead: int = 4,
        control_in: bool = False,
        addr_width: int = 64,
        append_icrc: bool = True,
        max_pmtu: int = MAX_PMTU,
    ):
        self.data_width, self.planes, self.qps = data_width, planes, qps
        self.append_icrc = append_icrc
        self.addr_width = addr_width
        self.control_in = control_in
        # A control frame's beats, its ICRC included (packed: it starts on lane 0).
        self.control_beats = -(-(MAX_CONTROL_FRAME_BYTES + 4) // data_width) if control_in else 0
        self.ev_slots, self.destinations = ev_slots, destinations
        self.srv6 = destinations > 0
        self.backups, self.window = backups, window
        self.retry_cycles = retry_cycles
        self.lookahead = lookahead
        self._paths = PathSelector(qps=qps, ev_slots=ev_slots, planes=planes, backups=backups)
        path_ports = self._paths.signature.members
        self.max_pmtu = max_pmtu
        self.max_packet_beats = -(-(MAX_HEADER_BYTES + max_pmtu + 4) // data_width) + 1
        # Exactly that many packets (and a control frame): a power of two would nearly double the block RAM
        # (2 x 1,062 beats would take 4,096 at 4 bytes a beat), and the FIFO handles any depth.
        self.plane_fifo_depth = plane_fifo_packets * self.max_packet_beats + self.control_beats
        members = {
            "work_request": In(stream.Signature(work_request_layout(qps, addr_width))),
            "retransmit": In(stream.Signature(retransmit_layout(qps, ev_slots))),
            "probe": In(stream.Signature(probe_request_layout(qps))),
            "sent": Out(stream.Signature(sent_layout(qps, ev_slots))),
            "feedback": In(stream.Signature(feedback_layout(qps, ev_slots))),
            "reserve_configure": In(path_ports["reserve_configure"].signature.flip()),
            "watch": Out(path_ports["watch"].signature),
            "path_trace": Out(path_ports["decision"].shape),
            "path_trace_valid": Out(1),
            "sequence_configure": In(
                stream.Signature(data.StructLayout({"qp": bits_for(qps), "psn": 24, "msn": 16, "rqmsn": 16}))
            ),
            "ev_configure": In(stream.Signature(configure_layout(qps, ev_slots))),
            "ev_seed": In(stream.Signature(seed_layout(qps))),
            "ev_read": In(path_ports["slot_read"].signature.flip()),
            "ev_read_answer": Out(path_ports["slot_read_answer"].signature),
            **route_configure_members(destinations),
            "qp_configure": In(
                stream.Signature(
                    data.StructLayout({"qp": bits_for(qps), "context": qp_context_layout(destinations)})
                )
            ),
            "config": In(tx_config_layout(planes)),
            "pmtu_log2": In(4, init=12),
            "min_active": In(range(ev_slots + 1), init=ev_slots // 4),
            "psn_limit": In(data.ArrayLayout(24, qps)),
            "cwnd_open": In(qps),
            "qp_halt": In(qps),
            "plane_up": In(planes, init=(1 << planes) - 1),
            "plane_queue_beats": In(range(self.plane_fifo_depth + 1), init=self.plane_fifo_depth),
            "now_ts": In(16),
            "slot_free": Out(qps),
            "m_axi": Out(Axi4ReadSignature(addr_width=addr_width, data_width_bytes=data_width)),
            "m_axis": Out(AxiStreamSignature(data_width)).array(planes),
            "stat_packets": Out(32),
            "stat_probes": Out(32),
            "stat_ack_requests": Out(32),
            "stat_stale_retransmits": Out(32),
            "stat_no_path": Out(32),
            "stat_rejected_wr": Out(32),
            "stat_flushed_wr": Out(32),
            "stat_dma_errors": Out(32),
            **{f"stat_path_{name}": Out(32) for name in PATH_STATS},
        }
        if control_in:
            members["control"] = In(stream.Signature(response_job_layout(qps, planes, self.srv6)))
            members["dscp_control"] = In(6, init=Dscp.CONTROL)
            members["stat_control_frames"] = Out(32)
            members.update({f"stat_{name}": Out(32) for name in ("sacks", "nacks", "acks")})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        w, planes, qps = self.data_width, self.planes, self.qps
        # Built without SRv6 (no route templates): every packet is single-IPv6, whatever the register says.
        srv6 = self.config.srv6 if self.srv6 else Const(0, 1)
        aw = self.addr_width
        m.submodules.segmenter = seg = Segmenter(qps=qps, ev_slots=self.ev_slots, addr_width=aw)
        m.submodules.scheduler = sch = QpScheduler(qps=qps)
        m.submodules.paths = paths = self._paths
        m.submodules.retransmitter = rtx = Retransmitter(
            qps=qps, window=self.window, ev_slots=self.ev_slots, addr_width=aw
        )
        if self.srv6:
            m.submodules.router = router = SourceRouter(destinations=self.destinations)
        m.submodules.builder = builder = HeaderBuilder(
            data_width=w,
            qps=qps,
            ev_slots=self.ev_slots,
            planes=planes,
            srv6=self.srv6,
            lookahead=self.lookahead,
            addr_width=aw,
            responses=self.control_in,
        )
        m.submodules.dma = dma = DmaReader(data_width=w, addr_width=aw)
        m.submodules.packer = packer = StreamPacker(w)
        m.submodules.demux = demux = PlaneDemux(
            data_width=w,
            planes=planes,
            fifo_depth=self.plane_fifo_depth,
            max_packet_beats=self.max_packet_beats,
            control_beats=self.control_beats,
        )

        # -- configuration and control inputs
        wiring.connect(m, wiring.flipped(self.work_request), seg.work_request)
        wiring.connect(m, wiring.flipped(self.sequence_configure), seg.configure)
        wiring.connect(m, wiring.flipped(self.retransmit), rtx.request)
        wiring.connect(m, wiring.flipped(self.reserve_configure), paths.reserve_configure)
        wiring.connect(m, wiring.flipped(self.watch), paths.watch)
        m.d.comb += [self.path_trace.eq(paths.decision), self.path_trace_valid.eq(paths.decision_valid)]
        wiring.connect(m, wiring.flipped(self.ev_configure), paths.configure)
        wiring.connect(m, wiring.flipped(self.ev_seed), paths.seed)
        wiring.connect(m, wiring.flipped(self.ev_read), paths.slot_read)
        wiring.connect(m, paths.slot_read_answer, wiring.flipped(self.ev_read_answer))
        wiring.connect(m, wiring.flipped(self.feedback), paths.feedback)
        if self.srv6:
            wiring.connect(m, wiring.flipped(self.route_configure), router.configure)
        m.d.comb += [
            seg.pmtu_log2.eq(self.pmtu_log2),
            seg.halt.eq(self.qp_halt),
            self.slot_free.eq(seg.slot_free),
            sch.has_data.eq(seg.has_data),
            sch.next_psn.eq(seg.next_psn),
            sch.psn_limit.eq(self.psn_limit),
            sch.cwnd_open.eq(self.cwnd_open),
            paths.min_active.eq(self.min_active),
            paths.plane_up.eq(self.plane_up),
            paths.plane_ready.eq(demux.plane_ready & self.plane_up),
            builder.config.eq(self.config),
            builder.now_ts.eq(self.now_ts),
            demux.queue_limit.eq(self.plane_queue_beats),
            self.stat_rejected_wr.eq(seg.stat_rejected),
            self.stat_flushed_wr.eq(seg.stat_flushed),
            self.stat_dma_errors.eq(builder.stat_dma_errors),
            self.stat_stale_retransmits.eq(rtx.stat_stale),
            *(getattr(self, f"stat_path_{name}").eq(getattr(paths, f"stat_{name}")) for name in PATH_STATS),
        ]
        wiring.connect(m, sch.next_packet, seg.next_packet)
        wiring.connect(m, seg.descriptor, rtx.store)
        out = rtx.descriptor
        m.d.comb += [
            sch.retransmit_waiting.eq(rtx.request.valid),
            sch.new_packet_taken.eq(out.valid & out.ready & ~out.payload.rtx),
        ]

        # Two tables from one configure record: the destination, read (synchronously) in the path stage
        # for the source router, and the peer's identity, read (combinationally) by the header builder for
        # the job whose header it builds, so jobs need not carry it. (One table with both read ports made
        # Yosys's ABC9 stop on an internal assertion in the Versa's full design, 2026-12-05.)
        cfg_context = self.qp_configure.payload.context
        route_layout = data.StructLayout({"dest": bits_for(self.destinations)})
        m.submodules.qp_context = qp_context = memory.Memory(
            shape=route_layout, depth=qps, init=[], attrs=small_table_attrs(qps)
        )
        ctx_write = qp_context.write_port()
        ctx_read = qp_context.read_port(domain="sync")
        m.submodules.peers = peers = memory.Memory(
            shape=peer_layout, depth=qps, init=[], attrs=small_table_attrs(qps)
        )
        peer_write = peers.write_port()
        peer_read = peers.read_port(domain="comb")
        m.d.comb += [
            peer_write.addr.eq(self.qp_configure.payload.qp),
            peer_write.data.qpn.eq(cfg_context.qpn),
            peer_write.data.peer_qpn.eq(cfg_context.peer_qpn),
            peer_write.data.peer_gid.eq(cfg_context.peer_gid),
            peer_write.en.eq(self.qp_configure.valid),
            peer_read.addr.eq(builder.peer_qp),
            builder.peer.eq(peer_read.data),
        ]
        m.d.comb += [
            ctx_write.addr.eq(self.qp_configure.payload.qp),
            ctx_write.data.dest.eq(cfg_context.dest),
            ctx_write.en.eq(self.qp_configure.valid),
            self.qp_configure.ready.eq(1),
        ]

        # -- path stage: descriptor -> EV slot -> peer context -> outer destination -> job
        # A probe goes first (it is neither window- nor cwnd-limited, §7.8) and skips the path selector:
        # it must go out on the EV it probes.
        job = Signal(job_layout(qps, self.ev_slots, planes, aw))
        retry = Signal(range(self.retry_cycles + 1))
        desc = rtx.descriptor.payload
        probe = self.probe.payload
        is_probe = job.descriptor.opcode == Opcode.PROBE
        ends_message = job.descriptor.opcode.matches(
            *(
                int(op)
                for op in (Opcode.WRITE_LAST, Opcode.WRITE_LAST_IMM, Opcode.WRITE_ONLY, Opcode.WRITE_ONLY_IMM)
            )
        )
        with m.If(self.sent.ready):
            m.d.sync += self.sent.valid.eq(0)
        # The job register is the builder's job in every state (``valid`` says when): gated by the state,
        # each of its ~400 bits would take a LUT in front of the builder's queue.
        m.d.comb += builder.job.payload.eq(job)
        with m.FSM():
            with m.State("DESCRIPTOR"):
                with m.If(self.probe.valid):
                    m.d.comb += [self.probe.ready.eq(1), ctx_read.addr.eq(probe.qp)]
                    # Only the fields a probe's header and its plane reservation read; the message
                    # fields (addresses, MSNs, rkey, immediate) are don't-care for a probe and keep the last
                    # packet's: cleared, each of their ~200 bits would take a LUT in front of the register.
                    m.d.sync += [
                        job.descriptor.qp.eq(probe.qp),
                        job.descriptor.opcode.eq(Opcode.PROBE),
                        job.descriptor.psn.eq(0),
                        job.descriptor.length.eq(0),
                        job.descriptor.rtx.eq(0),
                        job.descriptor.ack_req.eq(0),
                        job.descriptor.probe_id.eq(probe.probe_id),
                        job.ev.eq(probe.ev),
                        job.slot.eq(0),
                        job.plane.eq(probe.ev[29:32] if planes > 1 else 0),
                    ]
                    m.next = "CONTEXT"
                with m.Elif(rtx.descriptor.valid):
                    m.d.sync += job.descriptor.eq(desc)
                    m.d.comb += rtx.descriptor.ready.eq(1)
                    m.next = "REQUEST"
            with m.State("REQUEST"):
                m.d.comb += [
                    paths.request.valid.eq(1),
                    paths.request.payload.qp.eq(job.descriptor.qp),
                    paths.request.payload.avoid_slot.eq(job.descriptor.avoid_slot),
                    paths.request.payload.avoid_valid.eq(job.descriptor.rtx),
                ]
                with m.If(paths.request.ready):
                    m.next = "RESPONSE"
            with m.State("RESPONSE"):
                m.d.comb += paths.response.ready.eq(1)
                with m.If(paths.response.valid):
                    answer = paths.response.payload
                    with m.If(answer.found):
                        m.d.sync += [
                            job.ev.eq(answer.ev),
                            job.slot.eq(answer.slot),
                            job.plane.eq(answer.plane),
                        ]
                        m.d.comb += ctx_read.addr.eq(job.descriptor.qp)
                        m.next = "CONTEXT"
                    with m.Else():
                        m.d.sync += [retry.eq(self.retry_cycles), self.stat_no_path.eq(self.stat_no_path + 1)]
                        m.next = "RETRY"
            with m.State("RETRY"):
                m.d.sync += retry.eq(retry - 1)
                with m.If(retry == 0):
                    m.next = "REQUEST"
            with m.State("CONTEXT"):
                peer = ctx_read.data
                taken = router.request.ready if self.srv6 else Const(1)
                m.d.comb += [
                    ctx_read.en.eq(~taken),  # hold the read data until the router takes it
                    ctx_read.addr.eq(job.descriptor.qp),
                ]
                if self.srv6:
                    m.d.comb += [
                        router.request.valid.eq(1),
                        router.request.payload.dest.eq(peer.dest),
                        router.request.payload.ev.eq(job.ev),
                    ]
                with m.If(taken):
                    m.next = "ROUTE" if self.srv6 else "RESERVE"
            if self.srv6:
                with m.State("ROUTE"):
                    m.d.comb += router.response.ready.eq(1)
                    with m.If(router.response.valid):
                        m.d.sync += job.outer_dst.eq(router.response.payload.address)
                        m.next = "RESERVE"
            with m.State("RESERVE"):
                # The plane's FIFO space is claimed now, so the selector sees it taken from here on.
                m.d.comb += [
                    demux.reserve.valid.eq(1),
                    demux.reserve.payload.plane.eq(job.plane),
                    demux.reserve.payload.beats.eq(packet_beats_bound(job.descriptor.length, w)),
                ]
                m.next = "JOB"
            with m.State("JOB"):
                # The tracker hears of every data packet (``sent``) as it goes to the builder.
                m.d.comb += builder.job.valid.eq(~self.sent.valid)
                with m.If(builder.job.valid & builder.job.ready):
                    with m.If(is_probe):
                        m.d.sync += self.stat_probes.eq(self.stat_probes + 1)
                    with m.Elif(job.descriptor.ack_req):
                        # Asking again for a lost AETH: not a retransmission the tracker follows.
                        m.d.sync += self.stat_ack_requests.eq(self.stat_ack_requests + 1)
                    with m.Else():
                        m.d.sync += [
                            self.stat_packets.eq(self.stat_packets + 1),
                            self.sent.valid.eq(1),
                            self.sent.payload.qp.eq(job.descriptor.qp),
                            self.sent.payload.psn.eq(job.descriptor.psn),
                            self.sent.payload.slot.eq(job.slot),
                            self.sent.payload.ev.eq(job.ev),
                            self.sent.payload.length.eq(job.descriptor.length),
                            self.sent.payload.rtx.eq(job.descriptor.rtx),
                            self.sent.payload.msn.eq(job.descriptor.msn),
                            self.sent.payload.end.eq(ends_message),
                        ]
                    m.next = "DESCRIPTOR"

        # -- packet assembly: header + payload, packing, ICRC, demux to the planes
        m.d.comb += [
            dma.cmd.valid.eq(builder.dma_cmd.valid),
            dma.cmd.payload.addr.eq(builder.dma_cmd.payload.addr),
            dma.cmd.payload.length.eq(builder.dma_cmd.payload.length),
            builder.dma_cmd.ready.eq(dma.cmd.ready),
        ]
        wiring.connect(m, dma.data, builder.dma_data)
        wiring.connect(m, wiring.flipped(self.m_axi), dma.axi)
        wiring.connect(m, builder.packet, packer.i)
        if self.append_icrc:
            m.submodules.icrc = icrc = IcrcInserter(data_width=w)
            # Ethernet (+ outer IPv6 in SRv6 mode) is not covered
            m.d.comb += icrc.skip.eq(Mux(srv6, 54, 14))
            wiring.connect(m, icrc.o, demux.i)
            framed = icrc.i  # where whole frames go: the inserter, or straight to the demux
        else:
            framed = demux.i
        # The plane of each packet is known when the builder loads its header, but the demux holds it
        # until the packet's last beat is through: a short queue decouples the two.
        m.submodules.plane_order = plane_order = fifo.SyncFIFOBuffered(
            width=demux.plane.payload.shape().size, depth=8
        )
        m.d.comb += [
            demux.plane.payload.eq(plane_order.r_data),
            demux.plane.valid.eq(plane_order.r_rdy),
            plane_order.r_en.eq(demux.plane.ready),
        ]
        wiring.connect(m, packer.o, framed)
        announced = builder.packet_plane
        order = Signal(demux.plane.payload.shape())
        m.d.comb += [
            order.plane.eq(announced.payload.plane),
            order.beats.eq(announced.payload.beats),
            plane_order.w_data.eq(order),
            plane_order.w_en.eq(announced.valid),
            announced.ready.eq(plane_order.w_rdy),
        ]
        if self.control_in:
            self._responses(m, builder, demux)
        for p in range(planes):
            stream_to_axis(m, demux.o[p], self.m_axis[p])
        return m

    def _responses(self, m, builder, demux):
        """The receive side's answers go to the header builder, which builds them as header-only packets
        between data packets. A response starts only when its plane's FIFO has room for it
        (``control_room``) and claims that room as it starts, so the demux never waits on a full FIFO:
        one blocked port never stops the others."""
        wiring.connect(m, wiring.flipped(self.control), builder.response)
        announced = builder.packet_plane
        m.d.comb += [
            builder.response_room.eq(demux.control_room),
            builder.dscp_control.eq(self.dscp_control),
            self.stat_sacks.eq(builder.stat_sacks),
            self.stat_nacks.eq(builder.stat_nacks),
            self.stat_acks.eq(builder.stat_acks),
        ]
        with m.If(announced.valid & announced.ready & announced.payload.response):
            m.d.comb += [
                demux.control_reserve.valid.eq(1),
                demux.control_reserve.payload.plane.eq(announced.payload.plane),
                demux.control_reserve.payload.beats.eq(self.control_beats),
            ]
            m.d.sync += self.stat_control_frames.eq(self.stat_control_frames + 1)
