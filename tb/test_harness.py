"""The cocotb-on-Verilator harness itself: an Amaranth FIFO between two AXI-stream ports.

Checks that conversion, the shared Verilator build, cocotbext-axi binding with Amaranth port names,
random backpressure and the seed plumbing all work, before any real block relies on them.
"""

import random

import cocotb
import pytest
from amaranth import Module
from amaranth.back import verilog
from amaranth.lib import fifo, wiring
from amaranth.lib.wiring import In, Out
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from mrcnic.hdl.stream import AxiStreamSignature

from support.cocotb_runner import MODULE_VERILOG_LIMIT, check_verilog_size, dut_params, run_cocotb


class AxiStreamFifo(wiring.Component):
    def __init__(self, data_width: int, depth: int = 8):
        self.data_width, self.depth = data_width, depth
        super().__init__(
            {"s_axis": In(AxiStreamSignature(data_width)), "m_axis": Out(AxiStreamSignature(data_width))}
        )

    def elaborate(self, platform):
        m = Module()
        w = self.data_width
        m.submodules.q = q = fifo.SyncFIFOBuffered(width=9 * w + 1, depth=self.depth)
        m.d.comb += [
            q.w_data.eq(self.s_axis.tdata | (self.s_axis.tkeep << 8 * w) | (self.s_axis.tlast << 9 * w)),
            q.w_en.eq(self.s_axis.tvalid),
            self.s_axis.tready.eq(q.w_rdy),
            self.m_axis.tdata.eq(q.r_data[: 8 * w]),
            self.m_axis.tkeep.eq(q.r_data[8 * w : 9 * w]),
            self.m_axis.tlast.eq(q.r_data[9 * w]),
            self.m_axis.tvalid.eq(q.r_rdy),
            q.r_en.eq(self.m_axis.tready),
        ]
        return m


@cocotb.test()
async def frames_pass_with_backpressure(dut):
    width = dut_params()["data_width"]
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis", bus_separator="__"), dut.clk, dut.rst)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis", bus_separator="__"), dut.clk, dut.rst)
    source.set_pause_generator(iter(lambda: random.random() < 0.3, None))
    sink.set_pause_generator(iter(lambda: random.random() < 0.3, None))
    dut.rst.value = 1
    for _ in range(3):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    frames = [bytes(random.randrange(256) for _ in range(random.randint(1, 5 * width))) for _ in range(40)]
    for f in frames:
        await source.send(AxiStreamFrame(f))
    for f in frames:
        got = await sink.recv()
        assert bytes(got.tdata) == f


def test_harness_fifo():
    for width in (1, 8):
        run_cocotb(
            lambda width=width: AxiStreamFifo(width),
            name="harness_fifo",
            params={"data_width": width},
            module="test_harness",
        )


def test_verilog_size_guard_names_the_module_over_the_limit():
    """run_cocotb refuses a design with a module over MODULE_VERILOG_LIMIT characters, by name."""
    text = verilog.convert(AxiStreamFifo(8), name="top", emit_src=False)
    check_verilog_size(text)  # the harness FIFO is far below the limit
    sizes = {body.split("(", 1)[0].strip(): len(body) for body in text.split("\nmodule ")[1:]}
    assert "top" in sizes and len(sizes) == 2  # the top and its FIFO
    largest = max(sizes, key=sizes.get)
    with pytest.raises(ValueError, match=r"over [0-9,]+ characters: (\S+) \(") as error:
        check_verilog_size(text, sizes[largest] - 1)
    # only the largest is named, with its size
    assert str(error.value).split(": ", 1)[1].split(";")[0] == f"{largest} ({sizes[largest]:,} characters)"
    assert MODULE_VERILOG_LIMIT > 1_000_000  # above the NIC's register file (about 0.6 MB)
