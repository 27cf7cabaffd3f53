"""DMA reader: read commands ``{addr, length}`` in, the bytes from host memory out, over AXI4 reads.

Ref: ARM IHI 0022 §A3.4.1 (INCR bursts of at most 256 beats that never cross a 4 KiB boundary),
§A3.4.4 (RRESP), §A5.3 (in-order read data for one ARID).

The reader serves the TX payload path: one command per packet payload, any byte alignment. Data leaves
in *memory lanes* (the byte at address ``a`` sits at lane ``a % W``), so no realignment happens here;
the :class:`~mrcnic.hdl.stream_packer.StreamPacker` after the header builder does it once for header
and payload together.

Pipeline::

    cmd ► [split into bursts] ─► AR register ─► m_axi AR
                     └► burst info FIFO (lanes, first/last of command) ─┐
    m_axi R ─────────────────────────────────────► [keep/last/error] ► data register ► data

Several bursts stay outstanding (as many as the burst info FIFO holds), so with a memory that answers
every cycle the data stream is valid every cycle, across command boundaries too. All reads use one
ARID, so data returns in order (§A5.3) and the FIFO pairs each R beat with its burst.
"""

from __future__ import annotations

from amaranth import Const, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from .axi import Axi4ReadSignature, AxiBurst
from .bursts import BurstCursor, check_dma_params

__all__ = ["DmaReader", "dma_command_layout", "dma_data_layout"]


def dma_command_layout(addr_width: int = 64) -> data.StructLayout:
    """Read ``length`` bytes starting at byte address ``addr`` (any alignment)."""
    return data.StructLayout({"addr": addr_width, "length": 16})


def dma_data_layout(data_width: int) -> data.StructLayout:
    """A packet-stream beat (same bit positions as :class:`~mrcnic.hdl.stream.PacketLayout`) plus ``error``.

    ``payload.as_value()[: 9 * data_width + 1]`` is therefore a ``PacketLayout`` value.
    """
    return data.StructLayout({"data": 8 * data_width, "keep": data_width, "last": 1, "error": 1})


class DmaReader(wiring.Component):
    """Reads byte ranges of host memory through an AXI4 read port; commands are served in order.

    Parameters: ``data_width`` (bytes per beat, power of two, 1..128), ``addr_width`` (default 64),
    ``max_length`` (largest command in bytes, default 4096 + 64), ``max_outstanding`` (bursts in flight:
    the depth of the burst info FIFO; cover the memory's round trip in bursts), ``id_width``.

    Members:

    * ``cmd``: In, ``{addr, length}`` (:func:`dma_command_layout`). A command with ``length`` 0 or above
      ``max_length`` is *rejected*: no memory read, one beat ``keep = 0, last = 1, error = 1`` on
      ``data`` (so every command still ends with exactly one ``last``), counted in ``stat_rejected``.
    * ``data``: Out, :func:`dma_data_layout`. The command's bytes as they sit in memory lanes: the
      byte at address ``a`` is at lane ``a % W``; ``keep`` marks exactly the requested bytes (the first
      beat may start at a lane above 0, the last may end early); ``last`` on the command's final beat.
      ``error``: set on every beat whose AXI response was not OKAY/EXOKAY (its bytes are whatever the
      memory sent), and on the last beat of every command that had such a beat, so a consumer may look
      at last beats only.
    * ``axi``: Out(:class:`Axi4ReadSignature`): INCR bursts with full-width beats, ``arid`` = 0.
    * ``stat_read_errors``: Out(32), commands completed with ``error`` (non-OKAY responses).
    * ``stat_rejected``: Out(32), commands rejected for their length.
    """

    def __init__(
        self,
        *,
        data_width: int,
        addr_width: int = 64,
        max_length: int = 4096 + 64,
        max_outstanding: int = 16,
        id_width: int = 4,
    ):
        axi_signature = Axi4ReadSignature(
            addr_width=addr_width, data_width_bytes=data_width, id_width=id_width
        )
        check_dma_params(max_length, max_outstanding)
        self.data_width = data_width
        self.addr_width = addr_width
        self.max_length = max_length
        self.max_outstanding = max_outstanding
        super().__init__(
            {
                "cmd": In(stream.Signature(dma_command_layout(addr_width))),
                "data": Out(stream.Signature(dma_data_layout(data_width))),
                "axi": Out(axi_signature),
                "stat_read_errors": Out(32),
                "stat_rejected": Out(32),
            }
        )

    def elaborate(self, platform):
        m = Module()
        width = self.data_width
        lane_bits = width.bit_length() - 1

        # What the R side needs to know about each burst, in AR order.
        burst_layout = data.StructLayout(
            {
                "first": 1,  # first burst of its command: its first beat starts at start_lane
                "last": 1,  # final burst of its command: its last beat ends at end_lane, carries `last`
                "start_lane": lane_bits,
                "end_lane": lane_bits,
                "reject": 1,  # no burst at all: one empty `last` beat with `error`
            }
        )
        m.submodules.bursts = bursts = fifo.SyncFIFOBuffered(
            width=burst_layout.size, depth=self.max_outstanding
        )

        # -- command in, bursts out ------------------------------------------------------------------
        cur_valid = Signal()
        cursor = BurstCursor(m, addr_width=self.addr_width, data_width=width, max_length=self.max_length)
        final, burst = cursor.final, cursor.burst
        cur_first = Signal()
        cur_start_lane = Signal(lane_bits)
        cur_end_lane = Signal(lane_bits)
        cur_reject = Signal()

        axi = self.axi
        ar_free = ~axi.arvalid | axi.arready
        issue = Signal()
        m.d.comb += issue.eq(cur_valid & bursts.w_rdy & (cur_reject | ar_free))

        info = burst_layout(bursts.w_data)
        m.d.comb += [
            bursts.w_en.eq(issue),
            info.first.eq(cur_first),
            info.last.eq(final | cur_reject),
            info.start_lane.eq(cur_start_lane),
            info.end_lane.eq(cur_end_lane),
            info.reject.eq(cur_reject),
        ]

        m.d.comb += [
            axi.arsize.eq(lane_bits),
            axi.arburst.eq(AxiBurst.INCR),
            axi.arid.eq(0),
        ]
        with m.If(axi.arready):
            m.d.sync += axi.arvalid.eq(0)
        with m.If(issue & ~cur_reject):
            m.d.sync += [axi.arvalid.eq(1), axi.araddr.eq(cursor.address), axi.arlen.eq(burst - 1)]
        with m.If(issue):
            m.d.sync += [*cursor.advance(), cur_first.eq(0)]
            with m.If(final | cur_reject):
                m.d.sync += cur_valid.eq(0)

        # A new command enters as soon as the previous one issues its final burst (same cycle), so
        # one-burst commands go out at one AR per cycle.
        cmd = self.cmd.payload
        lane = cmd.addr[:lane_bits]
        span = Signal(17)  # bytes from the first word's lane 0 to the end of the command
        m.d.comb += [
            span.eq(lane + cmd.length),
            self.cmd.ready.eq(~cur_valid | (issue & (final | cur_reject))),
        ]
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += [
                cur_valid.eq(1),
                *cursor.load(cmd.addr, span),
                cur_first.eq(1),
                cur_start_lane.eq(lane),
                cur_end_lane.eq(span - 1),
                cur_reject.eq((cmd.length == 0) | (cmd.length > self.max_length)),
            ]

        # -- read data in, packet beats out ----------------------------------------------------------
        head = burst_layout(bursts.r_data)
        out = self.data.payload
        advance = ~self.data.valid | self.data.ready
        in_burst = Signal()  # a beat of the head burst was taken already
        command_bad = Signal()  # an earlier beat of the current command had a bad response

        all_lanes = (1 << width) - 1
        from_start = Signal(width)  # lanes >= start_lane
        to_end = Signal(width)  # lanes <= end_lane
        m.d.comb += [
            from_start.eq(Const(all_lanes, width) << head.start_lane),
            to_end.eq(Const(all_lanes, width) >> ~head.end_lane),  # ~end_lane = width - 1 - end_lane
        ]

        with m.If(advance):
            m.d.sync += self.data.valid.eq(0)

        with m.If(bursts.r_rdy & head.reject):
            with m.If(advance):
                m.d.comb += bursts.r_en.eq(1)
                m.d.sync += [
                    self.data.valid.eq(1),
                    out.keep.eq(0),
                    out.last.eq(1),
                    out.error.eq(1),
                    self.stat_rejected.eq(self.stat_rejected + 1),
                ]
        with m.Else():
            m.d.comb += axi.rready.eq(bursts.r_rdy & advance)

        with m.If(axi.rvalid & axi.rready):
            first_beat = head.first & ~in_burst
            last_beat = head.last & axi.rlast
            bad = axi.rresp[1]  # SLVERR or DECERR
            keep = Mux(first_beat, from_start, all_lanes) & Mux(last_beat, to_end, all_lanes)
            m.d.sync += [
                self.data.valid.eq(1),
                out.data.eq(axi.rdata),
                out.keep.eq(keep),
                out.last.eq(last_beat),
                out.error.eq(bad | (last_beat & command_bad)),
                in_burst.eq(~axi.rlast),
            ]
            m.d.comb += bursts.r_en.eq(axi.rlast)
            with m.If(last_beat):
                m.d.sync += command_bad.eq(0)
                with m.If(bad | command_bad):
                    m.d.sync += self.stat_read_errors.eq(self.stat_read_errors + 1)
            with m.Elif(bad):
                m.d.sync += command_bad.eq(1)

        return m
