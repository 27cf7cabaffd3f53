"""Plane demux: each finished packet goes to the transmit FIFO of the plane its EV names.

Ref: docs/protocol.md §6.3 step 4 ("the port of plane p cannot take a packet now").

Per plane there is a FIFO of ``fifo_depth`` beats in front of the port. When a packet's path is chosen,
``reserve`` claims room for it (``beats``, an upper bound of its size) in its plane's FIFO; the claim is
released when the packet's last beat has gone in (the same bound arrives with the packet on ``plane``).
``plane_ready[p]`` tells the path selector whether plane ``p`` still has room for one more packet of the
largest size after all claims, and whether the beats waiting for it (in its FIFO and claimed) are below
``queue_limit``; so a plane whose port is blocked stops getting packets while the others keep flowing,
and no plane builds a deep queue inside the NIC. The limit matters for loss inference: packets are
stamped when they are built, so the time a packet waits here shifts its send time against packets on
other planes, and the time rule (docs/protocol.md §7.7) tolerates only ``reorder_slack`` of that.

A FIFO entry is a beat with its ``keep`` as a byte count (the stream's beats are full except a packet's
last, whose bytes start at lane 0: :mod:`mrcnic.hdl.stream`), so an entry of W bytes is 8W + log2(W) + 2
bits instead of 9W + 1: at 4 bytes a beat 36 bits, one DP16KD's width in its 512 x 36 mode instead of
two; at 8 bytes 69 instead of 73, two instead of three (docs/benchmarks.md).
"""

from amaranth import Array, Cat, Const, Module, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..compare import at_most
from ..stream import PacketStream, kept_bytes, low_lanes
from .header_builder import PLANE_BEATS_BITS
from .layouts import bits_for

__all__ = ["PlaneDemux"]


class PlaneDemux(wiring.Component):
    """Members: ``i`` (packets in order), ``plane`` (``{plane, beats}`` for each packet, in the same
    order), ``reserve`` (``{plane, beats}``: a packet was chosen for this plane), ``plane_ready``
    (Out(planes)), ``queue_limit`` (In, beats; default: the FIFO depth, i.e. no limit beyond room), ``o``
    (one packet stream per plane).

    With ``control_beats`` > 0 (control frames of at most that many beats share the planes' FIFOs:
    ``TxPipeline(control_in=True)``) there are also ``control_reserve`` (In, ``{plane, beats}``) and
    ``control_room`` (Out(planes)): room for one control frame beyond all claims *and* a maximum-size
    packet, so a packet chosen on ``plane_ready`` still fits when control frames claim room before it
    does. Control frames ignore ``queue_limit``: it bounds how long data waits, and a control frame
    must leave whatever the data queue.
    """

    def __init__(
        self, *, data_width: int, planes: int, fifo_depth: int, max_packet_beats: int, control_beats: int = 0
    ):
        if fifo_depth < max_packet_beats + control_beats:
            raise ValueError(
                f"a plane FIFO of {fifo_depth} beats cannot hold a {max_packet_beats}-beat packet"
                + (f" and a {control_beats}-beat control frame" if control_beats else "")
            )
        self.data_width, self.planes = data_width, planes
        self.fifo_depth, self.max_packet_beats = fifo_depth, max_packet_beats
        self.control_beats = control_beats
        plane_layout = data.StructLayout({"plane": bits_for(planes), "beats": PLANE_BEATS_BITS})
        members = {
            "i": In(PacketStream(data_width)),
            "plane": In(stream.Signature(plane_layout)),
            "reserve": In(stream.Signature(plane_layout)),
            "plane_ready": Out(planes),
            "queue_limit": In(range(fifo_depth + 1), init=fifo_depth),
            "o": Out(PacketStream(data_width)).array(planes),
        }
        if control_beats:
            members["control_reserve"] = In(stream.Signature(plane_layout))
            members["control_room"] = Out(planes)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        w, planes = self.data_width, self.planes
        entry = data.StructLayout({"data": 8 * w, "bytes": range(w + 1), "last": 1})
        beat = self.i.payload
        queues = []
        for p in range(planes):
            q = fifo.SyncFIFOBuffered(width=entry.size, depth=self.fifo_depth)
            m.submodules[f"plane{p}"] = q
            queues.append(q)
            head = data.View(entry, q.r_data)
            m.d.comb += [
                self.o[p].payload.data.eq(head.data),
                self.o[p].payload.keep.eq(low_lanes(head.bytes, w)),
                self.o[p].payload.last.eq(head.last),
                self.o[p].valid.eq(q.r_rdy),
                q.r_en.eq(self.o[p].ready),
                q.w_data.eq(Cat(beat.data, kept_bytes(beat.keep), beat.last)),
            ]

        # Room claimed for packets chosen for a plane that are not yet completely in its FIFO. (While a
        # packet goes in, its beats count twice - in the FIFO level and in the claim: conservative.)
        claimed = Array(Signal(range(8 * self.fifo_depth), name=f"claimed_{p}") for p in range(planes))
        m.d.comb += self.reserve.ready.eq(1)
        if self.control_beats:
            m.d.comb += self.control_reserve.ready.eq(1)
        finished = Signal()  # last beat of the current packet enters its FIFO this cycle
        target = self.plane.payload.plane
        for p in range(planes):
            up = Signal.like(claimed[p], name=f"claim_{p}")
            down = Signal.like(claimed[p], name=f"release_{p}")
            with m.If(self.reserve.valid & (self.reserve.payload.plane == p)):
                m.d.comb += up.eq(self.reserve.payload.beats)
            with m.If(finished & (target == p)):
                m.d.comb += down.eq(self.plane.payload.beats)
            control_up = Const(0)
            if self.control_beats:
                control_up = Signal.like(claimed[p], name=f"control_claim_{p}")
                with m.If(self.control_reserve.valid & (self.control_reserve.payload.plane == p)):
                    m.d.comb += control_up.eq(self.control_reserve.payload.beats)
            m.d.sync += claimed[p].eq(claimed[p] + up + control_up - down)
            # The beats the plane's FIFO holds or has promised: one sum, compared with the queue limit
            # and with two constants (in LUTs, ``mrcnic.hdl.compare``) rather than three sums and three
            # carry chains against the FIFO's free room.
            used = Signal(range(9 * self.fifo_depth + 1), name=f"used_{p}")
            m.d.comb += [
                used.eq(queues[p].level + claimed[p]),
                self.plane_ready[p].eq(
                    at_most(used, self.fifo_depth - self.max_packet_beats) & (used < self.queue_limit)
                ),
            ]
            if self.control_beats:
                room = self.fifo_depth - self.max_packet_beats - self.control_beats
                m.d.comb += self.control_room[p].eq(at_most(used, room))

        # Route the current packet (its plane is at the head of ``plane``) into that plane's FIFO.
        w_rdy = Array(q.w_rdy for q in queues)
        go = self.plane.valid & self.i.valid & w_rdy[target]
        for p in range(planes):
            m.d.comb += queues[p].w_en.eq(go & (target == p))
        m.d.comb += [
            self.i.ready.eq(self.plane.valid & w_rdy[target]),
            finished.eq(go & self.i.payload.last),
            self.plane.ready.eq(finished),
        ]
        return m
