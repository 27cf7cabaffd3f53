"""Minimal pcap writer/reader (nanosecond timestamps, Ethernet link type) for captured MRC frames.

Written without scapy so simulators can log millions of frames cheaply; the files open in scapy
(``rdpcap``), Wireshark and tcpdump. Frames are stored without the Ethernet FCS.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

__all__ = ["PcapWriter", "read_pcap", "write_pcap"]

_MAGIC_NS = 0xA1B23C4D
_LINKTYPE_ETHERNET = 1


class PcapWriter:
    def __init__(self, path: str | Path, snaplen: int = 65535):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "wb")
        self._file.write(struct.pack("<IHHiIII", _MAGIC_NS, 2, 4, 0, 0, snaplen, _LINKTYPE_ETHERNET))
        self.count = 0

    def write(self, frame: bytes, time_ns: int = 0) -> None:
        seconds, nanoseconds = divmod(int(time_ns), 1_000_000_000)
        self._file.write(struct.pack("<IIII", seconds, nanoseconds, len(frame), len(frame)))
        self._file.write(frame)
        self.count += 1

    def close(self) -> None:
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def write_pcap(path: str | Path, frames: list[bytes] | list[tuple[int, bytes]]) -> None:
    """Write ``frames`` (bytes, or (time_ns, bytes) pairs) to ``path``."""
    with PcapWriter(path) as out:
        for i, item in enumerate(frames):
            time_ns, frame = item if isinstance(item, tuple) else (i * 1000, item)
            out.write(frame, time_ns)


def read_pcap(path: str | Path) -> Iterator[tuple[int, bytes]]:
    """Yield (time_ns, frame) from a pcap file (micro- or nanosecond resolution, either byte order)."""
    data = Path(path).read_bytes()
    magic = struct.unpack_from("<I", data)[0]
    order, scale = {
        _MAGIC_NS: ("<", 1),
        0xA1B2C3D4: ("<", 1000),
        0x4D3CB2A1: (">", 1),
        0xD4C3B2A1: (">", 1000),
    }.get(magic, (None, None))
    if order is None:
        raise ValueError(f"{path}: not a pcap file (magic {magic:#x})")
    pos = 24
    while pos + 16 <= len(data):
        seconds, fraction, caplen, _ = struct.unpack_from(order + "IIII", data, pos)
        pos += 16
        yield seconds * 1_000_000_000 + fraction * scale, data[pos : pos + caplen]
        pos += caplen
