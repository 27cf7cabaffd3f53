"""DMA writer: write commands ``{addr, length}`` and their packed bytes in, AXI4 write bursts out.

Ref: ARM IHI 0022 §A3.4.1 (INCR bursts of at most 256 beats that never cross a 4 KiB boundary),
§A3.4.3 (WSTRB: only the strobed byte lanes are written), §A3.3.1 (W may come before, with or after
its AW; the manager must not make AW wait for W), §A3.4.4 (BRESP), §A5.3 (one AWID: B responses come
back in AW order). docs/protocol.md §2.3 / §4 RETH (the payload goes to the RETH virtual address at
any byte alignment), §7.5 (a payload the validator rejects is never placed).

The writer serves the RX placement path, the write-side twin of
:class:`~mrcnic.hdl.dma.reader.DmaReader`. Payload bytes arrive packed from lane 0 (the packet-stream
convention of :mod:`mrcnic.hdl.stream`); memory wants the byte at address ``a`` on lane ``a % W``. The
writer realigns them itself: each input beat is rotated up by ``s = addr % W`` lanes, its low ``s``
lanes complete the *previous* memory word (held in a carry register) and its high lanes start the
next one, so one input beat per cycle gives one W beat per cycle, plus one extra W beat at the end
of a command when the realigned run spills into one more word.

Pipeline::

    cmd ► [split into bursts] ─► AW register ─────────────────────────────► m_axi AW
                     ├► W queue (per burst: lanes, beats, input beats) ─┐
                     └► B queue (per burst: last of command, length) ─┐ │
    data ► [rotate by s, merge with carry, strobes] ► W register ─────┼─┴──► m_axi W
    m_axi B ──────────────► [count B per command, W-side verdict] ◄───┘ ► done register ► done
                                              ▲── completion queue (per command: length mismatch) ◄─ W side

The AW side runs ahead of the W side; up to ``max_outstanding`` bursts wait for their B response (the
depth of the B queue), so with a memory that is always ready W carries one beat per cycle across
burst and command boundaries. An AW is always presented (``awvalid``) before or in the cycle the
first W beat of its burst appears, and AW never waits for W, so a slave that holds ``wready`` until
it has seen the AW cannot deadlock.

Errors never write outside ``[addr, addr + length)``: the strobes of every W beat are the AND of the
command's address window and of the (realigned) input ``keep``. When the input's ``last`` comes early,
the remaining W beats of the command still go out (every burst of the command may already be
announced on AW) with ``wstrb = 0`` for the missing bytes; when it comes late, the extra input beats
are consumed and dropped up to ``last``.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..stream import PacketStream
from .axi import Axi4WriteSignature, AxiBurst
from .bursts import BurstCursor, check_dma_params
from .reader import dma_command_layout

__all__ = ["DmaWriter", "dma_write_command_layout", "dma_write_done_layout"]


# A write command has the read command's shape: ``length`` bytes from byte address ``addr``, any alignment.
dma_write_command_layout = dma_command_layout


def dma_write_done_layout() -> data.StructLayout:
    """One per command: ``error`` = a bad BRESP, a length mismatch, or the command was rejected."""
    return data.StructLayout({"error": 1})


def _rotate_up(value, amount, unit: int, count: int):
    """``value`` (``count`` units of ``unit`` bits) rotated up by ``amount`` units: unit ``j`` moves to
    ``(j + amount) % count``. The shift of the doubled value keeps it a plain shifter for synthesis."""
    shift = Cat(Const(0, unit.bit_length() - 1), amount) if unit > 1 else amount
    return (Cat(value, value) << shift)[count * unit : 2 * count * unit]


class DmaWriter(wiring.Component):
    """Writes byte ranges of host memory through an AXI4 write port; commands are served in order.

    Parameters: ``data_width`` (bytes per beat, power of two, 1..128), ``addr_width`` (default 64),
    ``max_length`` (largest command in bytes, default 4096 + 64), ``max_outstanding`` (bursts waiting
    for their B response; cover the memory's write round trip in bursts), ``id_width``.

    Members:

    * ``cmd``: In, ``{addr, length}`` (:func:`dma_write_command_layout`). A command with ``length`` 0,
      above ``max_length``, or whose range ``[addr, addr + length)`` wraps past ``2**addr_width`` is
      *rejected*: nothing is written, its data beats up to and including ``last`` are dropped, its
      ``done`` carries ``error``, it counts in ``stat_rejected``.
    * ``data``: In(:func:`~mrcnic.hdl.stream.PacketStream`): the commands' bytes in command order,
      packed from lane 0, ``ceil(length / W)`` beats per command, every beat full but the last,
      ``last`` on the final one. Any other shape is a *length mismatch* (counted in
      ``stat_length_mismatch``, ``done.error``): strobes never leave the command's range nor cover a
      lane whose ``keep`` was 0, missing bytes are not written, extra beats are dropped up to ``last``.
    * ``axi``: Out(:class:`~mrcnic.hdl.dma.axi.Axi4WriteSignature`): INCR bursts of full-width beats,
      ``awid`` = 0, ``bready`` only while a B response can be taken.
    * ``done``: Out, ``{error}`` (:func:`dma_write_done_layout`): one per command, in command order,
      after the last B response of the command (the bytes are in memory then) and after its data
      beats were all consumed. ``error``: a BRESP other than OKAY/EXOKAY, a length mismatch, or a
      rejected command.
    * ``stat_commands``: Out(32), commands done (all of them); ``stat_bytes``: Out(32), ``length`` summed
      over commands done without error; ``stat_write_errors``: commands with a bad BRESP;
      ``stat_rejected``; ``stat_length_mismatch``. All count when the command's ``done`` is produced.

    Timing: ``axi.w*``, ``axi.aw*``, ``done`` are registers. ``data.ready`` depends combinationally on
    ``axi.wready`` (not on ``data.valid``); ``axi.bready`` on ``done.ready``. From a command to its first
    W beat: 3 cycles (AW register, W queue, W register) when its data is waiting.
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
        axi_signature = Axi4WriteSignature(
            addr_width=addr_width, data_width_bytes=data_width, id_width=id_width
        )
        check_dma_params(max_length, max_outstanding)
        self.data_width = data_width
        self.addr_width = addr_width
        self.max_length = max_length
        self.max_outstanding = max_outstanding
        super().__init__(
            {
                "cmd": In(stream.Signature(dma_write_command_layout(addr_width))),
                "data": In(PacketStream(data_width)),
                "axi": Out(axi_signature),
                "done": Out(stream.Signature(dma_write_done_layout())),
                "stat_commands": Out(32),
                "stat_bytes": Out(32),
                "stat_write_errors": Out(32),
                "stat_rejected": Out(32),
                "stat_length_mismatch": Out(32),
            }
        )

    def elaborate(self, platform):
        m = Module()
        width = self.data_width
        lane_bits = width.bit_length() - 1
        max_in_beats = (self.max_length + width - 1) // width
        all_lanes = (1 << width) - 1

        # What the W side needs to know about each burst, in AW order.
        w_layout = data.StructLayout(
            {
                "first": 1,  # first burst of its command
                "last": 1,  # final burst of its command (or a rejected command's only entry)
                "reject": 1,  # no burst: drop the command's data beats up to `last`
                "start_lane": lane_bits,  # addr % W: the rotation, and the first beat's lowest lane
                "end_lane": lane_bits,  # (addr + length - 1) % W: the final beat's highest lane
                "tail_lane": lane_bits,  # (length - 1) % W: the highest kept lane of the final input beat
                "in_beats": range(max_in_beats + 1),  # input beats the command should have
                "len": 8,  # beats - 1, as AWLEN
            }
        )
        # What the B side needs, in AW order.
        b_layout = data.StructLayout({"last": 1, "reject": 1, "length": 16})
        # Per command, from the W side once it has consumed the command's data.
        c_layout = data.StructLayout({"mismatch": 1})

        m.submodules.w_queue = w_queue = fifo.SyncFIFOBuffered(
            width=w_layout.size, depth=self.max_outstanding
        )
        m.submodules.b_queue = b_queue = fifo.SyncFIFOBuffered(
            width=b_layout.size, depth=self.max_outstanding
        )
        # Never overflows: a command enters it only after all its bursts entered the B queue, and its
        # final B queue entry leaves only together with it, so it never holds more than the B queue.
        m.submodules.c_queue = c_queue = fifo.SyncFIFOBuffered(
            width=c_layout.size, depth=self.max_outstanding
        )

        axi = self.axi

        # -- command in, bursts out (AW side) --------------------------------------------------------
        cur_valid = Signal()
        cursor = BurstCursor(m, addr_width=self.addr_width, data_width=width, max_length=self.max_length)
        final, burst = cursor.final, cursor.burst
        cur_first = Signal()
        cur_reject = Signal()
        cur_start_lane = Signal(lane_bits)
        cur_end_lane = Signal(lane_bits)
        cur_tail_lane = Signal(lane_bits)
        cur_in_beats = Signal(range(max_in_beats + 1))
        cur_length = Signal(16)

        aw_free = ~axi.awvalid | axi.awready
        issue = Signal()
        m.d.comb += issue.eq(cur_valid & w_queue.w_rdy & b_queue.w_rdy & (cur_reject | aw_free))
        ends_command = final | cur_reject

        w_entry = w_layout(w_queue.w_data)
        b_entry = b_layout(b_queue.w_data)
        m.d.comb += [
            w_queue.w_en.eq(issue),
            w_entry.first.eq(cur_first),
            w_entry.last.eq(ends_command),
            w_entry.reject.eq(cur_reject),
            w_entry.start_lane.eq(cur_start_lane),
            w_entry.end_lane.eq(cur_end_lane),
            w_entry.tail_lane.eq(cur_tail_lane),
            w_entry.in_beats.eq(cur_in_beats),
            w_entry.len.eq(burst - 1),
            b_queue.w_en.eq(issue),
            b_entry.last.eq(ends_command),
            b_entry.reject.eq(cur_reject),
            b_entry.length.eq(cur_length),
        ]

        m.d.comb += [
            axi.awsize.eq(lane_bits),
            axi.awburst.eq(AxiBurst.INCR),
            axi.awid.eq(0),
        ]
        with m.If(axi.awready):
            m.d.sync += axi.awvalid.eq(0)
        with m.If(issue & ~cur_reject):
            m.d.sync += [axi.awvalid.eq(1), axi.awaddr.eq(cursor.address), axi.awlen.eq(burst - 1)]
        with m.If(issue):
            m.d.sync += [*cursor.advance(), cur_first.eq(0)]
            with m.If(ends_command):
                m.d.sync += cur_valid.eq(0)

        # The next command enters in the cycle the current one issues its final burst.
        cmd = self.cmd.payload
        lane = cmd.addr[:lane_bits]
        span = Signal(17)  # bytes from the first word's lane 0 to the end of the command
        m.d.comb += [
            span.eq(lane + cmd.length),
            self.cmd.ready.eq(~cur_valid | (issue & ends_command)),
        ]
        # [addr, addr + length) wraps past 2**addr_width only if every address bit above the low 16 is
        # set and the low 16 bits plus length carry out: a 17-bit add instead of a full-width one.
        if self.addr_width > 16:
            wraps = cmd.addr[16:].all() & ((cmd.addr[:16] + cmd.length) > (1 << 16))
        else:
            wraps = (cmd.addr + cmd.length) > (1 << self.addr_width)
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += [
                cur_valid.eq(1),
                *cursor.load(cmd.addr, span),
                cur_first.eq(1),
                cur_reject.eq((cmd.length == 0) | (cmd.length > self.max_length) | wraps),
                cur_start_lane.eq(lane),
                cur_end_lane.eq(span - 1),
                cur_tail_lane.eq(cmd.length - 1),
                cur_in_beats.eq((cmd.length + width - 1) >> lane_bits),
                cur_length.eq(cmd.length),
            ]

        # -- data in, W beats out (W side) ------------------------------------------------------------
        head = w_layout(w_queue.r_data)
        beat = Signal(8)  # W beat index within the head burst
        in_left = Signal(range(max_in_beats + 1))  # input beats the command still expects
        ended = Signal()  # the command's data already had `last` (early): later beats have no bytes
        mismatch = Signal()  # the command's data has the wrong shape so far
        too_long = Signal()  # the command's final input beat had no `last`: drop beats after it
        carry_data = Signal(8 * width)  # the previous input beat, rotated: its lanes < s
        carry_keep = Signal(width)
        dropping = Signal()  # consuming and discarding data beats up to `last`
        drop_mismatch = Signal()  # ... for a too-long command (not for a rejected one)

        first_beat = head.first & (beat == 0)
        burst_end = beat == head.len
        final_beat = head.last & burst_end
        in_left_now = Mux(first_beat, head.in_beats, in_left)
        ended_now = ended & ~first_beat
        need_input = (in_left_now != 0) & ~ended_now

        advance = ~axi.wvalid | axi.wready
        have = w_queue.r_rdy & ~head.reject & ~dropping
        produce = Signal()
        m.d.comb += [
            produce.eq(have & advance & (~need_input | self.data.valid)),
            self.data.ready.eq(dropping | (have & advance & need_input)),
        ]

        # Realign: rotate the input beat up by s lanes; lanes < s come from the previous input beat.
        start_mask = Signal(width)  # lanes >= s
        end_mask = Signal(width)  # lanes <= end_lane
        tail_mask = Signal(width)  # lanes <= tail_lane
        m.d.comb += [
            start_mask.eq(Const(all_lanes, width) << head.start_lane),
            end_mask.eq(Const(all_lanes, width) >> ~head.end_lane),  # ~end_lane = W - 1 - end_lane
            tail_mask.eq(Const(all_lanes, width) >> ~head.tail_lane),
        ]
        in_keep = Mux(need_input, self.data.payload.keep, 0)
        rot_data = Signal(8 * width)
        rot_keep = Signal(width)
        m.d.comb += [
            rot_data.eq(_rotate_up(self.data.payload.data, head.start_lane, 8, width)),
            rot_keep.eq(_rotate_up(in_keep, head.start_lane, 1, width)),
        ]
        byte_from_new = Cat(start_mask[k].replicate(8) for k in range(width))
        merged_data = (rot_data & byte_from_new) | (carry_data & ~byte_from_new)
        merged_keep = (rot_keep & start_mask) | (carry_keep & ~start_mask)
        # The command's window: the first beat starts at s, the final one ends at end_lane.
        window = Mux(first_beat, start_mask, all_lanes) & Mux(final_beat, end_mask, all_lanes)

        # Shape check of a consumed input beat: full and without `last`, except the command's final
        # beat, which has `last` and keep = lanes 0..tail_lane.
        is_final_in = in_left_now == 1
        in_last = self.data.payload.last
        expected_keep = Mux(is_final_in, tail_mask, all_lanes)
        bad_beat = need_input & ((in_last != is_final_in) | (self.data.payload.keep != expected_keep))
        mismatch_new = (mismatch & ~first_beat) | bad_beat
        too_long_new = (too_long & ~first_beat) | (need_input & is_final_in & ~in_last)

        c_entry = c_layout(c_queue.w_data)

        with m.If(axi.wready):
            m.d.sync += axi.wvalid.eq(0)
        with m.If(produce):
            m.d.sync += [
                axi.wvalid.eq(1),
                axi.wdata.eq(merged_data),
                axi.wstrb.eq(merged_keep & window),
                axi.wlast.eq(burst_end),
                carry_data.eq(rot_data),
                carry_keep.eq(rot_keep),
                beat.eq(Mux(burst_end, 0, beat + 1)),
                in_left.eq(in_left_now - need_input),
                ended.eq(ended_now | (need_input & in_last)),
                mismatch.eq(mismatch_new),
                too_long.eq(too_long_new),
            ]
            m.d.comb += w_queue.r_en.eq(burst_end)
            with m.If(final_beat):
                with m.If(too_long_new):
                    m.d.sync += [dropping.eq(1), drop_mismatch.eq(1)]
                with m.Else():
                    m.d.comb += [c_queue.w_en.eq(1), c_entry.mismatch.eq(mismatch_new)]

        with m.If(w_queue.r_rdy & head.reject & ~dropping):
            m.d.comb += w_queue.r_en.eq(1)
            m.d.sync += [dropping.eq(1), drop_mismatch.eq(0)]

        with m.If(dropping & self.data.valid & self.data.payload.last):
            m.d.sync += dropping.eq(0)
            m.d.comb += [c_queue.w_en.eq(1), c_entry.mismatch.eq(drop_mismatch)]

        # -- B responses in, done out (B side) --------------------------------------------------------
        b_head = b_layout(b_queue.r_data)
        c_head = c_layout(c_queue.r_data)
        command_bad = Signal()  # an earlier burst of the command had a bad BRESP
        done_free = ~self.done.valid | self.done.ready
        can_finish = c_queue.r_rdy & done_free  # the W side's verdict is in and `done` has room
        m.d.comb += axi.bready.eq(b_queue.r_rdy & ~b_head.reject & (~b_head.last | can_finish))

        with m.If(self.done.ready):
            m.d.sync += self.done.valid.eq(0)

        finish = Signal()
        finish_error = Signal()
        with m.If(axi.bvalid & axi.bready):
            bad = axi.bresp[1]  # SLVERR or DECERR
            m.d.comb += b_queue.r_en.eq(1)
            with m.If(b_head.last):
                m.d.comb += [finish.eq(1), finish_error.eq(command_bad | bad | c_head.mismatch)]
                m.d.sync += command_bad.eq(0)
                with m.If(command_bad | bad):
                    m.d.sync += self.stat_write_errors.eq(self.stat_write_errors + 1)
                with m.If(c_head.mismatch):
                    m.d.sync += self.stat_length_mismatch.eq(self.stat_length_mismatch + 1)
            with m.Else():
                m.d.sync += command_bad.eq(command_bad | bad)
        with m.If(b_queue.r_rdy & b_head.reject & can_finish):
            m.d.comb += [b_queue.r_en.eq(1), finish.eq(1), finish_error.eq(1)]
            m.d.sync += self.stat_rejected.eq(self.stat_rejected + 1)

        with m.If(finish):
            m.d.comb += c_queue.r_en.eq(1)
            m.d.sync += [
                self.done.valid.eq(1),
                self.done.payload.error.eq(finish_error),
                self.stat_commands.eq(self.stat_commands + 1),
            ]
            with m.If(~finish_error):
                m.d.sync += self.stat_bytes.eq(self.stat_bytes + b_head.length)

        return m
