"""AXI4 arbiter: N manager ports share one subordinate port (towards host memory), routed back by ID.

Ref: ARM IHI 0022 (AMBA AXI and ACE Protocol Specification, issue E numbering) §A3.2.1 (handshake: a
VALID never waits for its READY), §A3.3.1 (channel dependencies: W may come before, with or after its
AW; a subordinate may wait for AW before it raises WREADY), §A5.3 (ordering: in order per ID, free
across IDs; read data of different IDs may interleave), §A5.4 (AXI4 has no WID: write data follows
the AW order), §A5.5 (an interconnect extends the ID with bits naming the manager port, so responses
route back by ID alone).

Channels::

    m[0..N-1] AR ─► [round robin] ─► AR register (ID ⊕ index) ─► s AR
    m[0..N-1] AW ─► [round robin] ─► AW register (ID ⊕ index) ─► s AW
                          └► W order FIFO (granted indices) ─┐
    m[W order head] W ───────────────────[until wlast]───────┴──► s W
    s R, s B ─► [high ID bits pick the manager, low bits are its own ID] ─► m[index] R, B

The DMA reader and writer each use one ID and rely on in-order responses; behind this arbiter each of
them still sees only its own responses in its own order, because their extended IDs differ.
"""

from __future__ import annotations

from amaranth import Array, Cat, Module, Signal
from amaranth.lib import fifo, wiring
from amaranth.lib.wiring import In, Out

from .axi import Axi4Signature

__all__ = ["AxiArbiter"]


def _round_robin(m: Module, requests: list, name: str):
    """Round-robin choice among ``requests``: the search starts just after the last granted index, so
    a request that stays high cannot starve the others (it is served again only after every other
    waiting one). Returns ``(any, index, last)``; the caller loads ``last`` with ``index`` on a grant."""
    count = len(requests)
    last = Signal(range(count), name=f"{name}_last")
    index = Signal(range(count), name=f"{name}_index")
    any_request = Signal(name=f"{name}_any")
    m.d.comb += any_request.eq(Cat(*requests).any())
    with m.Switch(last):
        for pointer in range(count):
            with m.Case(pointer):
                # Highest priority (the index right after `pointer`) is assigned last, so it wins.
                for k in reversed(range(1, count + 1)):
                    i = (pointer + k) % count
                    with m.If(requests[i]):
                        m.d.comb += index.eq(i)
    return any_request, index, last


class AxiArbiter(wiring.Component):
    """Shares one AXI4 subordinate port among ``managers`` manager ports, for reads and for writes.

    Parameters: ``managers`` (N >= 2), ``addr_width`` (default 64), ``data_width_bytes`` (power of
    two, 1..128), ``id_width`` (of each manager port, default 4), ``max_write_bursts`` (depth of the W
    order FIFO: write bursts granted on AW whose W beats have not all passed yet, default 8).

    Members:

    * ``m``: In(:class:`~mrcnic.hdl.dma.axi.Axi4Signature`).array(N), ``id_width`` bits of ID: the
      manager ports (the arbiter is their subordinate).
    * ``s``: Out(:class:`~mrcnic.hdl.dma.axi.Axi4Signature`), ``id_width + ceil(log2(N))`` bits of
      ID: towards memory. ``s.arid``/``s.awid`` are the manager's ID with its index in the high bits.

    Behaviour:

    * AR and AW: each has its own round-robin arbiter and an output register. A manager is granted
      (its ``arready``/``awready`` high) when the register is empty or being emptied in that cycle, so
      one grant per cycle goes out with one cycle of latency. ``s.arvalid``/``s.awvalid`` come from the
      register only; the managers' readies depend on ``s`` readies and on the managers' valids, never
      the other way round. AW is granted only while the W order FIFO has room.
    * W: AXI4 W beats carry no ID, so they pass in AW grant order: the W order FIFO holds the index of
      every granted write burst, W beats of the manager at its head pass straight through (one beat per
      cycle) until its ``wlast``, then the next burst's manager follows in the next cycle. W beats of a
      burst appear on ``s`` no earlier than the cycle its AW appears on ``s``; a manager's W offered
      before its AW is granted waits.
    * R and B: routed combinationally by the high bits of ``s.rid``/``s.bid`` to that manager, with
      the low bits as its ``rid``/``bid``; ``s.rready``/``s.bready`` are that manager's ready. Routing is
      by ID only, so the memory may interleave and reorder responses of different IDs freely. A response
      whose index names no manager (only possible when N is not a power of two, and only from a
      subordinate that invents IDs) is accepted and dropped, so it cannot hang the bus.
    """

    def __init__(
        self,
        *,
        managers: int,
        addr_width: int = 64,
        data_width_bytes: int,
        id_width: int = 4,
        max_write_bursts: int = 8,
    ):
        try:
            if not isinstance(managers, int) or managers < 2:
                raise ValueError(f"managers must be an integer >= 2, not {managers!r}")
            if not isinstance(max_write_bursts, int) or max_write_bursts < 1:
                raise ValueError(f"max_write_bursts must be an integer >= 1, not {max_write_bursts!r}")
            index_bits = (managers - 1).bit_length()  # ceil(log2(managers))
            # Axi4Signature checks addr_width, data_width_bytes and both ID widths.
            manager_signature = Axi4Signature(
                addr_width=addr_width, data_width_bytes=data_width_bytes, id_width=id_width
            )
            memory_signature = Axi4Signature(
                addr_width=addr_width, data_width_bytes=data_width_bytes, id_width=id_width + index_bits
            )
        except ValueError:
            self._MustUse__silence = True  # no "created but never used" warning for a rejected instance
            raise
        self.managers = managers
        self.id_width = id_width
        self.index_bits = index_bits
        self.max_write_bursts = max_write_bursts
        super().__init__({"m": In(manager_signature).array(managers), "s": Out(memory_signature)})

    def elaborate(self, platform):
        m = Module()
        s, ports = self.s, self.m
        id_width = self.id_width

        def pick(name, index):
            return Array(getattr(port, name) for port in ports)[index]

        # -- AR: round robin into the AR register --------------------------------------------------------
        ar_any, ar_index, ar_last = _round_robin(m, [port.arvalid for port in ports], "ar")
        ar_grant = Signal()
        m.d.comb += ar_grant.eq(ar_any & (~s.arvalid | s.arready))
        for i, port in enumerate(ports):
            m.d.comb += port.arready.eq(ar_grant & (ar_index == i))
        with m.If(s.arready):
            m.d.sync += s.arvalid.eq(0)
        with m.If(ar_grant):
            m.d.sync += [
                s.arvalid.eq(1),
                s.araddr.eq(pick("araddr", ar_index)),
                s.arlen.eq(pick("arlen", ar_index)),
                s.arsize.eq(pick("arsize", ar_index)),
                s.arburst.eq(pick("arburst", ar_index)),
                s.arid.eq(Cat(pick("arid", ar_index), ar_index)),
                ar_last.eq(ar_index),
            ]

        # -- AW: round robin into the AW register, the granted index into the W order FIFO ---------------
        m.submodules.w_order = w_order = fifo.SyncFIFO(width=self.index_bits, depth=self.max_write_bursts)
        aw_any, aw_index, aw_last = _round_robin(m, [port.awvalid for port in ports], "aw")
        aw_grant = Signal()
        m.d.comb += [
            aw_grant.eq(aw_any & (~s.awvalid | s.awready) & w_order.w_rdy),
            w_order.w_en.eq(aw_grant),
            w_order.w_data.eq(aw_index),
        ]
        for i, port in enumerate(ports):
            m.d.comb += port.awready.eq(aw_grant & (aw_index == i))
        with m.If(s.awready):
            m.d.sync += s.awvalid.eq(0)
        with m.If(aw_grant):
            m.d.sync += [
                s.awvalid.eq(1),
                s.awaddr.eq(pick("awaddr", aw_index)),
                s.awlen.eq(pick("awlen", aw_index)),
                s.awsize.eq(pick("awsize", aw_index)),
                s.awburst.eq(pick("awburst", aw_index)),
                s.awid.eq(Cat(pick("awid", aw_index), aw_index)),
                aw_last.eq(aw_index),
            ]

        # -- W: the manager at the head of the W order FIFO, until its wlast ----------------------------
        w_index = w_order.r_data
        m.d.comb += [
            s.wvalid.eq(w_order.r_rdy & pick("wvalid", w_index)),
            s.wdata.eq(pick("wdata", w_index)),
            s.wstrb.eq(pick("wstrb", w_index)),
            s.wlast.eq(pick("wlast", w_index)),
            w_order.r_en.eq(s.wvalid & s.wready & s.wlast),
        ]
        for i, port in enumerate(ports):
            m.d.comb += port.wready.eq(w_order.r_rdy & (w_index == i) & s.wready)

        # -- R and B: back to the manager named by the high ID bits --------------------------------------
        r_index = s.rid[id_width:]
        b_index = s.bid[id_width:]
        for i, port in enumerate(ports):
            m.d.comb += [
                port.rdata.eq(s.rdata),
                port.rresp.eq(s.rresp),
                port.rlast.eq(s.rlast),
                port.rid.eq(s.rid[:id_width]),
                port.rvalid.eq(s.rvalid & (r_index == i)),
                port.bresp.eq(s.bresp),
                port.bid.eq(s.bid[:id_width]),
                port.bvalid.eq(s.bvalid & (b_index == i)),
            ]
        # Defaults: an index of no manager is accepted and dropped (see the docstring).
        m.d.comb += [s.rready.eq(1), s.bready.eq(1)]
        with m.Switch(r_index):
            for i, port in enumerate(ports):
                with m.Case(i):
                    m.d.comb += s.rready.eq(port.rready)
        with m.Switch(b_index):
            for i, port in enumerate(ports):
                with m.Case(i):
                    m.d.comb += s.bready.eq(port.bready)

        return m
