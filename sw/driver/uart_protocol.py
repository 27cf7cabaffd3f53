"""The UART host bridge's wire protocol (docs/uart-bridge.md): requests and answers as COBS frames
delimited by 0x00, each with a CRC-32.

The one implementation of the codec: the driver's ``uart:`` backend (:mod:`.uart_backend`) speaks it, and
the gateware's tests check the bridge (``mrcnic.hdl.host.uart_bridge``) against it and against
:class:`BridgeModel`, the reference behaviour of the bridge.

Ref: S. Cheshire, M. Baker, "Consistent Overhead Byte Stuffing", IEEE/ACM Trans. Networking 7(2), 1999
(COBS); IEEE Std 802.3-2022 §3.2.9 (the CRC-32 polynomial), in the reflected form of ``zlib.crc32``
(CRC-32/ISO-HDLC).

Decoded frames (little-endian fields)::

    request: SEQ[2] CMD[1] COUNT[1] ADDRESS[4] DATA[4*COUNT, writes only] CRC[4]
    answer:  SEQ[2] STATUS[1] DONE[1] DATA[4*DONE, reads only] CRC[4]

``CMD`` bit 0: write (else read); bit 1: host memory (else registers); bits 7..2 zero. ``COUNT``: 32-bit
words, 1..``MAX_WORDS``. ``STATUS`` bits 3..0: :class:`Status`; bit 7 (:data:`REPEATED`): a repeated write
that was not performed again. ``DONE``: words accessed before the access stopped. ``CRC``: over every byte
before it.
"""

from __future__ import annotations

import enum
import zlib
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "ANSWER_HEADER",
    "CRC_BYTES",
    "MAX_WORDS",
    "MIN_REQUEST",
    "REPEATED",
    "REQUEST_HEADER",
    "Answer",
    "BridgeModel",
    "Deframer",
    "FrameError",
    "Request",
    "Space",
    "Status",
    "cobs_decode",
    "cobs_encode",
    "crc32",
    "decode_answer",
    "decode_request",
]

MAX_WORDS = 64  # words per request: a 64-byte WQE is 16, so a burst moves four
REQUEST_HEADER = 8
ANSWER_HEADER = 4
CRC_BYTES = 4
MIN_REQUEST = REQUEST_HEADER + CRC_BYTES  # a read; shorter frames are dropped unanswered
REPEATED = 0x80  # STATUS flag: a retried write answered from memory, not performed again
CMD_WRITE, CMD_MEMORY = 0x01, 0x02


class Space(enum.IntEnum):
    REGISTERS = 0  # the NIC's AXI4-Lite register port
    MEMORY = 1  # the host memory the NIC reaches by DMA


class Status(enum.IntEnum):
    OK = 0
    BAD_CRC = 1  # the request's CRC did not match: nothing done (its SEQ may be corrupt too)
    BAD_REQUEST = 2  # CRC good, but CMD, COUNT, length, alignment or address range wrong: nothing done
    SLVERR = 3  # an AXI SLVERR response (ARM IHI 0022 §A3.4.4); DONE words were accessed before it
    DECERR = 4  # an AXI DECERR response
    TIMEOUT = 5  # the AXI subordinate did not answer within the bridge's timeout


def crc32(data: bytes) -> int:
    return zlib.crc32(data)


class FrameError(ValueError):
    """A frame that cannot be used: ``reason`` says why. For a request, ``status`` is the error status the
    bridge answers with (and ``seq`` the SEQ it echoes), or None when the frame is dropped unanswered."""

    def __init__(self, reason: str, *, status: Status | None = None, seq: int | None = None):
        super().__init__(reason)
        self.reason, self.status, self.seq = reason, status, seq


# -- COBS ------------------------------------------------------------------------------------------------
def cobs_encode(data: bytes) -> bytes:
    """COBS: every block is a code byte n (1..255) and n - 1 non-zero bytes, followed by an implied zero
    unless n = 255; the zero implied after the last block is not part of the data. No zero byte remains,
    so 0x00 delimits frames. Overhead: 1 byte per 254 (at least 1)."""
    out = bytearray()
    block = bytearray()
    for byte in data:
        if byte == 0:
            out.append(len(block) + 1)
            out += block
            block.clear()
            continue
        block.append(byte)
        if len(block) == 254:
            out.append(255)
            out += block
            block.clear()
    out.append(len(block) + 1)
    out += block
    return bytes(out)


def cobs_decode(encoded: bytes) -> bytes:
    """Inverse of :func:`cobs_encode` (the bytes between two delimiters). Raises :class:`FrameError` for a
    zero byte or a block that runs past the end. A frame ending right after a 255 block is accepted without
    the final 0x01 block some encoders add."""
    out = bytearray()
    i = 0
    zero_pending = False
    while i < len(encoded):
        code = encoded[i]
        if code == 0:
            raise FrameError(f"COBS: zero byte at offset {i}")
        if zero_pending:
            out.append(0)
        block = encoded[i + 1 : i + code]
        if len(block) != code - 1:
            raise FrameError(f"COBS: block at offset {i} wants {code - 1} bytes, {len(block)} left")
        if 0 in block:
            raise FrameError(f"COBS: zero byte at offset {i + 1 + block.index(0)}")
        out += block
        zero_pending = code != 255
        i += code
    return bytes(out)


class Deframer:
    """Splits a byte stream into frames at 0x00 delimiters; empty frames (repeated delimiters) are skipped.
    A frame longer than ``limit`` bytes is cut there (it cannot be a valid one, and decoding rejects it)."""

    def __init__(self, limit: int = 4096):
        self.limit = limit
        self.partial = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """The frames ``data`` completes (COBS-encoded, without delimiters)."""
        frames = []
        *complete, tail = bytes(data).split(b"\x00")
        for chunk in complete:
            self._append(chunk)
            if self.partial:
                frames.append(bytes(self.partial))
            self.partial.clear()
        self._append(tail)
        return frames

    def _append(self, chunk: bytes) -> None:
        self.partial += chunk[: max(0, self.limit - len(self.partial))]

    def reset(self) -> None:
        self.partial.clear()


def _seal(body: bytes) -> bytes:
    """``body`` + CRC, COBS-encoded, delimited."""
    return cobs_encode(body + crc32(body).to_bytes(4, "little")) + b"\x00"


# -- requests -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Request:
    seq: int
    write: bool
    space: Space
    address: int
    count: int
    data: bytes = b""  # writes: 4 * count bytes

    def body(self) -> bytes:
        cmd = (CMD_WRITE if self.write else 0) | (CMD_MEMORY if self.space == Space.MEMORY else 0)
        header = (
            self.seq.to_bytes(2, "little") + bytes([cmd, self.count]) + self.address.to_bytes(4, "little")
        )
        return header + (self.data if self.write else b"")

    def encode(self) -> bytes:
        """The frame on the wire: COBS of body + CRC, then the 0x00 delimiter."""
        return _seal(self.body())

    @property
    def words(self) -> list[int]:
        return [int.from_bytes(self.data[i : i + 4], "little") for i in range(0, len(self.data), 4)]


def request_frame(seq: int, cmd: int, count: int, address: int, data: bytes = b"", *, crc: int | None = None):
    """A request frame from raw field values, for tests that need malformed ones (``crc``: force a CRC)."""
    body = seq.to_bytes(2, "little") + bytes([cmd, count]) + address.to_bytes(4, "little") + data
    value = crc32(body) if crc is None else crc
    return cobs_encode(body + value.to_bytes(4, "little")) + b"\x00"


def decode_request(
    encoded: bytes, *, max_words: int = MAX_WORDS, address_bits: tuple[int, int] = (16, 32)
) -> Request:
    """Decode one request frame (without its delimiter) as the bridge does, in the bridge's order of
    checks: undecodable or shorter than :data:`MIN_REQUEST` -> dropped; CRC mismatch -> BAD_CRC; then
    CMD, COUNT, length, alignment and the address range (``address_bits`` per :class:`Space`) ->
    BAD_REQUEST. Raises :class:`FrameError` with the bridge's reaction."""
    body = cobs_decode(encoded)
    if len(body) < MIN_REQUEST:
        raise FrameError(f"frame of {len(body)} bytes, shorter than a request ({MIN_REQUEST})")
    seq = int.from_bytes(body[0:2], "little")
    if crc32(body[:-4]) != int.from_bytes(body[-4:], "little"):
        raise FrameError("CRC mismatch", status=Status.BAD_CRC, seq=seq)
    cmd, count = body[2], body[3]
    address = int.from_bytes(body[4:8], "little")

    def bad(reason):
        return FrameError(reason, status=Status.BAD_REQUEST, seq=seq)

    if cmd & ~(CMD_WRITE | CMD_MEMORY):
        raise bad(f"CMD {cmd:#04x}: reserved bits set")
    if not 1 <= count <= max_words:
        raise bad(f"COUNT {count} outside 1..{max_words}")
    write = bool(cmd & CMD_WRITE)
    want = MIN_REQUEST + (4 * count if write else 0)
    if len(body) != want:
        raise bad(f"{'write' if write else 'read'} of {count} words in {len(body)} bytes, not {want}")
    if address & 3:
        raise bad(f"address {address:#x} not a multiple of 4")
    space = Space.MEMORY if cmd & CMD_MEMORY else Space.REGISTERS
    if address + 4 * count > 1 << address_bits[space]:
        raise bad(f"{space.name.lower()} {address:#x} + {4 * count} bytes beyond {address_bits[space]} bits")
    return Request(seq, write, space, address, count, body[8:-4] if write else b"")


# -- answers ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Answer:
    seq: int
    status: Status
    done: int = 0
    data: bytes = b""  # reads: 4 * done bytes
    repeated: bool = False

    def body(self) -> bytes:
        status = int(self.status) | (REPEATED if self.repeated else 0)
        return self.seq.to_bytes(2, "little") + bytes([status, self.done]) + self.data

    def encode(self) -> bytes:
        return _seal(self.body())

    @property
    def words(self) -> list[int]:
        return [int.from_bytes(self.data[i : i + 4], "little") for i in range(0, len(self.data), 4)]


def decode_answer(encoded: bytes) -> Answer:
    """Decode one answer frame (without its delimiter); raises :class:`FrameError` if it is unusable."""
    body = cobs_decode(encoded)
    if len(body) < ANSWER_HEADER + CRC_BYTES:
        raise FrameError(f"answer of {len(body)} bytes, shorter than {ANSWER_HEADER + CRC_BYTES}")
    if crc32(body[:-4]) != int.from_bytes(body[-4:], "little"):
        raise FrameError("answer CRC mismatch")
    seq = int.from_bytes(body[0:2], "little")
    code, done = body[2] & 0x0F, body[3]
    if body[2] & 0x70 or code not in Status._value2member_map_:
        raise FrameError(f"answer STATUS {body[2]:#04x} unknown")
    data = body[4:-4]
    if len(data) not in (0, 4 * done):
        raise FrameError(f"answer with DONE {done} carries {len(data)} data bytes")
    return Answer(seq, Status(code), done, data, bool(body[2] & REPEATED))


# -- the bridge's behaviour, for tests ----------------------------------------------------------------------
ReadWord = Callable[[Space, int], "tuple[int | None, int]"]
WriteWord = Callable[[Space, int, int], "int | None"]


class BridgeModel:
    """What the gateware bridge does with each frame (docs/uart-bridge.md "Bridge behaviour"), over two
    callbacks: ``read_word(space, address) -> (resp, value)`` and ``write_word(space, address, value) ->
    resp``, where ``resp`` is the AXI response (0 OKAY, 2 SLVERR, 3 DECERR) or None for no answer
    (TIMEOUT). :meth:`receive` takes one frame's bytes (without the delimiter) and returns the answer
    frame on the wire, or None when the frame is dropped. ``counters`` match the gateware's."""

    def __init__(
        self,
        read_word: ReadWord,
        write_word: WriteWord,
        *,
        max_words: int = MAX_WORDS,
        address_bits: tuple[int, int] = (16, 32),
    ):
        self.read_word, self.write_word = read_word, write_word
        self.max_words, self.address_bits = max_words, address_bits
        self.last_write: tuple[int, int, Answer] | None = None  # (seq, CRC field, answer)
        self.counters = dict.fromkeys(
            ("frames_ok", "bad_crc", "bad_frame", "framing_errors", "bus_errors", "timeouts", "repeated"), 0
        )

    def receive(self, encoded: bytes, *, poisoned: bool = False) -> bytes | None:
        if poisoned:  # a character with a framing error, or one that arrived while the bridge was busy
            self.counters["bad_frame"] += 1
            return None
        try:
            request = decode_request(encoded, max_words=self.max_words, address_bits=self.address_bits)
        except FrameError as error:
            self.counters["bad_crc" if error.status == Status.BAD_CRC else "bad_frame"] += 1
            return None if error.status is None else Answer(error.seq, error.status).encode()
        self.counters["frames_ok"] += 1
        crc_field = int.from_bytes(cobs_decode(encoded)[-4:], "little")
        if request.write and self.last_write and self.last_write[:2] == (request.seq, crc_field):
            self.counters["repeated"] += 1
            previous = self.last_write[2]
            return Answer(request.seq, previous.status, previous.done, repeated=True).encode()
        status, done, data = Status.OK, 0, bytearray()
        for i in range(request.count):
            address = request.address + 4 * i
            if request.write:
                resp = self.write_word(request.space, address, request.words[i])
            else:
                resp, value = self.read_word(request.space, address)
            if resp is None:
                status = Status.TIMEOUT
                self.counters["timeouts"] += 1
                break
            if resp & 2:
                status = Status.SLVERR if resp == 2 else Status.DECERR
                self.counters["bus_errors"] += 1
                break
            done += 1
            if not request.write:
                data += value.to_bytes(4, "little")
        answer = Answer(request.seq, status, done, bytes(data))
        self.last_write = (request.seq, crc_field, answer) if request.write else None
        return answer.encode()
