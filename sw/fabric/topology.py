"""Multi-plane two-tier Clos: hosts with one port per plane, per plane T0/T1 switches, static routes.

Per plane: T0 switches with radix/2 host ports and radix/2 uplinks (uplink j to T1 j); radix/2 T1s;
hosts = T0 count x radix/2 (T0 count <= radix). Port numbering: T0 ports 0..radix/2-1 face hosts
(host h is on T0 h // (radix/2), port h % (radix/2)), ports radix/2.. are uplinks; T1 port t faces T0 t.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ..model.endpoint import FabricInfo
from ..model.params import Params, frame_overhead
from ..wire import Role, header_length, usid
from ..wire.constants import Opcode
from .events import EventLoop
from .link import FCS, PREAMBLE_IFG, Port
from .switch import Switch

__all__ = ["Fabric", "FabricConfig", "Host"]

LOCATOR = 0xFC000000


@dataclass
class FabricConfig:
    hosts: int = 64
    planes: int = 4
    radix: int = 16
    link_rate_bps: int = 100_000_000_000  # per plane port (host line rate = planes x this)
    link_delay_ps: int = 500_000  # propagation per link
    ecn_bdp: float = 0.2  # ECN marking threshold, plane BDPs (UEC: 0.2-0.8)
    trim_bdp: float = 0.5  # trimming threshold, plane BDPs: 2 hops x 0.5 BDP of skew < loss delta
    buffer_bdp: float = 3.0  # tail drop, plane BDPs
    prio_bdp: float = 1.0  # priority (control / trimmed) queue limit
    trimming: bool = True
    srv6: bool = True
    loss: float = 0.0  # random loss probability on every link
    seed: int = 1
    mtu: int = 4096

    @property
    def half(self) -> int:
        return self.radix // 2

    @property
    def t0_count(self) -> int:
        return -(-self.hosts // self.half)

    @property
    def t1_count(self) -> int:
        return self.half

    def validate(self) -> None:
        if self.radix < 2 or self.radix % 2:
            raise ValueError("radix must be even and >= 2")
        if self.t0_count > self.radix:
            raise ValueError(
                f"{self.hosts} hosts need {self.t0_count} T0s; radix {self.radix} allows {self.radix}"
            )
        if not 1 <= self.planes <= 8:
            raise ValueError("1..8 planes")

    def serialization_ps(self, nbytes: int) -> int:
        return int(nbytes * 8e12 / self.link_rate_bps)

    def one_way_ps(self, links: int, payload: int | None = None) -> int:
        """Unloaded one-way latency of a data packet over ``links`` store-and-forward links."""
        payload = self.mtu if payload is None else payload
        return links * (self.link_delay_ps + self.serialization_ps(payload + frame_overhead(self.srv6)))

    def base_rtt_ps(self) -> int:
        """Cross-T1 path: an MTU data packet out, a SACK back, no queueing."""
        sack = header_length(Opcode.SACK, True, self.srv6) + 4 + FCS + PREAMBLE_IFG
        back = 4 * (self.link_delay_ps + self.serialization_ps(sack))
        return self.one_way_ps(4) + back

    def plane_bdp(self) -> int:
        return int(self.link_rate_bps * self.base_rtt_ps() / 8e12)

    def params(self, **overrides) -> Params:
        p = Params(
            mtu=self.mtu,
            srv6=self.srv6,
            base_rtt_ps=self.base_rtt_ps(),
            line_rate_bps=self.link_rate_bps * self.planes,
            trimmable=self.trimming,
        )
        for k, v in overrides.items():
            setattr(p, k, v)
        return p

    def info(self) -> FabricInfo:
        return FabricInfo(planes=self.planes, uplinks=self.t1_count, hosts_per_t0=self.half, locator=LOCATOR)


class Host:
    """A NIC with one port per plane; hosts an endpoint (MRC model or RoCE baseline)."""

    def __init__(self, fabric: Fabric, index: int):
        self.fabric = fabric
        self.loop = fabric.loop
        self.index = index
        self.ports: list[Port] = []
        self.endpoint = None
        self._pull_pending = False
        self.on_rx = None  # callback(host, frame, plane, now)

    # -- environment of the endpoint -------------------------------------------------------------
    def schedule(self, time: int, fn, *args) -> None:
        self.loop.at(time, fn, *args)

    def send_control(self, plane: int, frame) -> None:
        self.ports[plane].enqueue(frame, self.loop.now)

    def wake(self) -> None:
        if not self._pull_pending:
            self._pull_pending = True
            self.loop.at(self.loop.now, self._pull)

    # -- ports -----------------------------------------------------------------------------------
    def port_idle(self, port: Port, now: int) -> None:
        self._pull(now)

    def _pull(self, now: int) -> None:
        self._pull_pending = False
        ep = self.endpoint
        if ep is None:
            return
        mask = 0
        for p in self.ports:
            if p.idle and p.up:
                mask |= 1 << p.plane
        while mask:
            out = ep.next_data(now, mask)
            if out is None:
                return
            plane, frame = out
            self.ports[plane].enqueue(frame, now)
            mask &= ~(1 << plane)

    def receive(self, frame, plane: int, now: int) -> None:
        if self.on_rx is not None:
            self.on_rx(self, frame, plane, now)
        self.endpoint.on_frame(frame, plane, now)


class Fabric:
    def __init__(self, cfg: FabricConfig):
        cfg.validate()
        self.cfg = cfg
        self.loop = EventLoop()
        rng = random.Random(cfg.seed)
        bdp = cfg.plane_bdp()
        self.t0: list[list[Switch]] = []
        self.t1: list[list[Switch]] = []
        self.hosts = [Host(self, h) for h in range(cfg.hosts)]
        half = cfg.half
        rate, delay = cfg.link_rate_bps, cfg.link_delay_ps
        self.links: dict[tuple, tuple[Port, Port]] = {}

        def mkport(owner, index, plane, switch_port):
            port = Port(owner, index, rate, delay, plane=plane)
            port.loop = self.loop
            port.rng = random.Random(rng.randrange(1 << 30))
            port.loss = cfg.loss
            port.trimming = cfg.trimming
            if switch_port:
                port.switch_port = True
                port.ecn_bytes = int(cfg.ecn_bdp * bdp)
                port.trim_bytes = int(cfg.trim_bdp * bdp)
                port.buffer_bytes = int(cfg.buffer_bdp * bdp)
                port.prio_limit = int(cfg.prio_bdp * bdp)
            return port

        def wire(a, pa: Port, b, pb: Port):
            """Link port ``pa`` of node ``a`` with port ``pb`` of node ``b``."""
            pa.connect(b, pb.index, pb)
            pb.connect(a, pa.index, pa)

        for plane in range(cfg.planes):
            t0s = [
                Switch(
                    f"p{plane}.t0.{t}",
                    plane,
                    usid(plane, Role.T0, t),
                    LOCATOR,
                    srv6=cfg.srv6,
                    salt=plane * 1000 + t,
                )
                for t in range(cfg.t0_count)
            ]
            t1s = [
                Switch(
                    f"p{plane}.t1.{j}",
                    plane,
                    usid(plane, Role.T1, j),
                    LOCATOR,
                    srv6=cfg.srv6,
                    salt=plane * 1000 + 500 + j,
                )
                for j in range(cfg.t1_count)
            ]
            for t, sw in enumerate(t0s):
                sw.ports = [mkport(sw, i, plane, True) for i in range(cfg.radix)]
                for i in range(half):
                    sw.ports[i].last_hop = True
                    h = t * half + i
                    sw.routes[usid(plane, Role.HOST, h)] = i
                    sw.host_routes[h + 1] = i
                for j in range(cfg.t1_count):
                    sw.routes[usid(plane, Role.T1, j)] = half + j
                    sw.uplinks.append(half + j)
            for j, sw in enumerate(t1s):
                sw.ports = [mkport(sw, i, plane, True) for i in range(cfg.t0_count)]
                for t in range(cfg.t0_count):
                    sw.routes[usid(plane, Role.T0, t)] = t
                    for i in range(half):
                        sw.routes[usid(plane, Role.HOST, t * half + i)] = t
                        sw.host_routes[t * half + i + 1] = t
                for t in range(cfg.t0_count):
                    up = t0s[t].ports[half + j]
                    down = sw.ports[t]
                    wire(t0s[t], up, t1s[j], down)
                    self.links[("t0t1", plane, t, j)] = (up, down)
            self.t0.append(t0s)
            self.t1.append(t1s)
        for host in self.hosts:
            t, i = divmod(host.index, half)
            for plane in range(cfg.planes):
                hp = mkport(host, plane, plane, False)
                host.ports.append(hp)
                sp = self.t0[plane][t].ports[i]
                wire(host, hp, self.t0[plane][t], sp)
                self.links[("host", plane, host.index)] = (hp, sp)

    # -- failures --------------------------------------------------------------------------------
    def set_link(self, key: tuple, up: bool) -> None:
        a, b = self.links[key]
        a.set_up(up)
        b.set_up(up)
        if key[0] == "host":
            ep = self.hosts[key[2]].endpoint
            if ep is not None and hasattr(ep, "set_port"):
                ep.set_port(key[1], up)

    def set_switch(self, plane: int, tier: int, index: int, up: bool) -> None:
        sw = (self.t0 if tier == 0 else self.t1)[plane][index]
        sw.up = up
        for port in sw.ports:
            port.set_up(up)
            if port.peer_port is not None:
                port.peer_port.set_up(up)

    def all_ports(self):
        for plane in range(self.cfg.planes):
            for sw in self.t0[plane] + self.t1[plane]:
                yield from sw.ports
        for host in self.hosts:
            yield from host.ports

    def switch_counters(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for port in self.all_ports():
            for k, v in port.c.items():
                if k == "max_q":
                    out[k] = max(out.get(k, 0), v)
                else:
                    out[k] = out.get(k, 0) + v
        return out
