"""On-chip host memory for the board tops: one block RAM reached by the NIC (AXI4) and the host (AXI4-Lite).

Ref: ARM IHI 0022 (AMBA AXI and ACE Protocol Specification, issue E numbering) §A3.2.1 (handshakes),
§A3.3.1 (a subordinate may wait for AW before it raises WREADY; on AXI4-Lite for AWVALID and WVALID
before either ready), §A3.4.1 (burst length, size and type: an INCR beat after the first is at the first
address aligned down plus n sizes, every FIXED beat at the first address), §A3.4.3 (byte lanes),
§A3.4.4 (RRESP/BRESP), §A5.3 (responses in order per ID), Part B (AXI4-Lite); Lattice FPGA-TN-02204
(ECP5 memory usage guide: DP16KD true dual-port block RAM, 16 Kbit + parity, WRITEMODE NORMAL keeps the
output during a write).

On the boards the NIC's ``m_axi`` (:class:`~mrcnic.hdl.host.nic_top.MrcNicTop`) reads payload and WQEs
from, and writes received data and CQEs to, this memory; the host reaches the same bytes through the UART
bridge's ``memory`` port (:class:`~mrcnic.hdl.host.uart_bridge.UartBridge`, docs/uart-bridge.md).

Members:

* ``axi``: In(:class:`~mrcnic.hdl.dma.axi.Axi4Signature`) (``addr_width``, ``data_width_bytes`` = W,
  ``id_width``): the NIC side, on block RAM port A.
* ``axil``: In(:class:`~mrcnic.hdl.host.axil.AxiLiteSignature`) (``lite_addr_width``): the host side,
  one 32-bit word per access, on block RAM port B.

No counters: every error answer reaches a manager that reports it already (the placement writer's
``dma_write_errors`` counter, a payload or WQE read error as a LOCAL_DMA_ERROR completion, the bridge's
``stat_bus_errors``).

Address map: bytes [0, ``size``) on both ports, the same bytes (byte ``a`` is lane ``a % W`` of word
``a // W``; on ``axil`` byte ``a`` is lane ``a % 4`` of the word at ``a & ~3``). There is no aliasing:
an address at or above ``size`` (any higher address bit set) is *beyond*.

``axi`` (AXI4 subordinate):

* Served: INCR bursts (1..256 beats) and FIXED bursts (every beat at the first address), with full-width
  beats (AxSIZE = log2 W), WSTRB byte enables, any start address (a write's first beat writes the bytes
  its WSTRB selects: the manager clears the lanes below an unaligned address). This is what the NIC issues
  (:class:`~mrcnic.hdl.dma.reader.DmaReader`, :class:`~mrcnic.hdl.dma.writer.DmaWriter`: INCR,
  full-width). The 4 KiB rule and the FIXED length limit are not checked: longer bursts just go on.
* Not served, answered SLVERR on every beat, touching nothing: WRAP bursts, AxBURST 3 (reserved), narrow
  beats (AxSIZE < log2 W) and AxSIZE > log2 W; the beat count is still ``AxLEN + 1``. (Narrow beats and
  WRAP each cost about a quarter more logic in Yosys' count, and nothing on the boards issues them.)
* Beyond ``size``, per beat: a beat whose address is beyond answers DECERR, reads nothing and writes
  nothing; the other beats of the burst are served. So an INCR burst that starts inside and runs past
  ``size`` (only possible against the 4 KiB rule: ``size`` is a multiple of 4 KiB) writes its beats
  inside and drops the rest. R carries each beat's own response; B carries its last beat's, which is
  the burst's worst (SLVERR when not served, else DECERR when any beat was beyond: once beyond, every
  later beat is too).
* Concurrency: reads and writes are independent engines, each serving one burst at a time and taking the
  next AR (AW) in the cycle its current burst's last beat goes, or whenever idle, so bursts follow each
  other without a gap. The two engines share block RAM port A beat by beat: when both have a beat ready
  in the same cycle they take turns, each getting half the port; alone, each moves one beat per cycle.
  Responses leave in request order (so in order per ID), RID/BID echo ARID/AWID.
* Write data: W beats are taken only for an accepted AW (a W offered before its AW waits); the burst ends
  after ``AWLEN + 1`` beats by the subordinate's count (WLAST is not looked at). The last beat is taken
  only when the B register is free (empty, or taken in that cycle), so a manager that holds BREADY low
  stalls no more than the last beat of the next burst.
* Read data: RDATA is the block RAM's output register itself (no copy in logic); RVALID, RID, RRESP and
  RLAST are registers. While R is stalled (RVALID and not RREADY) the block RAM holds its output (read
  enable low) and the read engine waits; the write engine may use the port meanwhile (WRITEMODE NORMAL:
  a write does not change the read output). RDATA of a DECERR or SLVERR beat is not meaningful (the
  data of the last read).
* Latency (no back-pressure): an AR accepted in cycle t gives its first R beat in cycle t + 2 (the burst
  register, then the block RAM read), then one per cycle; a W beat is written in the cycle it is taken,
  the first in the cycle after its AW, and B rises in the cycle after the last beat.
* Handshakes: RVALID and BVALID are registers. ARREADY/AWREADY are high while the engine is idle, or in
  the cycle its last beat goes, which depends on RREADY (read), BREADY (write) and the port sharing
  (WVALID); WREADY depends on RREADY and BREADY the same way. No valid waits for a ready. The NIC's side
  (:class:`~mrcnic.hdl.dma.axi_arbiter.AxiArbiter` in front of the DMA blocks) drives its valids and
  readies without looking at these readies, so no combinational loop forms.

``axil`` (AXI4-Lite subordinate): one access at a time. With no response waiting, a write is taken when
AWVALID and WVALID are both high (AWREADY and WREADY together; the word is written in that cycle),
otherwise a read when ARVALID is high; the response (RVALID or BVALID, a register) comes in the next cycle
and is held until taken, and no access is taken while it waits. The two low address bits are ignored,
WSTRB selects the bytes, AWPROT/ARPROT are ignored. An address beyond ``size`` answers DECERR and
touches nothing (RDATA then not meaningful).

Both ports at once: the ports are independent. A read of bytes that the other port writes in the same
cycle returns undefined data, as in the DP16KD (simulation shows the old data), and two writes of one
byte in the same cycle leave it undefined. The NIC and the host do not share bytes that way (the host
writes a WQE, then rings the doorbell; it reads a CQE after the NIC wrote it).

What maps to block RAM: the storage, one ``lib.memory.Memory`` of ``size / W`` words of W bytes with
byte write enables. Each port is a read port and a write port on one address signal, so Yosys
(``synth_ecp5``) maps port A and port B onto the two ports of DP16KD true dual-port blocks (WRITEMODE
NORMAL), ``size / 2 KiB`` of them (16 Kbit of data each; parity bits unused), the minimum. The memory
carries ``no_rw_check`` (read-during-write undefined, as said above); without it Yosys must keep the
collision semantics (old data across ports) and falls back to flip-flops: 64 KiB became 524,288
flip-flops and took Yosys past WebAssembly's 4 GiB. Yosys's Verilog frontend turns the attribute into
undefined collisions itself; its RTLIL frontend (Amaranth's build flow) does not, so a flow reading
RTLIL runs ``mrcnic.hdl.tables.YOSYS_UNDEFINED_COLLISIONS`` after ``memory_collect``
(``boards/build.py``). In logic: the
two burst engines (word address, beat count, ID, response registers), the AXI4-Lite lane select (a
W/4-to-1 multiplexer of 32 bits) and the address checks. Figures for 64 KiB, W = 8: docs/host-interface.md.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In

from ..dma.axi import Axi4Signature, AxiBurst, AxiResp
from ..tables import UNDEFINED_COLLISIONS
from .axil import AxiLiteSignature

__all__ = ["HostMemory"]


class _BurstEngine:
    """Word address and beat count of the AXI4 burst being served (one per direction), added to ``m``.

    :meth:`load`: statements for ``m.d.sync`` when AR/AW is accepted; :meth:`step`: statements for
    ``m.d.sync`` when a beat goes. Combinational: ``resp`` (the current beat's response), ``last`` (the
    current beat is the burst's last)."""

    def __init__(self, m: Module, name: str, *, size_bits: int, lane_bits: int, id_width: int):
        self.size_bits, self.lane_bits = size_bits, lane_bits
        self.active = Signal(name=f"{name}_active")
        # The word of the current beat and a carry bit above it: set, the beat is beyond `size` (so
        # an INCR burst that runs past the end stays beyond; it cannot wrap around to word 0).
        self.word = Signal(size_bits - lane_bits, name=f"{name}_word")
        self.beyond = Signal(name=f"{name}_beyond")
        self.bad = Signal(name=f"{name}_bad")  # a burst not served: SLVERR on every beat
        self.fixed = Signal(name=f"{name}_fixed")
        self.remaining = Signal(8, name=f"{name}_remaining")  # beats after the current one
        self.id = Signal(id_width, name=f"{name}_id")
        self.last = Signal(name=f"{name}_last")
        self.resp = Signal(2, name=f"{name}_resp")
        m.d.comb += [
            self.last.eq(self.remaining == 0),
            self.resp.eq(Mux(self.bad, AxiResp.SLVERR, Mux(self.beyond, AxiResp.DECERR, AxiResp.OKAY))),
        ]

    def load(self, addr, length, size, burst, ident):
        size_bits, lane_bits = self.size_bits, self.lane_bits
        served = ((burst == AxiBurst.INCR) | (burst == AxiBurst.FIXED)) & (size == lane_bits)
        return [
            self.active.eq(1),
            self.word.eq(addr[lane_bits:size_bits]),
            self.beyond.eq(addr[size_bits:].any() if len(addr) > size_bits else 0),
            self.bad.eq(~served),
            self.fixed.eq(burst == AxiBurst.FIXED),
            self.remaining.eq(length),
            self.id.eq(ident),
        ]

    def step(self):
        # FIXED: every beat at the first address; INCR: the next word (§A3.4.1, full-width beats).
        incr = self.word + 1
        return [
            self.word.eq(Mux(self.fixed, self.word, incr[: len(self.word)])),
            self.beyond.eq(self.beyond | (~self.fixed & incr[-1])),
            self.remaining.eq(self.remaining - 1),
        ]


class HostMemory(wiring.Component):
    """``size`` bytes of block RAM behind an AXI4 port (``axi``, the NIC) and an AXI4-Lite port (``axil``,
    the host). The behaviour, precisely: the module docstring.

    Parameters: ``size`` (bytes, a power of two, 4 KiB .. 2^24), ``data_width_bytes`` (W, of ``axi``:
    4, 8 or 16), ``id_width`` (of ``axi``), ``addr_width`` (of ``axi``, at least log2(``size``)),
    ``lite_addr_width`` (of ``axil``, at least log2(``size``)).
    """

    def __init__(
        self,
        *,
        size: int,
        data_width_bytes: int = 8,
        id_width: int = 5,
        addr_width: int = 64,
        lite_addr_width: int = 32,
    ):
        try:
            if not isinstance(size, int) or size & (size - 1) or not 4096 <= size <= 1 << 24:
                raise ValueError(f"size must be a power of two in 4096..2**24, not {size!r}")
            if data_width_bytes not in (4, 8, 16):
                raise ValueError(f"data_width_bytes must be 4, 8 or 16, not {data_width_bytes!r}")
            size_bits = size.bit_length() - 1
            if not isinstance(addr_width, int) or addr_width < size_bits:
                raise ValueError(f"addr_width must be at least log2(size) = {size_bits}, not {addr_width!r}")
            if not isinstance(lite_addr_width, int) or lite_addr_width < size_bits:
                raise ValueError(
                    f"lite_addr_width must be at least log2(size) = {size_bits}, not {lite_addr_width!r}"
                )
            axi_signature = Axi4Signature(
                addr_width=addr_width, data_width_bytes=data_width_bytes, id_width=id_width
            )
            lite_signature = AxiLiteSignature(addr_width=lite_addr_width)
        except ValueError:
            self._MustUse__silence = True  # no "created but never used" warning for a rejected instance
            raise
        self.size = size
        self.size_bits = size_bits
        self.data_width_bytes = data_width_bytes
        super().__init__({"axi": In(axi_signature), "axil": In(lite_signature)})

    def elaborate(self, platform):
        m = Module()
        axi, axil = self.axi, self.axil
        width = self.data_width_bytes
        lane_bits = width.bit_length() - 1
        size_bits = self.size_bits

        # Read-during-write is undefined on either port (see the module docstring): without this
        # attribute Yosys keeps the Verilog semantics (old data across ports) and cannot use DP16KD.
        m.submodules.storage = storage = Memory(
            shape=8 * width, depth=self.size // width, init=[], attrs=UNDEFINED_COLLISIONS
        )
        # Port A (axi): one address for its read and write halves, so they map to one block RAM port.
        a_addr = Signal(size_bits - lane_bits)
        a_read = storage.read_port()
        a_write = storage.write_port(granularity=8)
        # Port B (axil), the same way.
        b_addr = Signal(size_bits - lane_bits)
        b_read = storage.read_port()
        b_write = storage.write_port(granularity=8)
        m.d.comb += [a_read.addr.eq(a_addr), a_write.addr.eq(a_addr)]
        m.d.comb += [b_read.addr.eq(b_addr), b_write.addr.eq(b_addr)]

        # -- axi: the read and write burst engines --------------------------------------------------------
        params = dict(size_bits=size_bits, lane_bits=lane_bits, id_width=len(axi.arid))
        rd = _BurstEngine(m, "rd", **params)
        wr = _BurstEngine(m, "wr", **params)

        # A read beat can go when the R register is free (empty, or taken in this cycle); a write beat when
        # W offers one, and, for the last beat, the B register is free. Both at once: they alternate.
        read_ready = Signal()
        write_ready = Signal()
        read_go = Signal()
        write_go = Signal()
        write_turn = Signal()  # who goes first when both can
        m.d.comb += [
            read_ready.eq(rd.active & (~axi.rvalid | axi.rready)),
            write_ready.eq(wr.active & (~wr.last | ~axi.bvalid | axi.bready)),
            axi.wready.eq(write_ready & (~read_ready | write_turn)),
            write_go.eq(axi.wvalid & axi.wready),
            read_go.eq(read_ready & ~write_go),
        ]
        with m.If(read_ready & write_ready & axi.wvalid):
            m.d.sync += write_turn.eq(~write_turn)

        m.d.comb += [
            a_addr.eq(Mux(write_go, wr.word, rd.word)),
            a_read.en.eq(read_go & (rd.resp == AxiResp.OKAY)),
            a_write.data.eq(axi.wdata),
            a_write.en.eq(Mux(write_go & (wr.resp == AxiResp.OKAY), axi.wstrb, 0)),
            axi.rdata.eq(a_read.data),
        ]

        # AR: taken while idle or in the cycle the last beat goes (no gap between bursts).
        m.d.comb += axi.arready.eq(~rd.active | (read_go & rd.last))
        with m.If(read_go):
            m.d.sync += rd.step()
            m.d.sync += [
                axi.rvalid.eq(1),
                axi.rid.eq(rd.id),
                axi.rresp.eq(rd.resp),
                axi.rlast.eq(rd.last),
            ]
            with m.If(rd.last):
                m.d.sync += rd.active.eq(0)
        with m.Elif(axi.rready):
            m.d.sync += axi.rvalid.eq(0)
        with m.If(axi.arvalid & axi.arready):
            m.d.sync += rd.load(axi.araddr, axi.arlen, axi.arsize, axi.arburst, axi.arid)

        # AW, W, B.
        m.d.comb += axi.awready.eq(~wr.active | (write_go & wr.last))
        with m.If(axi.bready):
            m.d.sync += axi.bvalid.eq(0)
        with m.If(write_go):
            m.d.sync += wr.step()
            with m.If(wr.last):
                # The last beat's response is the burst's worst: `bad` holds for the whole burst, and
                # once a beat is beyond every later one is too.
                m.d.sync += [wr.active.eq(0), axi.bvalid.eq(1), axi.bid.eq(wr.id), axi.bresp.eq(wr.resp)]
        with m.If(axi.awvalid & axi.awready):
            m.d.sync += wr.load(axi.awaddr, axi.awlen, axi.awsize, axi.awburst, axi.awid)

        # -- axil: one word access at a time on port B ---------------------------------------------------
        lanes = width // 4
        lite_busy = Signal()
        lite_write = Signal()
        lite_read = Signal()
        aw_beyond = axil.awaddr[size_bits:].any() if len(axil.awaddr) > size_bits else Const(0)
        ar_beyond = axil.araddr[size_bits:].any() if len(axil.araddr) > size_bits else Const(0)
        lite_lane = Signal(range(lanes))  # the 32-bit lane of the word being read
        m.d.comb += [
            lite_busy.eq(axil.rvalid | axil.bvalid),
            lite_write.eq(~lite_busy & axil.awvalid & axil.wvalid),
            lite_read.eq(~lite_busy & axil.arvalid & ~lite_write),
            axil.awready.eq(lite_write),
            axil.wready.eq(lite_write),
            axil.arready.eq(lite_read),
            b_addr.eq(Mux(lite_write, axil.awaddr[lane_bits:size_bits], axil.araddr[lane_bits:size_bits])),
            b_read.en.eq(lite_read & ~ar_beyond),
            b_write.data.eq(Cat(*([axil.wdata] * lanes))),
        ]
        if lanes > 1:
            aw_lane = axil.awaddr[2:lane_bits]
            m.d.comb += b_write.en.eq(
                Cat(*(Mux(lite_write & ~aw_beyond & (aw_lane == k), axil.wstrb, 0) for k in range(lanes)))
            )
            m.d.comb += axil.rdata.eq(b_read.data.word_select(lite_lane, 32))
        else:
            m.d.comb += b_write.en.eq(Mux(lite_write & ~aw_beyond, axil.wstrb, 0))
            m.d.comb += axil.rdata.eq(b_read.data)
        with m.If(axil.rready):
            m.d.sync += axil.rvalid.eq(0)
        with m.If(axil.bready):
            m.d.sync += axil.bvalid.eq(0)
        with m.If(lite_write):
            m.d.sync += [axil.bvalid.eq(1), axil.bresp.eq(Mux(aw_beyond, AxiResp.DECERR, AxiResp.OKAY))]
        with m.If(lite_read):
            m.d.sync += [axil.rvalid.eq(1), axil.rresp.eq(Mux(ar_beyond, AxiResp.DECERR, AxiResp.OKAY))]
            if lanes > 1:
                m.d.sync += lite_lane.eq(axil.araddr[2:lane_bits])
        return m
