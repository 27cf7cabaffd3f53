"""Ethernet port: one plane of the NIC on a 1 Gb/s GMII-style PHY interface.

The NIC core (:class:`~mrcnic.hdl.nic.MrcNic`) sends and receives whole Ethernet frames without FCS on
its per-plane ``m_axis[p]`` / ``s_axis[p]`` (:class:`~mrcnic.hdl.stream.AxiStreamSignature`, in the core
clock domain). This block is the rest of the plane's link: clock-domain crossing, width conversion, the
store-and-forward buffers and the MAC (IEEE Std 802.3-2022 clauses 3 and 4 over the GMII of clause 35).

::

    core domain              │ tx domain (125 MHz, local)
    s_axis ► CDC FIFO ───────┼─► ByteSerializer ► FIFO ► TxBuffer (ring) ► [IcrcAppender] ► TxMac ─► gmii.txd
                             │                                        │ status
    counters ◄ PortCounters ◄┼── AsyncFIFO ◄── {sent, dropped} ◄──────┘
                      ▲      │ rx domain (125 MHz, from the PHY)
                      └──────┼── AsyncFIFO ◄── RxBuffer status ◄───────────────────────┐
    m_axis ◄ CDC FIFO ◄──────┼── BytePacker ◄ FIFO ◄ [IcrcChecker ◄ Skid] ◄ RxBuffer ◄─┴ RxMac ◄── gmii.rxd

Members:

* ``s_axis``: In(:class:`~mrcnic.hdl.stream.AxiStreamSignature`) frames to send, ``m_axis``: Out, frames
  received (good ones only), both in the core domain: connect them to the core's ``m_axis[p]`` and
  ``s_axis[p]`` with ``wiring.connect``.
* ``gmii``: Out(:class:`~mrcnic.hdl.eth.gmii.GmiiSignature`): ``txd``/``tx_en``/``tx_er`` in the TX
  domain, ``rxd``/``rx_dv``/``rx_er`` in the RX domain; connect to
  :class:`~mrcnic.hdl.eth.rgmii.RgmiiPhy` ``gmii``.
* Counters, Out(32), wrapping, in the core domain: see :mod:`mrcnic.hdl.eth.counters`.

Parameters: ``data_width`` (octets per beat, as the core's), ``max_frame`` (octets with FCS), ``ifg``
(octets), ``tx_buffer_bytes`` / ``rx_buffer_bytes`` (ring sizes, at least ``max_frame``: a power of two,
or whole 2048-octet block RAMs; default the smallest such), ``cdc_depth`` (beats in the RAM of each data
FIFO between the domains, a power of two; :class:`~mrcnic.hdl.cdc_fifo.ClockCrossingFifo` holds two
more), ``core_domain`` / ``tx_domain`` / ``rx_domain`` (clock domain names; the domains are defined
elsewhere: the board's clocking for the core and TX, the PHY interface for RX), ``icrc`` (the port
appends each sent frame's RoCEv2 ICRC after the TX ring and checks each received frame's after the RX
ring, one octet per cycle, :mod:`mrcnic.hdl.eth.octet_icrc`: the core then sends frames without their
ICRC, and ``m_axis.tuser`` is 1 on a received frame's last beat when its ICRC is good).

Behaviour:

* TX runs at line rate when frames are waiting: every frame is whole in the TX ring before it starts,
  and the next one is stored while the current one goes out, so frames follow each other after exactly
  ``ifg`` idle octets (unless the next frame is much longer than the current one and is still being
  stored). ``s_axis.tready`` drops while the ring is full.
* RX never stalls the line: ``m_axis.tready`` low fills the data FIFO and then the RX ring, and frames
  that arrive while the ring is full are dropped whole (``rx_overflow``). Frames already committed in the
  ring are delivered intact, in order.
* Status records cross to the core domain in FIFOs of ``STATUS_DEPTH`` entries that the counters drain
  every core cycle. Frames sent and received make at most one record per 64 octet times; TX drops wait
  for room (keeping one entry free for the MAC), so no record is lost unless the core clock is below
  about 125 MHz / 64.
"""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.hdl import DomainRenamer
from amaranth.lib import fifo, wiring
from amaranth.lib.wiring import In, Out

from ..cdc_fifo import ClockCrossingFifo
from ..skid_buffer import SkidBuffer
from ..stream import AxiStreamSignature, PacketLayout
from .counters import COUNTERS, PortCounters
from .frame import (
    DEFAULT_IFG,
    DEFAULT_MAX_FRAME,
    ByteLayout,
    RxStatusLayout,
    TxStatusLayout,
    check_max_frame,
)
from .gmii import GmiiSignature
from .octet_icrc import ICRC_BYTES, IcrcAppender, IcrcChecker
from .packet_ring import BANK_DEPTH, ring_depth_ok
from .rx_buffer import RxBuffer
from .rx_mac import RxMac
from .tx_buffer import SerialByteLayout, TxBuffer
from .tx_mac import TxMac
from .width import BytePacker, ByteSerializer

__all__ = ["STATUS_DEPTH", "EthernetPort"]

STATUS_DEPTH = 8


def _ring_size(requested: int | None, max_frame: int, name: str) -> int:
    """The ring of ``requested`` octets, or by default the smallest that holds a ``max_frame`` frame: a
    power of two up to one block RAM's worth, whole block RAMs above (6 KiB, three RAMs, for 4242-octet
    frames, not 8 KiB in four)."""
    if requested is None:
        fits = 1 << (max_frame - 1).bit_length()
        requested = fits if fits <= BANK_DEPTH else -(-max_frame // BANK_DEPTH) * BANK_DEPTH
    if requested < max_frame or not ring_depth_ok(requested):
        raise ValueError(
            f"{name} must be at least max_frame ({max_frame}) and a power of two or a multiple of "
            f"{BANK_DEPTH}, not {requested}"
        )
    return requested


class EthernetPort(wiring.Component):
    def __init__(
        self,
        *,
        data_width: int = 8,
        max_frame: int = DEFAULT_MAX_FRAME,
        ifg: int = DEFAULT_IFG,
        tx_buffer_bytes: int | None = None,
        rx_buffer_bytes: int | None = None,
        cdc_depth: int = 16,
        core_domain: str = "sync",
        tx_domain: str = "eth_tx",
        rx_domain: str = "eth_rx",
        icrc: bool = False,
    ):
        self.data_width = data_width
        self.icrc = icrc
        self.max_frame = check_max_frame(max_frame)
        if ifg < 1:
            raise ValueError(f"ifg must be at least 1, not {ifg}")
        self.ifg = ifg
        self.tx_buffer_bytes = _ring_size(tx_buffer_bytes, max_frame, "tx_buffer_bytes")
        self.rx_buffer_bytes = _ring_size(rx_buffer_bytes, max_frame, "rx_buffer_bytes")
        self.cdc_depth = cdc_depth
        self.core_domain, self.tx_domain, self.rx_domain = core_domain, tx_domain, rx_domain
        super().__init__(
            {
                "s_axis": In(AxiStreamSignature(data_width)),
                "m_axis": Out(AxiStreamSignature(data_width, user_width=int(icrc))),
                "gmii": Out(GmiiSignature()),
                **{name: Out(32) for name in COUNTERS},
            }
        )

    @staticmethod
    def _connect_fifo(m, source, queue, sink):
        m.d.comb += [
            queue.w_data.eq(source.payload),
            queue.w_en.eq(source.valid),
            source.ready.eq(queue.w_rdy),
            sink.payload.eq(queue.r_data),
            sink.valid.eq(queue.r_rdy),
            queue.r_en.eq(sink.ready),
        ]

    def elaborate(self, platform):
        m = Module()
        core, tx, rx = self.core_domain, self.tx_domain, self.rx_domain
        beat = PacketLayout(self.data_width)
        rx_beat = PacketLayout(self.data_width, user_width=int(self.icrc))

        # -- TX: core -> tx domain -> octets -> ring -> MAC ---------------------------------------------
        # The read side runs at 125 MHz, its RAM may be a block RAM anywhere on the chip: a register behind
        # it. That costs a third of the read rate, which the serializer (a beat every ``data_width``
        # octets) does not need unless the beats are single octets.
        m.submodules.tx_fifo = tx_fifo = ClockCrossingFifo(
            beat, self.cdc_depth, w_domain=core, r_domain=tx, ram_register=self.data_width > 1
        )
        m.d.comb += [
            tx_fifo.i.payload.data.eq(self.s_axis.tdata),
            tx_fifo.i.payload.keep.eq(self.s_axis.tkeep),
            tx_fifo.i.payload.last.eq(self.s_axis.tlast),
            tx_fifo.i.valid.eq(self.s_axis.tvalid),
            self.s_axis.tready.eq(tx_fifo.i.ready),
        ]
        serializer = ByteSerializer(self.data_width)
        # With the ICRC appended after the ring, the ring's frames are four octets shorter on the wire.
        ring_frame = self.max_frame - ICRC_BYTES if self.icrc else self.max_frame
        tx_buffer = TxBuffer(depth=self.tx_buffer_bytes, max_frame=ring_frame)
        tx_mac = TxMac(ifg=self.ifg)
        to_tx = DomainRenamer(tx)
        m.submodules.serializer = to_tx(serializer)
        m.submodules.tx_buffer = to_tx(tx_buffer)
        m.submodules.tx_mac = to_tx(tx_mac)
        wiring.connect(m, tx_fifo.o, serializer.i)
        # Short FIFOs on the octet streams keep the ready chains short: their write side's ready is a
        # register, so neither the core-side FIFO nor a ring's read pipeline waits on the other side.
        m.submodules.tx_octets = tx_octets = to_tx(
            fifo.SyncFIFOBuffered(width=SerialByteLayout().size, depth=4)
        )
        self._connect_fifo(m, serializer.o, tx_octets, tx_buffer.i)
        if self.icrc:
            m.submodules.icrc_appender = appender = to_tx(IcrcAppender())
            wiring.connect(m, tx_buffer.o, appender.i)
            wiring.connect(m, appender.o, tx_mac.i)
        else:
            wiring.connect(m, tx_buffer.o, tx_mac.i)
        m.d.comb += [
            self.gmii.txd.eq(tx_mac.txd),
            self.gmii.tx_en.eq(tx_mac.tx_en),
            self.gmii.tx_er.eq(tx_mac.tx_er),
        ]

        # -- RX: MAC -> ring -> beats -> core domain ----------------------------------------------------
        rx_mac = RxMac(max_frame=self.max_frame)
        rx_buffer = RxBuffer(depth=self.rx_buffer_bytes)
        packer = BytePacker(self.data_width, user_width=int(self.icrc))
        to_rx = DomainRenamer(rx)
        m.submodules.rx_mac = to_rx(rx_mac)
        m.submodules.rx_buffer = to_rx(rx_buffer)
        m.submodules.packer = to_rx(packer)
        m.d.comb += [
            rx_mac.rxd.eq(self.gmii.rxd),
            rx_mac.rx_dv.eq(self.gmii.rx_dv),
            rx_mac.rx_er.eq(self.gmii.rx_er),
        ]
        wiring.connect(m, rx_mac.o, rx_buffer.i)
        user = int(self.icrc)
        m.submodules.rx_octets = rx_octets = to_rx(
            fifo.SyncFIFOBuffered(width=ByteLayout(user).size, depth=4)
        )
        if self.icrc:
            # In front of the short FIFO, whose write side's ready is a register: the checker's ready does
            # not lengthen the packer's ready chain (ECPIX-5, 2026-12-06: 134 MHz behind the FIFO).
            m.submodules.icrc_checker = checker = to_rx(IcrcChecker())
            # And a register slice behind the ring: its read pipeline shifts on its consumer's ready,
            # which was the checker's (Colorlight, 2026-12-07: 12.7 ns, the RX clock's critical path).
            m.submodules.rx_slice = rx_slice = to_rx(SkidBuffer(ByteLayout()))
            wiring.connect(m, rx_buffer.o, rx_slice.i)
            wiring.connect(m, rx_slice.o, checker.i)
            self._connect_fifo(m, checker.o, rx_octets, packer.i)
        else:
            self._connect_fifo(m, rx_buffer.o, rx_octets, packer.i)
        m.submodules.rx_fifo = rx_fifo = ClockCrossingFifo(
            rx_beat, self.cdc_depth, w_domain=rx, r_domain=core
        )
        wiring.connect(m, packer.o, rx_fifo.i)
        rx_out = rx_fifo.o.payload
        m.d.comb += [
            self.m_axis.tdata.eq(rx_out.data),
            self.m_axis.tkeep.eq(rx_out.keep),
            self.m_axis.tlast.eq(rx_out.last),
            self.m_axis.tvalid.eq(rx_fifo.o.valid),
            rx_fifo.o.ready.eq(self.m_axis.tready),
        ]
        if self.icrc:
            m.d.comb += self.m_axis.tuser.eq(rx_out.user)

        # -- Status records -> counters in the core domain ----------------------------------------------
        m.submodules.counters = counters = DomainRenamer(core)(PortCounters())
        for name in COUNTERS:
            m.d.comb += getattr(self, name).eq(getattr(counters, name))

        tx_layout = TxStatusLayout()
        m.submodules.tx_status_fifo = tx_status = fifo.AsyncFIFO(
            width=tx_layout.size, depth=STATUS_DEPTH, w_domain=tx, r_domain=core
        )
        tx_record = Signal(tx_layout)
        m.d.comb += [
            tx_record.sent.eq(tx_mac.status.valid),
            tx_record.dropped.eq(tx_buffer.dropped),
            tx_record.length.eq(tx_mac.status.payload.length),
            tx_status.w_data.eq(tx_record),
            tx_status.w_en.eq(tx_mac.status.valid | tx_buffer.dropped),
            counters.tx_status.payload.eq(tx_status.r_data),
            counters.tx_status.valid.eq(tx_status.r_rdy),
            tx_status.r_en.eq(1),
        ]

        # Drops wait for room and leave one entry for the MAC, whose records cannot wait (a record carries
        # both, so a drop and a MAC record in one cycle are one write). A register, so the TX buffer's
        # ready starts at flip-flops: it sees the level of two cycles before (``w_level`` is a register
        # that leaves out the write of its cycle), after which at most two more records were written.
        m.d[tx] += tx_buffer.drop_ok.eq(tx_status.w_level < STATUS_DEPTH - 3)

        m.submodules.rx_status_fifo = rx_status = fifo.AsyncFIFO(
            width=RxStatusLayout().size, depth=STATUS_DEPTH, w_domain=rx, r_domain=core
        )
        m.d.comb += [
            rx_status.w_data.eq(rx_buffer.status.payload),
            rx_status.w_en.eq(rx_buffer.status.valid),
            counters.rx_status.payload.eq(rx_status.r_data),
            counters.rx_status.valid.eq(rx_status.r_rdy),
            rx_status.r_en.eq(1),
        ]

        return m
