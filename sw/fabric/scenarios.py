"""Scenarios: traffic patterns and failure schedules over a multi-plane Clos, run to completion.

``run(SimConfig)`` builds the fabric, one endpoint per host (MRC model or the RoCE-over-ECMP baseline),
one QP pair and one WRITE message per flow, schedules the fabric events (failures, loss changes), runs
the event loop until every flow is acknowledged (or the time limit), verifies every placed byte against
the flow's pattern and returns the raw results that ``report`` turns into figures.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from ..model.endpoint import Endpoint
from ..model.memory import MemoryRegion, PatternSource, pattern_bytes
from ..model.params import frame_overhead
from .topology import Fabric, FabricConfig

__all__ = ["SCENARIOS", "FabricEvent", "Flow", "SimConfig", "SimResult", "parse_event", "run"]

SCENARIOS = ("permutation", "link-failure", "incast", "all-to-all")
US = 1_000_000
GUARD = 4096


@dataclass
class FabricEvent:
    """A scheduled change of the fabric: ``link``/``port``/``switch`` down (or ``-up``), or a new ``loss``.

    args: link = (plane, t0, t1); port = (plane, host); switch = (plane, tier 0|1, index); loss = (p,).
    """

    at_ps: int
    kind: str
    args: tuple
    up: bool = False

    @property
    def is_failure(self) -> bool:
        return not self.up and self.kind != "loss"

    def describe(self) -> str:
        if self.kind == "loss":
            return f"loss {self.args[0]:g}"
        names = {
            "link": "link p{}.t0.{}-t1.{}",
            "port": "port p{} host {}",
            "switch": "switch p{} tier {} #{}",
        }
        return names[self.kind].format(*self.args) + (" up" if self.up else " down")

    def apply(self, now: int, fabric: Fabric) -> None:
        if self.kind == "link":
            fabric.set_link(("t0t1", *self.args), self.up)
        elif self.kind == "port":
            fabric.set_link(("host", *self.args), self.up)
        elif self.kind == "switch":
            fabric.set_switch(*self.args, self.up)
        elif self.kind == "loss":
            for port in fabric.all_ports():
                port.loss = float(self.args[0])

    def affects_flow(self, flow, info) -> bool:
        """Could this failure hit some of the flow's packets?"""
        if self.kind == "link":
            return flow.links == 4 and self.args[1] in (info.t0_of(flow.src), info.t0_of(flow.dst))
        if self.kind == "port":
            return self.args[1] in (flow.src, flow.dst)
        if self.kind == "switch":
            _, tier, index = self.args
            if tier == 1:
                return flow.links == 4
            return index in (info.t0_of(flow.src), info.t0_of(flow.dst))
        return False

    def affects_ev(self, ev: int) -> bool:
        """Does a path named by ``ev`` cross the failed element (for a flow it affects)?"""
        plane, uplink = ev >> 29, (ev >> 21) & 0xFF
        if self.kind == "loss" or plane != self.args[0]:
            return False
        if self.kind == "link" or (self.kind == "switch" and self.args[1] == 1):
            return uplink == self.args[2]
        return True


def parse_event(spec: str) -> FabricEvent:
    """``AT_US:KIND:ARGS``: ``40:link:0,0,3``, ``90:link-up:0,0,3``, ``30:switch:1,1,2``, ``30:port:2,5``,
    ``10:loss:0.01``."""
    try:
        at, kind, args = spec.split(":")
        up = kind.endswith("-up")
        kind = kind.removesuffix("-up")
        values = tuple(float(a) if kind == "loss" else int(a) for a in args.split(","))
        if len(values) != {"link": 3, "port": 2, "switch": 3, "loss": 1}[kind] or (up and kind == "loss"):
            raise ValueError
    except (ValueError, KeyError):
        raise ValueError(
            f"bad fabric event {spec!r}: want AT_US:link|port|switch[-up]:ARGS or AT_US:loss:P"
        ) from None
    return FabricEvent(int(float(at) * US), kind, values, up)


@dataclass
class SimConfig:
    scenario: str = "permutation"
    transport: str = "mrc"  # or "roce-ecmp"
    fabric: FabricConfig = field(default_factory=FabricConfig)
    message_bytes: int = 4 << 20
    evs: int = 128
    incast_senders: int = 8
    fail_at_us: float | None = None  # link-failure: when (default: half the ideal FCT)
    fail_link: tuple | None = None  # ("t0t1", plane, t0, t1); default: plane 0, T0 of host 0, T1 0
    events: list = field(default_factory=list)  # FabricEvent or "AT_US:KIND:ARGS" strings, any scenario
    max_time_us: float | None = None
    bin_us: float = 2.0  # throughput sampling bin
    param_overrides: dict = field(default_factory=dict)
    pcap: str | None = None
    pcap_link: tuple | None = None
    progress: object = None  # callable(sim_time_ps, done_flows, total_flows)
    byte_exact: bool = False  # keep every destination region in memory (with guard bytes) and compare it


@dataclass
class Flow:
    fid: int
    src: int
    dst: int
    nbytes: int
    links: int
    start: int = 0
    placed_at: int | None = None
    acked_at: int | None = None
    ideal_ps: int = 0
    verified: bool = False
    region: MemoryRegion | None = None
    qp: object = None
    bins: dict = field(default_factory=dict)


@dataclass
class SimResult:
    cfg: SimConfig
    flows: list
    fabric: Fabric
    endpoints: list
    wall_s: float
    events: int
    sim_end_ps: int
    failures: list  # FabricEvent: every scheduled fabric event, in time order
    plane_bins: list  # per plane: dict bin -> payload bytes delivered
    bin_ps: int
    efficiency: float
    line_rate_bps: int


def _flows(cfg: SimConfig, rng: random.Random) -> list[tuple[int, int, int]]:
    n = cfg.fabric.hosts
    size = cfg.message_bytes
    if cfg.scenario in ("permutation", "link-failure"):
        while True:
            perm = list(range(n))
            rng.shuffle(perm)
            if all(perm[i] != i for i in range(n)):
                break
        return [(i, perm[i], size) for i in range(n)]
    if cfg.scenario == "incast":
        senders = min(cfg.incast_senders, n - 1)
        return [(1 + i, 0, size) for i in range(senders)]
    if cfg.scenario == "all-to-all":
        mtu = cfg.fabric.mtu
        per = max(mtu, -(-size // (n - 1) // mtu) * mtu)
        return [(s, d, per) for s in range(n) for d in range(n) if s != d]
    raise ValueError(f"unknown scenario {cfg.scenario!r}; one of {', '.join(SCENARIOS)}")


def run(cfg: SimConfig) -> SimResult:
    fc = cfg.fabric
    if cfg.transport == "roce-ecmp":
        fc.srv6 = False
        fc.trimming = False
    elif cfg.transport != "mrc":
        raise ValueError(f"unknown transport {cfg.transport!r}")
    fabric = Fabric(fc)
    loop = fabric.loop
    rng = random.Random(fc.seed)
    params = fc.params(n_evs=cfg.evs, **cfg.param_overrides)
    info = fc.info()
    endpoints = []
    for host in fabric.hosts:
        if cfg.transport == "mrc":
            ep = Endpoint(host.index, params, info, host, seed=fc.seed * 7777 + host.index)
        else:
            from .roce import RoceEndpoint

            ep = RoceEndpoint(host.index, params, info, host, seed=fc.seed * 7777 + host.index)
        host.endpoint = ep
        endpoints.append(ep)
    eff = fc.mtu / (fc.mtu + frame_overhead(fc.srv6))
    line_rate = fc.link_rate_bps * fc.planes
    flows: list[Flow] = []
    by_qp: dict[tuple[int, int], Flow] = {}
    for fid, (src, dst, nbytes) in enumerate(_flows(cfg, rng)):
        links = 2 if info.t0_of(src) == info.t0_of(dst) else 4
        packets = max(1, -(-nbytes // fc.mtu))
        ideal = int((nbytes + packets * frame_overhead(fc.srv6)) * 8e12 / line_rate)
        ideal += fc.one_way_ps(links)
        flow = Flow(fid, src, dst, nbytes, links, ideal_ps=ideal)
        qpn = 16 + fid
        sq = endpoints[src].create_qp(qpn, dst, qpn)
        endpoints[dst].create_qp(qpn, src, qpn)
        if cfg.byte_exact:
            region = MemoryRegion(0x1000_0000 - GUARD, nbytes + 2 * GUARD, buffer=True)
        else:
            region = MemoryRegion(0x1000_0000, nbytes, pattern_seed=fid)
        flow.region = endpoints[dst].register(fid + 1, region)
        flow.qp = sq
        flows.append(flow)
        by_qp[(dst, qpn)] = flow
    for flow in flows:
        endpoints[flow.src].post_write(
            16 + flow.fid,
            0x1000_0000,
            flow.fid + 1,
            flow.nbytes,
            PatternSource(flow.fid, flow.nbytes),
            wr_id=flow.fid,
            now=0,
        )

    bin_ps = int(cfg.bin_us * US)
    plane_bins: list[dict[int, int]] = [dict() for _ in range(fc.planes)]
    events = [parse_event(e) if isinstance(e, str) else e for e in cfg.events]
    track_flows = cfg.scenario == "link-failure" or any(e.is_failure for e in events)

    def on_rx(host, frame, plane, now):
        if frame.payload and not frame.trimmed and frame.bth.opcode < 0xD0:
            b = now // bin_ps
            pb = plane_bins[plane]
            n = len(frame.payload)
            pb[b] = pb.get(b, 0) + n
            if track_flows:
                flow = by_qp.get((host.index, frame.bth.dest_qp))
                if flow is not None:
                    flow.bins[b] = flow.bins.get(b, 0) + n

    for host in fabric.hosts:
        host.on_rx = on_rx

    done = [0]

    def placed(qp, msn, now):
        flow = by_qp.get((qp.endpoint.host, qp.qpn))
        if flow is not None and flow.placed_at is None:
            flow.placed_at = now

    def acked(qp, msg, now):
        flow = by_src.get((qp.endpoint.host, qp.qpn))
        if flow is not None and flow.acked_at is None and msg.msn == 0:
            flow.acked_at = now
            done[0] += 1
            if done[0] == len(flows):
                loop.stopped = True

    by_src = {(f.src, 16 + f.fid): f for f in flows}
    for ep in endpoints:
        ep.on_message_placed = placed
        ep.on_message_acked = acked

    max_ideal = max(f.ideal_ps for f in flows)
    if cfg.scenario == "link-failure" and not any(e.is_failure for e in events):
        key = cfg.fail_link or ("t0t1", 0, info.t0_of(0), 0)
        at = int(cfg.fail_at_us * US) if cfg.fail_at_us is not None else max_ideal // 2
        events.append(FabricEvent(at, "link", tuple(key[1:])))
    events.sort(key=lambda e: e.at_ps)
    for event in events:
        loop.at(event.at_ps, event.apply, fabric)
    capture = None
    if cfg.pcap:
        from ..wire.pcap import PcapWriter

        capture = PcapWriter(cfg.pcap)
        first_link = next((e for e in events if e.kind == "link"), None)
        default = ("t0t1", *first_link.args) if first_link else ("host", 0, 0)
        for port in fabric.links[tuple(cfg.pcap_link or default)]:
            port.capture = capture

    limit = int(cfg.max_time_us * US) if cfg.max_time_us else 50 * max_ideal + 20_000 * US

    def finished() -> bool:
        """Also stop when every flow is acknowledged or its QP is in error."""
        return all(f.acked_at is not None or getattr(f.qp.sender, "error", None) for f in flows)

    def progress(now):
        if cfg.progress is not None:
            cfg.progress(now, done[0], len(flows))

    wall = time.perf_counter()
    loop.run(until=limit, stop=finished, progress=progress, progress_every=5_000)
    progress(loop.now)
    wall = time.perf_counter() - wall
    if capture is not None:
        capture.close()
    for flow in flows:
        region = flow.region
        if cfg.byte_exact:
            buf = region.buffer
            flow.verified = (
                flow.placed_at is not None
                and bytes(buf[GUARD : GUARD + flow.nbytes]) == pattern_bytes(flow.fid, 0, flow.nbytes)
                and not any(buf[:GUARD])
                and not any(buf[GUARD + flow.nbytes :])
                and region.placed_bytes == flow.nbytes
            )
        else:
            flow.verified = flow.placed_at is not None and region.verify(flow.nbytes)
    return SimResult(
        cfg,
        flows,
        fabric,
        endpoints,
        wall,
        loop.events,
        loop.now,
        events,
        plane_bins,
        bin_ps,
        eff,
        line_rate,
    )
