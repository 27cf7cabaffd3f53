"""The ``cocotb`` backend: a NIC simulated with cocotb (``MrcNicTop``), driven through its AXI4-Lite
port by cocotbext-axi's ``AxiLiteMaster``, with host memory in a cocotbext-axi ``AxiRam`` on its
``m_axi`` port. For testbenches; cocotb and cocotbext-axi are imported only when it is used."""

from __future__ import annotations

from .transport import Transport

__all__ = ["CocotbTransport"]


class CocotbTransport(Transport):
    """``dut``: the simulation handle; ``prefix``: the NIC's port prefix (``""`` for a lone NIC,
    ``"nic0__"`` in a cluster); ``ram``: the ``AxiRam`` on its ``m_axi``; the driver allocates from
    ``[memory_base, memory_base + memory_size)`` of it."""

    def __init__(self, dut, prefix: str, ram, *, memory_base: int, memory_size: int, name: str = ""):
        from cocotbext.axi import AxiLiteBus, AxiLiteMaster

        self.axil = AxiLiteMaster(
            AxiLiteBus.from_prefix(dut, f"{prefix}s_axil", bus_separator="__"), dut.clk, dut.rst
        )
        self.axil.write_if.log.setLevel("WARNING")
        self.axil.read_if.log.setLevel("WARNING")
        self.ram = ram
        self.memory_base, self.memory_size = memory_base, memory_size
        self.name = name or prefix.rstrip("_") or "nic"

    def describe(self) -> str:
        return f"simulated RTL NIC {self.name} (cocotb)"

    async def read32(self, address: int) -> int:
        return await self.axil.read_dword(address)

    async def write32(self, address: int, value: int) -> None:
        await self.axil.write_dword(address, value)

    async def mem_read(self, address: int, length: int) -> bytes:
        return self.ram.read(address, length)

    async def mem_write(self, address: int, data: bytes) -> None:
        self.ram.write(address, data)

    async def idle(self, ns: float) -> None:
        from cocotb.triggers import Timer

        await Timer(max(1, round(ns)), "ns")
