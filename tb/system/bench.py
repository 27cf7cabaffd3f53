"""The cocotb side of the system tests: RTL MRC NICs (a :class:`NicCluster`) on the Python fabric.

Each RTL NIC sits on one host of a :class:`mrcnic.fabric.topology.Fabric` (the same switches, queues,
ECN marking, trimming and failures as ``mrcnic sim``) and has its own host memory (a cocotbext-axi
``AxiRam``). The fabric runs in picoseconds on its own event loop; the bench advances it to the
simulator's time every few clock cycles and whenever a frame crosses between the two worlds:

* a frame leaving NIC port ``p`` (``m_axis[p]``) is decoded (:func:`mrcnic.wire.decode`, ICRC checked)
  and queued on the host's plane-``p`` port, which serialises it at the link rate; the NIC's ``tready``
  is low while that port has a frame waiting behind the one on the wire (a MAC with a one-frame
  buffer), so the NIC's plane FIFOs fill and its path selector sees the plane as not ready;
* a frame the fabric delivers to the host is encoded and fed to ``s_axis[p]`` at one beat per cycle.

Per-cycle Python work is kept small: the frame movers sleep on events while there is nothing to move,
and the fabric is advanced in steps of :data:`FABRIC_STEP_CYCLES`. ``sim_cycles_per_s`` (simulated
cycles per wall second) is measured and reported by the tests.
"""

from __future__ import annotations

import logging
import random
import time
from collections import deque
from dataclasses import dataclass, field

import cocotb
from amaranth.hdl import Const
from amaranth.lib import data
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Event, RisingEdge
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiBus, AxiRam

from mrcnic import wire
from mrcnic.fabric.topology import LOCATOR, Fabric, FabricConfig
from mrcnic.hdl.host.nic_top import MrcNicTop
from mrcnic.hdl.nic import STATS, MrcNic, layout_only
from mrcnic.hdl.tx.layouts import WriteKind
from mrcnic.hdl.tx.path_selector import EvState
from mrcnic.model.endpoint import gid, host_mac
from mrcnic.model.ev import EvTable
from mrcnic.model.params import wire_bytes

from .scoreboard import PathScoreboard, ReceiveModel, SackScoreboard
from support.layouts import pack, unpack

__all__ = ["CLOCK_PS", "NicBench", "RtlNic", "SystemConfig"]

CLOCK_PS = 4000  # 250 MHz core clock
FABRIC_STEP_CYCLES = 8


@dataclass
class SystemConfig:
    """One system simulation: the NIC build parameters, the fabric, where the NICs sit."""

    nics: int = 2
    data_width: int = 8
    planes: int = 4
    qps: int = 2
    ev_slots: int = 16
    backups: int = 2
    window: int = 256
    pmtu: int = 1024
    memory: int = 1 << 21
    # fabric: radix 4 gives 2 hosts per T0 and 2 T1s per plane; NIC 0 and NIC 1 sit on different T0s, so
    # every path between them crosses a T1: 2 uplinks x planes paths.
    hosts: int = 4
    radix: int = 4
    link_rate_bps: int = 3_000_000_000
    link_delay_ps: int = 200_000
    loss: float = 0.0
    seed: int = 1
    fabric: dict = field(default_factory=dict)  # other FabricConfig fields
    # False: the NIC cores, configured through their streams; True: whole NICs (MrcNicTop) that the
    # driver drives through registers and queues in host memory
    host_interface: bool = False

    def nic_params(self) -> dict:
        return dict(
            data_width=self.data_width,
            planes=self.planes,
            qps=self.qps,
            ev_slots=self.ev_slots,
            backups=self.backups,
            window=self.window,
            destinations=max(2, self.nics),
            clock_hz=1e12 / CLOCK_PS,
        )

    def build_params(self) -> dict:
        """What identifies the Verilator build (shared by every test with the same values)."""
        params = {"nics": self.nics, **{k: v for k, v in self.nic_params().items() if k != "clock_hz"}}
        if self.host_interface:
            params["host_interface"] = True
        return params

    def fabric_config(self) -> FabricConfig:
        return FabricConfig(
            hosts=self.hosts,
            planes=self.planes,
            radix=self.radix,
            link_rate_bps=self.link_rate_bps,
            link_delay_ps=self.link_delay_ps,
            loss=self.loss,
            seed=self.seed,
            mtu=self.pmtu,
            **self.fabric,
        )


def _port_value(member) -> int:
    """The integer a register input takes by default: its ``init`` in the NIC's signature."""
    init = member.init
    if init is None:
        return 0
    if isinstance(member.shape, data.Layout):
        return Const.cast(data.Layout.cast(member.shape).const(init)).value
    return int(Const.cast(init).value) if not isinstance(init, int) else init


def now_ps() -> int:
    return int(get_sim_time("ps"))


def _bind_axis(mover, dut, prefix: str) -> None:
    """The five AXI-stream handles of port ``prefix`` as attributes of ``mover``."""
    for name in ("tdata", "tkeep", "tlast", "tvalid", "tready"):
        setattr(mover, name, getattr(dut, f"{prefix}__{name}"))


class FrameIn:
    """Frames into one ``s_axis`` port, a beat per cycle, sleeping while there are none."""

    def __init__(self, dut, prefix: str, width: int):
        self.clk, self.w = dut.clk, width
        _bind_axis(self, dut, prefix)
        self.tvalid.value = 0
        self.queue: deque[bytes] = deque()
        self.wake = Event()
        self.frames = 0  # frames and bytes the NIC has taken whole
        self.bytes = 0
        self.busy = False

    def start(self) -> None:
        """Begin moving data (after reset: a frame half-sent before reset must not be picked up)."""
        cocotb.start_soon(self._run())

    def send(self, raw: bytes) -> None:
        self.queue.append(raw)
        self.wake.set()

    async def _run(self):
        w = self.w
        while True:
            if not self.queue:
                self.wake.clear()
                await self.wake.wait()
                await RisingEdge(self.clk)
                continue
            raw = self.queue.popleft()
            self.busy = True
            for offset in range(0, len(raw), w):
                chunk = raw[offset : offset + w]
                self.tdata.value = int.from_bytes(chunk.ljust(w, b"\0"), "little")
                self.tkeep.value = (1 << len(chunk)) - 1
                self.tlast.value = int(offset + w >= len(raw))
                self.tvalid.value = 1
                while True:
                    await RisingEdge(self.clk)
                    if self.tready.value:
                        break
            self.tvalid.value = 0
            self.frames += 1
            self.bytes += len(raw)
            self.busy = False


class FrameOut:
    """Frames out of one ``m_axis`` port. ``tready`` is high only while ``may_take()``; ``deliver(raw)``
    is called at the end of each frame; ``resume()`` wakes the port after ``may_take`` became true."""

    def __init__(self, dut, prefix: str, width: int, may_take, deliver):
        self.clk, self.w = dut.clk, width
        _bind_axis(self, dut, prefix)
        self.tready.value = 0
        self.may_take, self.deliver = may_take, deliver
        self.wake = Event()

    def start(self) -> None:
        """Begin moving data (after reset: a frame half-sent before reset must not be picked up)."""
        cocotb.start_soon(self._run())

    def resume(self) -> None:
        self.wake.set()

    async def _run(self):
        w = self.w
        while True:
            if not self.may_take():
                self.tready.value = 0
                self.wake.clear()
                await self.wake.wait()
                continue
            self.tready.value = 1
            if not self.tvalid.value:
                await RisingEdge(self.tvalid)
            parts = []
            while True:
                await RisingEdge(self.clk)
                if self.tvalid.value:
                    keep = int(self.tkeep.value)
                    n = keep.bit_length()
                    parts.append(int(self.tdata.value).to_bytes(w, "little")[:n])
                    if self.tlast.value:
                        break
            self.tready.value = 0
            self.deliver(b"".join(parts))


class RecordMonitor:
    """Collects the records of an output stream (always ready), waking only when ``valid`` rises.

    ``strobe``: the output is a record signal ``name`` with a one-cycle ``name_valid`` (no ready)."""

    def __init__(self, dut, name: str, layout, on_record=None, *, strobe: bool = False):
        self.clk = dut.clk
        if strobe:
            self.valid = getattr(dut, f"{name}_valid")
            self.payload = getattr(dut, name)
        else:
            self.valid = getattr(dut, f"{name}__valid")
            self.payload = getattr(dut, f"{name}__payload")
            getattr(dut, f"{name}__ready").value = 1
        self.layout, self.on_record = layout, on_record
        self.records = []

    def start(self) -> None:
        """Begin moving data (after reset: a frame half-sent before reset must not be picked up)."""
        cocotb.start_soon(self._run())

    async def _run(self):
        while True:
            if not self.valid.value:
                await RisingEdge(self.valid)
            await RisingEdge(self.clk)
            if self.valid.value:
                record = unpack(self.layout, int(self.payload.value))
                self.records.append(record)
                if self.on_record is not None:
                    self.on_record(record)


class StreamWriter:
    """An input stream with a queue; sleeps while the queue is empty."""

    def __init__(self, dut, name: str):
        self.clk = dut.clk
        self.valid = getattr(dut, f"{name}__valid")
        self.ready = getattr(dut, f"{name}__ready")
        self.payload = getattr(dut, f"{name}__payload")
        self.valid.value = 0
        self.queue: deque[int] = deque()
        self.wake = Event()
        self.done = Event()

    def start(self) -> None:
        """Begin moving data (after reset: a frame half-sent before reset must not be picked up)."""
        cocotb.start_soon(self._run())

    def put(self, value: int) -> None:
        self.queue.append(value)
        self.done.clear()
        self.wake.set()

    async def drain(self) -> None:
        if self.queue or self.valid.value:
            await self.done.wait()

    async def _run(self):
        while True:
            if not self.queue:
                self.valid.value = 0
                self.done.set()
                self.wake.clear()
                await self.wake.wait()
                await RisingEdge(self.clk)
                continue
            self.payload.value = self.queue.popleft()
            self.valid.value = 1
            while True:
                await RisingEdge(self.clk)
                if self.ready.value:
                    break


class RtlNic:
    """One NIC of the cluster on host ``host`` of the fabric: memory, ports, configuration, records.

    It is also the fabric host's *endpoint* (``on_frame``, ``next_data``, ``set_port``).
    """

    def __init__(self, bench: NicBench, index: int, host: int):
        self.bench, self.index, self.host = bench, index, host
        cfg = bench.cfg
        dut = bench.dut
        self.dut, self.prefix = dut, f"nic{index}"
        self.members = bench.nic_model.signature.members
        self.planes, self.w = cfg.planes, cfg.data_width
        self.ram = AxiRam(
            AxiBus.from_prefix(dut, f"{self.prefix}__m_axi", bus_separator="__"),
            dut.clk,
            dut.rst,
            size=cfg.memory,
        )
        self.ram.write_if.log.setLevel(logging.WARNING)
        self.ram.read_if.log.setLevel(logging.WARNING)
        self.fabric_host = bench.fabric.hosts[host]
        self.fabric_host.endpoint = self
        self.ports = self.fabric_host.ports
        self.inputs = [FrameIn(dut, f"{self.prefix}__s_axis__{p}", self.w) for p in range(self.planes)]
        self.outputs = [
            FrameOut(
                dut,
                f"{self.prefix}__m_axis__{p}",
                self.w,
                may_take=lambda p=p: self._mac_has_room(p),
                deliver=lambda raw, p=p: self._transmit(p, raw),
            )
            for p in range(self.planes)
        ]
        for p, port in enumerate(self.ports):
            # The MAC takes the next frame while one is on the wire: wake the port when its queue empties.
            port.on_tx = lambda _port, _frame, _now, p=p: self.outputs[p].resume()
        self.writers = {}
        for name, member in self.members.items():
            if member.is_signature and "valid" in member.signature.members:
                if member.flow.name == "In":
                    self.writers[name] = StreamWriter(dut, f"{self.prefix}__{name}")
        # The core's completion streams (a whole NIC turns them into CQEs in host memory instead).
        self.monitors = []
        if "ack" in self.members:
            self.acks = RecordMonitor(dut, f"{self.prefix}__ack", self.layout("ack"), self._on_ack)
            self.send_errors = RecordMonitor(dut, f"{self.prefix}__send_error", self.layout("send_error"))
            self.receive_completions = RecordMonitor(
                dut, f"{self.prefix}__receive_completion", self.layout("receive_completion")
            )
            self.monitors = [self.acks, self.send_errors, self.receive_completions]
        # Reference-model scoreboards (tb/system/scoreboard.py); NicBench.connect attaches the QPs.
        self.paths = PathScoreboard(self.prefix, cfg.ev_slots, bench.stale_ev_grace_ps)
        self.sacks = SackScoreboard(self.prefix)
        self.receive_model = ReceiveModel(self.prefix, cfg.window)
        self.path_trace = RecordMonitor(
            dut,
            f"{self.prefix}__path_trace",
            self.members["path_trace"].shape,
            lambda record: self.paths.on_trace(record, now_ps()),
            strobe=True,
        )
        self.peer_qp: dict[int, int] = {}  # peer QPN -> our QP index
        self.sent_frames, self.sent_bytes = [0] * self.planes, [0] * self.planes
        self.port_up = (1 << self.planes) - 1
        self.on_transmit = None  # callback(nic, plane, frame, now_ps): a frame leaves the NIC
        self.on_receive = None  # callback(nic, plane, frame, now_ps): the fabric delivers a frame
        # fault(nic, plane, frame, raw) -> [(raw, intact)]: what reaches the NIC instead of the frame
        # (nothing: dropped before the NIC, e.g. by the MAC on a bad FCS; two copies; corrupted bytes)
        self.fault = None
        self.acked_msn: dict[int, int] = {}
        self.ack_waiters: list = []

    def start(self) -> None:
        movers = [*self.inputs, *self.outputs, *self.writers.values()]
        movers += [*self.monitors, self.path_trace]
        for mover in movers:
            mover.start()

    # -- helpers ---------------------------------------------------------------------------------
    def layout(self, name):
        return self.members[name].signature.members["payload"].shape

    def signal(self, name):
        return getattr(self.dut, f"{self.prefix}__{name}")

    def put(self, name: str, fields: dict) -> None:
        self.writers[name].put(pack(self.layout(name), fields))

    async def drain(self) -> None:
        for writer in self.writers.values():
            await writer.drain()

    def set_registers(self, overrides: dict) -> None:
        for name, member in self.members.items():
            if member.is_port and member.flow.name == "In":
                value = overrides[name] if name in overrides else _port_value(member)
                if isinstance(value, dict):
                    value = pack(member.shape, value)
                self.signal(name).value = value

    def port_counter_errors(self) -> list[str]:
        """The NIC's per-plane frame and byte counters against what the bench moved (after quiesce())."""
        errors = []
        for direction, frames, nbytes in (
            ("rx", [i.frames for i in self.inputs], [i.bytes for i in self.inputs]),
            ("tx", self.sent_frames, self.sent_bytes),
        ):
            for unit, want in (("frames", frames), ("bytes", nbytes)):
                raw = int(self.signal(f"stat_port_{direction}_{unit}").value)
                got = [(raw >> (32 * p)) & 0xFFFFFFFF for p in range(self.planes)]
                if got != [w & 0xFFFFFFFF for w in want]:
                    errors.append(f"{self.prefix} port {direction} {unit}: NIC {got}, moved {want}")
        if any(i.busy or i.queue for i in self.inputs):
            errors.append(f"{self.prefix}: frames still waiting at its ports after quiesce")
        return errors

    def counters(self) -> dict[str, int]:
        out = {}
        for block, names in STATS.items():
            for name in names:
                out[f"{block}_{name}"] = int(self.signal(f"stat_{block}_{name}").value)
        return out

    # -- fabric endpoint -------------------------------------------------------------------------
    def on_frame(self, frame, plane: int, now: int) -> None:
        copies = [(frame.encode(), True)]
        if self.fault is not None:
            copies = self.fault(self, plane, frame, copies[0][0])
        if self.on_receive is not None and any(intact for _, intact in copies):
            self.on_receive(self, plane, frame, now)
        qp = self.bench.qp_index(frame.bth.dest_qp)
        for _, intact in copies:
            self.sacks.on_arrival(qp, plane, frame, intact)
            if intact:
                self.receive_model.on_arrival(qp, frame, now)
        for raw, _ in copies:
            self.inputs[plane].send(raw)

    def next_data(self, now: int, plane_ok: int):
        for p in range(self.planes):
            if (plane_ok >> p) & 1:
                self.outputs[p].resume()
        return None

    def set_port(self, plane: int, up: bool) -> None:
        self.port_up = (self.port_up | (1 << plane)) if up else (self.port_up & ~(1 << plane))
        self.signal("link_up" if "link_up" in self.members else "plane_up").value = self.port_up
        self.outputs[plane].resume()

    def _mac_has_room(self, plane: int) -> bool:
        """The MAC of a plane port holds one frame besides the one on the wire (a down port drops)."""
        port = self.ports[plane]
        return not port.up or (not port.data and not port.prio)

    def _transmit(self, plane: int, raw: bytes) -> None:
        self.sent_frames[plane] += 1
        self.sent_bytes[plane] += len(raw)
        frame = wire.decode(raw, check_icrc=True)
        now = now_ps()
        self.bench.advance(now)
        if self.on_transmit is not None:
            self.on_transmit(self, plane, frame, now)
        qp = self.peer_qp.get(frame.bth.dest_qp)
        if qp is not None:
            if frame.opcode.is_write:
                self.paths.on_data_frame(qp, frame.ev, now)
            else:
                self.sacks.on_control(qp, frame, now)
        self.ports[plane].enqueue(frame, now)

    def _on_ack(self, record) -> None:
        self.acked_msn[int(record.qp)] = int(record.msn)


class NicBench:
    """The system: clock, reset, the fabric, one :class:`RtlNic` per cluster NIC."""

    def __init__(self, dut, cfg: SystemConfig):
        self.dut, self.cfg = dut, cfg
        component = MrcNicTop if cfg.host_interface else MrcNic
        self.nic_model = layout_only(component(**cfg.nic_params()))
        self.fabric = Fabric(cfg.fabric_config())
        self.rng = random.Random(cfg.seed)
        cocotb.start_soon(Clock(dut.clk, CLOCK_PS, unit="ps").start())
        # NIC 0 and NIC 1 on different T0s (every path between them crosses a T1), more NICs after them.
        hosts = [0, cfg.radix // 2] + [h for h in range(cfg.hosts) if h not in (0, cfg.radix // 2)]
        fc = self.fabric.cfg
        self.base_rtt_ps = fc.base_rtt_ps()
        self.reorder_slack_ps = 2_000_000  # the time rule's slack beyond target_qdelay (§7.7)
        # A packet whose EV was chosen just before a retirement may still leave after it: from the header
        # builder, the plane queue and the MAC's buffer (a few PMTU frames at link rate).
        frame_ps = round(wire_bytes(cfg.pmtu, srv6=True) * 8e12 / cfg.link_rate_bps)
        self.stale_ev_grace_ps = 6 * frame_ps + 4_000_000
        self.nics = [RtlNic(self, i, hosts[i]) for i in range(cfg.nics)]
        self.wall_start = None
        self.cycles_start = 0
        self.paused = False

    def advance(self, now: int | None = None) -> None:
        if not self.paused:
            self.fabric.loop.run(until=now_ps() if now is None else now)

    async def quiesce(self, cycles: int = 3000) -> None:
        """Stop the fabric (no frame moves between NICs) and let the NICs finish what they hold, so their
        port counters can be compared with what was moved; :meth:`resume` continues."""
        self.paused = True
        await ClockCycles(self.dut.clk, cycles)

    def resume(self) -> None:
        self.paused = False

    async def _fabric_clock(self):
        while True:
            await ClockCycles(self.dut.clk, FABRIC_STEP_CYCLES)
            self.advance()

    def registers(self, nic: RtlNic) -> dict:
        """Register values for a NIC on this fabric (times from the fabric's base RTT)."""
        cfg = self.cfg
        cycle_ps = CLOCK_PS
        rtt = self.base_rtt_ps
        target = 0.75 * rtt
        plane_bdp = cfg.link_rate_bps * rtt / 8e12
        return {
            "config": {
                "srv6": 1,
                "udp_port": wire.MRC_UDP_PORT,
                "pkey": 0xFFFF,
                "hop_limit": 8,
                "dscp_data": wire.Dscp.TRIMMABLE,
                "dscp_retx": wire.Dscp.TRIMMABLE_RETX,
                "own_gid": gid(nic.host),
                "port_mac": [host_mac(nic.host, p) for p in range(cfg.planes)],
                "next_hop_mac": [0x02FF00000000 | p for p in range(cfg.planes)],
                "port_address": [wire.port_address(LOCATOR, p, nic.host) for p in range(cfg.planes)],
            },
            "pmtu_log2": cfg.pmtu.bit_length() - 1,
            # one PMTU packet waiting per plane inside the NIC (the MAC holds the one on the wire)
            "plane_queue_beats": -(-(138 + cfg.pmtu + 4) // cfg.data_width),
            "min_active": max(1, cfg.ev_slots // 4),
            "rto_cycles": round(4 * rtt / cycle_ps),
            "reorder_cycles": round((target + self.reorder_slack_ps) / cycle_ps),
            "probe_interval": round(20_000_000 / cycle_ps),
            "probe_interval_max": round(1_000_000_000 / cycle_ps),
            "probe_rto": round(4 * rtt / cycle_ps),
            "cc_mtu": cfg.pmtu,
            "cc_max_cwnd": round(1.5 * plane_bdp * cfg.planes),
            "cc_base_rtt": round(rtt / 128_000),
            "cc_target": max(1, round(target / 128_000)),
            "ack_gen_cycles": round(2_000_000 / cycle_ps),
            "ack_interval_cycles": round(1_000_000 / cycle_ps),
            "base_rtt_cycles": round(rtt / cycle_ps),
        }

    async def start(self, overrides: dict | None = None):
        dut = self.dut
        dut.rst.value = 1
        for nic in self.nics:
            regs = self.registers(nic)
            regs.update(overrides or {})
            nic.set_registers(regs)
        await ClockCycles(dut.clk, 4)
        dut.rst.value = 0
        for nic in self.nics:
            nic.start()
        # The path selector clears its EV table for Q x N cycles after reset.
        await ClockCycles(dut.clk, self.cfg.qps * self.cfg.ev_slots + 8)
        cocotb.start_soon(self._fabric_clock())
        self.wall_start = time.monotonic()
        self.cycles_start = now_ps() // CLOCK_PS

    def sim_cycles_per_s(self) -> float:
        cycles = now_ps() // CLOCK_PS - self.cycles_start
        return cycles / max(1e-9, time.monotonic() - self.wall_start)

    # -- connection set-up (what the driver of issue 7 will do through registers and rings) -----
    def qpn(self, qp: int) -> int:
        return 0x100 | qp  # the low bits index the QP tables

    def qp_index(self, qpn: int) -> int | None:
        """Our QP index of QPN ``qpn`` (None: not one of ours)."""
        qp = qpn - 0x100
        return qp if 0 <= qp < self.cfg.qps else None

    def connect(self, a: RtlNic, qa: int, b: RtlNic, qb: int, *, psn_a=None, psn_b=None, seed=0):
        """Connect QP ``qa`` of NIC ``a`` with QP ``qb`` of NIC ``b`` (both directions). Returns the EV
        tables (the reference model's, also used as the configuration) of a and b."""
        cfg = self.cfg
        psn = {a: self.rng.randrange(1 << 24) if psn_a is None else psn_a}
        psn[b] = self.rng.randrange(1 << 24) if psn_b is None else psn_b
        info = self.fabric.cfg
        tables = []
        for me, q, peer, pq in ((a, qa, b, qb), (b, qb, a, qa)):
            dest = peer.index
            template = wire.RouteTemplate.for_clos(
                LOCATOR, me.host // info.half, peer.host // info.half, peer.host
            )
            usids = list(template.usids) + [0] * (6 - len(template.usids))
            me.put(
                "route_configure",
                {
                    "dest": dest,
                    "template": {
                        "locator": template.locator,
                        "usids": usids,
                        "count": len(template.usids),
                        "t1_slot": template.t1_slot,
                    },
                },
            )
            me.put(
                "tx_qp_configure",
                {
                    "qp": q,
                    "context": {
                        "qpn": self.qpn(q),
                        "peer_qpn": self.qpn(pq),
                        "peer_gid": gid(peer.host),
                        "dest": dest,
                    },
                },
            )
            table = EvTable(
                cfg.ev_slots,
                cfg.planes,
                info.t1_count,
                seed=seed * 1000 + me.index * 10 + q + 1,
                backups=cfg.backups,
                min_active=max(1, cfg.ev_slots // 4),
            )
            tables.append(table)
            me.paths.attach(q, table)
            me.sacks.attach(q, psn[peer])
            me.receive_model.attach(q, self.qpn(q), self.qpn(pq), psn[peer])
            me.peer_qp[self.qpn(pq)] = q
            me.put("ev_seed", {"qp": q, "seed": table.lfsr_seed})
            for slot, entry in enumerate(table.slots):
                me.put("ev_configure", {"qp": q, "slot": slot, "ev": entry.ev, "state": EvState.GOOD})
            for plane, evs in enumerate(table.backups):
                for index, ev in enumerate(evs):
                    me.put(
                        "reserve_configure", {"qp": q, "plane": plane, "index": index, "ev": ev, "valid": 1}
                    )
            me.put("connect", {"qp": q, "psn": psn[me], "msn": 0, "rqmsn": 0})
            me.put(
                "rx_qp_configure",
                {
                    "qp": q,
                    "entry": {
                        "connected": 1,
                        "qpn": self.qpn(q),
                        "peer_qpn": self.qpn(pq),
                        "peer_gid": gid(peer.host),
                        "dest": dest,
                        "pd": 1,
                        "pmtu_log2": cfg.pmtu.bit_length() - 1,
                    },
                    "initial_psn": psn[peer],
                    "initial_rqmsn": 0,
                },
            )
        return tables

    def register_memory(self, nic: RtlNic, index: int, base: int, length: int, tag: int = 0x5A) -> int:
        """A memory region writable by the peer; returns its R_Key (low bits = table index)."""
        rkey = (tag << 8) | index
        nic.receive_model.register(rkey, base, length)
        nic.put(
            "mr_configure",
            {
                "index": index,
                "entry": {
                    "valid": 1,
                    "rkey": rkey,
                    "pd": 1,
                    "remote_write": 1,
                    "base": base,
                    "length": length,
                },
            },
        )
        return rkey

    def post_write(self, nic: RtlNic, qp: int, local: int, remote: int, rkey: int, length: int, imm=None):
        nic.put(
            "work_request",
            {
                "qp": qp,
                "kind": WriteKind.WRITE if imm is None else WriteKind.WRITE_IMM,
                "local_addr": local,
                "remote_va": remote,
                "rkey": rkey,
                "length": length,
                "imm": imm or 0,
            },
        )

    async def wait_acked(self, nic: RtlNic, qp: int, msn: int, timeout_cycles: int) -> bool:
        """Until the sender has the transport ACK of message ``msn`` (or later) on ``qp``."""
        for _ in range(timeout_cycles // 256):
            got = nic.acked_msn.get(qp)
            if got is not None and ((got - msn) & 0xFFFF) < 0x8000:
                return True
            await ClockCycles(self.dut.clk, 256)
        return False
