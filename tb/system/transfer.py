"""One RDMA WRITE transfer between two RTL NICs over the fabric, verified byte for byte, with figures.

Used by the system tests and by ``make demo``. The figures:

* ``goodput_fraction``: payload bytes / (time from the first data frame to the last ACK), divided by
  the theoretical limit, which is every plane link busy with full-PMTU data frames (headers, ICRC, FCS,
  preamble and inter-frame gap are overhead on the wire, so they are not goodput);
* per-plane share of the data frames, retransmitted and lost packets, EVs retired / restored;
* ``sim_cycles_per_s``: simulated clock cycles per wall second.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import cocotb
from cocotb.triggers import ClockCycles

from mrcnic.model.params import wire_bytes

from .bench import NicBench, now_ps

__all__ = ["Transfer", "TransferResult", "theoretical_goodput_bps"]

GUARD = 4096  # bytes checked untouched on each side of the destination region


def theoretical_goodput_bps(cfg) -> float:
    """Payload rate with every plane link saturated by full-PMTU data frames (SRv6 mode)."""
    return cfg.planes * cfg.link_rate_bps * cfg.pmtu / wire_bytes(cfg.pmtu, srv6=True)


@dataclass
class TransferResult:
    size: int
    messages: int
    data_verified: bool = False
    completed: bool = False
    start_ps: int = 0
    end_ps: int = 0
    goodput_bps: float = 0.0
    goodput_fraction: float = 0.0
    data_frames: int = 0
    retx_frames: int = 0  # data frames with BTH.RTX, ACK-watchdog resends included
    ack_request_frames: int = 0  # of which the ACK watchdog's resends (§7.4: a transport ACK was lost)
    plane_frames: list = field(default_factory=list)
    counters: dict = field(default_factory=dict)
    peer_counters: dict = field(default_factory=dict)
    sim_cycles_per_s: float = 0.0
    timeline: list = field(default_factory=list)  # (time_ps, plane, payload, rtx, ev) of every data frame
    arrivals: list = field(default_factory=list)  # (time_ps, plane, psn, payload bytes, trimmed) at the peer
    lost_frames: int = 0  # data frames sent that did not reach the peer whole (dropped or trimmed)
    # reference-model scoreboards (tb/system/scoreboard.py): what was checked, and every disagreement
    model_checks: dict = field(default_factory=dict)
    model_mismatches: list = field(default_factory=list)
    port_counter_errors: list = field(default_factory=list)  # per-plane frame/byte counters vs the bench


class Transfer:
    """``size`` bytes from NIC ``a`` (QP ``qp``) to NIC ``b`` in messages of ``message_size``."""

    def __init__(
        self,
        bench: NicBench,
        size: int,
        *,
        message_size: int = 65536,
        qp: int = 0,
        local: int = 0,
        remote_base: int = 0x10_0000,
        imm_every: int = 4,
    ):
        self.bench, self.size, self.message_size, self.qp = bench, size, message_size, qp
        self.local, self.remote_base = local, remote_base
        self.imm_every = imm_every
        self.a, self.b = bench.nics[0], bench.nics[1]
        self.result = TransferResult(size=size, messages=-(-size // message_size))
        self.a.on_transmit = self._on_transmit
        self.b.on_receive = self._on_receive

    def _on_receive(self, nic, plane, frame, now):
        if frame.opcode.is_write and frame.bth.dest_qp == self.bench.qpn(self.qp):
            self.result.arrivals.append((now, plane, frame.bth.psn, len(frame.payload), int(frame.trimmed)))

    def _on_transmit(self, nic, plane, frame, now):
        if frame.opcode.is_write:
            r = self.result
            if not r.start_ps:
                r.start_ps = now
            r.data_frames += 1
            r.retx_frames += frame.bth.rtx
            r.plane_frames[plane] += 1
            r.timeline.append((now, plane, len(frame.payload), frame.bth.rtx, frame.ev))

    async def run(self, timeout_cycles: int, during=None) -> TransferResult:
        """Set up, post every message, wait for the last ACK (``during``: a coroutine run meanwhile)."""
        bench, a, b, r = self.bench, self.a, self.b, self.result
        cfg = bench.cfg
        r.plane_frames = [0] * cfg.planes
        rng = bench.rng
        bench.connect(a, self.qp, b, self.qp)
        region = self.remote_base - GUARD
        rkey = bench.register_memory(b, 0, region, self.size + 2 * GUARD)
        source = rng.randbytes(self.size)
        a.ram.write(self.local, source)
        before = rng.randbytes(self.size + 2 * GUARD)
        b.ram.write(region, before)
        await a.drain()
        await b.drain()
        offset = 0
        msn = 0
        while offset < self.size:
            length = min(self.message_size, self.size - offset)
            imm = (
                (0xC0DE0000 | msn) if self.imm_every and msn % self.imm_every == self.imm_every - 1 else None
            )
            if imm is not None:
                b.put("post_receive", {"qp": self.qp})
            bench.post_write(a, self.qp, self.local + offset, self.remote_base + offset, rkey, length, imm)
            offset += length
            msn += 1
        if during is not None:
            cocotb.start_soon(during)
        r.completed = await bench.wait_acked(a, self.qp, msn - 1, timeout_cycles)
        r.end_ps = now_ps()
        await ClockCycles(bench.dut.clk, 64)
        placed = b.ram.read(self.remote_base, self.size)
        r.data_verified = (
            r.completed
            and placed == source
            and b.ram.read(region, GUARD) == before[:GUARD]
            and b.ram.read(self.remote_base + self.size, GUARD) == before[GUARD + self.size :]
        )
        elapsed = max(1, r.end_ps - r.start_ps)
        r.goodput_bps = self.size * 8e12 / elapsed
        r.goodput_fraction = r.goodput_bps / theoretical_goodput_bps(cfg)
        r.lost_frames = r.data_frames - sum(1 for arrival in r.arrivals if not arrival[4])
        # Quiet fabric: the NICs' per-plane port counters must equal the frames and bytes moved.
        await bench.quiesce()
        r.port_counter_errors = a.port_counter_errors() + b.port_counter_errors()
        bench.resume()
        r.counters = a.counters()
        r.peer_counters = b.counters()
        r.ack_request_frames = r.counters["ack_watchdog_ack_requests"]
        for nic, counters in ((a, r.counters), (b, r.peer_counters)):
            nic.paths.check_counters(counters)
            nic.receive_model.check(counters, nic.ram.read)
            r.model_mismatches += nic.paths.mismatches + nic.sacks.mismatches + nic.receive_model.mismatches
        r.model_checks = {
            "ev_decisions": a.paths.summary()["decisions"],
            "ev_outcomes": a.paths.summary()["outcomes"],
            "data_frames_on_model_evs": a.paths.frames_checked,
            "sacks": b.sacks.sacks_checked,
            "trimmed_nacks": b.sacks.nacks_checked,
            "model_placed_packets": b.receive_model.summary()["placed"],
        }
        r.sim_cycles_per_s = bench.sim_cycles_per_s()
        return r


def describe(r: TransferResult) -> str:
    share = ", ".join(f"{100 * n / max(1, r.data_frames):.1f}%" for n in r.plane_frames)
    return (
        f"{r.size} B in {r.messages} messages: verified={r.data_verified} "
        f"goodput {r.goodput_bps / 1e9:.2f} Gb/s = {r.goodput_fraction:.3f} of the limit, "
        f"{r.data_frames} data frames ({r.lost_frames} lost, {r.retx_frames} retransmitted, of which "
        f"{r.ack_request_frames} ACK requests), "
        f"plane share [{share}], "
        f"{(r.end_ps - r.start_ps) / 1e6:.1f} us simulated, {r.sim_cycles_per_s:.0f} cycles/s; "
        f"model checks {r.model_checks}, {len(r.model_mismatches)} mismatches"
    )
