"""Message rate through the host interface (``make bench-host``): two whole RTL NICs, one QP, RDMA
WRITEs of one size posted back to back through the send queue (one doorbell per WQE, the send queue kept
full), completions polled from the completion queue, data checked byte for byte at the peer.

The figure: completions per second in the steady state (from the 20th percentile completion to the
last), as a ratio to the binding limit of the four below, all computed from the frames actually sent:

* wire: every plane link busy: ``planes x link rate / (frame + FCS + preamble and gap)`` per packet;
* TX data path: ``data_width`` bytes per core cycle shared by the planes: ``ceil(frame / data_width)``
  cycles per packet;
* queue engine WQE fetch: 16 cycles per WQE (docs/host-interface.md);
* queue engine CQE write: 13 cycles per CQE.

Two fabrics: the system tests' (4 planes of 3 Gb/s links: the wire binds) and 25 Gb/s links (the NIC
binds). Simulated time only; ``build/bench/message_rate-<rate>.json`` keeps the figures.
"""

import json
from pathlib import Path

import cocotb
import pytest
from cocotb.triggers import ClockCycles

from mrcnic.fabric.link import FCS, PREAMBLE_IFG, frame_wire_bytes

from support.cocotb_runner import dut_params, run_cocotb
from system.bench import CLOCK_PS, NicBench, SystemConfig, now_ps
from system.cluster import BUILD_NAME, design
from system.test_system import BASE

SIZES = {64: 2000, 256: 2000, 1024: 1000, 4096: 200}  # message bytes: messages
WQE_CYCLES, CQE_CYCLES = 16, 13
SQ_DEPTH = 256
POLL_CYCLES = 16


async def _run_size(bench, qa, size, count):
    a, b = bench.nics
    cfg = bench.cfg
    local = a.driver.memory.allocate(size * count)
    region = b.driver.memory.allocate(size * count)
    mr = await bench.register_memory(b, region, size * count)
    source = bench.rng.randbytes(size * count)
    a.ram.write(local, source)
    frames = []  # frame bytes (no FCS) of every data packet sent

    def on_transmit(nic, plane, frame, now):
        if frame.opcode.is_write:
            frames.append(frame_wire_bytes(frame) - FCS)

    a.on_transmit = on_transmit
    done_ps = []
    posted = 0
    deadline = now_ps() + 20_000_000_000
    while len(done_ps) < count and now_ps() < deadline:
        while posted < count and qa.outstanding < qa.sq_depth:
            at = posted * size
            await qa.post_write(local + at, region + at, mr.rkey, size, wr_id=posted)
            posted += 1
        for c in await a.driver.poll_cq(1024):
            assert c.ok and c.wr_id == len(done_ps), c
            done_ps.append(now_ps())
        await ClockCycles(bench.dut.clk, POLL_CYCLES)
    a.on_transmit = None
    assert len(done_ps) == count, f"{len(done_ps)} of {count} completions"
    assert b.ram.read(region, size * count) == source
    first = count // 5
    rate = (count - 1 - first) * 1e12 / (done_ps[-1] - done_ps[first])
    packets = len(frames) / count
    frame = sum(frames) / len(frames)
    clock = 1e12 / CLOCK_PS
    limits = {
        "wire": cfg.planes * cfg.link_rate_bps / ((frame + FCS + PREAMBLE_IFG) * 8 * packets),
        "tx_data_path": clock / sum(-(-f // cfg.data_width) for f in frames) * count,
        "wqe_fetch": clock / WQE_CYCLES,
        "cqe_write": clock / CQE_CYCLES,
    }
    binding = min(limits, key=limits.get)
    return {
        "message_bytes": size,
        "messages": count,
        "packets_per_message": packets,
        "frame_bytes": round(frame, 1),
        "messages_per_s": round(rate),
        "limits_per_s": {k: round(v) for k, v in limits.items()},
        "binding_limit": binding,
        "fraction_of_limit": round(rate / limits[binding], 4),
    }


@cocotb.test()
async def message_rate(dut):
    p = dut_params()
    cfg = SystemConfig(seed=1, link_rate_bps=p["link_rate_bps"], memory=8 << 20)
    bench = NicBench(dut, cfg)
    await bench.start(cq_depth=1024)
    qa, _ = await bench.connect(*bench.nics, sq_depth=SQ_DEPTH)
    rows = []
    for size, count in SIZES.items():
        row = await _run_size(bench, qa, size, count)
        rows.append(row)
        print(
            f"{cfg.link_rate_bps / 1e9:g} Gb/s links, {size:5d} B WRITEs: "
            f"{row['messages_per_s'] / 1e6:6.3f} M/s "
            f"= {row['fraction_of_limit']:.3f} of the {row['binding_limit']} limit "
            f"({row['limits_per_s'][row['binding_limit']] / 1e6:.3f} M/s); limits {row['limits_per_s']}"
        )
    out = Path(p["bench_out"])
    out.parent.mkdir(parents=True, exist_ok=True)
    config = {"planes": cfg.planes, "data_width": cfg.data_width, "pmtu": cfg.pmtu, "clock_ps": CLOCK_PS}
    config.update(link_rate_bps=cfg.link_rate_bps, sq_depth=SQ_DEPTH, poll_cycles=POLL_CYCLES)
    out.write_text(json.dumps({"config": config, "results": rows}, indent=2) + "\n")


@pytest.mark.bench
@pytest.mark.parametrize("link_gbps", [3, 25])
def test_bench_message_rate(link_gbps):
    """``make bench-host``: the message rate on 3 Gb/s and 25 Gb/s plane links (same Verilator build as
    the system tests)."""
    root = Path(__file__).resolve().parents[2]
    params = BASE.build_params()
    run_cocotb(
        design(params),
        name=BUILD_NAME,
        module="system.test_message_rate",
        params=params,
        testcase="message_rate",
        test_dir_suffix=f"-rate-{link_gbps}g",
        run_params={
            "link_rate_bps": link_gbps * 1_000_000_000,
            "bench_out": str(root / "build" / "bench" / f"message_rate-{link_gbps}g.json"),
        },
    )
