"""RX frame buffer: store-and-forward of whole frames until their ICRC is known, then payload or discard.

Ref: docs/protocol.md §7.5 rows 1-2 (malformed and bad-ICRC frames are dropped, so nothing may reach
memory before the ICRC is checked), §8 (ICRC coverage: the IPv6 header before UDP onwards; the
uncovered Ethernet / outer IPv6 / SRH bytes in front of it are the ``skip`` of
:class:`~mrcnic.hdl.icrc.IcrcEngine`), §2.3 (byte offsets; a received SRH shifts the inner headers by
``8 * (1 + hdr_ext_len)``).

The RX pipeline forks the plane arbiter's frames (Ethernet header first, no FCS) to the header parser
and to this block. This block stores each frame, checks its ICRC, reports one record per frame, and
then, told by the validator per frame and in frame order, either drops the frame or emits a byte range
of it (the payload) for the DMA writer.

Members (W = ``data_width`` bytes per beat):

* ``i``: In(:func:`~mrcnic.hdl.stream.PacketStream`): frames, back to back. ``ready`` is low only
  while the data memory is full (for a beat that is to be stored), the frame-record FIFO is full or the
  ICRC path is backed up (which happens only when records are not taken). ``ready`` depends on
  registers only (not on ``valid`` or the payload), so the stream can be forked to the parser with
  each side's ``valid`` gated by the other's ``ready``.
* ``frame``: Out, :data:`FrameRecordLayout` ``{icrc_ok, length, oversize}``, one per frame in order,
  once its last beat is stored and its ICRC result is known. ``length``: bytes received, saturating at
  0xFFFF. A frame longer than ``max_frame_bytes`` is stored only up to the beat holding byte
  ``max_frame_bytes - 1`` (its later beats are accepted and dropped), ``oversize`` is set and
  ``icrc_ok`` is 0. Otherwise ``icrc_ok`` is the engine's ``residue_ok``.
* ``release``: In, :data:`ReleaseLayout` ``{discard, offset, length}``, one per frame in frame order;
  it is taken only once that frame's record has gone out on ``frame``. ``discard = 1``: the frame is
  freed, nothing is emitted. ``discard = 0``: bytes ``[offset, offset + length)`` of the frame, clamped
  to the stored bytes (``min(length, max_frame_bytes)``), go out on ``payload`` as one packet; an
  empty range emits nothing. The frame is freed once its last beat has been read.
* ``payload``: Out(:func:`~mrcnic.hdl.stream.PacketStream`): the selected bytes packed from lane 0.
  ``frame.valid``, ``release.ready`` and ``payload.valid`` do not depend on the other side's
  handshake signal.
* ``stat_frames`` (frames received), ``stat_oversize`` (of them oversize), ``stat_discarded``
  (releases with ``discard = 1``), ``stat_released`` (releases with ``discard = 0``, empty ones
  included): Out(32), wrapping.

Structure::

    i ─┬► data memory (lib.memory ring of beats, write pointer)                  release
       │      │ sync read port ─► [keep/last] ─► StreamPacker ─► payload          │
       │      └──────────── free pointer ◄── read side (idle / streaming) ◄──────┘
       ├► length / beat counters ─► meta FIFO {end, stored, length, oversize} ─┐
       └► ICRC delay line (beats) ─► IcrcEngine ─► results ─────────────────── ┴► frame ─► record FIFO
          skip FIFO (one per frame) ─┘                                   {end, stored} for the read side

* **Data memory.** ``depth_beats``: the next power of two >= ``depth_frames * ceil(max_frame_bytes /
  W)`` beats, used as a ring. The writer stores each beat at the write pointer, without delay; a frame
  occupies consecutive beats, so the frame ahead of it ends where it starts and the read side needs
  only the *end* pointer of each frame (the free pointer is the start of the oldest frame). Pointers
  carry one extra bit, so full and empty differ. One write port, one synchronous read port.
* **Frame records.** At a frame's last beat ``{end, stored, length, oversize}`` enters the meta FIFO
  (``record_depth`` entries). A record leaves on ``frame`` when the engine's result for the frame is
  there too; ``{end, stored}`` then moves to the record FIFO (``record_depth`` entries) that the
  read side pops with each release.
* **ICRC delay line.** The engine samples ``skip`` on a frame's first beat, but ``skip`` depends on
  frame bytes 20 (first Next Header: 17 -> 14, 41 -> 54, 43 -> 62 + 8 * SRH ``hdr_ext_len``, anything
  else -> 14, the parser drops such frames) and 55 (``hdr_ext_len``). So the beats reach the engine
  through a FIFO of ``55 // W + 2`` beats, and each frame's ``skip`` goes into a skip FIFO when the beat
  holding byte 55 (or the frame's last beat, for shorter frames) is accepted. The head beat of a frame
  leaves only once its ``skip`` is there; at full rate that is the cycle after byte 55 arrived, so the
  line never fills and the input never stalls for it.
* **Read side.** Idle: take a release (with the record FIFO's head), clamp the range, and either free
  the frame at once (discard or empty: one cycle per frame) or start streaming. Streaming: one memory
  read per cycle from the beat holding ``offset`` to the beat holding ``offset + length - 1``, with
  ``keep`` masking the bytes outside the range, into a :class:`~mrcnic.hdl.stream_packer.StreamPacker`
  that packs them from lane 0. The frame is freed in the cycle its last beat is read.

Timing (figures measured by tb/hdl/rx/test_frame_buffer.py ``test_full_rate``):

* ``i`` takes one beat per cycle, frames back to back, as long as records and releases keep up.
* A frame's record can be taken the engine latency (``IcrcEngine``: 8 cycles at W = 8, 11 at W = 32)
  plus 1 to ``55 // W + 1`` cycles (the beats queued in the delay line) after its last beat was accepted:
  17 cycles at W = 8 and 15 at W = 32 with the input at full rate.
* A release is taken in one cycle when the read side is idle; a discarded or empty one frees its frame
  in that cycle, so one frame per cycle can be dropped. A range of ``n`` beats is then read in ``n``
  cycles, one beat per cycle (plus one packer flush cycle when the packed tail overflows a word), and
  its first payload beat is valid 5 cycles after the release was taken.
* With 4096-byte payloads back to back the input runs at 1.000 beats per cycle and the payload stream
  at 1.00 of its ideal rate (payload beats per input beat), at W = 8 and W = 32.
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..icrc import (
    IPPROTO_IPV6,
    IPPROTO_ROUTING,
    NEXT_HEADER_AT,
    SKIP_SINGLE,
    SKIP_SRH_BASE,
    SKIP_SRV6,
    SRH_EXT_LEN_AT,
    IcrcEngine,
    skip_for,
)
from ..stream import PacketLayout, PacketStream
from ..stream_packer import StreamPacker
from ..tables import UNDEFINED_COLLISIONS

__all__ = ["FrameBuffer", "FrameRecordLayout", "ReleaseLayout", "skip_for"]

FrameRecordLayout = data.StructLayout({"icrc_ok": 1, "length": 16, "oversize": 1})
ReleaseLayout = data.StructLayout({"discard": 1, "offset": 16, "length": 16})


def _keep_count(keep, width: int):
    """Number of set lanes of a keep mask contiguous from lane 0 (0..width), without an adder tree."""
    # Lane k is the last kept lane iff keep[k] & ~keep[k+1]; then the count is k + 1.
    ends = [keep[k] & ~keep[k + 1] for k in range(width - 1)] + [keep[width - 1]]
    bits = (width + 1).bit_length()
    return Cat(*(Cat(*(e for k, e in enumerate(ends) if (k + 1) >> b & 1)).any() for b in range(bits)))


class FrameBuffer(wiring.Component):
    """Parameters: ``data_width`` (W, bytes per beat, power of two 1..64), ``max_frame_bytes`` (64..65535,
    default 4096 + 256), ``depth_frames`` (maximum frames the data memory holds, default 2),
    ``record_depth`` (frames whose record is pending or whose release is pending, each, default 16),
    ``icrc_from_user`` (the Ethernet ports checked the ICRC, ``mrcnic.hdl.eth.octet_icrc``: ``i`` carries
    a ``user`` bit, and a frame's ``icrc_ok`` is that bit of its last beat; no ICRC engine, delay line or
    skip FIFO is built, and a record can be taken the cycle after its last beat).

    See the module docstring for the members and their timing.
    """

    def __init__(
        self,
        *,
        data_width: int,
        max_frame_bytes: int = 4096 + 256,
        depth_frames: int = 2,
        record_depth: int = 16,
        icrc_from_user: bool = False,
    ):
        if not 1 <= data_width <= 64 or data_width & (data_width - 1):
            raise ValueError(f"data_width must be a power of two from 1 to 64 bytes, not {data_width}")
        if not 64 <= max_frame_bytes <= 0xFFFF:
            raise ValueError(f"max_frame_bytes must be in 64..65535, not {max_frame_bytes}")
        if depth_frames < 1 or record_depth < 1:
            raise ValueError("depth_frames and record_depth must be at least 1")
        self.data_width = data_width
        self.max_frame_bytes = max_frame_bytes
        self.max_frame_beats = -(-max_frame_bytes // data_width)
        self.depth_frames = depth_frames
        self.depth_beats = 1 << (depth_frames * self.max_frame_beats - 1).bit_length()
        self.record_depth = record_depth
        self.icrc_from_user = icrc_from_user
        # Beats up to and including the one holding byte 55, plus one so a beat can enter while the
        # head leaves (SyncFIFO's w_rdy ignores a simultaneous read).
        self.delay_beats = SRH_EXT_LEN_AT // data_width + 2
        super().__init__(
            {
                "i": In(PacketStream(data_width, user_width=int(icrc_from_user))),
                "frame": Out(stream.Signature(FrameRecordLayout)),
                "release": In(stream.Signature(ReleaseLayout)),
                "payload": Out(PacketStream(data_width)),
                "stat_frames": Out(32),
                "stat_oversize": Out(32),
                "stat_discarded": Out(32),
                "stat_released": Out(32),
            }
        )

    def elaborate(self, platform):
        m = Module()
        width = self.data_width
        lane_bits = width.bit_length() - 1
        addr_bits = self.depth_beats.bit_length() - 1
        max_bytes, max_beats = self.max_frame_bytes, self.max_frame_beats

        pointer = addr_bits + 1  # ring pointers with a wrap bit
        verdict = {"icrc_ok": 1} if self.icrc_from_user else {}  # else the engine's result FIFO has it
        meta_layout = data.StructLayout(
            {"end": pointer, "stored": 16, "length": 16, "oversize": 1, **verdict}
        )
        record_layout = data.StructLayout({"end": pointer, "stored": 16})

        # Beats are read only once stored (a frame's, behind the write pointer): never the one being written.
        m.submodules.memory = memory = Memory(
            shape=8 * width, depth=self.depth_beats, init=[], attrs=UNDEFINED_COLLISIONS
        )
        write = memory.write_port()
        read = memory.read_port(domain="sync")
        m.submodules.meta = meta = fifo.SyncFIFOBuffered(width=meta_layout.size, depth=self.record_depth)
        m.submodules.records = records = fifo.SyncFIFOBuffered(
            width=record_layout.size, depth=self.record_depth
        )
        m.submodules.packer = packer = StreamPacker(width)

        write_ptr = Signal(pointer)
        free_ptr = Signal(pointer)  # start of the oldest frame still held

        # -- write side: store beats, count bytes, decide the ICRC skip ------------------------------------
        beat = self.i.payload
        beat_index = Signal(range(max_beats + 1))  # beats of the current frame so far, saturating
        length = Signal(16)  # bytes of the current frame so far, saturating

        store = Signal()
        room = Signal()
        accept = Signal()
        icrc_ready = Signal()  # the ICRC path can take a beat
        m.d.comb += [
            store.eq(beat_index < max_beats),
            # Occupancy (write - free, modulo 2 * depth) is at most depth; below depth iff its top bit is 0.
            room.eq(~(write_ptr - free_ptr)[addr_bits]),
            self.i.ready.eq(meta.w_rdy & (~store | room) & icrc_ready),
            accept.eq(self.i.valid & self.i.ready),
        ]

        m.d.comb += [
            write.addr.eq(write_ptr[:addr_bits]),
            write.data.eq(beat.data),
            write.en.eq(accept & store),
        ]

        length_sum = Signal(17)
        length_next = Signal(16)
        oversize = Signal()
        m.d.comb += [
            length_sum.eq(length + _keep_count(beat.keep, width)),
            length_next.eq(Mux(length_sum[16], 0xFFFF, length_sum[:16])),
            oversize.eq(length_next > max_bytes),
        ]

        if self.icrc_from_user:
            # The port checked the ICRC: its verdict comes with the frame's last beat.
            m.d.comb += icrc_ready.eq(1)
            icrc_result = stream.Signature(data.StructLayout({"residue_ok": 1})).create()
            m.d.comb += [
                icrc_result.valid.eq(1),
                icrc_result.payload.residue_ok.eq(meta_layout(meta.r_data).icrc_ok),
            ]
        else:
            engine_ready, icrc_result = self._icrc_engine(m, beat, beat_index, accept)
            m.d.comb += icrc_ready.eq(engine_ready)

        with m.If(accept):
            with m.If(store):
                m.d.sync += write_ptr.eq(write_ptr + 1)
            with m.If(beat.last):
                m.d.sync += [beat_index.eq(0), length.eq(0)]
            with m.Else():
                m.d.sync += [beat_index.eq(Mux(store, beat_index + 1, beat_index)), length.eq(length_next)]

        meta_in = Signal(meta_layout)
        m.d.comb += [
            meta_in.end.eq(write_ptr + store),
            meta_in.stored.eq(Mux(oversize, max_bytes, length_next)),
            meta_in.length.eq(length_next),
            meta_in.oversize.eq(oversize),
            *([meta_in.icrc_ok.eq(beat.user)] if self.icrc_from_user else []),
            meta.w_data.eq(meta_in),
            meta.w_en.eq(accept & beat.last),
        ]
        with m.If(accept & beat.last):
            m.d.sync += [
                self.stat_frames.eq(self.stat_frames + 1),
                self.stat_oversize.eq(self.stat_oversize + oversize),
            ]

        # -- frame records: the meta entry and the ICRC result of the same frame --------------------------
        meta_out = meta_layout(meta.r_data)
        record_in = Signal(record_layout)
        frame_go = Signal()
        m.d.comb += [
            self.frame.valid.eq(meta.r_rdy & icrc_result.valid & records.w_rdy),
            self.frame.payload.icrc_ok.eq(icrc_result.payload.residue_ok & ~meta_out.oversize),
            self.frame.payload.length.eq(meta_out.length),
            self.frame.payload.oversize.eq(meta_out.oversize),
            frame_go.eq(self.frame.valid & self.frame.ready),
            meta.r_en.eq(frame_go),
            icrc_result.ready.eq(frame_go),
            record_in.end.eq(meta_out.end),
            record_in.stored.eq(meta_out.stored),
            records.w_data.eq(record_in),
            records.w_en.eq(frame_go),
        ]

        # -- read side --------------------------------------------------------------------------------------
        record = record_layout(records.r_data)
        release = self.release.payload
        streaming = Signal()
        take = Signal()
        m.d.comb += [
            self.release.ready.eq(~streaming & records.r_rdy),
            take.eq(self.release.valid & self.release.ready),
            records.r_en.eq(take),
        ]

        # Clamp [offset, offset + length) to the stored bytes, so another frame's beats are never read.
        range_end = Signal(17)
        lo = Signal(16)
        hi = Signal(16)
        m.d.comb += [
            range_end.eq(release.offset + release.length),
            lo.eq(Mux(release.offset < record.stored, release.offset, record.stored)),
            hi.eq(Mux(range_end < record.stored, range_end, record.stored)),
        ]
        last_byte = Signal(16)
        m.d.comb += last_byte.eq(hi - 1)

        read_ptr = Signal(addr_bits)
        read_last = Signal(addr_bits)
        first_keep = Signal(width)  # lanes at or above the first byte's lane
        last_keep = Signal(width)  # lanes at or below the last byte's lane
        at_range_start = Signal()
        free_to = Signal(pointer)  # the streaming frame's end: the free pointer once it is read

        all_lanes = (1 << width) - 1
        with m.If(take):
            with m.If(release.discard):
                m.d.sync += [self.stat_discarded.eq(self.stat_discarded + 1), free_ptr.eq(record.end)]
            with m.Else():
                m.d.sync += self.stat_released.eq(self.stat_released + 1)
                with m.If(hi <= lo):
                    m.d.sync += free_ptr.eq(record.end)
                with m.Else():
                    m.d.sync += [
                        streaming.eq(1),
                        read_ptr.eq(free_ptr + (lo >> lane_bits)),
                        read_last.eq(free_ptr + (last_byte >> lane_bits)),
                        first_keep.eq(Cat(lo[:lane_bits] <= lane for lane in range(width))),
                        last_keep.eq(Cat(last_byte[:lane_bits] >= lane for lane in range(width))),
                        at_range_start.eq(1),
                        free_to.eq(record.end),
                    ]

        # One pipeline stage between the read port and the packer: the read port's data register is the
        # stage's data (its `en` holds it while the packer stalls), keep/last travel alongside.
        staged = Signal()
        staged_keep = Signal(width)
        staged_last = Signal()
        advance = Signal()
        m.d.comb += [
            advance.eq(~staged | packer.i.ready),
            read.addr.eq(read_ptr),
            read.en.eq(advance),
            packer.i.valid.eq(staged),
            packer.i.payload.data.eq(read.data),
            packer.i.payload.keep.eq(staged_keep),
            packer.i.payload.last.eq(staged_last),
        ]
        at_range_end = read_ptr == read_last
        with m.If(advance):
            m.d.sync += staged.eq(streaming)
            with m.If(streaming):
                m.d.sync += [
                    staged_keep.eq(
                        Mux(at_range_start, first_keep, all_lanes) & Mux(at_range_end, last_keep, all_lanes)
                    ),
                    staged_last.eq(at_range_end),
                    read_ptr.eq(read_ptr + 1),
                    at_range_start.eq(0),
                ]
                with m.If(at_range_end):
                    # The beat is in the read port's register now: the writer may reuse the frame's beats.
                    m.d.sync += [streaming.eq(0), free_ptr.eq(free_to)]

        wiring.connect(m, packer.o, wiring.flipped(self.payload))
        return m

    def _icrc_engine(self, m, beat, beat_index, accept):
        """The ICRC engine behind its delay line; returns (the input may take a beat, the results)."""
        width = self.data_width
        m.submodules.delay = delay = fifo.SyncFIFO(width=PacketLayout(width).size, depth=self.delay_beats)
        m.submodules.skips = skips = fifo.SyncFIFO(width=16, depth=self.delay_beats)
        m.submodules.icrc = icrc = IcrcEngine(width, result_depth=self.record_depth)
        next_header = Signal(8)
        skip_decided = Signal()

        # The skip is decided at the beat holding byte 55 (the SRH length) or at `last`, whichever comes
        # first; byte 20 was seen by then (or the frame is too short for its value to matter).
        def lane_byte(offset):
            return beat.data.word_select(offset % width, 8)

        nh_beat, ext_beat = NEXT_HEADER_AT // width, SRH_EXT_LEN_AT // width
        nh_now = Mux(beat_index == nh_beat, lane_byte(NEXT_HEADER_AT), next_header)
        ext_len = lane_byte(SRH_EXT_LEN_AT)
        skip = Signal(16)
        with m.Switch(nh_now):
            with m.Case(IPPROTO_IPV6):
                m.d.comb += skip.eq(SKIP_SRV6)
            with m.Case(IPPROTO_ROUTING):
                m.d.comb += skip.eq(SKIP_SRH_BASE + (ext_len << 3))
            with m.Default():
                m.d.comb += skip.eq(SKIP_SINGLE)
        decide = ~skip_decided & (beat.last | (beat_index == ext_beat))
        m.d.comb += [
            skips.w_data.eq(skip),
            skips.w_en.eq(accept & decide),
            delay.w_data.eq(beat.as_value()),
            delay.w_en.eq(accept),
        ]

        with m.If(accept):
            with m.If(beat_index == nh_beat):
                m.d.sync += next_header.eq(lane_byte(NEXT_HEADER_AT))
            m.d.sync += skip_decided.eq(Mux(beat.last, 0, skip_decided | decide))

        # -- ICRC: the delay line feeds the engine once the head frame's skip is known -------------------
        head = PacketLayout(width)(delay.r_data)
        at_first = Signal(init=1)  # the delay line's head beat starts a frame
        head_ready = delay.r_rdy & (~at_first | skips.r_rdy)
        m.d.comb += [
            icrc.i.valid.eq(head_ready),
            icrc.i.payload.data.eq(head.data),
            icrc.i.payload.keep.eq(head.keep),
            icrc.i.payload.last.eq(head.last),
            icrc.i.payload.skip.eq(skips.r_data),
            delay.r_en.eq(head_ready & icrc.i.ready),
            skips.r_en.eq(head_ready & icrc.i.ready & at_first),
        ]
        with m.If(head_ready & icrc.i.ready):
            m.d.sync += at_first.eq(head.last)
        return delay.w_rdy & skips.w_rdy, icrc.o
