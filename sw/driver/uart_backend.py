"""The ``uart:`` backend: a NIC on a board, reached through its UART host bridge
(``mrcnic.hdl.host.uart_bridge``; protocol and rules in docs/uart-bridge.md).

:class:`UartTransport` runs over any byte stream: an object with ``write(bytes)`` and ``read(n)`` (each
either a plain method or a coroutine; ``read`` returns up to ``n`` bytes, or ``b""`` when nothing came
within its own short wait, like pyserial's ``Serial.read`` with a timeout). Optional members: ``now()``
(seconds on the device's clock: a simulation's time; default ``time.monotonic``), ``sleep(seconds)``
(default ``asyncio.sleep``), ``byte_time`` (seconds per character on the line, to size the answer
timeout), ``close()``. For a serial port :func:`open_uart` wraps pyserial (imported only then).

Retry rule. One request is outstanding at a time; each new request takes the next 16-bit SEQ. When no
usable answer with that SEQ arrives in time (lost or corrupted on either way, or answered BAD_CRC), the
same frame is sent again, byte for byte, after a 0x00 that ends whatever partial frame the bridge holds:

* a read is simply performed again;
* a write that the bridge already performed is recognised (same SEQ and CRC as the last request it
  performed, which was a write) and answered from memory with the REPEATED flag, not performed again.
  So a retried write lands exactly once. The bridge remembers only the last request, which is why the
  transport starts with a read (:meth:`UartTransport.sync`, done before the first request): a write left
  over from an earlier session cannot match a new one.

SLVERR / DECERR / TIMEOUT answers are final: they raise :class:`~.nic.DriverError` naming the access
and how many words completed. No answer after ``retries`` + 1 attempts raises DriverError too.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import random
import time
from urllib.parse import parse_qsl, urlsplit

from .nic import DriverError, InvalidParameter
from .transport import Transport
from .uart_protocol import (
    CRC_BYTES,
    MAX_WORDS,
    Answer,
    Deframer,
    FrameError,
    Request,
    Space,
    Status,
    decode_answer,
)

__all__ = [
    "DEFAULT_BAUD",
    "DEFAULT_MEMORY_BASE",
    "DEFAULT_MEMORY_SIZE",
    "SerialStream",
    "UartTransport",
    "open_uart",
    "parse_uart_url",
]

DEFAULT_BAUD = 1_000_000
# The host-memory window the board tops decode on the bridge's `memory` port and on the NIC's m_axi
# alike (the same addresses on both): 64 KiB of on-chip memory from address 0.
DEFAULT_MEMORY_BASE = 0x0
DEFAULT_MEMORY_SIZE = 0x10000
DEFAULT_TIMEOUT = 0.05  # seconds beyond the time the two frames take on the line
DEFAULT_RETRIES = 4


async def _call(function, *args):
    result = function(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


class UartTransport(Transport):
    """One NIC behind a UART bridge on ``stream``. ``memory_base`` / ``memory_size``: the host-memory window
    the driver allocates from (defaults: :data:`DEFAULT_MEMORY_BASE`, :data:`DEFAULT_MEMORY_SIZE`);
    ``timeout``: seconds to wait for an answer beyond its time on the line; ``retries``: extra attempts
    per request; ``max_words``: words per request (the bridge's ``max_words``); ``seq``: the first SEQ
    (random by default)."""

    def __init__(
        self,
        stream,
        *,
        memory_base: int = DEFAULT_MEMORY_BASE,
        memory_size: int = DEFAULT_MEMORY_SIZE,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        max_words: int = MAX_WORDS,
        byte_time: float | None = None,
        name: str = "uart",
        seq: int | None = None,
    ):
        if not 1 <= max_words <= 255:
            raise InvalidParameter(f"max_words {max_words} outside 1..255")
        if retries < 0 or timeout <= 0:
            raise InvalidParameter(f"retries {retries} and timeout {timeout} must be >= 0 and > 0")
        self.stream = stream
        self.memory_base, self.memory_size = memory_base, memory_size
        self.timeout, self.retries, self.max_words = timeout, retries, max_words
        self.byte_time = byte_time if byte_time is not None else getattr(stream, "byte_time", 0.0)
        self.name = name
        self.seq = random.randrange(1 << 16) if seq is None else seq & 0xFFFF
        self.deframer = Deframer()
        self.synced = False
        self.resync = True
        self.stats = dict.fromkeys(
            (
                "requests",
                "retries",
                "lost",
                "corrupt_answers",
                "stale_answers",
                "bad_crc_answers",
                "repeated",
            ),
            0,
        )

    def describe(self) -> str:
        return f"NIC behind the UART bridge on {self.name}"

    # -- the stream's optional members
    def _now(self) -> float:
        now = getattr(self.stream, "now", None)
        return now() if now is not None else time.monotonic()

    async def _sleep(self, seconds: float) -> None:
        sleep = getattr(self.stream, "sleep", None)
        await (_call(sleep, seconds) if sleep is not None else asyncio.sleep(seconds))

    async def close(self) -> None:
        close = getattr(self.stream, "close", None)
        if close is not None:
            await _call(close)

    # -- one request, with retries
    async def sync(self) -> None:
        """A read of register 0: from here on the bridge's memory of the last write is this session's."""
        self.synced = True
        await self._transact(Space.REGISTERS, False, 0, 1)

    async def _transact(
        self, space: Space, write: bool, address: int, count: int, data: bytes = b""
    ) -> Answer:
        if not self.synced:
            await self.sync()
        self.seq = (self.seq + 1) & 0xFFFF
        request = Request(self.seq, write, space, address, count, data)
        frame = request.encode()
        answer_bytes = 8 + (0 if write else 4 * count) + CRC_BYTES
        # COBS adds one byte per 254 and the delimiter; the UART sends the request, then the answer.
        wire = len(frame) + 1 + answer_bytes + answer_bytes // 254 + 2
        budget = self.timeout + wire * self.byte_time
        op = "write" if write else "read"
        what = f"{op} of {count} word{'s' * (count != 1)} at {space.name.lower()} {address:#x}"
        self.stats["requests"] += 1
        for attempt in range(self.retries + 1):
            if attempt:
                self.stats["retries"] += 1
            self.deframer.reset()
            # After a failure (and first of all) a leading 0x00 ends any partial frame the bridge holds.
            await _call(self.stream.write, (b"\x00" if self.resync else b"") + frame)
            self.resync = True
            answer = await self._answer(request.seq, self._now() + budget)
            if answer is None:
                continue
            self.resync = False
            if answer.repeated:
                self.stats["repeated"] += 1
            if answer.status == Status.BAD_CRC:
                self.stats["bad_crc_answers"] += 1
                continue
            if answer.status == Status.BAD_REQUEST:
                raise DriverError(f"UART bridge on {self.name}: {what} refused (BAD_REQUEST)")
            if answer.status != Status.OK:
                reason = (
                    "no answer from the bus"
                    if answer.status == Status.TIMEOUT
                    else f"AXI {answer.status.name}"
                )
                raise DriverError(
                    f"UART bridge on {self.name}: {what}: {reason} after {answer.done} of {count} words"
                )
            if answer.done != count or (not write and len(answer.data) != 4 * count):
                raise DriverError(f"UART bridge on {self.name}: {what}: answer with {answer.done} words")
            return answer
        raise DriverError(
            f"UART bridge on {self.name}: no answer to a {what} after {self.retries + 1} attempts "
            f"({budget * 1e3:.1f} ms each)"
        )

    async def _answer(self, seq: int, deadline: float) -> Answer | None:
        """The answer to ``seq``; None when it did not come in time or came corrupted (retry now)."""
        while self._now() < deadline:
            chunk = await _call(self.stream.read, 4096)
            for frame in self.deframer.feed(chunk or b""):
                try:
                    answer = decode_answer(frame)
                except FrameError:
                    self.stats["corrupt_answers"] += 1
                    return None
                if answer.seq != seq:
                    self.stats["stale_answers"] += 1  # an answer to an earlier attempt, or noise
                    continue
                return answer
        self.stats["lost"] += 1
        return None

    # -- words, registers, memory
    async def read_words(self, space: Space, address: int, count: int) -> list[int]:
        words: list[int] = []
        while count:
            n = min(count, self.max_words)
            words += (await self._transact(space, False, address, n)).words
            address, count = address + 4 * n, count - n
        return words

    async def write_words(self, space: Space, address: int, words: list[int]) -> None:
        for i in range(0, len(words), self.max_words):
            chunk = words[i : i + self.max_words]
            data = b"".join(w.to_bytes(4, "little") for w in chunk)
            await self._transact(space, True, address + 4 * i, len(chunk), data)

    async def read32(self, address: int) -> int:
        return (await self.read_words(Space.REGISTERS, address, 1))[0]

    async def write32(self, address: int, value: int) -> None:
        await self.write_words(Space.REGISTERS, address, [value & 0xFFFFFFFF])

    async def read_block(self, address: int, count: int) -> list[int]:
        return await self.read_words(Space.REGISTERS, address, count)

    async def write_block(self, address: int, words: list[int]) -> None:
        await self.write_words(Space.REGISTERS, address, [w & 0xFFFFFFFF for w in words])

    async def mem_read(self, address: int, length: int) -> bytes:
        if length <= 0:
            return b""
        start, end = address & ~3, -(-(address + length) // 4) * 4
        words = await self.read_words(Space.MEMORY, start, (end - start) // 4)
        raw = b"".join(w.to_bytes(4, "little") for w in words)
        return raw[address - start : address - start + length]

    async def mem_write(self, address: int, data: bytes) -> None:
        """Whole words are written; a partial word at either end is read, merged and written back (the
        protocol moves words only)."""
        if not data:
            return
        start, end = address & ~3, -(-(address + len(data)) // 4) * 4
        raw = bytearray(end - start)
        head, tail = address != start, end != address + len(data)
        if head:
            raw[0:4] = await self.mem_read(start, 4)
        if tail and not (head and end - start == 4):
            raw[-4:] = await self.mem_read(end - 4, 4)
        raw[address - start : address - start + len(data)] = data
        await self.write_words(
            Space.MEMORY, start, [int.from_bytes(raw[i : i + 4], "little") for i in range(0, len(raw), 4)]
        )

    async def idle(self, ns: float) -> None:
        await self._sleep(ns * 1e-9)


# -- serial ports ------------------------------------------------------------------------------------------
class SerialStream:
    """A pyserial port as the byte stream :class:`UartTransport` wants. Reads wait at most ``poll``
    seconds (they block the event loop meanwhile: the driver runs one request at a time anyway)."""

    def __init__(self, port, *, poll: float = 0.005):
        self.port = port
        self.port.timeout = poll
        self.byte_time = 10 / port.baudrate  # 8N1: ten bit times per character

    def write(self, data: bytes) -> None:
        self.port.write(data)
        self.port.flush()

    def read(self, size: int) -> bytes:
        return self.port.read(max(1, min(size, self.port.in_waiting)))

    def close(self) -> None:
        self.port.close()


def _number(text: str, what: str) -> int:
    scale = {"k": 1 << 10, "m": 1 << 20}.get(text[-1:].lower(), 1)
    try:
        return int(text[:-1] if scale > 1 else text, 0) * scale
    except ValueError:
        raise InvalidParameter(
            f"{what}: {text!r} is not a number (decimal, 0x..., optional K or M)"
        ) from None


def parse_uart_url(url: str) -> tuple[str, dict]:
    """``uart:<port>[?baud=N&memory=BASE:SIZE&timeout=SECONDS&retries=N]`` -> (port, keyword arguments).
    ``<port>``: ``/dev/ttyUSB1`` (also written ``uart:///dev/ttyUSB1``), ``COM3``."""
    parts = urlsplit(url)
    port = parts.netloc + parts.path
    if parts.scheme != "uart" or not port:
        raise InvalidParameter(
            f"UART URL {url!r}: expected uart:<port>, e.g. uart:///dev/ttyUSB1?baud=1000000"
        )
    options: dict = {"baud": DEFAULT_BAUD}
    for key, value in parse_qsl(parts.query, keep_blank_values=True, strict_parsing=False):
        if key == "baud":
            options["baud"] = _number(value, "baud")
        elif key == "memory":
            base, sep, size = value.partition(":")
            if not sep:
                raise InvalidParameter(f"memory={value!r}: expected BASE:SIZE, e.g. memory=0x0:64K")
            options["memory_base"], options["memory_size"] = (
                _number(base, "memory base"),
                _number(size, "memory size"),
            )
        elif key == "timeout":
            try:
                options["timeout"] = float(value)
            except ValueError:
                raise InvalidParameter(f"timeout={value!r}: expected seconds") from None
        elif key == "retries":
            options["retries"] = _number(value, "retries")
        else:
            raise InvalidParameter(
                f"UART URL {url!r}: unknown option {key!r} (baud, memory, timeout, retries)"
            )
    return port, options


def open_uart(url: str) -> UartTransport:
    """Open the serial port a ``uart:`` URL names (pyserial) and wrap it in a :class:`UartTransport`."""
    port, options = parse_uart_url(url)
    baud = options.pop("baud")
    try:
        import serial
    except ImportError:
        raise DriverError("the uart: backend needs pyserial (pip install pyserial)") from None
    try:
        handle = serial.Serial(port, baudrate=baud)
    except (serial.SerialException, OSError, ValueError) as error:
        errno = getattr(error, "errno", None)
        reason = os.strerror(errno) if errno else str(error)
        raise DriverError(f"cannot open UART port {port}: {reason}") from None
    return UartTransport(SerialStream(handle), name=f"{port} at {baud} baud", **options)
