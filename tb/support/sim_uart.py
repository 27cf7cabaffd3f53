"""The host end of a simulated serial line: a bit-level UART model for cocotb benches of the UART host
bridge (``mrcnic.hdl.host.uart_bridge``), usable as the byte stream of the driver's ``uart:`` transport
(:class:`~mrcnic.driver.uart_backend.UartTransport`)."""

import random

import cocotb
from cocotb.simtime import get_sim_time
from cocotb.triggers import Event, FallingEdge, First, Timer

from mrcnic.driver.uart_protocol import Deframer

__all__ = ["SimUart"]


class SimUart:
    """Bit-level 8N1 UART on a bench's pins (``rx``: the DUT's input, driven here; ``tx``: its output,
    sampled in the middle of each bit), and a byte stream for UartTransport (sim-time clock).

    ``bit_ns``: the host's bit time (may differ from the bridge's). Faults: ``flip_rate`` (each byte,
    either way, has one bit flipped with this chance), ``lose_answers`` (the next n answers are dropped
    whole), :meth:`send` with ``framing_error_at``."""

    def __init__(self, rx, tx, bit_ns: float, rng: random.Random, *, clock_ns: float = 10):
        self.rx, self.tx, self.bit_ns, self.rng, self.clock_ns = rx, tx, bit_ns, rng, clock_ns
        self.byte_time = 10 * bit_ns * 1e-9
        self.inbox = bytearray()
        self.arrived = Event()
        self.flip_rate = 0.0
        self.lose_answers = 0
        self.losing = False
        self.flips = 0
        rx.value = 1
        cocotb.start_soon(self._receive())

    # byte stream for UartTransport
    def now(self) -> float:
        return get_sim_time("ns") * 1e-9

    async def sleep(self, seconds: float) -> None:
        await Timer(max(1, round(seconds * 1e9)), "ns")

    async def write(self, data: bytes) -> None:
        await self.send(data)

    async def read(self, size: int) -> bytes:
        if not self.inbox:
            self.arrived.clear()
            await First(self.arrived.wait(), Timer(round(20 * self.bit_ns), "ns"))
        chunk = bytes(self.inbox[:size])
        del self.inbox[:size]
        return chunk

    # the line
    def _damage(self, byte: int) -> int:
        if self.flip_rate and self.rng.random() < self.flip_rate:
            self.flips += 1
            return byte ^ (1 << self.rng.randrange(8))
        return byte

    async def send(self, data: bytes, *, framing_error_at: int | None = None, clean: bool = False) -> None:
        # Bits change half a clock away from the active edge; the timer keeps fractional bit times.
        offset = round((self.clock_ns / 2 - get_sim_time("ns")) % self.clock_ns)
        if offset:
            await Timer(offset, "ns")
        start = get_sim_time("ns")
        t = 0.0
        for i, byte in enumerate(data):
            byte = byte if clean else self._damage(byte)
            stop = 0 if i == framing_error_at else 1
            for bit in [0] + [(byte >> k) & 1 for k in range(8)] + [stop]:
                self.rx.value = bit
                t += self.bit_ns
                await Timer(max(1, round(start + t - get_sim_time("ns"))), "ns")
            if stop == 0:
                self.rx.value = 1
                t += self.bit_ns
                await Timer(max(1, round(start + t - get_sim_time("ns"))), "ns")

    async def _receive(self) -> None:
        tx = self.tx
        while True:
            await FallingEdge(tx)
            await Timer(round(self.bit_ns / 2) + 3, "ns")  # middle of the start bit, away from edges
            if tx.value:
                continue
            byte = 0
            for k in range(8):
                await Timer(round(self.bit_ns), "ns")
                byte |= int(tx.value) << k
            await Timer(round(self.bit_ns), "ns")
            assert tx.value == 1, "the bridge sent a character without its stop bit"
            if self.losing or (self.lose_answers and byte != 0):
                # drop this answer whole, up to and including its delimiter
                if not self.losing:
                    self.lose_answers -= 1
                self.losing = byte != 0
                continue
            self.inbox.append(self._damage(byte))
            self.arrived.set()

    async def answers(self, n: int, *, within_bytes: int = 400) -> list[bytes]:
        """Up to ``n`` answer frames (without delimiters) arriving within ``within_bytes`` byte times."""
        deframer, frames = Deframer(), []
        deadline = get_sim_time("ns") + within_bytes * 10 * self.bit_ns
        while len(frames) < n and get_sim_time("ns") < deadline:
            frames += deframer.feed(await self.read(4096))
        return frames
