"""The ``model`` backend: NICs made of the reference model (``mrcnic.model``) on the multi-plane fabric
(``mrcnic.fabric``), behind the same registers and queues as the gateware (docs/registers.md,
docs/host-interface.md). No RTL is involved: the driver, the CLI and their tests run in pure Python.

:class:`ModelCluster` builds the fabric and one :class:`ModelDevice` per NIC; a device keeps the register
values, its own host memory, and a model :class:`~mrcnic.model.endpoint.Endpoint`. Writes act as on the
NIC: a TABLE block's COMMAND configures the endpoint (the route and address tables are kept but the model
addresses packets from the fabric's topology), a send-queue doorbell reads WQEs from host memory and posts
them, and the endpoint's ACKs and WRITE-with-immediate arrivals become CQEs written into host memory.
Time passes only in :meth:`ModelDevice.idle` (the fabric's event loop runs).

Limits of the model, not of the interface: memory regions have no protection domain or rights check
(an MR without remote write is simply not registered); counters the model does not keep read 0, and
``host_cq_full_stalls`` counts completions that found the CQ full (the gateware counts cycles).
"""

from __future__ import annotations

from collections import deque

from ..fabric.link import FCS, frame_wire_bytes
from ..fabric.topology import Fabric, FabricConfig
from ..model.endpoint import Endpoint
from ..model.ev import EvSlot
from ..model.memory import MemoryRegion
from ..regmap import (
    CQE_BYTES,
    HOST_COUNTERS,
    WQE_BYTES,
    Access,
    BlockType,
    Capabilities,
    Cqe,
    CqeKind,
    CqeStatus,
    Wqe,
    WqeOpcode,
    cqe_phase,
    nic_register_map,
)
from .transport import Transport

__all__ = ["ModelCluster", "ModelDevice", "host_of_gid"]

# the model's message status -> CQE status
_STATUS = {
    "ok": CqeStatus.SUCCESS,
    "invalid_request": CqeStatus.REMOTE_INVALID_REQUEST,
    "remote_access": CqeStatus.REMOTE_ACCESS_ERROR,
    "remote_operation": CqeStatus.REMOTE_OPERATION_ERROR,
    "flushed": CqeStatus.FLUSHED,
    "retry_exceeded": CqeStatus.RETRY_EXCEEDED,
}
GID_PREFIX = 0xFD00 << 112  # mrcnic.model.endpoint.gid(host) = prefix | (host + 1)
CLOCK_PS = 4000  # the NOW register counts 250 MHz cycles


def host_of_gid(gid: int) -> int | None:
    if gid >> 112 != 0xFD00 or not 1 <= gid & 0xFFFF_FFFF <= 1 << 16:
        return None
    return (gid & 0xFFFF_FFFF) - 1


class _HostRegion(MemoryRegion):
    """A registered memory region whose placements land in the device's host memory."""

    def __init__(self, device: ModelDevice, base: int, length: int):
        super().__init__(base, length)
        self.device = device

    def write(self, va: int, data: bytes) -> None:
        self.device.memory_store(va, data)
        self.placed_bytes += len(data)


class _HostSource:
    """The payload of a WRITE, read from host memory when the model segments it (as the NIC's DMA does)."""

    def __init__(self, device: ModelDevice, address: int):
        self.device, self.address = device, address

    def read(self, offset: int, length: int) -> bytes:
        return self.device.memory_load(self.address + offset, length)


class _QpContext:
    def __init__(self):
        self.tx: dict | None = None
        self.rx: dict | None = None
        self.slots: dict[int, int] = {}
        self.reserve: dict[tuple[int, int], int] = {}
        self.seed = 1
        self.model = None  # mrcnic.model.endpoint.Qp once connected
        self.error = False
        self.sq_stopped = False
        self.sq_consumer = 0
        self.sq_completed = 0
        self.rq_consumer = 0  # RECV_IMM CQEs written (SQ_COMPLETED: SEND CQEs written)
        self.rq_taken = 0  # receives consumed by the model (their CQEs may wait for room in the CQ)
        self.posted: deque = deque()  # (sq index, msn) sent to the model, not yet completed
        self.recv_seen = 0  # receiver completions already turned into CQEs
        self.receives_posted = 0  # RQ_PRODUCER as handed to the model
        self.parked: tuple | None = None  # (sq index, status) of a WQE waiting for those in flight


class _PortCounter:
    """Stands between the fabric host and the model endpoint to count what the NIC's plane ports count
    (docs/registers.md, PORT blocks): frames and bytes (Ethernet header to ICRC, no FCS) delivered to the
    NIC and put on the wire by it."""

    def __init__(self, endpoint, host, planes: int):
        self.endpoint = endpoint
        self.counts = {name: [0] * planes for name in ("rx_frames", "rx_bytes", "tx_frames", "tx_bytes")}
        for port in host.ports:
            port.on_tx = self._sent

    def _sent(self, port, frame, now) -> None:
        self.counts["tx_frames"][port.plane] += 1
        self.counts["tx_bytes"][port.plane] += frame_wire_bytes(frame) - FCS

    def on_frame(self, frame, plane: int, now: int) -> None:
        self.counts["rx_frames"][plane] += 1
        self.counts["rx_bytes"][plane] += frame_wire_bytes(frame) - FCS
        self.endpoint.on_frame(frame, plane, now)

    def __getattr__(self, name):
        return getattr(self.endpoint, name)


class ModelDevice(Transport):
    def __init__(self, cluster: ModelCluster, host: int, caps: Capabilities, memory_size: int):
        self.cluster, self.host, self.caps = cluster, host, caps
        self.map = nic_register_map(caps)
        self.memory_base, self.memory_size = 0x1000, memory_size
        self._memory = bytearray(memory_size)
        self.values: dict[tuple[str, str], int] = {}
        self.words: dict[int, tuple] = {}
        for address, block, register, index in self.map.words():
            self.words[address >> 2] = (block, register, index)
            if register is not None:
                self.values[(block.name, register.name)] = register.reset
        fabric = cluster.fabric
        # Packets of the fabric's MTU, as long as the NIC's buffers hold them (MAX_PMTU).
        params = cluster.fabric_config.params(
            n_evs=caps.ev_slots,
            backup_evs=caps.backups,
            window=caps.window,
            mtu=min(cluster.fabric_config.mtu, caps.max_pmtu),
        )
        self.endpoint = Endpoint(host, params, fabric.cfg.info(), fabric.hosts[host], seed=host + 1)
        self.ports = _PortCounter(self.endpoint, fabric.hosts[host], caps.planes)
        fabric.hosts[host].endpoint = self.ports
        self.endpoint.on_message_acked = self._message_done
        self.endpoint.on_message_failed = self._message_done
        self.qps = [_QpContext() for _ in range(caps.qps)]
        self.cq_pending: deque[Cqe] = deque()
        self.cq_producer = 0
        self.table_taken: dict[str, int] = {}
        self.host_counts = {name: 0 for name, _ in HOST_COUNTERS}

    def describe(self) -> str:
        return f"model NIC on host {self.host} of a {self.caps.planes}-plane fabric"

    # -- host memory ------------------------------------------------------------------------------
    def _span(self, address: int, length: int) -> slice:
        start = address - self.memory_base
        if start < 0 or start + length > self.memory_size:
            raise ValueError(f"host memory access [{address:#x}, +{length}) outside the device's window")
        return slice(start, start + length)

    def memory_load(self, address: int, length: int) -> bytes:
        return bytes(self._memory[self._span(address, length)])

    def memory_store(self, address: int, data: bytes) -> None:
        self._memory[self._span(address, len(data))] = data

    async def mem_read(self, address: int, length: int) -> bytes:
        return self.memory_load(address, length)

    async def mem_write(self, address: int, data: bytes) -> None:
        self.memory_store(address, data)

    async def idle(self, ns: float) -> None:
        self.cluster.run_for(ns)

    # -- registers --------------------------------------------------------------------------------
    async def read32(self, address: int) -> int:
        entry = self.words.get(address >> 2)
        if entry is None:
            return 0
        block, register, index = entry
        if register is None:
            return self.map.header(block)[index]
        value = self._read_register(block, register)
        return (value >> (32 * index)) & 0xFFFFFFFF

    def _read_register(self, block, register) -> int:
        name = register.name
        if block.kind == BlockType.TABLE and name == "STATUS":
            readable = block.read_back is not None
            return ((self.table_taken.get(block.name, 0) & 0xFFFF) << 16) | (int(readable) << 1)
        if block.kind == BlockType.QP_QUEUES:
            q = self.qps[block.info]
            live = {
                "SQ_CONSUMER": q.sq_consumer,
                "SQ_COMPLETED": q.sq_completed,
                "RQ_CONSUMER": q.rq_consumer,
                "STATUS": int(q.error) | (int(q.sq_stopped) << 1),
            }
            if name in live:
                return live[name] & 0xFFFF
        if block.kind == BlockType.COMPLETION_QUEUE and name == "CQ_PRODUCER":
            return self.cq_producer & 0xFFFF
        if block.kind == BlockType.COUNTERS:
            return self._counter(name.lower()) & 0xFFFFFFFF
        if block.kind == BlockType.PORT and name.lower() in self.ports.counts:
            return self.ports.counts[name.lower()][block.info] & 0xFFFFFFFF
        if block.name == "nic_id" and name == "NOW":
            return (self.cluster.now_ps // CLOCK_PS) & 0xFFFFFFFF
        if register.access == Access.WO:
            return 0
        return self.values[(block.name, name)]

    async def write32(self, address: int, value: int) -> None:
        entry = self.words.get(address >> 2)
        if entry is None or entry[1] is None:
            return
        block, register, index = entry
        if register.access == Access.RO:
            return
        if register.access == Access.WO:
            if block.kind == BlockType.TABLE and value & 3 == 1:
                self._table(block)
            elif block.name == "ev_slot" and value & 3 == 2:
                self._read_ev_slot()
            return
        key = (block.name, register.name)
        mask = ((1 << min(32, register.width - 32 * index)) - 1) << (32 * index)
        self.values[key] = (self.values[key] & ~mask) | ((value << (32 * index)) & mask)
        if block.kind == BlockType.QP_QUEUES and register.name in ("SQ_PRODUCER", "SQ_SIZE_LOG2"):
            self._serve_sq(block.info)
        elif block.kind == BlockType.QP_QUEUES and register.name == "RQ_PRODUCER":
            self._deliver_receives(block.info)
        elif block.kind == BlockType.COMPLETION_QUEUE:
            self._flush_cq()
        elif block.kind == BlockType.PORT and register.name == "LINK_UP":
            self.endpoint.set_port(block.info, bool(self.values[key]))

    # -- tables -----------------------------------------------------------------------------------
    def _table(self, block) -> None:
        self.table_taken[block.name] = self.table_taken.get(block.name, 0) + 1
        f = {r.name: self.values[(block.name, r.name)] for r in block.registers if r.binding}
        name = block.name
        if name in ("tx_qp", "rx_qp", "connect", "ev_slot", "ev_reserve", "ev_seed"):
            if f["QP"] >= self.caps.qps:
                return
            q = self.qps[f["QP"]]
        if name == "tx_qp":
            q.tx = f
        elif name == "rx_qp":
            q.rx = f
        elif name == "ev_slot":
            q.slots[f["SLOT"]] = f["EV"]
        elif name == "ev_reserve":
            q.reserve[(f["PLANE"], f["INDEX"])] = f["EV"] if f["VALID"] else None
        elif name == "ev_seed":
            q.seed = f["SEED"] or 1
        elif name == "connect":
            self._connect(f["QP"], f)
        elif name == "mr":
            regions = self.endpoint.regions
            for rkey in [k for k in regions if k & 0xFF == f["INDEX"]]:
                del regions[rkey]
            # A region past the NIC's reach is stored invalid, as the gateware does (docs/protocol.md §7.9).
            within_reach = f["BASE"] + f["LENGTH"] <= 1 << self.caps.addr_width
            if f["VALID"] and f["REMOTE_WRITE"] and within_reach:
                self.endpoint.register(f["RKEY"], _HostRegion(self, f["BASE"], f["LENGTH"]))
        # route: kept in the registers; the model addresses packets from the fabric's topology

    def _read_ev_slot(self) -> None:
        """COMMAND = 2 on the ev_slot table: the slot named by QP and SLOT, read back into EV and STATE."""
        qp, slot = self.values[("ev_slot", "QP")], self.values[("ev_slot", "SLOT")]
        if qp >= self.caps.qps or slot >= self.caps.ev_slots:
            ev, state = 0, 3  # as the gateware answers a QP it does not have
        elif (q := self.qps[qp]).model is not None:
            entry = q.model.evs.slots[slot]
            ev, state = entry.ev, 3 if entry.denied else 2 if entry.bad else 0
        else:
            ev, state = q.slots.get(slot, 0), 3  # unconfigured slots are DENIED
        self.values[("ev_slot", "EV")], self.values[("ev_slot", "STATE")] = ev, state

    def _connect(self, index: int, f: dict) -> None:
        q = self.qps[index]
        if q.tx is None or q.rx is None:
            return
        peer = host_of_gid(q.tx["PEER_GID"])
        if peer is None:
            return
        qp = self.endpoint.create_qp(q.tx["QPN"], peer, q.tx["PEER_QPN"])
        evs = qp.evs
        for s in range(evs.n):
            ev = q.slots.get(s)
            if ev is not None:
                evs.slots[s] = EvSlot(ev)
        evs.by_ev = {slot.ev: i for i, slot in enumerate(evs.slots)}
        evs.backups = [
            [q.reserve[(p, i)] for i in range(self.caps.backups) if q.reserve.get((p, i)) is not None]
            for p in range(self.caps.planes)
        ]
        qp.sender.next_psn = qp.sender.una = f["PSN"]
        qp.receiver.cack = q.rx["INITIAL_PSN"] - 1
        qp.receiver.post_receive(0)  # the NIC checks posted receives (those posted before: next step)
        q.model, q.error = qp, False

    # -- send queues ------------------------------------------------------------------------------
    def _serve_sq(self, index: int) -> None:
        q = self.qps[index]
        block = f"qp{index}_queues"
        log2 = self.values[(block, "SQ_SIZE_LOG2")]
        if not log2:
            q.sq_stopped = False  # size 0 restarts a send queue stopped by an overrun
            return
        if q.sq_stopped or q.parked is not None:
            return
        producer = self.values[(block, "SQ_PRODUCER")]
        ahead = (producer - q.sq_consumer) & 0xFFFF
        if ahead > 1 << log2:
            q.sq_stopped = True
            self.host_counts["doorbell_overruns"] += 1
            return
        base = self.values[(block, "SQ_BASE")]
        while (producer - q.sq_consumer) & 0xFFFF and q.parked is None:
            sq_index = q.sq_consumer & 0xFFFF
            raw = self.memory_load(base + (q.sq_consumer % (1 << log2)) * WQE_BYTES, WQE_BYTES)
            q.sq_consumer += 1
            self.host_counts["wqes_fetched"] += 1
            self._execute(index, sq_index, Wqe.decode(raw))

    def _execute(self, index: int, sq_index: int, wqe: Wqe) -> None:
        q = self.qps[index]
        if q.error or q.model is None:
            status = CqeStatus.FLUSHED
            self.host_counts["flushed"] += 1
        elif wqe.opcode not in (WqeOpcode.WRITE, WqeOpcode.WRITE_IMM) or not 1 <= wqe.length <= 1 << 31:
            status = CqeStatus.INVALID_WQE
            self.host_counts["invalid_wqes"] += 1
            q.error = True
        elif wqe.local_addr + wqe.length > 1 << self.caps.addr_width:
            status = CqeStatus.LOCAL_DMA_ERROR  # past the NIC's reach: not read (docs/host-interface.md)
            self.host_counts["dma_errors"] += 1
            q.error = True
        else:
            imm = wqe.imm if wqe.opcode == WqeOpcode.WRITE_IMM else None
            msg = self.endpoint.post_write(
                q.model.qpn,
                wqe.remote_va,
                wqe.rkey,
                wqe.length,
                _HostSource(self, wqe.local_addr),
                imm,
                wr_id=sq_index,
                now=self.cluster.now_ps,
            )
            q.posted.append((sq_index, msg.msn))
            return
        if q.posted:  # completions stay in SQ order: it waits for the WQEs in flight (and stops the SQ)
            q.parked = (sq_index, status)
        else:
            self._send_cqe(index, sq_index, status)

    def _message_done(self, model_qp, msg, now: int) -> None:
        """The model completed a message (in MSN order): its WQE's CQE, with the model's status."""
        index = next(i for i, q in enumerate(self.qps) if q.model is model_qp)
        q = self.qps[index]
        sq_index, msn = q.posted.popleft()
        status = _STATUS[msg.status]
        if status != CqeStatus.SUCCESS:
            q.error = True
            self.host_counts["flushed"] += status == CqeStatus.FLUSHED
        self._send_cqe(index, sq_index, status, msn)
        if not q.posted and q.parked is not None:
            parked, q.parked = q.parked, None
            self._send_cqe(index, *parked)
            self._serve_sq(index)

    def _send_cqe(self, index: int, sq_index: int, status: CqeStatus, msn: int = 0) -> None:
        self.cq_pending.append(Cqe(sq_index, CqeKind.SEND, status, index, msn=msn & 0xFFFF))
        self._flush_cq()

    # -- receives and the completion queue --------------------------------------------------------
    def _deliver_receives(self, index: int) -> None:
        q = self.qps[index]
        if q.model is None:
            return
        posted = self.values[(f"qp{index}_queues", "RQ_PRODUCER")]
        new = (posted - q.receives_posted) & 0xFFFF
        if new:
            q.model.receiver.post_receive(new)  # from now on a WRITE_IMM without a receive is NAKed
            q.receives_posted = posted
        done = q.model.receiver.completions
        while q.recv_seen < len(done):
            entry = done[q.recv_seen]
            q.recv_seen += 1
            if entry[1] != "recv_imm":
                continue  # a plain WRITE, or a failed message (NAKed: no receive completion, §7.6)
            _, _, rqmsn, imm, size = entry
            rq_index = q.rq_taken & 0xFFFF
            q.rq_taken += 1
            self.cq_pending.append(
                Cqe(
                    rq_index,
                    CqeKind.RECV_IMM,
                    CqeStatus.SUCCESS,
                    index,
                    msn=rqmsn & 0xFFFF,
                    byte_len=size,
                    imm=imm,
                )
            )
        self._flush_cq()

    def _flush_cq(self) -> None:
        log2 = self.values[("cq", "CQ_SIZE_LOG2")]
        if not log2:
            return
        base, consumer = self.values[("cq", "CQ_BASE")], self.values[("cq", "CQ_CONSUMER")]
        while self.cq_pending:
            if (self.cq_producer - consumer) & 0xFFFF >= 1 << log2:
                self.host_counts["cq_full_stalls"] += 1
                return
            cqe = self.cq_pending.popleft()
            cqe.phase = cqe_phase(self.cq_producer, log2)
            self.memory_store(base + (self.cq_producer % (1 << log2)) * CQE_BYTES, cqe.encode())
            self.cq_producer += 1
            self.host_counts["cqes_written"] += 1
            if cqe.kind == CqeKind.SEND:
                self.qps[cqe.qp].sq_completed += 1
            else:
                self.qps[cqe.qp].rq_consumer += 1

    def step(self) -> None:
        """After the fabric ran: new receive completions."""
        for index in range(len(self.qps)):
            self._deliver_receives(index)

    # -- counters ---------------------------------------------------------------------------------
    def _counter(self, name: str) -> int:
        if name.startswith("host_link_"):
            return 0  # the model is reached without a host link
        if name.startswith("host_"):
            return self.host_counts.get(name[5:], 0)
        total = 0
        for q in self.qps:
            if q.model is None:
                continue
            s, r, evs = q.model.sender.c, q.model.receiver.c, q.model.evs
            total += {
                "tx_packets": s["tx_pkts"] + s["retx_pkts"],
                "tx_probes": s["probes_sent"],
                "tracker_timeouts": s["timeouts"],
                "tracker_lost_time_rule": max(0, s["lost_pkts"] - s["timeouts"]),
                "tracker_retransmit_requests": s["retx_pkts"],
                "path_retired": evs.retired,
                "path_restored": evs.restored,
                "prober_answers": s["probe_ok"],
                "prober_unanswered": s["probe_fail"],
                "rx_placed": r["rx_pkts"],
                "rx_placed_bytes": r["rx_bytes"],
                "rx_duplicate": r["dups"],
                "rx_trimmed": r["trimmed"],
                "rx_psn_out_of_window": r["oor"],
                "rx_access_error": r["bad_access"],
                "rx_invalid_request": r.get("invalid_request", 0),
                "rx_naks": r.get("naks", 0),
                "rx_probes": r["probes"],
                "rx_sacks": r["sacks"],
                "rx_nacks": r["nacks"],
                "rx_acks": r["acks"],
            }.get(name, 0)
        return total


class ModelCluster:
    """``nics`` model NICs on one fabric (default: 4 planes, 2 T0 and 2 T1 per plane, 4 hosts)."""

    def __init__(
        self, nics: int = 2, *, caps: Capabilities | None = None, memory_size: int = 16 << 20, **fabric
    ):
        self.caps = caps or Capabilities()
        cfg = FabricConfig(planes=self.caps.planes, **{"hosts": max(4, nics), "radix": 4, **fabric})
        self.fabric_config = cfg
        self.fabric = Fabric(cfg)
        # NIC 0 and NIC 1 on different T0s, so their paths cross the T1s
        hosts = [0, cfg.radix // 2] + [h for h in range(cfg.hosts) if h not in (0, cfg.radix // 2)]
        self.devices = [ModelDevice(self, hosts[i], self.caps, memory_size) for i in range(nics)]

    @property
    def now_ps(self) -> int:
        return self.fabric.loop.now

    def run_for(self, ns: float) -> None:
        loop = self.fabric.loop
        until = loop.now + max(1, round(ns * 1000))
        loop.run(until=until)
        loop.now = max(loop.now, until)
        for device in self.devices:
            device.step()
