"""What the driver needs of a device: 32-bit register access, the host memory the NIC reads and writes by
DMA, and a way to let time pass. Each backend implements it (``model``: the reference model; ``cocotb``:
an AXI4-Lite manager and a memory model in a simulation; a board's UART bridge)."""

from __future__ import annotations

import abc

__all__ = ["HostMemoryAllocator", "Transport"]


class Transport(abc.ABC):
    """One NIC as the driver sees it. ``memory_base`` / ``memory_size``: the window of host memory the
    driver may allocate rings and buffers from (the NIC's DMA reaches it)."""

    memory_base: int = 0
    memory_size: int = 0

    @abc.abstractmethod
    async def read32(self, address: int) -> int: ...

    @abc.abstractmethod
    async def write32(self, address: int, value: int) -> None: ...

    async def read_block(self, address: int, count: int) -> list[int]:
        """``count`` consecutive 32-bit registers from ``address``, in address order. This default reads
        them one by one; a backend that moves several words per transaction (the UART bridge) overrides
        it, which is what makes multi-word registers, register-block headers and table records cheap."""
        return [await self.read32(address + 4 * i) for i in range(count)]

    async def write_block(self, address: int, words: list[int]) -> None:
        """Write ``words`` to consecutive 32-bit registers from ``address``, in address order."""
        for i, word in enumerate(words):
            await self.write32(address + 4 * i, word)

    @abc.abstractmethod
    async def mem_read(self, address: int, length: int) -> bytes: ...

    @abc.abstractmethod
    async def mem_write(self, address: int, data: bytes) -> None: ...

    @abc.abstractmethod
    async def idle(self, ns: float) -> None:
        """Let ``ns`` nanoseconds of device time pass (a simulation advances; hardware sleeps)."""

    def describe(self) -> str:
        return type(self).__name__

    async def close(self) -> None:
        return None


class HostMemoryAllocator:
    """Bump allocator over the transport's host-memory window (rings and buffers live until close)."""

    def __init__(self, base: int, size: int):
        self.base, self.size, self.next = base, size, base

    def allocate(self, length: int, align: int = 64) -> int:
        if length <= 0:
            raise ValueError(f"cannot allocate {length} bytes")
        address = -(-self.next // align) * align
        if address + length > self.base + self.size:
            raise MemoryError(
                f"host memory window exhausted: {length} bytes wanted, "
                f"{self.base + self.size - address} left of {self.size}"
            )
        self.next = address + length
        return address
