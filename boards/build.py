"""Build a board's bitstream with the open toolchain (YoWASP Yosys, nextpnr-ecp5, ecppack) and report it.

``python -m mrcnic.boards.build <board>`` (``make bitstream BOARD=<board>``) writes, under
``build/boards/<board>/``:

* ``mrcnic_<board>.bit`` (and ``.svf``): the bitstream, to load with the board's openFPGALoader command
  (docs/boards.md);
* ``report.json``: the board, device, NIC configuration, every clock domain's target and achieved
  frequency (post-route, nextpnr's timing analysis) with its margin, the utilisation of LUT4s,
  flip-flops, block RAMs (DP16KD), distributed RAM, DSPs, PLLs and I/O delays against the device, and the
  build time; on failure, the tool's error lines too.

The build fails (exit status 1, the failing clocks or the tool's error named on the terminal) when the
design does not fit or a clock misses its target; ``--allow-timing-fail`` keeps the bitstream anyway
(still reported). Nothing is programmed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

from mrcnic.toolchain import apply_tool_environment

from .board_top import BOARDS, ETH_HZ, BoardTop
from .nic_board import BOARD_NIC

__all__ = ["build_board", "clock_domain", "main"]

# Yosys's ECP5 script maps LUTs with ABC9, which the WebAssembly Yosys (YoWASP 0.70) aborts with an
# uncaught exception on the whole board design; classic ABC with the same LUT4..LUT7 library (wide LUTs
# become PFUMX / L6MUX21) is used instead, then the rest of the script (cell mapping, checks) as usual.
SYNTH_OPTS = "-run :map_luts"


def _after_synth(name: str) -> str:
    steps = ["techmap -map +/lattice/latches_map.v", "abc -dress -lut 4:7", "clean"]
    return "; ".join([*steps, f"synth_ecp5 -top {name} -run map_cells:"])


UTILISATION = {
    "TRELLIS_COMB": "lut4",
    "TRELLIS_FF": "ff",
    "DP16KD": "bram",
    "TRELLIS_RAMW": "lutram_write_ports",
    "MULT18X18D": "dsp",
    "EHXPLLL": "pll",
    "DELAYG": "delayg",
    "TRELLIS_IO": "io",
}


def clock_domain(net: str) -> str:
    """The clock domain a nextpnr clock net drives, from the names the board top gives them."""
    if "clk_os" in net:
        return "core"
    if "clk_op" in net:
        return "eth_tx"
    found = re.search(r"eth_rgmii_pins_(\d+)__rx_clk", net)
    if found:
        return f"eth_rx{found.group(1)}"
    return net


def _targets(spec) -> dict:
    targets = {"core": spec.core_hz / 1e6, "eth_tx": ETH_HZ / 1e6}
    targets.update({f"eth_rx{p}": ETH_HZ / 1e6 for p in range(spec.planes)})
    return targets


def build_board(board: str, build_root: Path, *, seed: int = 1, allow_timing_fail: bool = False) -> dict:
    """Build ``board``; returns the report (also written as report.json). Raises SystemExit(1) on failure."""
    apply_tool_environment()
    os.environ.setdefault("OPENFPGALOADER", "true")  # amaranth-boards names it; nothing is programmed
    spec = BOARDS[board]
    top = BoardTop(board)
    platform = spec.platform()
    build_dir = build_root / board
    build_dir.mkdir(parents=True, exist_ok=True)
    name = f"mrcnic_{board}"
    for stale in ("nextpnr-report.json", f"{name}.bit", "report.json"):
        (build_dir / stale).unlink(missing_ok=True)
    report = {
        "board": board,
        "device": f"{platform.device}-{platform.speed} {platform.package}",
        "planes": spec.planes,
        "memory_bytes": spec.memory_size,
        "max_frame": spec.max_frame,
        "nic": {**BOARD_NIC, **top.nic_params, "planes": spec.planes, "clock_hz": int(spec.core_hz)},
        "seed": seed,
    }
    started = time.monotonic()
    error = None
    try:
        # nextpnr keeps going on failed timing, so the report is written in every case; we judge below.
        platform.build(
            top,
            name=name,
            build_dir=str(build_dir),
            do_program=False,
            synth_opts=SYNTH_OPTS,
            script_after_synth=_after_synth(name),
            nextpnr_opts=f"--report nextpnr-report.json --timing-allow-fail --seed {seed}",
        )
    except Exception as exc:  # the toolchain's own failure (does not fit, bad constraint, ...)
        log = build_dir / f"{name}.tim"
        lines = log.read_text().splitlines() if log.exists() else []
        error = [line for line in lines if "ERROR" in line] or [str(exc).splitlines()[-1]]
    report["seconds"] = round(time.monotonic() - started, 1)

    nextpnr = build_dir / "nextpnr-report.json"
    if nextpnr.exists():
        data = json.loads(nextpnr.read_text())
        report["utilisation"] = {
            UTILISATION[cell]: {"used": use["used"], "available": use["available"]}
            for cell, use in data.get("utilization", {}).items()
            if cell in UTILISATION
        }
        clocks, targets = {}, _targets(spec)
        for net, timing in data.get("fmax", {}).items():
            domain = clock_domain(net)
            target = targets.get(domain, timing["constraint"])
            clocks[domain] = {
                "net": net,
                "target_mhz": round(target, 3),
                "achieved_mhz": round(timing["achieved"], 2),
                "margin": round(timing["achieved"] / target - 1, 3),
            }
        report["clocks"] = clocks
        missing = sorted(set(targets) - set(clocks))
        if missing and error is None:
            error = [
                f"no timing figure for clock domain(s) {', '.join(missing)} (nets: {', '.join(data['fmax'])})"
            ]
    elif error is None:
        error = ["nextpnr wrote no report"]
    failing = [d for d, c in report.get("clocks", {}).items() if c["achieved_mhz"] < c["target_mhz"]]
    report["timing_met"] = not failing and error is None
    if error:
        report["error"] = error
    bitstream = build_dir / f"{name}.bit"
    report["bitstream"] = str(bitstream) if bitstream.exists() and error is None else None
    (build_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")

    print(json.dumps(report, indent=2))
    if error:
        print(f"\n{board}: build FAILED:\n  " + "\n  ".join(error), file=sys.stderr)
        raise SystemExit(1)
    if failing:
        detail = ", ".join(
            f"{d} {report['clocks'][d]['achieved_mhz']} MHz < {report['clocks'][d]['target_mhz']} MHz"
            for d in failing
        )
        print(f"\n{board}: timing NOT met: {detail}", file=sys.stderr)
        if not allow_timing_fail:
            raise SystemExit(1)
    else:
        print(f"\n{board}: timing met; bitstream {bitstream}")
    return report


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m mrcnic.boards.build", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("board", choices=sorted(BOARDS))
    parser.add_argument("--build-dir", type=Path, default=Path("build/boards"))
    parser.add_argument("--seed", type=int, default=1, help="nextpnr placement seed")
    parser.add_argument(
        "--allow-timing-fail", action="store_true", help="keep a bitstream that misses timing"
    )
    args = parser.parse_args(argv)
    build_board(args.board, args.build_dir, seed=args.seed, allow_timing_fail=args.allow_timing_fail)


if __name__ == "__main__":
    main()
