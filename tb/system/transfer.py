"""One RDMA WRITE transfer between two RTL NICs over the fabric, verified byte for byte, with figures.

Used by the system tests and by ``make demo``. Everything goes through the ``mrcnic`` driver, as an
application would: connect a QP on each NIC, register the destination memory, post the WRITEs (every
``imm_every``-th one with immediate data, for a receive posted at the peer) into the send queue, ring the
doorbell, poll the completion queues. The figures:

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

from mrcnic.driver import CqeKind, CqeStatus, QpState
from mrcnic.model.params import wire_bytes

from .bench import CLOCK_PS, NicBench, now_ps

__all__ = ["Transfer", "TransferResult", "theoretical_goodput_bps"]

GUARD = 4096  # bytes checked untouched on each side of the destination region
POLL_CYCLES = 64  # how often the host polls its completion queues


def theoretical_goodput_bps(cfg) -> float:
    """Payload rate with every plane link saturated by full-PMTU data frames (SRv6 mode)."""
    return cfg.planes * cfg.link_rate_bps * cfg.pmtu / wire_bytes(cfg.pmtu, srv6=True)


@dataclass
class TransferResult:
    size: int
    messages: int
    data_verified: bool = False
    completed: bool = False  # every WRITE completed SUCCESS at the sender
    completions: list = field(default_factory=list)  # the sender's completions, in order
    receive_completions: list = field(default_factory=list)  # the receiver's (WRITE-with-immediate)
    receive_completions_verified: bool = False  # one per WRITE_IMM, in order, immediate and length right
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
    retransmissions: list = field(default_factory=list)  # (time_ps, psn, BTH.A) of every BTH.RTX data frame
    arrivals: list = field(default_factory=list)  # (time_ps, plane, psn, payload bytes, trimmed) at the peer
    lost_frames: int = 0  # data frames sent that did not reach the peer whole (dropped or trimmed)
    # reference-model scoreboards (tb/system/scoreboard.py): what was checked, and every disagreement
    model_checks: dict = field(default_factory=dict)
    model_mismatches: list = field(default_factory=list)
    port_counter_errors: list = field(default_factory=list)  # per-plane frame/byte counters vs the bench


class Transfer:
    """``size`` bytes from NIC ``a`` to NIC ``b`` in messages of ``message_size`` on a new QP pair."""

    def __init__(self, bench: NicBench, size: int, *, message_size: int = 65536, imm_every: int = 4):
        self.bench, self.size, self.message_size = bench, size, message_size
        self.imm_every = imm_every
        self.a, self.b = bench.nics[0], bench.nics[1]
        self.result = TransferResult(size=size, messages=-(-size // message_size))
        self.qa = self.qb = None
        self.a.on_transmit = self._on_transmit
        self.b.on_receive = self._on_receive

    @property
    def messages_done(self) -> int:
        return len(self.result.completions)

    def _on_receive(self, nic, plane, frame, now):
        if self.qb is not None and frame.opcode.is_write and frame.bth.dest_qp == self.qb.qpn:
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
            if frame.bth.rtx:
                r.retransmissions.append((now, frame.bth.psn, frame.bth.ack_req))

    async def run(self, timeout_cycles: int, during=None) -> TransferResult:
        """Set up, post every message, poll until each has its completion (``during``: a coroutine run
        meanwhile); then verify memory, completions, counters and the model's view."""
        bench, a, b, r = self.bench, self.a, self.b, self.result
        cfg = bench.cfg
        r.plane_frames = [0] * cfg.planes
        rng = bench.rng
        self.qa, self.qb = qa, qb = await bench.connect(a, b)
        local = a.driver.memory.allocate(self.size)
        region = b.driver.memory.allocate(self.size + 2 * GUARD)
        mr = await bench.register_memory(b, region, self.size + 2 * GUARD)
        remote = region + GUARD
        source = rng.randbytes(self.size)
        a.ram.write(local, source)
        before = rng.randbytes(self.size + 2 * GUARD)
        b.ram.write(region, before)
        work = []  # (offset, length, immediate or None)
        for msn, offset in enumerate(range(0, self.size, self.message_size)):
            with_imm = self.imm_every and msn % self.imm_every == self.imm_every - 1
            work.append(
                (offset, min(self.message_size, self.size - offset), (0xC0DE0000 | msn) if with_imm else None)
            )
        if during is not None:
            cocotb.start_soon(during)
        deadline = now_ps() + timeout_cycles * CLOCK_PS
        posted = 0
        while len(r.completions) < len(work) and now_ps() < deadline:
            while posted < len(work) and qa.outstanding < qa.sq_depth and qa.state == QpState.RTS:
                offset, length, imm = work[posted]
                if imm is None:
                    await qa.post_write(local + offset, remote + offset, mr.rkey, length, wr_id=posted)
                else:
                    await qb.post_recv(wr_id=posted)
                    await qa.post_write_imm(
                        local + offset, remote + offset, mr.rkey, length, imm, wr_id=posted
                    )
                posted += 1
            r.completions += await a.driver.poll_cq()
            r.receive_completions += await b.driver.poll_cq()
            if any(not c.ok for c in r.completions) and qa.outstanding == 0:
                break  # the QP is in error: everything posted has completed (FLUSHED after the first)
            await ClockCycles(bench.dut.clk, POLL_CYCLES)
        r.end_ps = now_ps()
        r.completed = len(r.completions) == len(work) and all(
            c.ok and c.kind == CqeKind.SEND for c in r.completions
        )
        r.completed &= [c.wr_id for c in r.completions] == list(range(len(work)))
        # the receive completions follow the last ACK closely (the peer writes them before acknowledging)
        wanted = [(i, imm, length) for i, (_, length, imm) in enumerate(work) if imm is not None]
        for _ in range(20):
            if len(r.receive_completions) >= len(wanted) or not r.completed:
                break
            await ClockCycles(bench.dut.clk, POLL_CYCLES)
            r.receive_completions += await b.driver.poll_cq()
        r.receive_completions_verified = [
            (c.wr_id, c.imm, c.byte_len, c.kind, c.status) for c in r.receive_completions
        ] == [(i, imm, length, CqeKind.RECV_IMM, CqeStatus.SUCCESS) for i, imm, length in wanted]
        placed = b.ram.read(remote, self.size)
        r.data_verified = (
            r.completed
            and placed == source
            and b.ram.read(region, GUARD) == before[:GUARD]
            and b.ram.read(remote + self.size, GUARD) == before[GUARD + self.size :]
        )
        elapsed = max(1, r.end_ps - r.start_ps)
        r.goodput_bps = self.size * 8e12 / elapsed
        r.goodput_fraction = r.goodput_bps / theoretical_goodput_bps(cfg)
        r.lost_frames = r.data_frames - sum(1 for arrival in r.arrivals if not arrival[4])
        # Quiet fabric: the NICs' per-plane port counters must equal the frames and bytes moved; the
        # counters are read (through the driver) while nothing arrives.
        await bench.quiesce()
        r.port_counter_errors = await a.port_counter_errors() + await b.port_counter_errors()
        r.counters = await a.driver.counters()
        r.peer_counters = await b.driver.counters()
        bench.resume()
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
        f"{len(r.completions)} send / {len(r.receive_completions)} receive completions; "
        f"model checks {r.model_checks}, {len(r.model_mismatches)} mismatches"
    )
