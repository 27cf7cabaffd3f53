"""``make demo`` on the simulator side: two RTL NICs, 4 planes, a multi-MiB RDMA WRITE, a T0-T1 link of
one plane failing in the middle and coming back. Writes ``timeline.json`` (every data frame sent and
received, the failure times, counters) and ``wire.pcap`` (NIC A's plane ports, both directions) into the
output folder; :mod:`system.report` turns them into the summary and the plot."""

import json
import sys
from pathlib import Path

import cocotb
from cocotb.triggers import ClockCycles

from mrcnic.wire.pcap import PcapWriter

from support.cocotb_runner import dut_params
from system.bench import NicBench, SystemConfig, now_ps
from system.transfer import Transfer, describe, theoretical_goodput_bps

FAIL_FRACTION, RESTORE_FRACTION = 0.35, 0.70  # of the ideal transfer time, from the first data frame


def _bar(done: float, width: int = 40) -> str:
    filled = int(done * width)
    return "[" + "#" * filled + "." * (width - filled) + f"] {100 * done:5.1f} %"


@cocotb.test()
async def demo(dut):
    p = dut_params()
    out = Path(p["out"])
    out.mkdir(parents=True, exist_ok=True)
    size, message = p["size"], p.get("message_size", 256 * 1024)
    cfg = SystemConfig(seed=p.get("seed", 1), memory=size + (2 << 20))
    bench = NicBench(dut, cfg)
    await bench.start()
    a = bench.nics[0]
    capture = PcapWriter(out / "wire.pcap")
    for plane in range(cfg.planes):
        for port in bench.fabric.links[("host", plane, a.host)]:
            port.capture = capture
    transfer = Transfer(bench, size, message_size=message)
    ideal_ps = size * 8e12 / theoretical_goodput_bps(cfg)
    link = ("t0t1", 1, a.host // bench.fabric.cfg.half, 0)  # plane 1, A's T0 to T1 0
    events = {}

    async def failure_and_progress():
        while not transfer.result.start_ps:
            await ClockCycles(dut.clk, 64)
        start = transfer.result.start_ps
        fabric = bench.fabric
        for name, fraction, up in (("fail", FAIL_FRACTION, False), ("restore", RESTORE_FRACTION, True)):
            at = start + int(fraction * ideal_ps)
            events[name] = at
            fabric.loop.at(at, lambda now, up=up: fabric.set_link(link, up))
        while True:
            done = min(1.0, transfer.messages_done * message / size)
            sim_us = (now_ps() - start) / 1e6
            sys.stdout.write(f"\r  {_bar(done)}  {sim_us:8.1f} us simulated  ")
            sys.stdout.flush()
            if done >= 1.0 or transfer.result.end_ps:
                break
            await ClockCycles(dut.clk, 5000)
        sys.stdout.write("\n")

    result = await transfer.run(
        timeout_cycles=40 * int(ideal_ps / 4000) + 2_000_000, during=failure_and_progress()
    )
    capture.close()
    print(describe(result))
    (out / "timeline.json").write_text(
        json.dumps(
            {
                "config": {
                    "nics": cfg.nics,
                    "planes": cfg.planes,
                    "data_width": cfg.data_width,
                    "pmtu": cfg.pmtu,
                    "link_rate_bps": cfg.link_rate_bps,
                    "link_delay_ps": cfg.link_delay_ps,
                    "ev_slots": cfg.ev_slots,
                    "clock_ps": 4000,
                    "base_rtt_ps": bench.base_rtt_ps,
                    "failed_link": list(link),
                },
                "size": size,
                "message_size": message,
                "data_verified": result.data_verified,
                "completed": result.completed,
                "start_ps": result.start_ps,
                "end_ps": result.end_ps,
                "fail_ps": events.get("fail"),
                "restore_ps": events.get("restore"),
                "limit_bps": theoretical_goodput_bps(cfg),
                "sent": result.timeline,
                "arrivals": result.arrivals,
                "lost_frames": result.lost_frames,
                "retx_frames": result.retx_frames,
                "counters": result.counters,
                "peer_counters": result.peer_counters,
                "fabric": bench.fabric.switch_counters(),
                "sim_cycles_per_s": result.sim_cycles_per_s,
                "model_checks": result.model_checks,
                "model_mismatches": result.model_mismatches,
            }
        )
    )
    assert result.data_verified, "the written data does not match the source"
    assert not result.model_mismatches, result.model_mismatches[:10]
    assert not result.port_counter_errors, result.port_counter_errors
