"""Response router: where a SACK, NACK or ACK goes out, before any of its bytes exist.

Ref: docs/protocol.md §5.8 (reverse-path rule), §5.3 (route-template specialisation), §5.1 (plane =
EV[31:29]).

The receive engine decides *that* and *what* to answer; this block decides *where*: the plane port and
the EV that addresses the frame, and in SRv6 mode the outer destination. The bytes are made elsewhere:
by :class:`~mrcnic.hdl.rx.response_builder.ResponseBuilder` (a receive pipeline that sends its own
frames), or by the transmit pipeline's header builder (the NIC: ``HeaderBuilder(responses=True)``, one
header builder and one ICRC path for data and control frames).

Members (P = ``planes``):

* ``response``: In, :func:`~mrcnic.hdl.tx.layouts.control_record_layout` ``{opcode, ev, qp, seth, cc,
  neth, aeth}``. A record whose opcode is not SACK, NACK or ACK is dropped and counted
  (``stat_bad_opcode``); one that finds no port up is dropped and counted (``stat_no_plane``).
* ``peer_configure``: In, ``{qp, peer: peer_layout}``: the QP's peer addressing (only ``dest``, the
  route-template index, is used here, in SRv6 mode). A write waits while a record is held and takes
  priority over the next record, so a record is routed with the addressing in force when it was taken.
* ``route_configure``: In (SRv6 builds only), ``{dest, template}``: one route template, as
  ``SourceRouter.configure``. Writes take priority over records.
* ``port_up``: In(P), default all up, sampled when a record is taken.
* ``o``: Out, :func:`~mrcnic.hdl.tx.layouts.response_job_layout` ``{record, plane, route_ev,
  outer_dst}`` (``outer_dst`` only in SRv6 builds): from registers and the template table's registered
  read, stable while offered.
* ``stat_no_plane``, ``stat_bad_opcode``: Out(32), wrapping.

Reverse-path rule (§5.8). The plane the EV names is ``ev[31:29] mod P`` (P is 1, 2 or 4: the low bits of
the field). If ``port_up`` has that port down, the lowest-numbered up port is used instead. ``route_ev``
is ``ev`` with its plane field replaced by the port used, so a frame's own EV always names its plane;
the record keeps the answered ``ev`` (echoed in the SETH / NETH). SRv6: ``outer_dst`` is the template of
the QP's ``dest`` specialised with ``route_ev``.

Timing: one record held; a record is taken in the cycle the held one leaves (or when none is held), so
records flow one per cycle while ``o`` is ready.
"""

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from mrcnic.wire.constants import Opcode

from ..tx.header_builder import response_job_layout
from ..tx.layouts import bits_for, control_record_layout
from ..tx.source_router import RouteTemplateLayout, route_configure_members, route_template_table, specialise

__all__ = ["ResponseRouter", "peer_layout"]


def peer_layout(destinations: int) -> data.StructLayout:
    """The addressing of a QP's answers: its peer's route, QPN and GID, and its own QPN."""
    return data.StructLayout(
        {
            "dest": bits_for(destinations),  # route-template index of the peer (SRv6 mode)
            "peer_qpn": 24,
            "peer_gid": 128,
            "own_qpn": 24,
        }
    )


class ResponseRouter(wiring.Component):
    """Parameters: ``planes`` (1, 2 or 4), ``qps``, ``destinations`` (route-template table size; 0: built
    without SRv6, no ``route_configure`` and no ``outer_dst``). Members: see the module docstring."""

    def __init__(self, *, planes: int, qps: int, destinations: int):
        if planes not in (1, 2, 4):
            raise ValueError(f"planes must be 1, 2 or 4, not {planes}")
        self.planes, self.qps, self.destinations = planes, qps, destinations
        self.srv6 = destinations > 0
        super().__init__(
            {
                "response": In(stream.Signature(control_record_layout(qps))),
                "peer_configure": In(
                    stream.Signature(
                        data.StructLayout({"qp": bits_for(qps), "peer": peer_layout(destinations)})
                    )
                ),
                "port_up": In(planes, init=(1 << planes) - 1),
                **route_configure_members(destinations),
                "o": Out(stream.Signature(response_job_layout(qps, planes, self.srv6))),
                "stat_no_plane": Out(32),
                "stat_bad_opcode": Out(32),
            }
        )

    def elaborate(self, platform):
        m = Module()
        planes = self.planes
        plane_bits = bits_for(planes)
        held = Signal()  # ``o`` offers a record

        template_write = Const(0)
        if self.srv6:
            read = route_template_table(m, self.route_configure, self.destinations)
            template_write = self.route_configure.valid

        # The route index of each QP (a few bits each), so the incoming record's template is read as it
        # is taken. Without SRv6 there is nothing to keep.
        pc = self.peer_configure
        m.d.comb += pc.ready.eq(~held)
        dests = Array(Signal(bits_for(self.destinations), name=f"dest_{q}") for q in range(self.qps))
        if self.srv6:
            with m.If(pc.valid & pc.ready):
                m.d.sync += dests[pc.payload.qp].eq(pc.payload.peer.dest)
        config_write = template_write | pc.valid

        # -- the reverse-path rule on the incoming record: which port, and the EV naming it
        rec_in = self.response.payload
        asked = Signal(plane_bits)
        if planes > 1:
            m.d.comb += asked.eq(rec_in.ev[29 : 29 + (planes - 1).bit_length()])  # ev[31:29] mod P
        up = self.port_up
        lowest_up = Signal(plane_bits)
        for p in reversed(range(planes)):  # priority: the last assignment (lowest p) wins
            with m.If(up[p]):
                m.d.comb += lowest_up.eq(p)
        chosen = Signal(plane_bits)
        m.d.comb += chosen.eq(Mux(up.bit_select(asked, 1), asked, lowest_up))
        known = (
            (rec_in.opcode == Opcode.SACK) | (rec_in.opcode == Opcode.NACK) | (rec_in.opcode == Opcode.ACK)
        )

        # -- the held record, while its template is read
        rec = Signal(control_record_layout(self.qps))
        plane = Signal(plane_bits)
        route_ev = Signal(32)
        out = self.o.payload
        leave = self.o.valid & self.o.ready
        accept = Signal()
        m.d.comb += [
            out.record.eq(rec),
            out.plane.eq(plane),
            out.route_ev.eq(route_ev),
            self.o.valid.eq(held),
            # Configuration writes are rare: they go first (a record never reads a half-written entry).
            self.response.ready.eq((~held | self.o.ready) & ~config_write),
            accept.eq(self.response.valid & self.response.ready),
        ]
        if self.srv6:
            m.d.comb += [
                read.addr.eq(dests[rec_in.qp]),
                read.en.eq(accept),
                out.outer_dst.eq(specialise(m, data.View(RouteTemplateLayout, read.data), route_ev)),
            ]
        with m.If(leave):
            m.d.sync += held.eq(0)
        with m.If(accept):
            with m.If(~known):
                m.d.sync += self.stat_bad_opcode.eq(self.stat_bad_opcode + 1)
            with m.Elif(up == 0):
                m.d.sync += self.stat_no_plane.eq(self.stat_no_plane + 1)
            with m.Else():
                m.d.sync += [
                    held.eq(1),
                    rec.eq(rec_in),
                    plane.eq(chosen),
                    route_ev.eq(Cat(rec_in.ev[:29], chosen, Const(0, 3 - plane_bits))),
                ]
        return m
