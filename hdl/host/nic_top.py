"""The whole NIC as a host sees it: the MRC core behind the register file and the queue engine.

Ref: docs/host-interface.md (registers, work queues), docs/registers.md (the map, generated).

::

    s_axil ► RegisterFile ─ registers ─► MrcNic core ◄─► s_axis[p] / m_axis[p] (one port per plane)
                 │  tables (QP, MR, EV, route) ─►│  ▲ work_request, post_receive
                 │  queue registers ◄─► QueueEngine ◄┘ ack, send_error, receive_completion
                 │                          │
    m_axi ◄─ AxiArbiter ◄─ core (payload reads, placement writes), engine (WQE reads, CQE writes)

Members: ``s_axil`` (AXI4-Lite subordinate, 16 address bits), ``m_axi`` (AXI4 manager to host memory;
its ID is one bit wider than the blocks' because the arbiter appends the manager), ``s_axis`` /
``m_axis`` (per plane), ``link_up`` (In: the MACs' link status; a plane is used when its link is up and
its LINK_UP register is 1), ``mac_<name>`` (In, per plane: the Ethernet MACs' drop counters of
``mrcnic.regmap.MAC_COUNTERS``, read in the PORT blocks), ``stat_host_link_<name>`` (In: the host link's
counters of ``mrcnic.regmap.HOST_LINK_COUNTERS``, a board's UART bridge, read in the COUNTERS block; like
the MAC counters 0 when nothing drives them), and ``path_trace``
/ ``path_trace_valid`` (every EV state-machine decision, for event logs and the system scoreboards).
Everything else is reached through registers.

Connections are made by name: every register binding, table stream and read-back stream pair
(``ev_read`` / ``ev_read_answer``) names a port of the core or of the queue engine (``mrcnic.regmap``),
so adding a register is a change to the map and to the block that owns the port.
"""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from mrcnic.regmap import HOST_LINK_COUNTERS, MAC_COUNTERS, Capabilities, nic_register_map

from ..dma.axi import Axi4Signature
from ..dma.axi_arbiter import AxiArbiter
from ..fanout import StreamFork
from ..nic import MrcNic
from ..stream import AxiStreamSignature
from .axil import AxiLiteSignature
from .queue_engine import QueueEngine
from .register_file import RegisterFile

__all__ = ["MrcNicTop", "board_counter_shapes"]

ID_WIDTH = 4  # of each block's AXI port; m_axi has one more bit


def board_counter_shapes(planes: int) -> dict:
    """The counters a board drives into MrcNicTop, by port name: ``mac_<name>`` for the MACs'
    (``mrcnic.regmap.MAC_COUNTERS``, one 32-bit counter per plane each, read in the PORT blocks) and
    ``stat_host_link_<name>`` for the host link's (``mrcnic.regmap.HOST_LINK_COUNTERS``, 32 bits, read in
    the COUNTERS block)."""
    return {
        **{f"mac_{name}": data.ArrayLayout(32, planes) for name in MAC_COUNTERS},
        **{f"stat_host_link_{name}": 32 for name, _ in HOST_LINK_COUNTERS},
    }


class MrcNicTop(wiring.Component):
    """Parameters as :class:`~mrcnic.hdl.nic.MrcNic`; ``clock_hz`` is published in the NIC_ID block."""

    def __init__(
        self,
        *,
        data_width: int = 8,
        planes: int = 4,
        qps: int = 4,
        ev_slots: int = 16,
        backups: int = 2,
        window: int = 256,
        mrs: int = 8,
        destinations: int = 4,
        clock_hz: int = 250_000_000,
        lookahead: int = 4,
        addr_width: int = 64,
        port_icrc: bool = False,
        max_pmtu: int = 4096,
        rx_timer_width: int = 32,
    ):
        params = dict(
            data_width=data_width,
            planes=planes,
            qps=qps,
            ev_slots=ev_slots,
            backups=backups,
            window=window,
            mrs=mrs,
            destinations=destinations,
            clock_hz=clock_hz,
            addr_width=addr_width,
            max_pmtu=max_pmtu,
            rx_timer_width=rx_timer_width,
        )
        self.params = params
        self.caps = Capabilities(**{**params, "clock_hz": int(clock_hz)})
        # How far the TX header builder's payload reads run ahead, and whether the Ethernet ports handle
        # the ICRC: not capabilities the host sees.
        self._core = MrcNic(**params, lookahead=lookahead, port_icrc=bool(port_icrc))
        self._engine = QueueEngine(qps=qps, data_width=data_width, addr_width=addr_width, id_width=ID_WIDTH)
        # The register file sees the core's and the engine's ports by name (the core's where both have
        # one: its streams are the tables' targets).
        self._board_counters = board = board_counter_shapes(planes)
        bound = {
            **self._engine.signature.members,
            **self._core.signature.members,
            **{name: Out(shape) for name, shape in board.items()},
        }
        self._regs = RegisterFile(nic_register_map(self.caps), wiring.Signature(bound))
        self._arbiter = AxiArbiter(
            managers=2, addr_width=addr_width, data_width_bytes=data_width, id_width=ID_WIDTH
        )
        core = self._core.signature.members
        super().__init__(
            {
                "s_axil": In(AxiLiteSignature(addr_width=16)),
                "m_axi": Out(
                    Axi4Signature(addr_width=addr_width, data_width_bytes=data_width, id_width=ID_WIDTH + 1)
                ),
                "s_axis": In(AxiStreamSignature(data_width, user_width=int(bool(port_icrc)))).array(planes),
                "m_axis": Out(AxiStreamSignature(data_width)).array(planes),
                "path_trace": Out(core["path_trace"].shape),
                "path_trace_valid": Out(1),
                # the MACs' link status: a plane is up when its link is and its LINK_UP register is 1
                "link_up": In(planes, init=(1 << planes) - 1),
                # the MACs' drop counters per plane and the host link's counters (0 without them)
                **{name: In(shape) for name, shape in board.items()},
            }
        )

    def elaborate(self, platform):
        m = Module()
        core, engine, regs, arbiter = self._core, self._engine, self._regs, self._arbiter
        m.submodules.core = core
        m.submodules.queue_engine = engine
        m.submodules.registers = regs
        m.submodules.axi_arbiter = arbiter

        wiring.connect(m, wiring.flipped(self.s_axil), regs.bus)
        for p in range(self.caps.planes):
            wiring.connect(m, wiring.flipped(self.s_axis[p]), core.s_axis[p])
            wiring.connect(m, core.m_axis[p], wiring.flipped(self.m_axis[p]))
        m.d.comb += [self.path_trace.eq(core.path_trace), self.path_trace_valid.eq(core.path_trace_valid)]

        # Host memory: the core's port and the engine's, one AXI port out.
        wiring.connect(m, core.m_axi, arbiter.m[0])
        wiring.connect(m, engine.m_axi, arbiter.m[1])
        wiring.connect(m, arbiter.s, wiring.flipped(self.m_axi))

        # Work in and completions out between the engine and the core.
        wiring.connect(m, engine.work_request, core.work_request)
        wiring.connect(m, engine.post_receive, core.post_receive)
        wiring.connect(m, core.ack, engine.ack)
        wiring.connect(m, core.send_error, engine.send_error)
        wiring.connect(m, core.receive_completion, engine.receive_completion)

        # Registers and tables, by name. A connect record goes to the core and, as a copy, to the engine
        # (it restarts the QP's MSN count and clears its ERROR state there).
        owners = (core, engine)
        for name, member in regs.signature.members.items():
            if name == "bus":
                continue
            if name == "connect":
                m.submodules.connect_fork = fork = StreamFork(member.signature.members["payload"].shape, 2)
                wiring.connect(m, regs.connect, fork.i)
                wiring.connect(m, fork.o[0], core.connect)
                wiring.connect(m, fork.o[1], engine.connect)
                continue
            if name in self._board_counters:
                m.d.comb += getattr(regs, name).eq(getattr(self, name))
                continue
            owner = next(o for o in owners if name in o.signature.members)
            port, inner = getattr(regs, name), getattr(owner, name)
            if name == "plane_up":
                m.d.comb += inner.eq(port & self.link_up)
            elif member.is_signature:
                wiring.connect(m, port, inner)
            elif member.flow == Out:
                m.d.comb += inner.eq(port)
            else:
                m.d.comb += port.eq(inner)
        return m
