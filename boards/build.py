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
design does not fit, when router2 stops converging (no fewer overused wires in ``--route-patience``
iterations: nextpnr would go on for hours, see :class:`RouteStallWatch`) or when a clock misses its
target; ``--allow-timing-fail`` keeps the bitstream anyway (still reported). Nothing is programmed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import sys
import threading
import time
from pathlib import Path

from mrcnic.hdl.tables import YOSYS_UNDEFINED_COLLISIONS
from mrcnic.toolchain import apply_tool_environment

from .board_top import BOARDS, ETH_HZ, BoardTop, nic_setting
from .nic_board import board_nic_parameters
from .place_best import parse_seeds

__all__ = ["RouteStallWatch", "RoutingStalled", "build_board", "clock_domain", "main"]

# Iterations router2 may go without fewer overused wires before the build stops it. The ECPIX-5's
# routes converged steadily (0 after 75 and 98 iterations); the ones that never did reached their
# fewest overused wires by iteration 11-25 and then climbed for as long as they ran (docs/boards.md).
ROUTE_PATIENCE = 25

# Yosys's ECP5 script, in two halves around one step: after ``memory_collect`` the host memory's ports are
# marked as having undefined read-during-write (``no_rw_check``, which Yosys's RTLIL frontend does not
# apply itself), so it maps to DP16KD blocks instead of half a million flip-flops.
SYNTH_OPTS = "-run :map_ram"


# Amaranth's FIFOs (``lib.fifo``, their memory is named ``storage``) never read the entry being written:
# an entry is read once the level counts it, and nothing is written while the FIFO is full. So their
# read-during-write is left undefined too (``mrcnic.hdl.tables.UNDEFINED_COLLISIONS``): kept, it costs a
# flip-flop and a LUT4 per bit of every FIFO in block RAM, and a LUT between the memory and its register.
# Only the FIFOs of one clock domain (the NIC's in a board top, and the ports' short octet FIFOs in their
# MAC domains; the ports' clock-domain crossings are FIFOs too) and only those whose read port is
# synchronous by then (RD_CLK_ENABLE 1'1): the setparam after it stops on an assertion for either.
BOARD_FIFOS = ("board.nic.*.storage", "board.port*.*_octets.storage")


def _fifo_undefined_collisions(fifos: tuple[str, ...]) -> str:
    names = " ".join(f"*/{pattern}" for pattern in fifos) + " %u" * (len(fifos) - 1)
    return f"setattr -set no_rw_check 1 t:$mem_v2 {names} %i r:RD_CLK_ENABLE=1'1 %i"


def _after_synth(
    name: str,
    block_ram: tuple[str, ...] = (),
    fifos: tuple[str, ...] = BOARD_FIFOS,
    small_arithmetic: int = 0,
) -> str:
    """The second half; ``block_ram``: memory name patterns marked ``ram_style = "block"`` first (each
    must name a memory: a renamed block fails the build instead of quietly landing in LUT RAM again);
    ``fifos``: the name patterns of the single-clock FIFOs' memories; ``small_arithmetic``: adders and
    comparisons (Yosys ``$alu``) up to that many bits, outside ``hdl/eth``, go to LUTs, not carry chains."""
    steer = "".join(
        f"select -assert-min 1 t:$mem_v2 */{pattern} %i; "
        f'setattr -set ram_style "block" t:$mem_v2 */{pattern} %i; '
        for pattern in block_ram
    )
    undefined = f"{_fifo_undefined_collisions(fifos)}; {YOSYS_UNDEFINED_COLLISIONS}"
    small = (
        f"techmap -map +/techmap.v t:$alu r:Y_WIDTH<={small_arithmetic} %i a:src=*/hdl/eth/* %d; "
        if small_arithmetic
        else ""
    )
    return f"{undefined}; {steer}{small}synth_ecp5 -top {name} -run map_ram:"


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
    """The clock domain a nextpnr clock net drives. Yosys keeps one of each clock's names: the board's
    core clock (``board.clk``, a block's ``clk`` port such as ``board.host_memory.clk``, or the PLL
    output, ``clk_os``); the MACs' transmit clock (``board.phy0.eth_tx_clk``, ``clk_op``); a port's
    receive clock (``board.phy<p>.eth_rx<p>_clk``, or the pin, ``eth_rgmii_pins_<p>__rx_clk``)."""
    name = net.removeprefix("$glbnet$")
    found = re.search(r"eth_rx(\d+)_clk|eth_rgmii_pins_(\d+)__rx_clk", name)
    if found:
        return f"eth_rx{found.group(1) or found.group(2)}"
    if "eth_tx_clk" in name or "clk_op" in name:
        return "eth_tx"
    if name == "clk" or name.endswith(".clk") or "clk_os" in name:
        return "core"
    return net


def _log_utilisation(log: Path) -> dict:
    """nextpnr's "Device utilisation" table from its log: still there when placement fails."""
    found = re.findall(r"^Info:\s+(\w+):\s+(\d+)/\s*(\d+)", log.read_text() if log.exists() else "", re.M)
    return {cell: {"used": int(used), "available": int(avail)} for cell, used, avail in found}


class RouteStallWatch:
    """Follows nextpnr's log for router2's progress lines (``iter=N wires=W overused=O ...``) and says
    when routing has stopped converging: ``patience`` iterations after the fewest overused wires so far
    without fewer. :meth:`feed` takes one log line and returns the reason to stop, or None."""

    PROGRESS = re.compile(r"\biter=(\d+) wires=\d+ overused=(\d+)")

    def __init__(self, patience: int = ROUTE_PATIENCE):
        self.patience = patience
        self.best: tuple[int, int] | None = None  # (overused wires, iteration)

    def feed(self, line: str) -> str | None:
        match = self.PROGRESS.search(line)
        if not match or self.patience <= 0:
            return None
        iteration, overused = int(match[1]), int(match[2])
        if self.best is None or overused < self.best[0]:
            self.best = (overused, iteration)
        elif iteration - self.best[1] >= self.patience:
            return (
                f"routing does not converge: {overused} overused wires at router2 iteration {iteration}, "
                f"none fewer than {self.best[0]} (iteration {self.best[1]}) in {self.patience} iterations; "
                "the design is too dense or too congested for this device (docs/boards.md, "
                '"Fitting the smaller boards"); --route-patience 0 lets nextpnr go on'
            )
        return None


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux ``/proc``); empty where there is no ``/proc``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def stop_processes(pattern: str, parent: int | None = None) -> int:
    """SIGTERM to every process below ``parent`` (default: this one) whose command line holds
    ``pattern``; returns how many were signalled."""
    count = 0
    for pid in _descendants(os.getpid() if parent is None else parent):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if pattern in command:
                os.kill(pid, signal.SIGTERM)
                count += 1
        except OSError:
            continue
    return count


def _watch_routing(log: Path, watch: RouteStallWatch, done: threading.Event, verdict: list) -> None:
    """Thread body: follow ``log`` as nextpnr writes it; on a stall, note the reason and stop nextpnr."""
    position = 0
    while not done.wait(2.0):
        if not log.exists():
            continue
        with log.open(errors="replace") as f:
            f.seek(position)
            text = f.read()
        complete = text.rfind("\n") + 1  # whole lines only; the rest is read again next time
        position += len(text[:complete].encode())
        for line in text[:complete].splitlines():
            reason = watch.feed(line)
            if reason:
                verdict.append(reason)
                stop_processes("nextpnr")
                return


def _targets(spec, core_hz: float) -> dict:
    targets = {"core": core_hz / 1e6, "eth_tx": ETH_HZ / 1e6}
    targets.update({f"eth_rx{p}": ETH_HZ / 1e6 for p in range(spec.planes)})
    return targets


class RoutingStalled(SystemExit):
    """The build stopped because router2 no longer converged (exit status 1): another seed may route."""

    def __init__(self):
        super().__init__(1)


def nextpnr_options(seed: int, placer: str, router: str, *, timing_driven: bool = True) -> str:
    """nextpnr's options for a board build. It always reports and never stops on failed timing: the build
    reads the report and judges (``--allow-timing-fail``)."""
    options = (
        f"--report nextpnr-report.json --timing-allow-fail --seed {seed} --placer {placer} --router {router}"
    )
    return options if timing_driven else f"{options} --no-tmdriv"


def build_board(
    board: str,
    build_root: Path,
    *,
    seed: int | None = None,
    allow_timing_fail: bool = False,
    router: str | None = None,
    placer: str = "static",
    timing_driven: bool | None = None,
    nic: dict | None = None,
    core_hz: float | None = None,
    route_patience: int = ROUTE_PATIENCE,
    place_seeds: list[int] | None = None,
) -> dict:
    """Build ``board``; returns the report (also written as report.json). Raises SystemExit(1) on failure.
    ``seed``: nextpnr's placement seed; None tries the board's ``seeds`` in order, the next one only when
    routing stopped converging with the one before (the report's ``seeds_tried`` lists them).
    ``place_seeds``: place with each of these seeds and route only the placement whose worst clock
    estimate is best (:mod:`mrcnic.boards.place_best`; the report's ``placement_seeds``); None: the
    board's ``place_seeds`` (none when ``seed`` is given), an empty list: one placement per seed.
    ``router``: nextpnr's (None: the board's); ``timing_driven``: nextpnr's timing-driven placement
    (None: the board's ``timing_driven_placement``); ``route_patience``: router2 iterations without progress
    before the build stops it (0: never)."""
    if place_seeds is None:  # the board's, unless a seed was asked for
        place_seeds = [] if seed is not None else list(BOARDS[board].place_seeds)
    if place_seeds:  # the placements choose the seed; routing it again with another would not help
        seeds = [place_seeds[0]]
    else:
        seeds = list(BOARDS[board].seeds) if seed is None else [seed]
    options = dict(
        allow_timing_fail=allow_timing_fail,
        router=router,
        placer=placer,
        timing_driven=timing_driven,
        nic=nic,
        core_hz=core_hz,
        route_patience=route_patience,
        place_seeds=place_seeds,
    )
    tried: list[dict] = []
    for attempt, following in zip(seeds, seeds[1:], strict=False):
        try:
            return _build_with_seed(board, build_root, attempt, tried, **options)
        except RoutingStalled:
            tried.append({"seed": attempt, "error": "routing does not converge"})
            print(f"\n{board}: seed {attempt} did not route; trying seed {following}", file=sys.stderr)
    return _build_with_seed(board, build_root, seeds[-1], tried, **options)


def _build_with_seed(
    board: str,
    build_root: Path,
    seed: int,
    tried: list[dict],
    *,
    allow_timing_fail: bool,
    router: str | None,
    placer: str,
    timing_driven: bool | None,
    nic: dict | None,
    core_hz: float | None,
    route_patience: int,
    place_seeds: list[int],
) -> dict:
    """One build with one seed (or the best of ``place_seeds``); ``tried``: the seeds this build tried
    before, for the report."""
    apply_tool_environment()
    os.environ.setdefault("OPENFPGALOADER", "true")  # amaranth-boards names it; nothing is programmed
    spec = BOARDS[board]
    router = spec.router if router is None else router
    timing_driven = spec.timing_driven_placement if timing_driven is None else timing_driven
    top = BoardTop(board, nic=nic, core_hz=core_hz)
    platform = spec.platform()
    build_dir = build_root / board
    build_dir.mkdir(parents=True, exist_ok=True)
    name = f"mrcnic_{board}"
    for stale in ("nextpnr-report.json", f"{name}.bit", "report.json", f"{name}.tim", "placement_seeds.json"):
        (build_dir / stale).unlink(missing_ok=True)
    report = {
        "board": board,
        "device": f"{platform.device}-{platform.speed} {platform.package}",
        "planes": spec.planes,
        "memory_bytes": spec.memory_size,
        "max_frame": spec.max_frame,
        "nic": {
            **board_nic_parameters(spec.memory_size, top.nic_params),
            "planes": spec.planes,
            "clock_hz": int(top.core_hz),
        },
        "seed": seed,
        "seeds_tried": [*tried, {"seed": seed}],  # earlier seeds of this build and why they were left
        "placer": placer,
        "timing_driven_placement": timing_driven,
        "router": router,
    }
    started = time.monotonic()
    error = None
    stalled: list[str] = []
    routing_done = threading.Event()
    watcher = threading.Thread(
        target=_watch_routing,
        args=(build_dir / f"{name}.tim", RouteStallWatch(route_patience), routing_done, stalled),
        daemon=True,
    )
    watcher.start()
    nextpnr = os.environ.get("NEXTPNR_ECP5", "nextpnr-ecp5")  # the tool environment sets it
    if place_seeds:
        # The build script runs "$NEXTPNR_ECP5": a wrapper that places with each seed and routes the best.
        wrapper = build_dir / "nextpnr_place_best.sh"
        wrapper.write_text(
            f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m mrcnic.boards.place_best"
            f' --seeds {",".join(map(str, place_seeds))} --nextpnr {shlex.quote(nextpnr)} -- "$@"\n'
        )
        wrapper.chmod(0o755)
        os.environ["NEXTPNR_ECP5"] = str(wrapper.resolve())
    try:
        # nextpnr keeps going on failed timing, so the report is written in every case; we judge below.
        platform.build(
            top,
            name=name,
            build_dir=str(build_dir),
            do_program=False,
            synth_opts=SYNTH_OPTS,
            script_after_synth=_after_synth(name, spec.block_ram, small_arithmetic=spec.small_arithmetic),
            nextpnr_opts=nextpnr_options(seed, placer, router, timing_driven=timing_driven),
        )
    except Exception as exc:  # the toolchain's own failure (does not fit, bad constraint, ...)
        log = build_dir / f"{name}.tim"
        lines = log.read_text().splitlines() if log.exists() else []
        error = stalled or [line for line in lines if "ERROR" in line] or [str(exc).splitlines()[-1]]
    finally:
        os.environ["NEXTPNR_ECP5"] = nextpnr
        routing_done.set()
        watcher.join()
    report["seconds"] = round(time.monotonic() - started, 1)
    placements = build_dir / "placement_seeds.json"
    if place_seeds and placements.exists():
        report["placement_seeds"] = json.loads(placements.read_text())
        report["seed"] = report["placement_seeds"]["chosen"]
        report["seeds_tried"][-1] = {"seed": report["seed"], "placed_with": place_seeds}

    nextpnr_report = build_dir / "nextpnr-report.json"
    data = json.loads(nextpnr_report.read_text()) if nextpnr_report.exists() else {}
    utilisation = data.get("utilization") or _log_utilisation(build_dir / f"{name}.tim")
    report["utilisation"] = {
        UTILISATION[cell]: {"used": use["used"], "available": use["available"]}
        for cell, use in utilisation.items()
        if cell in UTILISATION
    }
    over = [
        f"{cell} {u['used']}/{u['available']}"
        for cell, u in report["utilisation"].items()
        if u["used"] > u["available"]
    ]
    if over and error is not None:
        error.append("does not fit: " + ", ".join(over))
    if data:
        clocks, targets = {}, _targets(spec, top.core_hz)
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
        raise RoutingStalled() if stalled else SystemExit(1)
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
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="nextpnr placement seed (default: the board's seeds in turn, the next when routing stalls)",
    )
    parser.add_argument(
        "--place-seeds",
        type=_seed_list,
        default=None,
        metavar="S,S,...",
        help="place with each seed, route only the best placement (default: the board's; 'none': one)",
    )
    parser.add_argument(
        "--allow-timing-fail", action="store_true", help="keep a bitstream that misses timing"
    )
    parser.add_argument(
        "--router",
        choices=("router1", "router2"),
        default=None,
        help="nextpnr's router (default: the board's; router1 on the Versa ECP5 and the ECPIX-5)",
    )
    # nextpnr's analytic "static" placer left the ECPIX-5 design 21 % less wire than "heap", its default
    # (docs/boards.md, "ECPIX-5").
    parser.add_argument("--placer", choices=("static", "heap"), default="static", help="nextpnr's placer")
    parser.add_argument(
        "--timing-driven",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="nextpnr's timing-driven placement (default: the board's; on for every board)",
    )
    parser.add_argument(
        "--nic", nargs="*", type=nic_setting, default=[], metavar="KEY=VALUE", help="NIC parameter overrides"
    )
    parser.add_argument(
        "--core-mhz", type=float, default=None, help="core clock (default: the board's; the PLL must make it)"
    )
    parser.add_argument(
        "--route-patience",
        type=int,
        default=ROUTE_PATIENCE,
        metavar="N",
        help="stop when router2 goes N iterations without fewer overused wires (0: never)",
    )
    args = parser.parse_args(argv)
    nic = dict(args.nic)
    build_board(
        args.board,
        args.build_dir,
        seed=args.seed,
        allow_timing_fail=args.allow_timing_fail,
        router=args.router,
        placer=args.placer,
        timing_driven=args.timing_driven,
        nic=nic,
        core_hz=args.core_mhz * 1e6 if args.core_mhz else None,
        route_patience=args.route_patience,
        place_seeds=args.place_seeds,
    )


def _seed_list(text: str) -> list[int]:
    """``--place-seeds``: ``1,2,3``, or ``none`` for a single placement."""
    return [] if text == "none" else parse_seeds(text)


if __name__ == "__main__":
    main()
