"""The MRC NIC core: the transmit data path, the receive pipeline, and the closed loop between them.

Ref: docs/protocol.md §6 (EV sets, path health), §7 (reliability), §7.8 (probes), §10 (congestion
control); DESIGN.md "Gateware architecture".

::

    work_request ► TxPipeline ─────────────────────────────────────────► m_axis[p]
                    ▲  ▲   ▲   │ sent        │ watch            ▲ control: RX answers (SACK/NACK/ACK),
      retransmit,   │  │   │   ▼             ▼                  │ routed records built between data
      psn_limit ── TxTracker   │ cwnd_open   Prober ── probe ──► (TxPipeline.probe)
            │ cc_event,        │             ▲ answers          │
            │ inflight         │             │                  │
            └──► CongestionControl ◄─┘       │                  │
    path events: tracker + prober restores ► TxPipeline.feedback │
    s_axis[p] ► RxPipeline ─ feedback records ─► fork ─► TxTracker, Prober
                    ├► control ──────────────────────────────────┘
                    ├► m_axi writes (placed payload)        m_axi reads ◄─ TxPipeline (payload)
                    └► receive_completion

One ``m_axi`` AXI4 port: the TX pipeline uses its read channels, the RX pipeline its write channels.
Each plane port carries both the TX data frames and the RX pipeline's SACK/NACK/ACK frames. The RX
pipeline decides each answer and routes it (plane, addressing EV, SRv6 outer destination:
``ResponseRouter``) and hands the record to the TX pipeline, whose header builder builds it as a
header-only packet between data packets: one header builder and one ICRC path for every frame (fewer
logic cells than a response builder of its own: docs/boards.md). They share the plane FIFOs, where a
control frame claims room before it starts like a data packet (``TxPipeline`` "Control frames").

Configuration enters through the ``*_configure`` streams and the registers are plain inputs with the
defaults below; the sender-side outputs (``ack``, ``send_error``) and ``receive_completion`` are streams;
``ev_read`` / ``ev_read_answer`` read one EV slot back (the register map's ``ev_slot`` COMMAND = 2). The
whole NIC (:class:`~mrcnic.hdl.host.nic_top.MrcNicTop`) drives them from its register file and turns the
outputs into completion-queue entries.

A QP is in ERROR (``qp_error``) from its first error record (the tracker's or the ACK watchdog's) or a
receive-side error until it is connected again; meanwhile it sends nothing (§7.4): the segmenter
abandons its message in progress and drops the work requests it still gets (``stat_tx_flushed_wr``).

Time. ``now`` counts core cycles; ``now_ts`` (TSETH / PETH timestamps and the congestion controller's
clock) counts 128 ns ticks, from a prescaler of ``round(clock_hz * 128 ns)`` cycles.
"""

from amaranth import Elaboratable, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .dma.axi import Axi4Signature
from .fanout import StreamFork, StreamMerge
from .rx.pipeline import STATS as RX_STATS
from .rx.pipeline import RxPipeline
from .stream import AxiStreamSignature
from .tx.ack_watchdog import AckWatchdog
from .tx.congestion import STATS as CC_STATS
from .tx.congestion import CongestionControl
from .tx.header_builder import tx_config_layout
from .tx.layouts import MAX_PMTU, PMTUS, bits_for
from .tx.path_selector import STATS as PATH_STATS
from .tx.pipeline import TxPipeline
from .tx.prober import STATS as PROBER_STATS
from .tx.prober import Prober
from .tx.tracker import STATS as TRACKER_STATS
from .tx.tracker import TxTracker

__all__ = ["PORT_STATS", "STATS", "MrcNic", "connect_layout", "core_signature", "layout_only"]

PORT_STATS = ("frames", "bytes")  # per plane port, NIC port stat_port_<rx|tx>_<name>[p]
TX_STATS = (
    "packets",
    "probes",
    "ack_requests",
    "no_path",
    "rejected_wr",
    "flushed_wr",
    "dma_errors",
    "stale_retransmits",
)
WATCHDOG_STATS = ("ack_requests", "retry_exceeded")


# Every counter of the NIC, by block: NIC port ``stat_<block>_<name>``.
STATS = {
    "tx": TX_STATS,
    "path": PATH_STATS,
    "tracker": TRACKER_STATS,
    "cc": CC_STATS,
    "prober": PROBER_STATS,
    "ack_watchdog": WATCHDOG_STATS,
    "rx": RX_STATS,
}


def connect_layout(qps: int) -> data.StructLayout:
    """Connect the sending side of a QP: first PSN, first MSN / RQMSN. Resets its scoreboard and window."""
    return data.StructLayout({"qp": bits_for(qps), "psn": 24, "msn": 16, "rqmsn": 16})


def _fixed(value: float, fraction_bits: int) -> int:
    return round(value * (1 << fraction_bits))


class MrcNic(wiring.Component):
    """Parameters: ``data_width`` (bytes per beat), ``planes``, ``qps``, ``ev_slots``, ``backups`` (reserve
    EVs per QP and plane), ``window`` (PSNs), ``mrs`` (memory regions), ``destinations`` (route
    templates; 0 builds the NIC without SRv6: single-IPv6 frames only, docs/protocol.md §5.7),
    ``clock_hz`` (core clock: register defaults in cycles and the 128 ns tick follow it), ``lookahead``
    (payload reads the TX header builder runs ahead, ``TxPipeline``'s), ``addr_width`` (host addresses:
    ``m_axi``'s, and the local addresses in every descriptor; a board with on-chip host memory needs only
    its size's bits. Nothing is cut short: the queue engine refuses buffers past ``2**addr_width`` and
    the validator regions past it, docs/host-interface.md), ``port_icrc`` (the Ethernet ports append and
    check the ICRC, one octet per cycle, ``mrcnic.hdl.eth.octet_icrc``, as the boards' NICs do: frames
    leave on ``m_axis`` without it, and ``s_axis[p].tuser`` is a received frame's verdict on its last
    beat; the core then has no ICRC logic of its own), ``max_pmtu`` (the largest path MTU, a power of
    two from 256 to 4096: the transmit plane FIFOs and the receive frame buffer hold frames of that size,
    and the ``pmtu_log2`` the segmenter uses is capped at it. 1024 keeps every frame inside a standard
    1500-byte Ethernet MTU, and a board's NIC then needs a quarter of the block RAM, docs/boards.md),
    ``rx_timer_width`` (bits of the receive side's timer registers ACK_GEN_CYCLES, ACK_INTERVAL_CYCLES and
    BASE_RTT_CYCLES: 16 spans 2.6 ms at 25 MHz, and saves the Colorlight's NIC about 200 logic cells).
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
        mrs: int = 8,
        destinations: int = 4,
        clock_hz: float = 250e6,
        lookahead: int = 4,
        addr_width: int = 64,
        port_icrc: bool = False,
        max_pmtu: int = MAX_PMTU,
        rx_timer_width: int = 32,
    ):
        if max_pmtu not in PMTUS:
            raise ValueError(f"max_pmtu must be one of {', '.join(map(str, PMTUS))}, not {max_pmtu!r}")
        self.max_pmtu = max_pmtu
        self.data_width, self.planes, self.qps, self.ev_slots = data_width, planes, qps, ev_slots
        self.port_icrc = port_icrc
        self.addr_width = addr_width
        self.backups, self.window, self.mrs, self.destinations = backups, window, mrs, destinations
        self.clock_hz = clock_hz
        self.tick_cycles = max(1, round(clock_hz * 128e-9))
        self._tx = TxPipeline(
            data_width=data_width,
            planes=planes,
            qps=qps,
            ev_slots=ev_slots,
            backups=backups,
            window=window,
            destinations=destinations,
            lookahead=lookahead,
            control_in=True,
            addr_width=addr_width,
            append_icrc=not port_icrc,
            max_pmtu=max_pmtu,
        )
        # The receive side's SACKs, NACKs and ACKs go out through the transmit pipeline, which appends
        # their ICRC with the one it has for data: one ICRC inserter, not two (docs/boards.md).
        self._rx = RxPipeline(
            data_width=data_width,
            planes=planes,
            qps=qps,
            mrs=mrs,
            destinations=destinations,
            window=window,
            clock_hz=clock_hz,
            control_to_tx=True,
            addr_width=addr_width,
            port_icrc=port_icrc,
            max_pmtu=max_pmtu,
            timer_width=rx_timer_width,
        )
        self._tracker = TxTracker(qps=qps, window=window, ev_slots=ev_slots)
        self._prober = Prober(qps=qps, ev_slots=ev_slots, targets=self._tx._paths.targets)
        tx_ports, rx_ports = self._tx.signature.members, self._rx.signature.members
        tracker_ports = self._tracker.signature.members
        us = clock_hz / 1e6
        base_rtt_us = 10  # the default fabric's round trip; the host sets the real one

        def cycles(microseconds):
            return round(microseconds * us)

        def ticks(microseconds):
            return round(microseconds * 1000 / 128)

        members = {
            "s_axis": In(AxiStreamSignature(data_width, user_width=int(port_icrc))).array(planes),
            "m_axis": Out(AxiStreamSignature(data_width)).array(planes),
            "m_axi": Out(Axi4Signature(addr_width=addr_width, data_width_bytes=data_width)),
            # -- host requests and configuration (the host interface of issue 7 will drive these)
            "work_request": In(tx_ports["work_request"].signature.flip()),
            "connect": In(stream.Signature(connect_layout(qps))),
            "tx_qp_configure": In(tx_ports["qp_configure"].signature.flip()),
            "ev_configure": In(tx_ports["ev_configure"].signature.flip()),
            "ev_seed": In(tx_ports["ev_seed"].signature.flip()),
            "reserve_configure": In(tx_ports["reserve_configure"].signature.flip()),
            # the host reads an EV slot back: {qp, slot} in, {ev, state} out, one at a time, in order
            "ev_read": In(tx_ports["ev_read"].signature.flip()),
            "ev_read_answer": Out(tx_ports["ev_read_answer"].signature),
            # route templates (none without SRv6)
            **(
                {"route_configure": In(tx_ports["route_configure"].signature.flip())}
                if destinations > 0
                else {}
            ),
            "rx_qp_configure": In(rx_ports["qp_configure"].signature.flip()),
            "mr_configure": In(rx_ports["mr_configure"].signature.flip()),
            "post_receive": In(rx_ports["post_receive"].signature.flip()),
            # -- completions and errors for the host
            "ack": Out(tracker_ports["ack_out"].signature),
            "send_error": Out(tracker_ports["error"].signature),
            "receive_completion": Out(rx_ports["receive_completion"].signature),
            "qp_error": Out(qps),
            # every EV state-machine decision (the path selector's ``decision``): event log, scoreboard
            "path_trace": Out(tx_ports["path_trace"].shape),
            "path_trace_valid": Out(1),
            "cwnd": Out(data.ArrayLayout(32, qps)),
            "inflight": Out(data.ArrayLayout(32, qps)),
            # -- registers
            "config": In(tx_config_layout(planes)),
            "plane_up": In(planes, init=(1 << planes) - 1),  # link status of each plane port
            # beats a plane may have queued inside the NIC before it gets no new packet (default: one
            # maximum-size packet)
            "plane_queue_beats": In(range(self._tx.plane_fifo_depth + 1), init=self._tx.max_packet_beats),
            "pmtu_log2": In(4, init=max_pmtu.bit_length() - 1),
            "min_active": In(range(ev_slots + 1), init=max(1, ev_slots // 4)),
            "rto_cycles": In(32, init=cycles(4 * base_rtt_us)),
            "reorder_cycles": In(32, init=cycles(0.75 * base_rtt_us + 2)),
            "retry_budget": In(3, init=7),
            "probe_interval": In(32, init=cycles(20)),
            "probe_interval_max": In(32, init=cycles(1000)),
            "probe_rto": In(32, init=cycles(4 * base_rtt_us)),
            "probe_k": In(3, init=3),
            "cc_enabled": In(1, init=1),
            "cc_mtu": In(16, init=max_pmtu),
            "cc_max_cwnd": In(32, init=1 << 20),
            "cc_base_rtt": In(16, init=ticks(base_rtt_us)),
            "cc_target": In(16, init=ticks(0.75 * base_rtt_us)),
            "cc_alpha": In(16, init=_fixed(1.0, 12)),
            "cc_eta": In(16, init=_fixed(0.15, 12)),
            "cc_gamma": In(16, init=_fixed(0.8, 16)),
            "cc_max_md_jump": In(16, init=_fixed(0.5, 16)),
            "cc_qa_gate": In(5, init=3),
            "ack_gen_bytes": In(32, init=16384),
            "ack_gen_cycles": In(rx_timer_width, init=cycles(2)),
            "ack_interval_cycles": In(rx_timer_width, init=cycles(1)),
            "base_rtt_cycles": In(rx_timer_width, init=cycles(base_rtt_us)),
            "now": Out(32),
            # per plane port: frames and bytes (Ethernet frame without FCS) in and out, wrapping
            **{
                f"stat_port_{d}_{u}": Out(data.ArrayLayout(32, planes))
                for d in ("rx", "tx")
                for u in PORT_STATS
            },
        }
        for block, names in STATS.items():
            members.update({f"stat_{block}_{name}": Out(32) for name in names})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        planes, qps = self.planes, self.qps
        max_log2 = self.max_pmtu.bit_length() - 1
        m.submodules.tx = tx = self._tx
        m.submodules.rx = rx = self._rx
        m.submodules.tracker = tracker = self._tracker
        m.submodules.prober = prober = self._prober
        m.submodules.cc = cc = CongestionControl(qps=qps)
        m.submodules.ack_watchdog = watchdog = AckWatchdog(qps=qps, ev_slots=self.ev_slots)

        # -- time
        now = self.now
        ticks = Signal(32)
        prescale = Signal(range(self.tick_cycles))
        m.d.sync += now.eq(now + 1)
        if self.tick_cycles == 1:
            m.d.sync += ticks.eq(ticks + 1)
        else:
            m.d.sync += prescale.eq(prescale + 1)
            with m.If(prescale == self.tick_cycles - 1):
                m.d.sync += [prescale.eq(0), ticks.eq(ticks + 1)]
        m.d.comb += [
            tx.now_ts.eq(ticks[:16]),
            tracker.now.eq(now),
            tracker.now_ts.eq(ticks[:16]),
            prober.now.eq(now),
            watchdog.now.eq(now),
            cc.now.eq(ticks),
        ]

        # -- host-side streams and registers
        wiring.connect(m, wiring.flipped(self.work_request), tx.work_request)
        wiring.connect(m, wiring.flipped(self.tx_qp_configure), tx.qp_configure)
        wiring.connect(m, wiring.flipped(self.ev_configure), tx.ev_configure)
        wiring.connect(m, wiring.flipped(self.ev_seed), tx.ev_seed)
        wiring.connect(m, wiring.flipped(self.reserve_configure), tx.reserve_configure)
        wiring.connect(m, wiring.flipped(self.ev_read), tx.ev_read)
        wiring.connect(m, tx.ev_read_answer, wiring.flipped(self.ev_read_answer))
        wiring.connect(m, wiring.flipped(self.rx_qp_configure), rx.qp_configure)
        wiring.connect(m, wiring.flipped(self.mr_configure), rx.mr_configure)
        wiring.connect(m, wiring.flipped(self.post_receive), rx.post_receive)
        wiring.connect(m, tracker.ack_out, wiring.flipped(self.ack))
        m.d.comb += [  # the watchdog sees every ACK record as the host takes it
            watchdog.ack.valid.eq(self.ack.valid & self.ack.ready),
            watchdog.ack.payload.eq(self.ack.payload),
        ]
        # A QP is in ERROR from its first error record (the tracker's or the ACK watchdog's) or a
        # receive-side error until it is connected again; it sends nothing meanwhile (§7.4).
        halted = Signal(qps)
        in_error = Signal(qps)
        m.d.comb += in_error.eq(halted | tracker.qp_error | rx.qp_error)
        with m.If(self.send_error.valid & self.send_error.ready):
            m.d.sync += halted.bit_select(self.send_error.payload.qp, 1).eq(1)
        with m.If(self.connect.valid & self.connect.ready):
            m.d.sync += halted.bit_select(self.connect.payload.qp, 1).eq(0)
        m.submodules.error_merge = error_merge = StreamMerge(self.send_error.payload.shape(), 2)
        wiring.connect(m, tracker.error, error_merge.i[0])
        wiring.connect(m, watchdog.error, error_merge.i[1])
        wiring.connect(m, error_merge.o, wiring.flipped(self.send_error))
        wiring.connect(m, rx.receive_completion, wiring.flipped(self.receive_completion))

        # One route table write goes to both sides: data (TX) and answers on the reverse path (RX).
        if self.destinations > 0:
            m.submodules.route_fork = route_fork = StreamFork(self.route_configure.payload.shape(), 2)
            wiring.connect(m, wiring.flipped(self.route_configure), route_fork.i)
            wiring.connect(m, route_fork.o[0], tx.route_configure)
            wiring.connect(m, route_fork.o[1], rx.route_configure)

        # Connecting a QP's sending side sets its sequence numbers, its scoreboard and its window.
        m.submodules.connect_fork = connect_fork = StreamFork(connect_layout(qps), 4)
        wiring.connect(m, wiring.flipped(self.connect), connect_fork.i)
        request = connect_fork.o[0].payload
        m.d.comb += [
            tx.sequence_configure.valid.eq(connect_fork.o[0].valid),
            tx.sequence_configure.payload.eq(request),
            connect_fork.o[0].ready.eq(tx.sequence_configure.ready),
            tracker.configure.valid.eq(connect_fork.o[1].valid),
            tracker.configure.payload.qp.eq(connect_fork.o[1].payload.qp),
            tracker.configure.payload.initial_psn.eq(connect_fork.o[1].payload.psn),
            connect_fork.o[1].ready.eq(tracker.configure.ready),
            cc.configure.valid.eq(connect_fork.o[2].valid),
            cc.configure.payload.qp.eq(connect_fork.o[2].payload.qp),
            connect_fork.o[2].ready.eq(cc.configure.ready),
            watchdog.configure.valid.eq(connect_fork.o[3].valid),
            watchdog.configure.payload.qp.eq(connect_fork.o[3].payload.qp),
            connect_fork.o[3].ready.eq(watchdog.configure.ready),
        ]

        m.d.comb += [
            tx.config.eq(self.config),
            rx.config.eq(self.config),
            # Capped: a larger packet would not fit the plane FIFOs (the driver refuses it anyway).
            tx.pmtu_log2.eq(Mux(self.pmtu_log2 > max_log2, max_log2, self.pmtu_log2)),
            tx.min_active.eq(self.min_active),
            tx.plane_up.eq(self.plane_up),
            tx.plane_queue_beats.eq(self.plane_queue_beats),
            rx.port_up.eq(self.plane_up),
            prober.plane_up.eq(self.plane_up),
            tracker.rto_cycles.eq(self.rto_cycles),
            tracker.reorder_cycles.eq(self.reorder_cycles),
            tracker.retry_budget.eq(self.retry_budget),
            watchdog.rto_cycles.eq(self.rto_cycles),
            watchdog.retry_budget.eq(self.retry_budget),
            prober.probe_interval.eq(self.probe_interval),
            prober.probe_interval_max.eq(self.probe_interval_max),
            prober.rto.eq(self.probe_rto),
            prober.probe_k.eq(self.probe_k),
            cc.enabled.eq(self.cc_enabled),
            cc.mtu.eq(self.cc_mtu),
            cc.max_cwnd.eq(self.cc_max_cwnd),
            cc.base_rtt.eq(self.cc_base_rtt),
            cc.target.eq(self.cc_target),
            cc.alpha.eq(self.cc_alpha),
            cc.eta.eq(self.cc_eta),
            cc.gamma.eq(self.cc_gamma),
            cc.max_md_jump.eq(self.cc_max_md_jump),
            cc.qa_gate.eq(self.cc_qa_gate),
            rx.ack_gen_bytes.eq(self.ack_gen_bytes),
            rx.ack_gen_cycles.eq(self.ack_gen_cycles),
            rx.ack_interval_cycles.eq(self.ack_interval_cycles),
            rx.base_rtt_cycles.eq(self.base_rtt_cycles),
            self.qp_error.eq(in_error),
            tx.qp_halt.eq(in_error),
            self.cwnd.eq(cc.cwnd),
            self.inflight.eq(tracker.inflight),
        ]

        # -- the closed loop
        wiring.connect(m, tx.sent, tracker.sent)
        m.d.comb += [self.path_trace.eq(tx.path_trace), self.path_trace_valid.eq(tx.path_trace_valid)]
        m.d.comb += [
            watchdog.sent.valid.eq(tx.sent.valid & tx.sent.ready),
            watchdog.sent.payload.eq(tx.sent.payload),
        ]
        for q in range(qps):
            m.d.comb += watchdog.cack[q].eq(tracker.psn_limit[q] - self.window)
        # Retransmissions the tracker asks for, and the watchdog's requests for a lost AETH.
        m.submodules.retransmit_merge = retransmit_merge = StreamMerge(tx.retransmit.payload.shape(), 2)
        wiring.connect(m, tracker.retransmit, retransmit_merge.i[0])
        wiring.connect(m, watchdog.request, retransmit_merge.i[1])
        wiring.connect(m, retransmit_merge.o, tx.retransmit)
        wiring.connect(m, tracker.cc_event, cc.cc_event)
        m.d.comb += [
            tx.psn_limit.eq(tracker.psn_limit),
            cc.inflight.eq(tracker.inflight),
            tx.cwnd_open.eq(cc.cwnd_open),
        ]
        # Every SACK/NACK/ACK for our sending side goes to the tracker and, for probe answers, the prober.
        m.submodules.feedback_fork = feedback_fork = StreamFork(rx.feedback.payload.shape(), 2)
        wiring.connect(m, rx.feedback, feedback_fork.i)
        wiring.connect(m, feedback_fork.o[0], tracker.feedback)
        wiring.connect(m, feedback_fork.o[1], prober.answer)
        # Path events: the tracker's (ECN, TRIM, LOSS) and the prober's restores.
        m.submodules.path_merge = path_merge = StreamMerge(tx.feedback.payload.shape(), 2)
        wiring.connect(m, tracker.path_event, path_merge.i[0])
        wiring.connect(m, prober.restore, path_merge.i[1])
        wiring.connect(m, path_merge.o, tx.feedback)
        # The path selector says which EVs to probe (start) and which to stop probing.
        watch = tx.watch.payload
        with m.If(watch.start):
            m.d.comb += [
                prober.watch.valid.eq(tx.watch.valid),
                prober.watch.payload.qp.eq(watch.qp),
                prober.watch.payload.target.eq(watch.target),
                prober.watch.payload.ev.eq(watch.ev),
                tx.watch.ready.eq(prober.watch.ready),
            ]
        with m.Else():
            m.d.comb += [
                prober.unwatch.valid.eq(tx.watch.valid),
                prober.unwatch.payload.qp.eq(watch.qp),
                prober.unwatch.payload.target.eq(watch.target),
                tx.watch.ready.eq(prober.unwatch.ready),
            ]
        m.d.comb += [
            tx.probe.valid.eq(prober.probe.valid),
            tx.probe.payload.qp.eq(prober.probe.payload.qp),
            tx.probe.payload.ev.eq(prober.probe.payload.ev),
            tx.probe.payload.probe_id.eq(prober.probe.payload.probe_id),
            prober.probe.ready.eq(tx.probe.ready),
        ]

        # -- host memory: TX reads, RX writes
        for name in self.m_axi.signature.members:
            side = tx.m_axi if name.startswith(("ar", "r")) else rx.m_axi
            port, mine = getattr(side, name), getattr(self.m_axi, name)
            if self.m_axi.signature.members[name].flow == Out:
                m.d.comb += mine.eq(port)
            else:
                m.d.comb += port.eq(mine)

        # -- plane ports: frames in to RX; out from TX, data and RX answers merged there a frame at a time
        wiring.connect(m, rx.control, tx.control)
        for p in range(planes):
            wiring.connect(m, wiring.flipped(self.s_axis[p]), rx.s_axis[p])
            wiring.connect(m, tx.m_axis[p], wiring.flipped(self.m_axis[p]))
            for direction, port in (("rx", self.s_axis[p]), ("tx", self.m_axis[p])):
                frames = getattr(self, f"stat_port_{direction}_frames")[p]
                nbytes = getattr(self, f"stat_port_{direction}_bytes")[p]
                with m.If(port.tvalid & port.tready):
                    m.d.sync += nbytes.eq(nbytes + sum(port.tkeep[i] for i in range(self.data_width)))
                    with m.If(port.tlast):
                        m.d.sync += frames.eq(frames + 1)

        # -- counters
        blocks = {
            "tx": tx,
            "path": tx,
            "tracker": tracker,
            "cc": cc,
            "prober": prober,
            "ack_watchdog": watchdog,
            "rx": rx,
        }
        for block, names in STATS.items():
            for name in names:
                source = f"stat_{name}"
                if block == "path":
                    source = f"stat_path_{name}"
                m.d.comb += getattr(self, f"stat_{block}_{name}").eq(getattr(blocks[block], source))
        return m


def layout_only(component):
    """Mark ``component`` and the blocks it holds as deliberately never elaborated (it is used only for
    its signature: port layouts and defaults), so Amaranth does not warn "created but never used"."""
    seen, todo = set(), [component]
    while todo:
        part = todo.pop()
        if id(part) in seen or not isinstance(part, Elaboratable):
            continue
        seen.add(id(part))
        part._MustUse__silence = True
        todo += [v for k, v in vars(part).items() if k.startswith("_") and isinstance(v, Elaboratable)]
    return component


def core_signature(**params) -> wiring.Signature:
    """The signature of an ``MrcNic(**params)``, for blocks built around the core (the register file)
    without elaborating one."""
    return layout_only(MrcNic(**params)).signature
