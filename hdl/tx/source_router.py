"""Source router: the outer IPv6 destination (SRv6 uSID container) of a packet, from its EV.

Ref: docs/protocol.md §5 (uSID and EV layouts, route templates, end-of-carrier zeros); RFC 9800.

Per destination a route template is stored in a ``lib.memory`` table: the 32-bit locator, up to six
uSIDs, how many are used, and which slot (if any) names the T1 switch. A packet's container is the
template with the EV's plane copied into every uSID and the EV's uplink into the T1 slot's index, then
zeros (end of carrier) after the last used uSID. The Python twin is ``mrcnic.wire.RouteTemplate``.
"""

from amaranth import Cat, Const, Module, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from mrcnic.wire.usid import MAX_USIDS

from .layouts import bits_for

__all__ = [
    "RouteTemplateLayout",
    "SourceRouter",
    "route_configure_members",
    "route_template_table",
    "specialise",
]

RouteTemplateLayout = data.StructLayout(
    {
        "locator": 32,
        "usids": data.ArrayLayout(16, MAX_USIDS),  # plane bits [15:13] are ignored: they come from the EV
        "count": range(MAX_USIDS + 1),
        "t1_slot": 3,  # NO_T1_SLOT (7): no T1 hop (destination under the same T0)
    }
)


def route_configure_members(destinations: int) -> dict:
    """The ``route_configure`` member of a block that keeps route templates: In, ``{dest, template}``, one
    template write. None for a NIC built without SRv6 (``destinations`` 0): it has no templates."""
    if destinations == 0:
        return {}
    layout = data.StructLayout({"dest": bits_for(destinations), "template": RouteTemplateLayout})
    return {"route_configure": In(stream.Signature(layout))}


def specialise(m: Module, template, ev) -> Signal:
    """Combinational: the 128-bit container for ``template`` (a view) and ``ev`` (32 bits)."""
    plane, uplink = ev[29:32], ev[21:29]
    usids = []
    for slot in range(MAX_USIDS):
        u = template.usids[slot]
        used = Signal(16, name=f"usid_{slot}")
        with m.If(slot >= template.count):
            m.d.comb += used.eq(0)  # end of carrier
        with m.Elif(template.t1_slot == slot):
            m.d.comb += used.eq(Cat(uplink, Const(0, 3), u[11:13], plane))  # T1 index = EV uplink
        with m.Else():
            m.d.comb += used.eq(Cat(u[:13], plane))
        usids.append(used)
    # As an integer the address is big-endian: locator in bits [127:96], uSID 0 in [95:80], ...
    address = Signal(128)
    m.d.comb += address.eq(Cat(Const(0, 128 - 32 - 16 * MAX_USIDS), *reversed(usids), template.locator))
    return address


def route_template_table(m, configure, destinations: int):
    """The route-template table in ``m``: written from ``configure`` (``{dest, template}``, always
    ready), returned as a synchronous read port."""
    m.submodules.templates = templates = memory.Memory(shape=RouteTemplateLayout, depth=destinations, init=[])
    write = templates.write_port()
    m.d.comb += [
        write.addr.eq(configure.payload.dest),
        write.data.eq(configure.payload.template),
        write.en.eq(configure.valid),
        configure.ready.eq(1),
    ]
    return templates.read_port(domain="sync")


class SourceRouter(wiring.Component):
    """Members:

    * ``configure``: In, ``{dest, template}``: write one destination's route template.
    * ``request``: In, ``{dest, ev}``; ``response``: Out, ``{address}`` (128-bit IPv6 address as an
      integer, most significant bits = locator), one per request, in order, one cycle later.
    """

    def __init__(self, *, destinations: int):
        if destinations < 1:
            raise ValueError(f"a source router needs route templates, not {destinations}")
        self.destinations = destinations
        dest_bits = bits_for(destinations)
        super().__init__(
            {
                "configure": route_configure_members(destinations)["route_configure"],
                "request": In(stream.Signature(data.StructLayout({"dest": dest_bits, "ev": 32}))),
                "response": Out(stream.Signature(data.StructLayout({"address": 128}))),
            }
        )

    def elaborate(self, platform):
        m = Module()
        # Configuration writes are rare: they simply take priority over lookups.
        read = route_template_table(m, self.configure, self.destinations)

        # One-stage pipeline: the table read takes a cycle, the EV rides along.
        held_valid = Signal()
        held_ev = Signal(32)
        can_advance = ~held_valid | self.response.ready
        m.d.comb += [
            self.request.ready.eq(can_advance & ~self.configure.valid),
            read.addr.eq(self.request.payload.dest),
            read.en.eq(self.request.ready),
        ]
        with m.If(can_advance):
            m.d.sync += held_valid.eq(self.request.valid & self.request.ready)
            m.d.sync += held_ev.eq(self.request.payload.ev)
        template = data.View(RouteTemplateLayout, read.data)
        m.d.comb += [
            self.response.valid.eq(held_valid),
            self.response.payload.address.eq(specialise(m, template, held_ev)),
        ]
        return m
