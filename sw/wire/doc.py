"""Generated parts of docs/protocol.md: the field tables and the ICRC worked example.

Both come from the codec itself (header definitions, example frames), so the document cannot drift from
the code. ``python -m mrcnic.wire.doc`` prints them; ``python -m mrcnic.wire.doc --write
docs/protocol.md`` replaces the generated blocks in the document. A test fails when it is stale.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .headers import HEADER_TYPES, Header
from .icrc import ICRC_PREFIX, compute_icrc, mask_variant_fields

__all__ = ["BLOCKS", "render_field_tables", "render_icrc_example", "update_document"]


def _bits(start: int, width: int) -> str:
    # Bit numbering inside the byte where the field starts, 7 = most significant (first on the wire).
    first_byte, first_bit = divmod(start, 8)
    if width % 8 == 0 and first_bit == 0:
        last_byte = first_byte + width // 8 - 1
        return f"{first_byte}" if last_byte == first_byte else f"{first_byte}-{last_byte}"
    hi = 7 - first_bit
    lo = hi - width + 1
    if lo >= 0:
        return f"{first_byte} [{hi}:{lo}]" if width > 1 else f"{first_byte} [{hi}]"
    end = start + width - 1
    return f"{first_byte} [{hi}:0] - {end // 8} [7:{7 - end % 8}]"


def render_header(kind: type[Header]) -> str:
    doc = (kind.__doc__ or "").strip().splitlines()[0]
    lines = [
        f"#### {kind.NAME} ({kind.SIZE} bytes)",
        "",
        doc,
        "",
        "| byte [bits] | width | field | meaning |",
        "| --- | ---: | --- | --- |",
    ]
    for _, bit, f in kind.layout():
        meaning = f.doc or ("reserved: 0 on transmit, ignored on receive" if f.reserved else "")
        if f.signed:
            meaning = "signed, two's complement. " + meaning
        if f.default and not f.reserved:
            meaning = f"{meaning} (default {f.default:#x})".strip()
        lines.append(f"| {_bits(bit, f.bits)} | {f.bits} | `{f.name}` | {meaning} |")
    return "\n".join(lines)


def render_field_tables() -> str:
    intro = (
        "Byte offsets are from the start of each header; bit 7 is the most significant bit of a byte and\n"
        "the first one on the wire. Multi-byte fields are big-endian (network order).\n"
    )
    return "\n\n".join([intro] + [render_header(k) for k in HEADER_TYPES]) + "\n"


def _hexdump(data: bytes) -> list[str]:
    return [f"{i:04x}  " + " ".join(f"{b:02x}" for b in data[i : i + 16]) for i in range(0, len(data), 16)]


def render_icrc_example() -> str:
    from .examples import example_frames

    frame = dict(example_frames(srv6=False))["write_only"]
    raw = frame.encode()
    covered = raw[14:-4]
    value = compute_icrc(covered)
    srv6 = dict(example_frames(srv6=True))["write_only"].encode()
    sizes = " + ".join(f"{h.NAME} {h.SIZE}" for h in [frame.ip, frame.udp, frame.bth, *frame.ext])
    lines = [
        "**Worked example** (generated): the single-mode `write_only` frame of "
        "`mrcnic.wire.examples.example_frames(srv6=False)`:",
        "",
        f"- Frame: {len(raw)} bytes without FCS: {frame.summary()}.",
        f"- Covered bytes: {len(covered)} ({sizes} + payload {len(frame.payload)}); the CRC input is "
        f"{len(ICRC_PREFIX) + len(covered)} bytes with the 0xFF prefix.",
        f"- ICRC = **0x{value:08X}**, on the wire `{value.to_bytes(4, 'little').hex(' ').upper()}` at frame "
        f"offsets {len(raw) - 4}-{len(raw) - 1}.",
        f"- The SRv6 version of the same frame ({len(srv6)} bytes) carries the same ICRC "
        f"(`{srv6[-4:].hex(' ').upper()}`): the outer header is not covered.",
        "",
        "The frame (ICRC last):",
        "",
        "```",
        *_hexdump(raw),
        "```",
        "",
        "The CRC input after masking (prefix, then the covered bytes with the variant fields set to ones):",
        "",
        "```",
        *_hexdump(ICRC_PREFIX + mask_variant_fields(covered)),
        "```",
        "",
    ]
    return "\n".join(lines)


BLOCKS = {
    "FIELD TABLES": render_field_tables,
    "ICRC EXAMPLE": render_icrc_example,
}


def _markers(name: str) -> tuple[str, str]:
    suffix = " (python -m mrcnic.wire.doc --write docs/protocol.md)" if name == "FIELD TABLES" else ""
    return f"<!-- BEGIN GENERATED {name}{suffix} -->", f"<!-- END GENERATED {name} -->"


def update_document(path: Path) -> bool:
    """Rewrite the generated blocks of ``path``; returns True when anything changed."""
    text = original = path.read_text()
    for name, render in BLOCKS.items():
        begin, end = _markers(name)
        head, sep, rest = text.partition(begin)
        if not sep or end not in rest:
            raise SystemExit(f"{path}: markers of the generated block {name!r} are missing")
        _, _, tail = rest.partition(end)
        text = f"{head}{begin}\n{render()}{end}{tail}"
    if text != original:
        path.write_text(text)
        return True
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, help="update the generated block in this document")
    args = parser.parse_args(argv)
    if args.write:
        changed = update_document(args.write)
        print(f"{args.write}: {'updated' if changed else 'up to date'}")
    else:
        for render in BLOCKS.values():
            sys.stdout.write(render() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
