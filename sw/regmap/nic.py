"""The MRC NIC's register map: identity, plane ports, transport, reliability, paths, congestion control,
table write ports and counters. The gateware's register file, the driver and ``docs/registers.md`` are
all made from :func:`nic_register_map`.

Register resets are the NIC's defaults; times in cycles follow ``clock_hz`` and a 10 µs base RTT (the host
sets the fabric's real one). Table blocks stage one record and push it into the NIC with ``COMMAND``;
their field registers mirror the record of the NIC stream named in the block (docs/protocol.md §3, §6, §9).
Tables in :data:`READ_BACK` also read an entry back into those registers (``COMMAND`` = 2).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..wire.constants import MRC_UDP_PORT, Dscp
from .model import Access, Block, BlockType, Register, RegisterMap

__all__ = [
    "COUNTERS",
    "HOST_COUNTERS",
    "HOST_LINK_COUNTERS",
    "MAC_COUNTERS",
    "MAGIC",
    "READ_BACK",
    "Capabilities",
    "nic_register_map",
]

MAGIC = 0x4E43524D  # "MRCN", little-endian ASCII
RO, WO = Access.RO, Access.WO

# The Ethernet MAC's drop counters of each plane port (``mrcnic.hdl.eth.counters``), read through the
# PORT blocks: MrcNicTop inputs ``mac_<name>[p]``, wired by a board top, 0 where there is no MAC.
MAC_COUNTERS = {
    "tx_dropped": "frames from the NIC the MAC did not send (empty, or over the maximum frame)",
    "rx_bad_fcs": "frames dropped by the MAC: bad FCS",
    "rx_errors": "frames dropped by the MAC: RX_ER during the frame",
    "rx_runts": "frames dropped by the MAC: under 64 octets",
    "rx_oversize": "frames dropped by the MAC: over the maximum frame",
    "rx_overflow": "good frames dropped by the MAC: no room in its receive buffer",
}


@dataclass(frozen=True)
class Capabilities:
    """The build parameters of one NIC (``MrcNic``'s), published in the NIC_ID block."""

    data_width: int = 8
    planes: int = 4
    qps: int = 4
    ev_slots: int = 16
    backups: int = 2
    window: int = 256
    mrs: int = 8
    destinations: int = 4  # route templates; 0: built without SRv6 (single-IPv6 frames only)
    clock_hz: int = 250_000_000
    addr_width: int = 64  # host addresses the NIC reaches (its DMA): a board's on-chip memory needs fewer
    max_pmtu: int = 4096  # the largest path MTU its buffers hold (1024: frames fit a 1500-byte Ethernet MTU)
    rx_timer_width: int = 32  # bits of ACK_GEN_CYCLES, ACK_INTERVAL_CYCLES, BASE_RTT_CYCLES
    # The work queues in host memory (QP_QUEUES, COMPLETION_QUEUE blocks and the host counters). The
    # gateware's register file is built without them until its queue engine exists (issue 7, in progress).
    host_queues: bool = True

    @property
    def srv6(self) -> bool:
        """Whether the NIC can send SRv6 frames: it has route templates (docs/protocol.md §5.7)."""
        return self.destinations > 0

    def cycles(self, microseconds: float) -> int:
        return round(microseconds * self.clock_hz / 1e6)

    def ticks(self, microseconds: float) -> int:
        """In 128 ns units (the TSETH clock)."""
        return round(microseconds * 1000 / 128)

    @property
    def max_packet_beats(self) -> int:
        """Beats of the largest frame (142 header bytes, ``max_pmtu``, ICRC) plus one: the TX plane queue's
        default fill limit (``TxPipeline.max_packet_beats``)."""
        return -(-(142 + self.max_pmtu + 4) // self.data_width) + 1


def _bits(count: int) -> int:
    return max(1, (count - 1).bit_length())


def _fixed(value: float, fraction_bits: int) -> int:
    return round(value * (1 << fraction_bits))


# Every counter of the NIC core, by the block that counts it: (name, meaning). 32 bits, wrapping; software
# takes differences. Register name COUNTER_<BLOCK>_<NAME>, binding stat_<block>_<name>.
COUNTERS: dict[str, tuple[tuple[str, str], ...]] = {
    "tx": (
        ("packets", "data packets sent (first transmissions and retransmissions)"),
        ("probes", "reliability probes sent"),
        ("ack_requests", "data packets sent with BTH.A (ask for an immediate SACK)"),
        ("no_path", "transmission opportunities where no EV slot could be chosen"),
        ("rejected_wr", "work requests refused (QP not connected, length 0 or too long)"),
        ("flushed_wr", "work requests dropped unsent because their QP was in ERROR (§7.4)"),
        ("dma_errors", "payload reads that returned an AXI error"),
        ("stale_retransmits", "retransmit requests for PSNs acknowledged meanwhile (dropped)"),
    ),
    "path": (
        ("retired", "EVs retired: ASSUMED_BAD in place or replaced by a backup"),
        ("restored", "EVs back to GOOD (probes or host) or to the backups"),
        ("guarded", "losses the ev_min_active floor guard refused"),
        ("stale_feedback", "feedback about an EV no longer in its slot"),
        ("skipped_visits", "rotation visits that spent a skip credit"),
        ("not_found", "EV requests that found no usable slot"),
        ("config_rejected", "EV slot or reserve writes naming an EV of another plane"),
        ("replaced", "retirements where a backup EV took the slot"),
    ),
    "tracker": (
        ("lost_time_rule", "packets declared lost by the time rule (RACK-style)"),
        ("timeouts", "packets declared lost by the per-packet timeout"),
        ("retransmit_requests", "retransmissions asked of the retransmitter"),
        ("stale_feedback", "SACK/NACK references to PSNs no longer outstanding"),
        ("retry_exceeded", "QPs put in error after the retry budget"),
    ),
    "cc": (
        ("proportional", "SACKs in the proportional-increase quadrant"),
        ("fair", "SACKs in the fair-increase quadrant"),
        ("decreases", "multiplicative decreases"),
        ("decreases_held", "decreases skipped (one per RTT)"),
        ("holds", "SACKs in the hold quadrant"),
        ("quick_adapts", "quick adaptations after trims or losses"),
    ),
    "prober": (
        ("probes", "probes requested"),
        ("answers", "probe answers matched"),
        ("unanswered", "probes that timed out"),
        ("restores", "EVs restored after k answers"),
        ("stale_answers", "probe answers matching no outstanding probe"),
    ),
    "ack_watchdog": (
        ("ack_requests", "data packets resent with BTH.A because no transport ACK came"),
        ("retry_exceeded", "QPs put in error waiting for a transport ACK"),
    ),
    "rx": (
        ("placed", "data packets placed in host memory"),
        ("placed_bytes", "payload bytes placed"),
        ("duplicate", "duplicate data packets (answered with a SACK, not placed)"),
        ("psn_out_of_window", "data packets beyond the receive window"),
        ("oor_nack_suppressed", "out-of-window NACKs not sent (one per base RTT)"),
        ("trimmed", "trimmed data packets (NACK TRIMMED)"),
        ("trimmed_lasthop", "data packets trimmed at the last hop (NACK TRIMMED_LASTHOP)"),
        ("invalid_request", "malformed requests (bad opcode sequence, length)"),
        ("access_error", "R_Key, protection domain, permission or bounds violations"),
        ("probes", "reliability probes answered"),
        ("feedback", "SACK/NACK/ACK frames handed to the sender side"),
        ("sacks", "SACKs sent"),
        ("nacks", "NACKs sent"),
        ("acks", "transport ACKs sent"),
        ("naks", "AETH NAKs sent"),
        ("dma_errors", "placement writes that returned an AXI error"),
        ("drop_malformed", "frames dropped: malformed headers"),
        ("drop_bad_icrc", "frames dropped: bad ICRC"),
        ("drop_not_for_us", "frames dropped: destination address or port not ours"),
        ("drop_unknown_qp", "frames dropped: no such QP"),
        ("drop_qp_not_ready", "frames dropped: QP not connected"),
        ("drop_bad_source", "frames dropped: source GID or QPN not the QP's peer"),
        ("drop_endpoint", "frames dropped: endpoint (ENDPOINT_REQUEST/RESPONSE) frames, not handled"),
        ("frames", "frames received on all plane ports"),
        ("oversize", "frames longer than the receive buffer's largest frame"),
        ("dma_commands", "placement DMA commands issued"),
        ("dma_bytes", "bytes written by placement DMA"),
        ("dma_write_errors", "placement DMA write responses with an error"),
        ("feedback_unknown_nack", "NACKs with a reason code the sender does not act on"),
        ("response_no_plane", "answers dropped: the plane of the echoed EV is not present"),
    ),
}


# Byte counters grow by a packet's length at once: read directly, not through the counter bank.
BYTE_COUNTERS = {("rx", "placed_bytes"), ("rx", "dma_bytes")}


def _counter_step(c: Capabilities, block: str, name: str) -> int:
    """The most an event counter of the core or the queue engine grows by in one cycle (see
    ``Register.max_step``; 0 for byte counters)."""
    if (block, name) in BYTE_COUNTERS:
        return 0
    if (block, name) == ("tx", "flushed_wr"):
        return 1 + c.qps  # the segmenter flushes one request and abandons one per QP in a cycle
    if (block, name) == ("host", "dma_errors"):
        return 2  # two sources (WQE reads, CQE writes); the queue engine's other counters one each
    if (block, name) == ("host_link", "bad_frame"):
        return 2  # the UART bridge counts a decoder's drop and a request's rejection in one cycle
    return 1


# Counters of the host interface's queue engine (binding stat_host_<name>).
HOST_COUNTERS: tuple[tuple[str, str], ...] = (
    ("wqes_fetched", "work-queue entries read from the send queues"),
    ("cqes_written", "completion-queue entries written"),
    ("doorbell_overruns", "SQ doorbells further than the ring size ahead of the consumer (SQ stopped)"),
    ("invalid_wqes", "WQEs with a bad opcode or length (completed INVALID_WQE)"),
    ("flushed", "WQEs completed FLUSHED on a QP in ERROR"),
    ("cq_full_stalls", "cycles a completion waited because the completion queue was full"),
    ("dma_errors", "WQE reads or CQE writes that returned an AXI error"),
)

# Counters of the host link in front of the register file (a board's UART bridge,
# ``mrcnic.hdl.host.uart_bridge.COUNTERS``): MrcNicTop inputs ``stat_host_link_<name>``, wired by a board,
# 0 where nothing drives them (a simulation's AXI4-Lite host). Read through the link they count, they
# include every request before the read's own.
HOST_LINK_COUNTERS: tuple[tuple[str, str], ...] = (
    ("frames_ok", "host-link requests with a good CRC and a valid form (repeated ones included)"),
    ("bad_crc", "host-link frames dropped: bad CRC"),
    ("bad_frame", "host-link frames dropped (bad COBS, short, too long) or answered BAD_REQUEST"),
    ("framing_errors", "host-link characters whose stop bit was low"),
    ("bus_errors", "host-link register or memory accesses answered SLVERR or DECERR"),
    ("timeouts", "host-link register or memory accesses that timed out"),
    ("repeated", "host-link writes repeated by the host, answered without being performed again"),
)


@dataclass(frozen=True)
class TableField:
    path: str  # field path in the NIC stream's record, e.g. "context.peer_gid"
    width: int
    doc: str


def _tables(c: Capabilities) -> dict[str, tuple[str, str, list[TableField]]]:
    """Table blocks: name -> (NIC stream, doc, fields of its record)."""
    qp, slot, dest = _bits(c.qps), _bits(c.ev_slots), _bits(c.destinations)
    F = TableField
    gid = "the peer's GID (its inner IPv6 address)"
    return {
        "tx_qp": (
            "tx_qp_configure",
            "Send side of a QP: its QPN, the peer, and the destination (route template) the peer is at.",
            [
                F("qp", qp, "QP index"),
                F("context.qpn", 24, "own QPN"),
                F("context.peer_qpn", 24, "the peer's QPN (BTH.dest_qp)"),
                F("context.peer_gid", 128, gid),
                F("context.dest", dest, "route template index of the peer"),
            ],
        ),
        "rx_qp": (
            "rx_qp_configure",
            "Receive side of a QP (docs/protocol.md §7.1): connection state, peer, PD, first PSN and RQMSN.",
            [
                F("qp", qp, "QP index"),
                F("entry.connected", 1, "1: the QP accepts packets"),
                F("entry.qpn", 24, "own QPN"),
                F("entry.peer_qpn", 24, "the peer's QPN (checked against the source)"),
                F("entry.peer_gid", 128, gid),
                F("entry.dest", dest, "route template index for answers"),
                F("entry.pd", 8, "protection domain (must match the MR's)"),
                F("entry.pmtu_log2", 4, "path MTU, log2 bytes"),
                F("initial_psn", 24, "first PSN the peer will send"),
                F("initial_rqmsn", 16, "first RQMSN the peer will send"),
            ],
        ),
        "connect": (
            "connect",
            "Start sending on a QP: first PSN, MSN and RQMSN; resets its tracker, window and watchdog.",
            [
                F("qp", qp, "QP index"),
                F("psn", 24, "first PSN to send"),
                F("msn", 16, "first MSN"),
                F("rqmsn", 16, "first RQMSN (WRITE-with-immediate)"),
            ],
        ),
        "ev_slot": (
            "ev_configure",
            "One EV slot of a QP (docs/protocol.md §6.1): slot s is on plane s mod planes. Read back: QP "
            "and SLOT name the slot; EV and STATE get its EV and state (GOOD also while it is skipped).",
            [
                F("qp", qp, "QP index"),
                F("slot", slot, "slot index"),
                F("ev", 32, "entropy value; EV[31:29] must be the slot's plane"),
                F("state", 2, "0 GOOD, 1 (SKIP: taken as GOOD, never read), 2 ASSUMED_BAD, 3 DENIED"),
            ],
        ),
        "ev_reserve": (
            "reserve_configure",
            "A backup EV entry of a (QP, plane) (docs/protocol.md §6.4 guard and replacement).",
            [
                F("qp", qp, "QP index"),
                F("plane", _bits(c.planes), "plane"),
                F("index", _bits(max(c.backups, 1)), "entry of that plane's reserve"),
                F("ev", 32, "entropy value of that plane"),
                F("valid", 1, "1: a backup EV; 0: the entry is empty"),
            ],
        ),
        "ev_seed": (
            "ev_seed",
            "The LFSR seed of a QP's rotation (docs/protocol.md §6.2); restarts the rotation.",
            [F("qp", qp, "QP index"), F("seed", 16, "seed (0 is taken as 1)")],
        ),
        "route": (
            "route_configure",
            "A route template (docs/protocol.md §4): locator and uSIDs of the path to one destination.",
            [F("dest", dest, "destination index"), F("template.locator", 32, "uSID block (locator)")]
            + [F(f"template.usids[{i}]", 16, f"uSID {i}") for i in range(6)]
            + [
                F("template.count", 3, "uSIDs used (1..6)"),
                F("template.t1_slot", 3, "uSID index the EV's T1 choice goes into"),
            ],
        ),
        "mr": (
            "mr_configure",
            "A memory region the peer may write (docs/protocol.md §7.5).",
            [
                F("index", _bits(c.mrs), "MR table index (the R_Key's low bits)"),
                F("entry.valid", 1, "1: the entry is in use"),
                F("entry.rkey", 32, "R_Key"),
                F("entry.pd", 8, "protection domain"),
                F("entry.remote_write", 1, "1: remote WRITE allowed"),
                F("entry.base", 64, "first byte address"),
                F("entry.length", 64, "length in bytes"),
            ],
        ),
    }


# Tables that can be read back: block -> the NIC's (request, answer) streams (``Block.read_back``).
READ_BACK = {"ev_slot": ("ev_read", "ev_read_answer")}


def _reg_name(path: str) -> str:
    """``context.peer_gid`` -> ``PEER_GID``; ``template.usids[2]`` -> ``USID2``."""
    leaf = path.split(".")[-1]
    leaf = leaf.replace("usids[", "usid").replace("]", "")
    return leaf.upper()


def nic_register_map(c: Capabilities | None = None) -> RegisterMap:
    c = c or Capabilities()
    R = Register
    base_rtt_us = 10
    blocks = [
        Block(
            BlockType.NIC_ID,
            "nic_id",
            "Identity and build parameters. The first block, at address 0.",
            [
                R("MAGIC", '"MRCN" (0x4E43524D): an MRC NIC is here', access=RO, reset=MAGIC),
                R("DATA_WIDTH", "bytes per beat of the data path", access=RO, reset=c.data_width),
                R("PLANES", "plane ports", access=RO, reset=c.planes),
                R("QPS", "queue pairs", access=RO, reset=c.qps),
                R("EV_SLOTS", "EV slots per QP", access=RO, reset=c.ev_slots),
                R("BACKUPS", "backup EV entries per QP and plane", access=RO, reset=c.backups),
                R("WINDOW", "PSN window (both directions)", access=RO, reset=c.window),
                R("MRS", "memory-region table entries", access=RO, reset=c.mrs),
                R(
                    "DESTINATIONS",
                    "route templates (0: built without SRv6, single-IPv6 frames only)",
                    access=RO,
                    reset=c.destinations,
                ),
                R("CLOCK_HZ", "core clock frequency", access=RO, reset=c.clock_hz),
                R("NOW", "free-running core cycle counter", access=RO, binding="now"),
                R(
                    "ADDR_WIDTH",
                    "host address bits the NIC reaches: buffers, queues and regions must lie below 2^n",
                    access=RO,
                    reset=c.addr_width,
                ),
                R(
                    "MAX_PMTU",
                    "largest path MTU in bytes: PMTU_LOG2 and every QP's PMTU at most this",
                    access=RO,
                    reset=c.max_pmtu,
                ),
                R(
                    "RX_TIMER_WIDTH",
                    "bits of ACK_GEN_CYCLES, ACK_INTERVAL_CYCLES and BASE_RTT_CYCLES",
                    access=RO,
                    reset=c.rx_timer_width,
                ),
            ],
            info=1,  # register map layout version 1
        )
    ]
    for p in range(c.planes):
        blocks.append(
            Block(
                BlockType.PORT,
                f"port{p}",
                f"Plane port {p}: link state, the addresses of its frames, frame and byte counters.",
                [
                    R(
                        "LINK_UP",
                        "1: the plane is up (locally and as the peer reports)",
                        1,
                        reset=1,
                        binding=f"plane_up[{p}]",
                    ),
                    R("MAC", "own MAC address of the port", 48, binding=f"config.port_mac[{p}]"),
                    R(
                        "NEXT_HOP_MAC",
                        "MAC address of the T0 switch",
                        48,
                        binding=f"config.next_hop_mac[{p}]",
                    ),
                    *(
                        [
                            R(
                                "PORT_ADDRESS",
                                "outer IPv6 source address (SRv6 mode)",
                                128,
                                binding=f"config.port_address[{p}]",
                            )
                        ]
                        if c.srv6
                        else []
                    ),
                    R(
                        "RX_FRAMES",
                        "frames received on this port (all of them, good or not)",
                        access=RO,
                        binding=f"stat_port_rx_frames[{p}]",
                        max_step=1,
                    ),
                    R(
                        "RX_BYTES",
                        "bytes of those frames (FCS excluded)",
                        access=RO,
                        binding=f"stat_port_rx_bytes[{p}]",
                    ),
                    R(
                        "TX_FRAMES",
                        "frames sent on this port (data, probes, SACK/NACK/ACK)",
                        access=RO,
                        binding=f"stat_port_tx_frames[{p}]",
                        max_step=1,
                    ),
                    R(
                        "TX_BYTES",
                        "bytes of those frames (FCS excluded)",
                        access=RO,
                        binding=f"stat_port_tx_bytes[{p}]",
                    ),
                    *(
                        R(
                            f"MAC_{name.upper()}",
                            f"{text} (0 without a MAC)",
                            access=RO,
                            binding=f"mac_{name}[{p}]",
                            max_step=1,
                        )
                        for name, text in MAC_COUNTERS.items()
                    ),
                ],
                info=p,
            )
        )
    blocks += [
        Block(
            BlockType.TRANSPORT,
            "transport",
            "Header fields of every packet (docs/protocol.md §2, §9) and the MTU.",
            [
                R(
                    "SRV6",
                    "1: SRv6 mode (outer IPv6 + uSID container); 0: single-IPv6 mode",
                    1,
                    reset=1,
                    binding="config.srv6",
                )
                if c.srv6
                else R("SRV6", "0: built without SRv6 (DESTINATIONS is 0), single-IPv6 mode", 1, access=RO),
                R("UDP_PORT", "UDP destination port", 16, reset=MRC_UDP_PORT, binding="config.udp_port"),
                R("PKEY", "BTH partition key", 16, reset=0xFFFF, binding="config.pkey"),
                R(
                    "HOP_LIMIT",
                    "outer IPv6 hop limit (switch hops + 1 at least)",
                    8,
                    reset=64,
                    binding="config.hop_limit",
                ),
                R(
                    "DSCP_DATA",
                    "DSCP of first transmissions",
                    6,
                    reset=Dscp.TRIMMABLE,
                    binding="config.dscp_data",
                ),
                R(
                    "DSCP_RETX",
                    "DSCP of retransmissions",
                    6,
                    reset=Dscp.TRIMMABLE_RETX,
                    binding="config.dscp_retx",
                ),
                R("OWN_GID", "own GID (inner IPv6 address)", 128, binding="config.own_gid"),
                R(
                    "PMTU_LOG2",
                    "path MTU, log2 bytes (8..log2 MAX_PMTU; larger values act as the largest)",
                    4,
                    reset=c.max_pmtu.bit_length() - 1,
                    binding="pmtu_log2",
                ),
                R(
                    "PLANE_QUEUE_BEATS",
                    "beats a plane may have queued before it gets no new packet",
                    16,
                    reset=c.max_packet_beats,
                    binding="plane_queue_beats",
                ),
            ],
        ),
        Block(
            BlockType.RELIABILITY,
            "reliability",
            "Loss inference, retry budget and transport ACK generation (docs/protocol.md §7).",
            [
                R("RTO_CYCLES", "per-packet timeout", reset=c.cycles(4 * base_rtt_us), binding="rto_cycles"),
                R(
                    "REORDER_CYCLES",
                    "time-rule slack: a packet sent this long before a SACKed one is lost",
                    reset=c.cycles(0.75 * base_rtt_us + 2),
                    binding="reorder_cycles",
                ),
                R(
                    "RETRY_BUDGET",
                    "retransmissions of one PSN before the QP goes to error",
                    3,
                    reset=7,
                    binding="retry_budget",
                ),
                R(
                    "ACK_GEN_BYTES",
                    "payload bytes between transport ACKs",
                    reset=16384,
                    binding="ack_gen_bytes",
                ),
                R(
                    "ACK_GEN_CYCLES",
                    "time after a completed message before its transport ACK",
                    c.rx_timer_width,
                    reset=c.cycles(2),
                    binding="ack_gen_cycles",
                ),
                R(
                    "ACK_INTERVAL_CYCLES",
                    "minimum time between transport ACKs",
                    c.rx_timer_width,
                    reset=c.cycles(1),
                    binding="ack_interval_cycles",
                ),
                R(
                    "BASE_RTT_CYCLES",
                    "the fabric's base round trip",
                    c.rx_timer_width,
                    reset=c.cycles(base_rtt_us),
                    binding="base_rtt_cycles",
                ),
            ],
        ),
        Block(
            BlockType.PATHS,
            "paths",
            "EV state machine floor and the prober (docs/protocol.md §6.4, §7.8).",
            [
                R(
                    "MIN_ACTIVE",
                    "ev_min_active: the floor of usable slots per QP",
                    _bits(c.ev_slots + 1),
                    reset=max(1, c.ev_slots // 4),
                    binding="min_active",
                ),
                R("PROBE_INTERVAL", "first probe interval", reset=c.cycles(20), binding="probe_interval"),
                R(
                    "PROBE_INTERVAL_MAX",
                    "probe back-off limit",
                    reset=c.cycles(1000),
                    binding="probe_interval_max",
                ),
                R("PROBE_RTO", "probe answer timeout", reset=c.cycles(4 * base_rtt_us), binding="probe_rto"),
                R("PROBE_K", "answered probes that restore an EV", 3, reset=3, binding="probe_k"),
            ],
        ),
        Block(
            BlockType.CONGESTION,
            "congestion",
            "NSCC-style window control (docs/protocol.md §10). Fixed point as noted.",
            [
                R("CC_ENABLED", "1: the window gates sending", 1, reset=1, binding="cc_enabled"),
                R("CC_MTU", "bytes per increase step", 16, reset=c.max_pmtu, binding="cc_mtu"),
                R("CC_MAX_CWND", "window ceiling, bytes", reset=1 << 20, binding="cc_max_cwnd"),
                R(
                    "CC_BASE_RTT",
                    "base RTT, 128 ns ticks",
                    16,
                    reset=c.ticks(base_rtt_us),
                    binding="cc_base_rtt",
                ),
                R(
                    "CC_TARGET",
                    "target delay, 128 ns ticks",
                    16,
                    reset=c.ticks(0.75 * base_rtt_us),
                    binding="cc_target",
                ),
                R("CC_ALPHA", "proportional gain, Q4.12", 16, reset=_fixed(1.0, 12), binding="cc_alpha"),
                R("CC_ETA", "fair increase, Q4.12", 16, reset=_fixed(0.15, 12), binding="cc_eta"),
                R("CC_GAMMA", "decrease factor, Q0.16", 16, reset=_fixed(0.8, 16), binding="cc_gamma"),
                R(
                    "CC_MAX_MD_JUMP",
                    "largest decrease, Q0.16",
                    16,
                    reset=_fixed(0.5, 16),
                    binding="cc_max_md_jump",
                ),
                R("CC_QA_GATE", "quick-adapt gate, log2", 5, reset=3, binding="cc_qa_gate"),
            ],
        ),
    ]
    for i, (name, (stream_name, doc, fields)) in enumerate(_tables(c).items()):
        if name == "route" and not c.srv6:
            continue  # no route templates; the other tables keep their numbers
        regs = [
            R(
                "STATUS",
                "[0] 1: the staged record waits to be taken, or a read-back waits for its answer; "
                "[1] 1: the table can be read back; [31:16] records taken (mod 2^16)",
                access=RO,
            ),
            R(
                "COMMAND",
                "write 1: push the staged record into the table; write 2 (tables with STATUS[1]): read the "
                "entry named by the key fields back into the other field registers (done when STATUS[0] "
                "is 0); other values: nothing",
                2,
                access=WO,
            ),
        ]
        regs += [R(_reg_name(f.path), f.doc, f.width, binding=f.path) for f in fields]
        blocks.append(
            Block(BlockType.TABLE, name, doc, regs, info=i, table=stream_name, read_back=READ_BACK.get(name))
        )
    if c.host_queues:
        blocks += _queue_blocks(c)
    groups = dict(
        COUNTERS, **({"host": HOST_COUNTERS} if c.host_queues else {}), host_link=HOST_LINK_COUNTERS
    )
    counters = [
        R(
            f"{block}_{name}".upper(),
            doc,
            access=RO,
            binding=f"stat_{block}_{name}",
            max_step=_counter_step(c, block, name),
        )
        for block, entries in groups.items()
        for name, doc in entries
    ]
    blocks.append(
        Block(
            BlockType.COUNTERS,
            "counters",
            "Event counters of the NIC core, its queue engine and its host link: 32 bits, wrapping; software "
            "takes differences. INFO = count.",
            counters,
            info=len(counters),
        )
    )
    return RegisterMap(blocks)


def _queue_blocks(c: Capabilities) -> list[Block]:
    """Per QP its send queue and receive credits, then the completion queue (docs/host-interface.md)."""
    R = Register
    blocks = []
    for q in range(c.qps):
        blocks.append(
            Block(
                BlockType.QP_QUEUES,
                f"qp{q}_queues",
                f"QP {q}: its send queue in host memory (64-byte WQEs) and its posted receives.",
                [
                    R(
                        "SQ_BASE",
                        "byte address of the send queue ring (64-byte aligned)",
                        64,
                        binding=f"sq_base[{q}]",
                    ),
                    R(
                        "SQ_SIZE_LOG2",
                        "ring of 2^n WQEs (1..15); 0: the send queue is off",
                        4,
                        binding=f"sq_size_log2[{q}]",
                    ),
                    R(
                        "SQ_PRODUCER",
                        "doorbell: WQEs the host has written (mod 2^16)",
                        16,
                        binding=f"sq_producer[{q}]",
                    ),
                    R(
                        "SQ_CONSUMER",
                        "WQEs the NIC has read (mod 2^16)",
                        16,
                        access=RO,
                        binding=f"sq_consumer[{q}]",
                    ),
                    R(
                        "SQ_COMPLETED",
                        "WQEs completed: a CQE written (mod 2^16)",
                        16,
                        access=RO,
                        binding=f"sq_completed[{q}]",
                    ),
                    R(
                        "RQ_PRODUCER",
                        "doorbell: receives posted for WRITE-with-immediate (mod 2^16)",
                        16,
                        binding=f"rq_producer[{q}]",
                    ),
                    R(
                        "RQ_CONSUMER",
                        "receives consumed: a RECV_IMM CQE written (mod 2^16)",
                        16,
                        access=RO,
                        binding=f"rq_consumer[{q}]",
                    ),
                    R(
                        "STATUS",
                        "[0] QP in ERROR (WQEs complete FLUSHED); [1] SQ stopped by a doorbell overrun",
                        2,
                        access=RO,
                        binding=f"qp_status[{q}]",
                    ),
                ],
                info=q,
            )
        )
    blocks.append(
        Block(
            BlockType.COMPLETION_QUEUE,
            "cq",
            "The completion queue in host memory (32-byte CQEs) for every QP.",
            [
                R(
                    "CQ_BASE",
                    "byte address of the completion queue ring (32-byte aligned)",
                    64,
                    binding="cq_base",
                ),
                R(
                    "CQ_SIZE_LOG2",
                    "ring of 2^n CQEs (1..15); 0: no completions are written",
                    4,
                    binding="cq_size_log2",
                ),
                R("CQ_PRODUCER", "CQEs the NIC has written (mod 2^16)", 16, access=RO, binding="cq_producer"),
                R(
                    "CQ_CONSUMER",
                    "CQEs the host has consumed (mod 2^16): the NIC never overwrites an unconsumed CQE",
                    16,
                    binding="cq_consumer",
                ),
            ],
        )
    )
    return blocks
