"""One block through the ECP5 synthesis alone (``mrcnic.boards.synth_block``): keyword arguments from the
command line, the counts of a design whose cells are known, and clear errors for a bad component."""

from __future__ import annotations

import pytest
from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from mrcnic.boards.synth_block import main

from support.cocotb_runner import REPO_ROOT


class Counter(wiring.Component):
    """A free-running counter: ``width`` flip-flops and a carry chain of ``width / 2`` carry cells."""

    def __init__(self, *, width: int = 8, step: int = 1):
        self.step = step
        super().__init__({"value": Out(width)})

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.value.eq(self.value + self.step)
        return m


HERE = f"{__name__}:Counter"  # how the tool imports this module's Counter


def test_counts_of_a_counter(capsys):
    main([HERE, "width=32", "step=3", "--build-dir", str(REPO_ROOT / "build/test_synth_block")])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{HERE} width=32 step=3"
    header, row = lines[1].split(), lines[3].split()
    counts = dict(zip(header[1:], map(int, row[1:]), strict=True))
    assert row[0] == "Counter"
    assert counts["ff"] == 32
    assert counts["ccu2c"] in (16, 17)  # two bits per carry cell, perhaps one for the carry in
    assert counts["cells"] == counts["lut4"] + 2 * counts["ccu2c"] + 6 * counts["lutram"]


@pytest.mark.parametrize(
    "argv, message",
    [
        ([HERE.replace(":", ".")], "expected module:Class"),
        ([HERE.replace("Counter", "Nothing")], "has no Nothing"),
        ([HERE, "width"], "expected KEY=VALUE"),
        ([HERE, "width=eight"], "is not a Python literal"),
    ],
)
def test_bad_arguments_are_named(argv, message, capsys):
    with pytest.raises(SystemExit):
        main(argv)
    assert message in capsys.readouterr().err
