"""Field tables of docs/protocol.md, generated from the codec's header definitions.

``python -m mrcnic.wire.doc`` prints them; ``python -m mrcnic.wire.doc --write docs/protocol.md``
replaces the generated block in the document. A test fails when the document is stale.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .headers import HEADER_TYPES, Header

__all__ = ["BEGIN", "END", "render_field_tables", "update_document"]

BEGIN = "<!-- BEGIN GENERATED FIELD TABLES (python -m mrcnic.wire.doc --write docs/protocol.md) -->"
END = "<!-- END GENERATED FIELD TABLES -->"


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
            meaning += f" (default {f.default:#x})"
        lines.append(f"| {_bits(bit, f.bits)} | {f.bits} | `{f.name}` | {meaning} |")
    return "\n".join(lines)


def render_field_tables() -> str:
    intro = (
        "Byte offsets are from the start of each header; bit 7 is the most significant bit of a byte and\n"
        "the first one on the wire. Multi-byte fields are big-endian (network order).\n"
    )
    return "\n\n".join([intro] + [render_header(k) for k in HEADER_TYPES]) + "\n"


def update_document(path: Path) -> bool:
    """Rewrite the generated block of ``path``; returns True when it changed."""
    text = path.read_text()
    head, sep, rest = text.partition(BEGIN)
    if not sep or END not in rest:
        raise SystemExit(f"{path}: markers for the generated field tables are missing")
    _, _, tail = rest.partition(END)
    new = f"{head}{BEGIN}\n{render_field_tables()}{END}{tail}"
    if new != text:
        path.write_text(new)
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
        sys.stdout.write(render_field_tables())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
