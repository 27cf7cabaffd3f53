"""The `mrcnic` command line: one entry point, one sub-command per area."""

from __future__ import annotations

import argparse
import sys

from .driver.cli import add_driver_parsers
from .fabric.cli import add_sim_parser

__all__ = ["main"]


def _wire_example(args: argparse.Namespace) -> int:
    from .wire import decode
    from .wire.examples import example_frames
    from .wire.pcap import write_pcap

    frames = []
    modes = {"srv6": [True], "single": [False], "both": [True, False]}[args.mode]
    for srv6 in modes:
        for name, frame in example_frames(srv6):
            raw = frame.encode()
            decode(raw, check_icrc=True)  # every example must be valid before it is written
            frames.append(raw)
            print(f"{'srv6  ' if srv6 else 'single'} {name:20s} {len(raw):4d} B  {frame.summary()}")
    write_pcap(args.out, frames)
    print(f"wrote {len(frames)} frames to {args.out}")
    return 0


def _wire_decode(args: argparse.Namespace) -> int:
    from .wire import WireError, decode
    from .wire.pcap import read_pcap

    bad = 0
    for i, (time_ns, raw) in enumerate(read_pcap(args.pcap)):
        try:
            frame = decode(raw, check_icrc=True)
            print(f"{i:5d} {time_ns / 1000:12.3f} us  {frame.summary()}")
        except WireError as error:
            bad += 1
            print(f"{i:5d} {time_ns / 1000:12.3f} us  MALFORMED {error}")
    return 1 if bad else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mrcnic", description="MRC NIC tools: wire format, simulation, driver"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    wire = sub.add_parser("wire", help="the MRC wire format")
    wire_sub = wire.add_subparsers(dest="wire_command", required=True)
    example = wire_sub.add_parser("example", help="write one frame of every MRC packet type to a pcap")
    example.add_argument("--out", required=True, help="pcap file to write")
    example.add_argument(
        "--mode", choices=["srv6", "single", "both"], default="both", help="header stack(s) (default both)"
    )
    example.set_defaults(func=_wire_example)
    show = wire_sub.add_parser("decode", help="decode a pcap of MRC frames, checking lengths and ICRC")
    show.add_argument("pcap")
    show.set_defaults(func=_wire_decode)
    add_sim_parser(sub)  # mrcnic sim
    add_driver_parsers(sub)  # mrcnic info / counters / qp list / paths
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # output piped into `head` and friends
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
