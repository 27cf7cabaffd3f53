"""Write the Verilog of the top-level designs: ``python -m mrcnic.hdl.generate OUTDIR`` (`make verilog`).

Each entry of :data:`TOP_LEVELS` is a design a user may want to drop into another flow; the list grows
as blocks land (TX and RX pipelines, the NIC core).
"""

import argparse
import sys
from pathlib import Path

from amaranth.back import verilog

__all__ = ["TOP_LEVELS", "main"]


def _icrc(data_width):
    from .icrc import IcrcEngine

    return lambda: IcrcEngine(data_width)


def _tx(data_width, planes):
    from .tx.pipeline import TxPipeline

    return lambda: TxPipeline(data_width=data_width, planes=planes)


def _rx(data_width, planes):
    from .rx.pipeline import RxPipeline

    return lambda: RxPipeline(data_width=data_width, planes=planes)


def _top(data_width, planes):
    from .host.nic_top import MrcNicTop

    return lambda: MrcNicTop(data_width=data_width, planes=planes)


def _nic(data_width, planes):
    from .nic import MrcNic

    return lambda: MrcNic(data_width=data_width, planes=planes)


TOP_LEVELS = {
    "icrc_engine_dw8": _icrc(8),
    "icrc_engine_dw32": _icrc(32),
    "tx_pipeline_dw8_p4": _tx(8, 4),
    "tx_pipeline_dw32_p4": _tx(32, 4),
    "rx_pipeline_dw8_p4": _rx(8, 4),
    "rx_pipeline_dw32_p4": _rx(32, 4),
    "mrc_nic_dw8_p4": _nic(8, 4),
    "mrc_nic_top_dw8_p4": _top(8, 4),
    "mrc_nic_dw8_p2": _nic(8, 2),
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path, nargs="?", default=Path("build/verilog"))
    parser.add_argument(
        "--only", nargs="*", choices=sorted(TOP_LEVELS), help="designs to write (default all)"
    )
    args = parser.parse_args(argv)
    args.outdir.mkdir(parents=True, exist_ok=True)
    for name in args.only or sorted(TOP_LEVELS):
        path = args.outdir / f"{name}.v"
        path.write_text(verilog.convert(TOP_LEVELS[name](), name=name, emit_src=False))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
