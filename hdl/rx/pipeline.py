"""The receive pipeline of the NIC: frames from every plane in, payload in host memory, answers out.

Ref: docs/protocol.md §5.5, §5.8, §7, §8, §9.3; DESIGN.md "Gateware architecture".

    s_axis[p] ► PlaneArbiter ─┬► HeaderParser ► header FIFO ─┐
                              └► FrameBuffer (store and forward, ICRC) ─► join ► Validator
    Validator ► ReceiveEngine (SackTracker, CompletionTracker, coalescing and pacing)
       ├► release ► FrameBuffer ► payload ► DmaWriter ► m_axi (AXI4 writes at the RETH VA)
       ├► response ► ResponseBuilder ► m_axis[p] (SACK / NACK / ACK on the reverse path; or
       │             ResponseRouter ► ``control``: routed records the transmit pipeline builds and sends)
       ├► feedback ► FeedbackDecoder ► feedback (for the sender, issue 6)
       └► receive_completion (WRITE-with-immediate, after its data is in memory)

No byte reaches ``m_axi`` before its frame's ICRC has been checked and the frame validated; a frame
that fails anything is dropped from the buffer whole. Until the host interface exists (issue 7) the
tables are written through the ``*_configure`` streams and the registers are plain inputs.
"""

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from mrcnic.wire.constants import MRC_UDP_PORT, MRC_UDP_PORT_ALT, Dscp

from ..dma.axi import Axi4WriteSignature
from ..dma.writer import DmaWriter
from ..stream import AxiStreamSignature, PacketStream, axis_to_stream, stream_to_axis
from ..tx.header_builder import response_job_layout, tx_config_layout
from ..tx.layouts import MAX_PMTU, bits_for
from ..tx.source_router import route_configure_members
from .feedback_decoder import FeedbackDecoder, feedback_packet_layout
from .frame_buffer import FrameBuffer
from .parser import HeaderParser, ParsedHeaders
from .plane_arbiter import PlaneArbiter
from .receive_engine import STATS as ENGINE_STATS
from .receive_engine import ReceiveEngine
from .response_builder import ResponseBuilder
from .response_router import ResponseRouter
from .validator import Validator, mr_entry_layout, qp_entry_layout

__all__ = ["RxPipeline", "STATS", "rx_qp_configure_layout"]

STATS = ENGINE_STATS + (
    "frames",
    "oversize",
    "dma_commands",
    "dma_bytes",
    "dma_write_errors",
    "feedback_unknown_nack",
    "response_no_plane",
)


def rx_qp_configure_layout(qps: int, destinations: int) -> data.StructLayout:
    """Connect a QP for receiving: its context and the first PSN / RQMSN the peer will send."""
    return data.StructLayout(
        {
            "qp": bits_for(qps),
            "entry": qp_entry_layout(destinations),
            "initial_psn": 24,
            "initial_rqmsn": 16,
        }
    )


class RxPipeline(wiring.Component):
    """Parameters: ``data_width``, ``planes`` (1, 2, 4), ``qps``, ``mrs``, ``destinations``, ``window``,
    ``buffer_frames`` (maximum frames the store-and-forward buffer holds), ``clock_hz``, ``addr_width``
    (host addresses, ``m_axi``'s: regions past ``2**addr_width`` are refused, see ``Validator``),
    ``control_to_tx`` (False: the control frames leave complete on ``m_axis[p]``; True: their records
    leave routed, plane and addressing EV chosen (``ResponseRouter``), on one stream, ``control``
    (:func:`~mrcnic.hdl.tx.header_builder.response_job_layout`), for the transmit pipeline's header
    builder to build and send with its data packets, as ``mrcnic.hdl.nic`` does), ``port_icrc``
    (the Ethernet ports check the ICRC, ``mrcnic.hdl.eth.octet_icrc``: ``s_axis[p].tuser`` is the verdict
    on a frame's last beat, and the frame buffer has no ICRC engine), ``max_pmtu`` (the largest payload
    the frame buffer holds a frame of, with 256 bytes of headers; a longer frame is dropped as oversize),
    ``timer_width`` (bits of the ACK timers' registers, ``ReceiveEngine``'s)."""

    def __init__(
        self,
        *,
        data_width: int = 8,
        planes: int = 4,
        qps: int = 4,
        mrs: int = 8,
        destinations: int = 4,
        window: int = 256,
        buffer_frames: int = 3,
        clock_hz: float = 250e6,
        control_to_tx: bool = False,
        addr_width: int = 64,
        port_icrc: bool = False,
        max_pmtu: int = MAX_PMTU,
        timer_width: int = 32,
    ):
        self.data_width, self.planes, self.qps, self.mrs = data_width, planes, qps, mrs
        self.max_pmtu = max_pmtu
        self.addr_width, self.timer_width = addr_width, timer_width
        self.control_to_tx = control_to_tx
        self.port_icrc = port_icrc
        self.destinations, self.window, self.buffer_frames = destinations, window, buffer_frames
        self.clock_hz = clock_hz
        us = round(clock_hz / 1e6)
        super().__init__(
            {
                "s_axis": In(AxiStreamSignature(data_width, user_width=int(port_icrc))).array(planes),
                **(
                    {"control": Out(stream.Signature(response_job_layout(qps, planes, destinations > 0)))}
                    if control_to_tx
                    else {"m_axis": Out(AxiStreamSignature(data_width)).array(planes)}
                ),
                "m_axi": Out(Axi4WriteSignature(addr_width=addr_width, data_width_bytes=data_width)),
                "qp_configure": In(stream.Signature(rx_qp_configure_layout(qps, destinations))),
                "mr_configure": In(
                    stream.Signature(data.StructLayout({"index": bits_for(mrs), "entry": mr_entry_layout}))
                ),
                "post_receive": In(stream.Signature(data.StructLayout({"qp": bits_for(qps)}))),
                **route_configure_members(destinations),
                "feedback": Out(stream.Signature(feedback_packet_layout(qps))),
                "receive_completion": Out(
                    stream.Signature(
                        data.StructLayout(
                            {"qp": bits_for(qps), "status": 8, "imm": 32, "byte_len": 32, "rqmsn": 16}
                        )
                    )
                ),
                "qp_error": Out(qps),
                "config": In(tx_config_layout(planes)),
                "udp_ports": In(data.ArrayLayout(16, 2), init=[MRC_UDP_PORT, MRC_UDP_PORT_ALT]),
                "dscp_trimmed": In(6, init=Dscp.TRIMMED),
                "dscp_trimmed_lasthop": In(6, init=Dscp.TRIMMED_LASTHOP),
                "dscp_control": In(6, init=Dscp.CONTROL),
                "port_up": In(planes, init=(1 << planes) - 1),
                "ack_gen_bytes": In(32, init=16384),
                "ack_gen_cycles": In(timer_width, init=2 * us),
                "ack_interval_cycles": In(timer_width, init=us),
                "base_rtt_cycles": In(timer_width, init=10 * us),
                **{f"stat_{name}": Out(32) for name in STATS},
            }
        )

    def elaborate(self, platform):
        m = Module()
        w, planes, qps = self.data_width, self.planes, self.qps
        user = int(self.port_icrc)
        m.submodules.arbiter = arbiter = PlaneArbiter(data_width=w, planes=planes, user_width=user)
        m.submodules.parser = parser = HeaderParser(
            data_width=w, planes=planes, port_addresses=self.destinations > 0
        )
        m.submodules.buffer = buffer = FrameBuffer(
            data_width=w,
            depth_frames=self.buffer_frames,
            max_frame_bytes=self.max_pmtu + 256,
            icrc_from_user=self.port_icrc,
        )
        # The parsed records between the parser and the validator, in flip-flops. The engine takes a
        # frame every ~13 cycles: up to 8 bytes a beat a header alone takes longer to arrive, so one
        # record is enough (bench-rx: the same cycle counts at 8 bytes, 256 B and 4 KiB frames; about
        # 540 flip-flops fewer). At 32 bytes a beat with 256 B frames the engine is the limit and one
        # record cost 3.5 % (the parser holds the next record and takes no beat meanwhile), so wider
        # paths keep two. Depth 4 bought nothing and cost 400 logic cells (docs/benchmarks.md).
        header_records = 1 if w <= 8 else 2
        header_fifo = fifo.SyncFIFO if header_records == 1 else fifo.SyncFIFOBuffered
        m.submodules.headers = headers = header_fifo(
            width=ParsedHeaders.as_shape().size, depth=header_records
        )
        m.submodules.validator = validator = Validator(
            qps=qps, mrs=self.mrs, destinations=self.destinations, addr_width=self.addr_width
        )
        m.submodules.engine = engine = ReceiveEngine(
            qps=qps,
            window=self.window,
            destinations=self.destinations,
            clock_hz=self.clock_hz,
            addr_width=self.addr_width,
            timer_width=self.timer_width,
        )
        m.submodules.writer = writer = DmaWriter(data_width=w, addr_width=self.addr_width)
        if self.control_to_tx:  # the transmit pipeline's header builder makes the frames
            m.submodules.router = builder = ResponseRouter(
                planes=planes, qps=qps, destinations=self.destinations
            )
        else:
            m.submodules.builder = builder = ResponseBuilder(
                data_width=w, planes=planes, qps=qps, destinations=self.destinations
            )
        m.submodules.feedback = feedback = FeedbackDecoder(qps=qps, destinations=self.destinations)

        # -- frames in: arbiter, then the parser and the buffer side by side ------------------------
        for p in range(planes):
            inbound = PacketStream(w, user).create(path=("inbound", str(p)))
            axis_to_stream(m, self.s_axis[p], inbound)
            wiring.connect(m, inbound, arbiter.i[p])
        beat = arbiter.o
        for sink, other in ((parser.i, buffer.i), (buffer.i, parser.i)):
            m.d.comb += [
                sink.payload.data.eq(beat.payload.data),
                sink.payload.keep.eq(beat.payload.keep),
                sink.payload.last.eq(beat.payload.last),
                sink.valid.eq(beat.valid & other.ready),
            ]
        m.d.comb += beat.ready.eq(parser.i.ready & buffer.i.ready)
        if user:  # the port's ICRC verdict, for the buffer's frame record
            m.d.comb += buffer.i.payload.user.eq(beat.payload.user)
        m.d.comb += [
            parser.udp_ports.eq(self.udp_ports),
            parser.dscp_trimmed.eq(self.dscp_trimmed),
            parser.dscp_trimmed_lasthop.eq(self.dscp_trimmed_lasthop),
            headers.w_data.eq(parser.header.payload),
            headers.w_en.eq(parser.header.valid),
            parser.header.ready.eq(headers.w_rdy),
        ]

        # -- join the two records of a frame ----------------------------------------------------------
        joined = validator.i
        m.d.comb += [
            joined.payload.header.eq(headers.r_data),
            joined.payload.icrc_ok.eq(buffer.frame.payload.icrc_ok),
            joined.payload.oversize.eq(buffer.frame.payload.oversize),
            joined.valid.eq(headers.r_rdy & buffer.frame.valid),
            headers.r_en.eq(joined.valid & joined.ready),
            buffer.frame.ready.eq(joined.valid & joined.ready),
        ]

        # -- configuration ----------------------------------------------------------------------------
        cfg = self.qp_configure
        # One configure record feeds three blocks: the validator's QP table, the engine's window and
        # completion state, the builder's peer table; it is taken when all three have taken it.
        entry = cfg.payload.entry
        sinks = (validator.qp_configure, engine.connect, builder.peer_configure)
        done = [Signal(name=f"configured_{k}") for k in range(len(sinks))]
        m.d.comb += [
            validator.qp_configure.payload.qp.eq(cfg.payload.qp),
            validator.qp_configure.payload.entry.eq(entry),
            engine.connect.payload.qp.eq(cfg.payload.qp),
            engine.connect.payload.initial_psn.eq(cfg.payload.initial_psn),
            engine.connect.payload.initial_rqmsn.eq(cfg.payload.initial_rqmsn),
            builder.peer_configure.payload.qp.eq(cfg.payload.qp),
            builder.peer_configure.payload.peer.dest.eq(entry.dest),
            builder.peer_configure.payload.peer.peer_qpn.eq(entry.peer_qpn),
            builder.peer_configure.payload.peer.peer_gid.eq(entry.peer_gid),
            builder.peer_configure.payload.peer.own_qpn.eq(entry.qpn),
        ]
        taken = [d | sink.ready for d, sink in zip(done, sinks, strict=True)]
        m.d.comb += cfg.ready.eq(Cat(taken).all())
        for d, sink, ok in zip(done, sinks, taken, strict=True):
            m.d.comb += sink.valid.eq(cfg.valid & ~d)
            with m.If(cfg.valid):
                m.d.sync += d.eq(Mux(cfg.ready, 0, ok))
        wiring.connect(m, wiring.flipped(self.mr_configure), validator.mr_configure)
        wiring.connect(m, wiring.flipped(self.post_receive), engine.post_receive)
        if self.destinations > 0:  # without SRv6 there are no route templates
            wiring.connect(m, wiring.flipped(self.route_configure), builder.route_configure)
        m.d.comb += [
            parser.gid.eq(self.config.own_gid),
            parser.port_address.eq(self.config.port_address),
            validator.qp_error.eq(engine.qp_error),
            self.qp_error.eq(engine.qp_error),
            engine.ack_gen_bytes.eq(self.ack_gen_bytes),
            engine.ack_gen_cycles.eq(self.ack_gen_cycles),
            engine.ack_interval_cycles.eq(self.ack_interval_cycles),
            engine.base_rtt_cycles.eq(self.base_rtt_cycles),
            engine.dscp_trimmed_lasthop.eq(self.dscp_trimmed_lasthop),
            builder.port_up.eq(self.port_up),
        ]
        if not self.control_to_tx:
            m.d.comb += [builder.config.eq(self.config), builder.dscp_control.eq(self.dscp_control)]

        # -- the engine and its outputs ---------------------------------------------------------------
        wiring.connect(m, validator.o, engine.verdict)
        wiring.connect(m, engine.release, buffer.release)
        wiring.connect(m, buffer.payload, writer.data)
        wiring.connect(m, engine.dma_cmd, writer.cmd)
        m.d.comb += [
            engine.dma_done.payload.error.eq(writer.done.payload.error),
            engine.dma_done.valid.eq(writer.done.valid),
            writer.done.ready.eq(engine.dma_done.ready),
        ]
        wiring.connect(m, wiring.flipped(self.m_axi), writer.axi)
        wiring.connect(m, engine.feedback, feedback.i)
        wiring.connect(m, feedback.o, wiring.flipped(self.feedback))
        wiring.connect(m, engine.receive_completion, wiring.flipped(self.receive_completion))
        wiring.connect(m, engine.response, builder.response)

        # -- answers out: routed records to the transmit pipeline, or frames, one stream per plane ------
        out = builder.o
        if self.control_to_tx:
            wiring.connect(m, out, wiring.flipped(self.control))
        else:
            for p in range(planes):
                port = PacketStream(w).create(path=("outbound", str(p)))
                selected = out.payload.plane == p
                m.d.comb += [
                    port.payload.data.eq(out.payload.data),
                    port.payload.keep.eq(out.payload.keep),
                    port.payload.last.eq(out.payload.last),
                    port.valid.eq(out.valid & selected),
                ]
                with m.If(selected):
                    m.d.comb += out.ready.eq(port.ready)
                stream_to_axis(m, port, self.m_axis[p])

        # -- counters -------------------------------------------------------------------------------
        for name in ENGINE_STATS:
            m.d.comb += getattr(self, f"stat_{name}").eq(getattr(engine, f"stat_{name}"))
        m.d.comb += [
            self.stat_frames.eq(buffer.stat_frames),
            self.stat_oversize.eq(buffer.stat_oversize),
            self.stat_dma_commands.eq(writer.stat_commands),
            self.stat_dma_bytes.eq(writer.stat_bytes),
            self.stat_dma_write_errors.eq(writer.stat_write_errors),
            self.stat_feedback_unknown_nack.eq(feedback.stat_unknown_nack),
            self.stat_response_no_plane.eq(builder.stat_no_plane),
        ]
        return m
