"""System tests: two RTL MRC NICs exchanging RDMA WRITEs over the Python multi-plane fabric.

The fault matrix of issue 6: every transfer completes and is verified byte for byte in the receiver's
memory (and the guard bytes around it untouched), the counters agree with what was injected, and
retransmissions stay selective (at most 1.2 x the data packets lost, trimmed or corrupted). Each test
prints its figures and the simulation speed; the random seed is cocotb's (printed, ``SEED=`` reproduces).

The NICs are whole NICs (``MrcNicTop``) driven only through the ``mrcnic`` driver: parameters and
addresses in registers, QPs, EV profiles and memory regions set up by the driver, WRITEs posted into the
send queue and completed through the completion queue, counters read from the register blocks.
"""

import random

import cocotb
import pytest
from cocotb.triggers import ClockCycles

from mrcnic import wire
from mrcnic.driver import CqeStatus, QpState
from mrcnic.fabric.topology import LOCATOR
from mrcnic.model.endpoint import gid, host_mac

from support.cocotb_runner import dut_params, run_cocotb
from system.bench import CLOCK_PS, NicBench, SystemConfig, now_ps
from system.cluster import BUILD_NAME, design
from system.scoreboard import PSN_MOD, psn_at_or_below
from system.transfer import Transfer, describe, theoretical_goodput_bps

SIZE = 256 * 1024


class Injector:
    """Faults on the frames the fabric delivers to one NIC: drop, duplicate or corrupt a fraction of
    the data frames and/or the control frames (SACK, NACK, ACK), counting what it did.

    ``sure_corrupt`` = n: the n-th frame long enough to corrupt is corrupted whatever the dice say, so a
    run always has one to check (at 2 % of about 260 data frames, or 5 % of about 100 SACKs, about one
    seed in 150 would have none)."""

    def __init__(
        self, rng, *, drop=0.0, duplicate=0.0, corrupt=0.0, data=True, control=False, sure_corrupt=None
    ):
        self.rng, self.drop, self.duplicate, self.corrupt = rng, drop, duplicate, corrupt
        self.data, self.control = data, control
        self.sure_corrupt = sure_corrupt
        self.dropped = self.duplicated = self.corrupted = 0
        self.corrupted_data = 0
        self.corruptible = 0  # frames seen that are long enough to corrupt
        self.sacks = []  # (time_ps, SETH, lost: dropped or corrupted) of every SACK it saw

    def __call__(self, nic, plane, frame, raw):
        is_data = frame.opcode.is_write
        if not (self.data if is_data else self.control):
            return [(raw, True)]
        r = self.rng.random()
        seth = None if is_data else frame.get(wire.Seth)
        # A byte after the BTH (SRv6 frames: 14 + 40 + 40 + 8 + 12 = 114), which only the ICRC covers:
        # the NIC must drop the frame as bad ICRC (a flipped address would be dropped for that).
        corruptible = self.corrupt > 0 and len(raw) > 114 + 4
        self.corruptible += corruptible
        sure = corruptible and self.corruptible == self.sure_corrupt
        corrupt = sure or (self.drop <= r < self.drop + self.corrupt and corruptible)
        dropped = r < self.drop and not sure
        if seth is not None:
            self.sacks.append((now_ps(), seth, corrupt or dropped))
        if dropped:
            self.dropped += 1
            return []
        if corrupt:
            at = self.rng.randrange(114, len(raw) - 4)
            bad = bytearray(raw)
            bad[at] ^= 1 << self.rng.randrange(8)
            self.corrupted += 1
            self.corrupted_data += is_data
            return [(bytes(bad), False)]
        if self.drop + self.corrupt <= r < self.drop + self.corrupt + self.duplicate:
            self.duplicated += 1
            return [(raw, True), (raw, True)]
        return [(raw, True)]


def _config(**overrides) -> SystemConfig:
    params = dut_params()
    cfg = SystemConfig(**{k: params[k] for k in ("nics", "data_width", "planes") if k in params})
    cfg.seed = cocotb.RANDOM_SEED
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cfg


async def _transfer(dut, cfg, *, size=SIZE, registers=None, setup=None, during=None, timeout_cycles=None):
    bench = NicBench(dut, cfg)
    await bench.start(registers)
    if setup is not None:
        setup(bench)
    transfer = Transfer(bench, size)
    ideal_cycles = int(size * 8e12 / theoretical_goodput_bps(cfg) / CLOCK_PS)
    result = await transfer.run(
        timeout_cycles=timeout_cycles or 20 * ideal_cycles + 200_000,
        during=during(bench, transfer) if during else None,
    )
    print(describe(result))
    print({k: v for k, v in result.counters.items() if v})
    print({k: v for k, v in result.peer_counters.items() if v})
    for line in result.model_mismatches[:20]:
        print("MODEL MISMATCH", line)
    assert not result.model_mismatches, f"{len(result.model_mismatches)} disagreements with the model"
    assert not result.port_counter_errors, result.port_counter_errors
    assert not result.completed or result.receive_completions_verified, result.receive_completions
    return bench, result


MATRIX = []  # (test, lost, retransmitted) of every fault test, for the figure across the matrix


def _selective(result, name, *, news_lost=0):
    """Selective, not go-back-N: per test at most 1.5 x the packets lost (a few spurious retransmissions
    happen at 5 % loss on every link, where SACKs are lost too); across the matrix at most 1.2 x
    (``selective_across_the_matrix``). The ACK watchdog's resends of a message's last packet (§7.4: the
    transport ACK was lost, not data) are recovery of control loss and counted apart, and so are
    ``news_lost`` resends of packets whose every SACK was lost (``_resent_for_lost_sacks``)."""
    lost = result.lost_frames
    retx = result.retx_frames - result.ack_request_frames - news_lost
    MATRIX.append((name, lost, retx))
    assert retx <= 1.5 * lost, (
        f"{retx} retransmitted for {lost} lost ({result.ack_request_frames} ACK requests, "
        f"{news_lost} resent for lost SACKs)"
    )


# From a SACK reaching the sender's port to the tracker having released or SACKed its PSNs: the receive
# path, the feedback queue and the tracker's SACK walk take well under this.
SACK_LATENCY_PS = 2_000_000


def _sack_covers(seth, psn: int) -> bool:
    """The SACK reports ``psn`` received: at or below its cack (serial arithmetic), or its bitmap bit."""
    if psn_at_or_below(psn, seth.cack_psn):
        return True
    bit = (psn - (seth.cack_psn + seth.sack_offset)) % PSN_MOD
    return bit < 64 and bool(seth.sack_bitmap >> bit & 1)


def _resent_for_lost_sacks(result, injector) -> int:
    """Retransmissions (not the ACK watchdog's) of PSNs the peer already had, each checked against the
    SACKs on their way to the sender: one that reported the PSN was dropped before the resend, and none
    that reported it got through in time to prevent it (§7.7: with no news, an entry times out). Returns
    how many there were."""
    first_arrival = {}
    for time_ps, _, psn, _, trimmed in result.arrivals:
        if not trimmed:
            first_arrival.setdefault(psn, time_ps)
    spurious = 0
    for time_ps, psn, ack_req in result.retransmissions:
        if ack_req or first_arrival.get(psn, time_ps) >= time_ps:
            continue
        spurious += 1
        told = [(t, lost) for t, seth, lost in injector.sacks if t < time_ps and _sack_covers(seth, psn)]
        assert any(lost for _, lost in told), f"PSN {psn} resent at {time_ps} ps with no SACK of it lost"
        delivered = [t for t, lost in told if not lost]
        assert not delivered or delivered[0] > time_ps - SACK_LATENCY_PS, (
            f"PSN {psn} resent at {time_ps} ps though a SACK of it reached the sender at {delivered[0]} ps"
        )
    return spurious


@cocotb.test()
async def clean_transfer(dut):
    """No faults: every plane used evenly, nothing lost or retransmitted, goodput near the limit."""
    _, r = await _transfer(dut, _config())
    assert r.data_verified
    assert r.retx_frames == 0 and r.lost_frames == 0
    assert all(abs(n / r.data_frames - 0.25) < 0.02 for n in r.plane_frames)
    assert r.goodput_fraction > 0.85, r.goodput_fraction


async def _random_loss(dut, loss):
    """Random loss on every link, both directions (data, SACKs, NACKs, ACKs)."""
    cfg = _config(loss=loss)
    bench, r = await _transfer(dut, cfg)
    dropped = bench.fabric.switch_counters()["loss_drops"]
    print(f"{dropped} frames lost on the links")
    assert r.data_verified
    assert loss < 0.01 or dropped > 0
    _selective(r, f"random_loss_{loss}")
    assert r.counters["tracker_retry_exceeded"] == 0


@cocotb.test()
async def random_loss_0_1_percent(dut):
    await _random_loss(dut, 0.001)


@cocotb.test()
async def random_loss_1_percent(dut):
    await _random_loss(dut, 0.01)


@cocotb.test()
async def random_loss_5_percent(dut):
    await _random_loss(dut, 0.05)


@cocotb.test()
async def reordering_from_path_delay_skew(dut):
    """The links through T1 0 of two planes are 4 us longer: packets arrive out of order across paths.
    The time rule's tolerance covers the skew, as an operator would set it for such a fabric (slack 2 us
    + 4 us beyond the target queueing delay). Where the paths converge the last hop can overflow its trim
    threshold: trimmed packets are NACKed and retransmitted. The time rule may fire for at most a couple
    of packets, when queueing on the long paths exceeds the target queueing delay as well; everything
    else retransmitted is a last-hop trim. A packet can be both trimmed and timed out; it is retransmitted
    once. (With the tolerance not covering the skew, 3 of 33 seeds saw 3 time-rule losses: 1016, 1025,
    1029; docs/benchmarks.md.)"""
    skew_ps = 4_000_000

    def skew(bench):
        for key, ports in bench.fabric.links.items():
            if key[0] == "t0t1" and key[1] in (0, 2) and key[3] == 0:
                for port in ports:
                    port.delay_ps += skew_ps

    cfg = _config(reorder_slack_ps=SystemConfig.reorder_slack_ps + skew_ps)
    _, r = await _transfer(dut, cfg, setup=skew)
    reordered = sum(1 for x, y in zip(r.arrivals, r.arrivals[1:], strict=False) if y[2] < x[2])
    print(f"{reordered} arrivals after a higher PSN")
    assert r.data_verified and reordered > 10
    time_rule = r.counters["tracker_lost_time_rule"]
    assert time_rule <= 2, f"{time_rule} packets declared lost by the time rule under a 4 us skew"
    # The time rule and a trim NACK can name the same packet (seed 1383503566: 9 trims, 1 time-rule loss,
    # 9 retransmissions): the tracker retransmits it once, so the two sets may overlap.
    trimmed = r.peer_counters["rx_trimmed_lasthop"]
    assert r.ack_request_frames == 0
    assert max(trimmed, time_rule) <= r.retx_frames <= trimmed + time_rule
    assert r.peer_counters["rx_duplicate"] <= time_rule  # only a spurious time-rule loss arrives twice
    _selective(r, "reordering")


@cocotb.test()
async def duplication(dut):
    """5 % of the data frames reach the receiver twice, 5 % of the control frames reach the sender
    twice: every duplicate is counted, nothing is placed twice or retransmitted."""
    cfg = _config()
    rng = random.Random(cfg.seed)
    to_b = Injector(rng, duplicate=0.05)
    to_a = Injector(rng, duplicate=0.05, data=False, control=True)

    def setup(bench):
        bench.nics[1].fault, bench.nics[0].fault = to_b, to_a

    _, r = await _transfer(dut, cfg, setup=setup)
    assert r.data_verified and to_b.duplicated > 0 and to_a.duplicated > 0
    assert r.peer_counters["rx_duplicate"] == to_b.duplicated
    assert r.peer_counters["rx_placed"] == r.data_frames
    assert r.retx_frames == 0
    _selective(r, "duplication")


@cocotb.test()
async def corruption(dut):
    """2 % of the frames into each NIC have a flipped bit under the ICRC (data into the receiver,
    SACK/NACK/ACK into the sender), and 1 % are dropped as a MAC drops a bad FCS: every corrupted frame
    is dropped and counted by its ICRC check, the data is recovered."""
    cfg = _config()
    rng = random.Random(cfg.seed)
    to_b = Injector(rng, corrupt=0.02, drop=0.01, sure_corrupt=20)
    to_a = Injector(rng, corrupt=0.05, drop=0.01, data=False, control=True, sure_corrupt=5)

    def setup(bench):
        bench.nics[1].fault, bench.nics[0].fault = to_b, to_a

    _, r = await _transfer(dut, cfg, setup=setup)
    print(
        f"into the receiver: {to_b.corrupted} corrupted, {to_b.dropped} dropped; into the sender: "
        f"{to_a.corrupted} corrupted, {to_a.dropped} dropped"
    )
    assert r.data_verified and to_b.corrupted > 0 and to_a.corrupted > 0
    assert r.peer_counters["rx_drop_bad_icrc"] == to_b.corrupted
    assert r.counters["rx_drop_bad_icrc"] == to_a.corrupted
    _selective(r, "corruption", news_lost=_resent_for_lost_sacks(r, to_a))


class CrossTraffic:
    """A plain traffic source on another host (a fabric endpoint, no RTL): back-to-back full-size WRITE
    frames on one plane to a QP the receiving NIC does not have, between ``start`` and ``stop`` (ps). With
    the RTL sender it makes an incast on the receiver's last hop of that plane."""

    def __init__(self, bench, host, target, plane, start, stop, pmtu):
        self.bench, self.plane, self.start, self.stop = bench, plane, start, stop
        info = bench.fabric.cfg
        template = wire.RouteTemplate.for_clos(
            LOCATOR, host // info.half, target.host // info.half, target.host
        )
        ev = wire.make_ev(plane, 1, 7)
        self.addressing = wire.Addressing(
            src_mac=host_mac(host, plane),
            dst_mac=0x02FF00000000 | plane,
            src_gid=gid(host),
            dst_gid=gid(target.host),
            outer_src=wire.port_address(LOCATOR, plane, host),
            outer_dst=template.destination(ev),
            hop_limit=8,
        )
        self.ev, self.payload, self.sent, self.psn = ev, bytes(pmtu), 0, 0
        fabric_host = bench.fabric.hosts[host]
        fabric_host.endpoint = self
        bench.fabric.loop.at(start, lambda now: fabric_host.wake())

    def next_data(self, now, plane_ok):
        if not (self.start <= now < self.stop and (plane_ok >> self.plane) & 1):
            return None
        self.sent += 1
        self.psn += 1
        frame = wire.data_frame(
            self.addressing,
            ev=self.ev,
            opcode=wire.Opcode.WRITE_ONLY,
            dest_qp=0x7777,
            psn=self.psn,
            msn=0,
            rqmsn=0,
            va=0,
            rkey=0,
            dma_length=len(self.payload),
            payload=self.payload,
        )
        return self.plane, frame

    def on_frame(self, frame, plane, now):
        pass


@cocotb.test()
async def trimming_under_incast(dut):
    """A second source sends line-rate cross traffic into the receiver's plane-0 port for a while: two
    senders into one port of equal rate, the switch trims payloads (NACK TRIMMED_LASTHOP), and the sender
    retransmits the trimmed packets; the cross traffic, for an unknown QP, is dropped and counted."""
    cfg = _config()
    sources = []

    def setup(bench):
        ideal = SIZE * 8e12 / theoretical_goodput_bps(cfg)
        other = cfg.radix // 2 + 1  # the receiver's T0 neighbour
        now = now_ps()  # the fabric's clock is the simulator's, which runs on from test to test
        sources.append(CrossTraffic(bench, other, bench.nics[1], 0, now, now + int(0.8 * ideal), cfg.pmtu))

    bench, r = await _transfer(dut, cfg, setup=setup)
    trims = bench.fabric.switch_counters()["trims"]
    ours = sum(1 for a in r.arrivals if a[4])
    print(f"{trims} trimmed in the fabric, {ours} of ours, cross traffic {sources[0].sent} frames")
    assert r.data_verified and ours > 0
    peer = r.peer_counters
    assert peer["rx_trimmed"] + peer["rx_trimmed_lasthop"] >= ours
    assert peer["rx_nacks"] >= ours
    assert peer["rx_drop_unknown_qp"] > 0
    _selective(r, "trimming_under_incast")


# When a failed link or plane returns. A retired EV is probed at 20, 40, 80, 160, 320 us intervals
# (PROBE_INTERVAL doubling, §7.8), so its restore lands up to one interval after the return: at 0.6 of the
# transfer a seed whose probe had just missed the return restored the EVs too late for any data to be left
# (SEED=346831843). At 0.4 the link is down ~200 us, the restore comes by ~0.65 and a third of the data
# is still to send.
UP_AT = 0.4


async def _fail_and_restore(bench, transfer, key, down_at, up_at=UP_AT):
    while not transfer.result.start_ps:
        await ClockCycles(bench.dut.clk, 64)
    ideal = transfer.size * 8e12 / theoretical_goodput_bps(bench.cfg)
    start, fabric = transfer.result.start_ps, bench.fabric
    for fraction, up in ((down_at, False), (up_at, True)):
        fabric.loop.at(start + int(fraction * ideal), lambda now, up=up: fabric.set_link(key, up))


@cocotb.test()
async def link_fails_and_comes_back(dut):
    """A T0-T1 link of plane 1 fails mid-transfer and comes back: its EVs are retired (replaced from the
    backups), probed, and restored after the link returns."""
    cfg = _config(memory=4 << 20)
    size = 1 << 20
    bench, r = await _transfer(
        dut, cfg, size=size, during=lambda b, t: _fail_and_restore(b, t, ("t0t1", 1, 0, 0), 0.15)
    )
    assert r.data_verified and r.lost_frames > 0
    assert r.counters["path_retired"] >= 1 and r.counters["path_restored"] >= 1
    # The EVs whose path crosses the failed link (plane 1, uplink = T1 0) carry data before the failure.
    # After it, each of them - slot EV or a backup that replaced one on the same path - loses its first
    # packet and is retired once that loss is seen: by the timeout at the latest (RTO after the send,
    # §7.7). A packet whose EV was chosen just before the retirement may still leave (the bench's stale-EV
    # grace). So no EV on the failed path carries data later than RTO + grace after its first send after
    # the failure, until the link returns; after the return the probes restore them (§6.4 / §7.8).
    # (A fixed allowance from the failure does not fit an EV whose first packet after it goes late.)
    ideal = size * 8e12 / theoretical_goodput_bps(cfg)
    down, up = r.start_ps + int(0.15 * ideal), r.start_ps + int(UP_AT * ideal)
    detect_ps = 4 * bench.base_rtt_ps + bench.stale_ev_grace_ps

    def on_failed_path(ev):
        plane, uplink, _ = wire.ev_fields(ev)
        return plane == 1 and uplink == 0

    failed = [(t, ev) for t, _p, _n, _rtx, ev in r.timeline if on_failed_path(ev)]
    assert any(t < down for t, _ in failed)
    first_after: dict[int, int] = {}
    for t, ev in sorted(failed):
        if down <= t < up:
            first_after.setdefault(ev, t)
    late = {
        (ev, (t - first_after[ev]) / 1e6)
        for t, ev in failed
        if down <= t < up and t > first_after[ev] + detect_ps
    }
    assert not late, f"EVs on the failed path carried data past the loss-detection time: {late}"
    assert any(t >= up for t, _ in failed), "the restored EVs carry data again"
    _selective(r, "link_fails_and_comes_back")


@cocotb.test()
async def whole_plane_fails(dut):
    """Every switch of plane 2 dies mid-transfer (the NICs' links stay up: only losses tell): the sender
    retires that plane's EVs and carries on over the other three; after the plane returns, probes
    restore them."""
    cfg = _config(memory=4 << 20)
    size, down_at, up_at = 1 << 20, 0.15, UP_AT

    async def during(bench, transfer):
        while not transfer.result.start_ps:
            await ClockCycles(bench.dut.clk, 64)
        fabric = bench.fabric
        start = transfer.result.start_ps
        ideal = transfer.size * 8e12 / theoretical_goodput_bps(bench.cfg)
        for fraction, up in ((down_at, False), (up_at, True)):
            for tier, switches in ((0, fabric.t0[2]), (1, fabric.t1[2])):
                for index in range(len(switches)):
                    fabric.loop.at(
                        start + int(fraction * ideal),
                        lambda now, tier=tier, index=index, up=up: fabric.set_switch(2, tier, index, up),
                    )

    _, r = await _transfer(dut, cfg, size=size, during=during)
    assert r.data_verified
    ideal = size * 8e12 / theoretical_goodput_bps(cfg)
    down, up = r.start_ps + int(down_at * ideal), r.start_ps + int(up_at * ideal)
    plane2 = [(t, ev) for t, plane, _n, _rtx, ev in r.timeline if plane == 2]
    late = {ev for t, ev in plane2 if down + 100_000_000 <= t < up}
    print(f"plane 2: {len(plane2)} data frames, during the failure on {len(late)} backup EVs")
    assert any(t < down for t, _ in plane2)
    # Once the losses are seen, plane 2 carries data only on a backup EV that replaced a retired slot EV,
    # until that backup's own first loss; after the plane returns the probes restore its EVs.
    assert all(wire.ev_fields(ev)[2] >= cfg.ev_slots for ev in late) and len(late) <= cfg.backups
    assert any(t >= up for t, _ in plane2), "plane 2 carries data again"
    assert r.counters["path_retired"] >= cfg.ev_slots // cfg.planes
    assert r.counters["path_restored"] >= 1 and r.counters["prober_restores"] >= 1
    _selective(r, "whole_plane_fails")


@cocotb.test()
async def control_frames_lost(dut):
    """10 % of the SACKs, NACKs and ACKs never reach the sender: cumulative SACK state covers the lost
    ones, and a lost final ACK is asked for again (BTH.A) by the ACK watchdog. When no later SACK comes
    (the last ones of a transfer were lost), the packets they reported time out and are resent: each such
    resend must be of a PSN whose SACKs were all lost (§7.7), and nothing else is resent."""
    cfg = _config()
    rng = random.Random(cfg.seed)
    to_a = Injector(rng, drop=0.10, data=False, control=True)

    def setup(bench):
        bench.nics[0].fault = to_a

    _, r = await _transfer(dut, cfg, setup=setup)
    assert r.data_verified and to_a.dropped > 0
    resent = _resent_for_lost_sacks(r, to_a)
    print(f"{to_a.dropped} control frames dropped; {resent} packets resent because every SACK of them was")
    _selective(r, "control_frames_lost", news_lost=resent)


@cocotb.test()
async def peer_stops_answering(dut):
    """The receiver vanishes mid-transfer (nothing reaches it any more): the sender retransmits up to its
    retry budget, then the WRITE in flight completes RETRY_EXCEEDED, the ones after it FLUSHED, and the
    QP is in error; nothing hangs."""
    cfg = _config()
    bench = NicBench(dut, cfg)
    await bench.start({"retry_budget": 3})
    transfer = Transfer(bench, SIZE)
    gone = Injector(random.Random(cfg.seed), drop=1.0, data=True, control=True)

    async def vanish(bench, transfer):
        while len(transfer.result.timeline) < 40:
            await ClockCycles(dut.clk, 64)
        bench.nics[1].fault = gone

    budget_cycles = int(4 * bench.base_rtt_ps / CLOCK_PS) * 12 + 200_000
    r = await transfer.run(timeout_cycles=budget_cycles, during=vanish(bench, transfer))
    print(describe(r))
    assert not r.completed and not r.data_verified
    statuses = [c.status for c in r.completions]
    failed = statuses.index(CqeStatus.RETRY_EXCEEDED)
    assert statuses == [CqeStatus.SUCCESS] * failed + [CqeStatus.RETRY_EXCEEDED] + [CqeStatus.FLUSHED] * (
        r.messages - failed - 1
    ), r.completions
    assert transfer.qa.state == QpState.ERROR
    assert (await bench.nics[0].driver.queue_state(transfer.qa.index))["status"] & 1
    counters = r.counters
    assert counters["tracker_retry_exceeded"] + counters["ack_watchdog_retry_exceeded"] == 1
    assert counters["host_flushed"] == r.messages - failed - 1
    print(f"QP error after {(now_ps() - r.start_ps) / 1e6:.0f} us, {r.retx_frames} retransmissions")


@cocotb.test()
async def selective_across_the_matrix(dut):
    """The issue-6 figure: over every fault test above, retransmitted <= 1.2 x lost data packets."""
    lost = sum(x[1] for x in MATRIX)
    retx = sum(x[2] for x in MATRIX)
    for name, n_lost, n_retx in MATRIX:
        print(f"  {name:28s} lost {n_lost:4d}  retransmitted {n_retx:4d}")
    print(f"across the matrix: {retx} retransmitted for {lost} lost = {retx / max(1, lost):.3f}")
    assert len(MATRIX) >= 9 and retx <= 1.2 * lost


BASE = SystemConfig()
CONFIGS = [pytest.param(BASE.build_params(), id="dw8-p4")]
TESTS = [
    "clean_transfer",
    "random_loss_1_percent",
    "random_loss_5_percent",
    "reordering_from_path_delay_skew",
    "duplication",
    "corruption",
    "trimming_under_incast",
    "link_fails_and_comes_back",
    "whole_plane_fails",
    "control_frames_lost",
    "peer_stops_answering",
    "selective_across_the_matrix",
]


# In `make test-slow` only: at 0.1 % loss on every link a 256 KiB transfer loses a frame or two, which the
# 1 % and 5 % runs cover many times over.
SLOW_TESTS = ["random_loss_0_1_percent"]


@pytest.mark.long(seconds=440)
@pytest.mark.parametrize("params", CONFIGS)
def test_system(params):
    run_cocotb(design(params), name=BUILD_NAME, module="system.test_system", params=params, testcase=TESTS)


@pytest.mark.slow
@pytest.mark.parametrize("params", CONFIGS)
def test_system_slow(params):
    run_cocotb(
        design(params), name=BUILD_NAME, module="system.test_system", params=params, testcase=SLOW_TESTS
    )
