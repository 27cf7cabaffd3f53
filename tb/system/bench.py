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

The NICs are whole NICs (:class:`~mrcnic.hdl.host.nic_top.MrcNicTop`): every test configures and drives
them only through the ``mrcnic`` driver (``RtlNic.driver``: registers over AXI4-Lite, queues in the
host memory), as software drives a board. The bench only moves frames, injects faults and watches the
NIC's path-decision port for the scoreboards.

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
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Event, RisingEdge
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiBus, AxiRam

from mrcnic import driver, wire
from mrcnic.driver.cocotb_backend import CocotbTransport
from mrcnic.driver.fabric_setup import connect_over_fabric
from mrcnic.fabric.topology import LOCATOR, Fabric, FabricConfig
from mrcnic.hdl.host.nic_top import MrcNicTop
from mrcnic.hdl.nic import layout_only
from mrcnic.model.endpoint import gid, host_mac
from mrcnic.model.params import wire_bytes

from .scoreboard import PathScoreboard, ReceiveModel, SackScoreboard
from support.layouts import unpack

__all__ = ["CLOCK_PS", "NicBench", "RtlNic", "SystemConfig"]

CLOCK_PS = 4000  # 250 MHz core clock
FABRIC_STEP_CYCLES = 8
DRIVER_MEMORY_BASE = 0x1000  # the driver allocates rings and buffers from here to the end of the memory


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
    # The time rule's reordering tolerance beyond target_qdelay (§7.7): the path delay differences the
    # fabric adds besides queueing (a test that lengthens some paths adds its skew).
    reorder_slack_ps: int = 2_000_000

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
        return {"nics": self.nics, **{k: v for k, v in self.nic_params().items() if k != "clock_hz"}}

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


class RtlNic:
    """One NIC of the cluster on host ``host`` of the fabric: memory, ports, its driver, records.

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
        self.transport = CocotbTransport(
            dut,
            f"{self.prefix}__",
            self.ram,
            memory_base=DRIVER_MEMORY_BASE,
            memory_size=cfg.memory - DRIVER_MEMORY_BASE,
            name=self.prefix,
        )
        self.driver: driver.Nic | None = None  # opened by NicBench.start
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

    def start(self) -> None:
        for mover in [*self.inputs, *self.outputs, self.path_trace]:
            mover.start()
        self.signal("link_up").value = self.port_up

    def signal(self, name):
        return getattr(self.dut, f"{self.prefix}__{name}")

    def _moved(self) -> dict:
        return {
            "rx_frames": [i.frames for i in self.inputs],
            "rx_bytes": [i.bytes for i in self.inputs],
            "tx_frames": list(self.sent_frames),
            "tx_bytes": list(self.sent_bytes),
        }

    async def port_counter_errors(self) -> list[str]:
        """The NIC's per-plane frame and byte counters, read through the driver, against what the bench
        moved (after :meth:`NicBench.quiesce`). The registers are read one after the other while a late
        probe may still leave: each must lie between the bench's counts before and after the reads."""
        before = self._moved()
        ports = await self.driver.port_counters()
        after = self._moved()
        errors = []
        for name in before:
            got = [c[name] for c in ports]
            low = [v & 0xFFFFFFFF for v in before[name]]
            high = [v & 0xFFFFFFFF for v in after[name]]
            if not all(lo <= g <= hi for lo, g, hi in zip(low, got, high, strict=True)):
                errors.append(f"{self.prefix} port {name}: NIC {got}, moved {low}..{high}")
        if any(i.busy or i.queue for i in self.inputs):
            errors.append(f"{self.prefix}: frames still waiting at its ports after quiesce")
        return errors

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
        self.signal("link_up").value = self.port_up
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
                self.sacks.on_control(qp, frame, now, plane)
        self.ports[plane].enqueue(frame, now)


class NicBench:
    """The system: clock, reset, the fabric, one :class:`RtlNic` per cluster NIC, each with its driver."""

    def __init__(self, dut, cfg: SystemConfig):
        self.dut, self.cfg = dut, cfg
        self.nic_model = layout_only(MrcNicTop(**cfg.nic_params()))
        self.fabric = Fabric(cfg.fabric_config())
        self.rng = random.Random(cfg.seed)
        cocotb.start_soon(Clock(dut.clk, CLOCK_PS, unit="ps").start())
        # NIC 0 and NIC 1 on different T0s (every path between them crosses a T1), more NICs after them.
        hosts = [0, cfg.radix // 2] + [h for h in range(cfg.hosts) if h not in (0, cfg.radix // 2)]
        fc = self.fabric.cfg
        self.base_rtt_ps = fc.base_rtt_ps()
        # A packet whose EV was chosen just before a retirement may still leave after it: from the header
        # builder, the plane queue and the MAC's buffer (a few PMTU frames at link rate).
        frame_ps = round(wire_bytes(cfg.pmtu, srv6=True) * 8e12 / cfg.link_rate_bps)
        self.stale_ev_grace_ps = 6 * frame_ps + 4_000_000
        self.nics = [RtlNic(self, i, hosts[i]) for i in range(cfg.nics)]
        self.wall_start = None
        self.cycles_start = 0
        self.paused = False
        self.connections = 0

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

    def parameters(self) -> dict:
        """NIC parameters (register names, ``Nic.set_parameters``) for this fabric: timers from its
        base RTT, the congestion window from its bandwidth-delay product."""
        cfg = self.cfg
        cycle_ps = CLOCK_PS
        rtt = self.base_rtt_ps
        target = 0.75 * rtt
        plane_bdp = cfg.link_rate_bps * rtt / 8e12
        return {
            "hop_limit": 8,
            "dscp_data": wire.Dscp.TRIMMABLE,
            "dscp_retx": wire.Dscp.TRIMMABLE_RETX,
            "pmtu_log2": cfg.pmtu.bit_length() - 1,
            # one PMTU packet waiting per plane inside the NIC (the MAC holds the one on the wire)
            "plane_queue_beats": -(-(138 + cfg.pmtu + 4) // cfg.data_width),
            "min_active": max(1, cfg.ev_slots // 4),
            "rto_cycles": round(4 * rtt / cycle_ps),
            "reorder_cycles": round((target + cfg.reorder_slack_ps) / cycle_ps),
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

    async def configure(self, nic: RtlNic, overrides: dict | None = None) -> None:
        """Through the driver: the parameters for this fabric (``overrides`` replace some) and the
        NIC's addresses on it (GID, port MACs, the next hop's MACs, the SRv6 port addresses)."""
        cfg = self.cfg
        await nic.driver.set_parameters(**{**self.parameters(), **(overrides or {})})
        await nic.driver.set_addresses(
            gid=gid(nic.host),
            port_macs=[host_mac(nic.host, p) for p in range(cfg.planes)],
            next_hop_macs=[0x02FF00000000 | p for p in range(cfg.planes)],
            port_addresses=[wire.port_address(LOCATOR, p, nic.host) for p in range(cfg.planes)],
        )

    async def start(self, overrides: dict | None = None, *, cq_depth: int = 256):
        """Reset, start the frame movers and the fabric, open every NIC's driver and configure it."""
        dut = self.dut
        dut.rst.value = 1
        for nic in self.nics:
            nic.signal("link_up").value = nic.port_up
        await ClockCycles(dut.clk, 4)
        dut.rst.value = 0
        for nic in self.nics:
            nic.start()
        # The path selector clears its EV table for Q x N cycles after reset.
        await ClockCycles(dut.clk, self.cfg.qps * self.cfg.ev_slots + 8)
        cocotb.start_soon(self._fabric_clock())
        self.wall_start = time.monotonic()
        self.cycles_start = now_ps() // CLOCK_PS
        for nic in self.nics:
            nic.driver = await driver.open(nic.transport, cq_depth=cq_depth)
            await self.configure(nic, overrides)

    def sim_cycles_per_s(self) -> float:
        cycles = now_ps() // CLOCK_PS - self.cycles_start
        return cycles / max(1e-9, time.monotonic() - self.wall_start)

    def qp_index(self, qpn: int) -> int | None:
        """Our QP index of QPN ``qpn`` (None: not one of ours)."""
        qp = qpn - driver.QPN_BASE
        return qp if 0 <= qp < self.cfg.qps else None

    async def connect(self, a: RtlNic, b: RtlNic, *, seed: int | None = None, sq_depth: int = 64):
        """A connected QP on each of ``a`` and ``b`` (route templates, EV profiles, random first PSNs),
        set up through the drivers; the scoreboards take the EV tables the profiles were drawn from, the
        first PSNs and the QPNs. Returns the two driver QPs."""
        if seed is None:
            seed = self.cfg.seed * 1000 + self.connections
        self.connections += 1
        info = self.fabric.cfg
        qa, qb = await connect_over_fabric(
            a.driver,
            b.driver,
            (a.host, b.host),
            uplinks=info.t1_count,
            hosts_per_t0=info.half,
            seed=seed,
            sq_depth=sq_depth,
        )
        for me, q, peer_q in ((a, qa, qb), (b, qb, qa)):
            me.paths.attach(q.index, q.profile.table)
            me.sacks.attach(q.index, q.peer_psn)
            me.receive_model.attach(q.index, q.qpn, peer_q.qpn, q.peer_psn)
            me.peer_qp[peer_q.qpn] = q.index
        return qa, qb

    async def register_memory(self, nic: RtlNic, address: int, length: int):
        """A memory region of ``nic`` the peer may write, through the driver; the receive scoreboard
        learns it too."""
        mr = await nic.driver.register_memory(address, length)
        nic.receive_model.register(mr.rkey, address, length)
        return mr
