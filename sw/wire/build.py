"""Builders for every MRC packet type, from the addressing of one direction of a connection.

Ref: docs/protocol.md §2-§7. These fill in the fields a sender owns; lengths and the ICRC are set by
:meth:`Frame.encode`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .constants import ENDPOINT_QPN, IPPROTO_IPV6, IPPROTO_UDP, Dscp, Ecn, Opcode
from .frame import Frame
from .headers import Bth, Ethernet, Header, ImmDt, Ipv6, Meth, Reth, Tseth, Udp

__all__ = ["Addressing", "control_frame", "data_frame"]


@dataclass
class Addressing:
    """Addresses of one direction of a connection.

    ``outer_dst`` set means SRv6 mode: ``outer_src``/``outer_dst`` go into the outer IPv6 header
    (plane port address / uSID container) and the GIDs into the inner one. ``None`` means the
    single-IPv6 mode: the GIDs are the only IPv6 addresses.
    """

    src_mac: int
    dst_mac: int
    src_gid: int
    dst_gid: int
    outer_src: int | None = None
    outer_dst: int | None = None
    hop_limit: int = 64


def _frame(
    addr: Addressing,
    *,
    ev: int,
    opcode: Opcode,
    dest_qp: int,
    psn: int,
    ext: list[Header],
    dscp: int,
    ecn: int,
) -> Frame:
    ip = Ipv6(dscp=dscp, ecn=ecn, src=addr.src_gid, dst=addr.dst_gid, hop_limit=addr.hop_limit)
    outer = None
    if addr.outer_dst is not None:
        outer = Ipv6(
            dscp=dscp,
            ecn=ecn,
            next_header=IPPROTO_IPV6,
            hop_limit=addr.hop_limit,
            src=addr.outer_src or 0,
            dst=addr.outer_dst,
        )
        ip.next_header = IPPROTO_UDP
    frame = Frame(
        eth=Ethernet(dst=addr.dst_mac, src=addr.src_mac),
        ip=ip,
        udp=Udp(),
        bth=Bth(opcode=opcode, dest_qp=dest_qp, psn=psn),
        ext=ext,
        outer=outer,
    )
    frame.set_ev(ev)
    return frame


def data_frame(
    addr: Addressing,
    *,
    ev: int,
    opcode: Opcode,
    dest_qp: int,
    psn: int,
    msn: int,
    rqmsn: int,
    va: int,
    rkey: int,
    dma_length: int,
    payload: bytes,
    imm: int | None = None,
    timestamp: int | None = 0,
    rtx: bool = False,
    ack_req: bool = False,
    dscp: int | None = None,
    ecn: int = Ecn.ECT0,
) -> Frame:
    """An RDMA WRITE packet (any of the six WRITE opcodes)."""
    opcode = Opcode(opcode)
    if not opcode.is_write:
        raise ValueError(f"{opcode.name} is not a WRITE opcode")
    if opcode.has_immediate != (imm is not None):
        raise ValueError(f"{opcode.name} {'needs' if opcode.has_immediate else 'takes no'} immediate data")
    ext: list[Header] = [Meth(rqmsn=rqmsn, msn=msn)]
    if timestamp is not None:
        ext.append(Tseth(tx_timestamp=timestamp))
    ext.append(Reth(va=va, rkey=rkey, dma_length=dma_length))
    if imm is not None:
        ext.append(ImmDt(imm=imm))
    if dscp is None:
        dscp = Dscp.TRIMMABLE_RETX if rtx else Dscp.TRIMMABLE
    frame = _frame(addr, ev=ev, opcode=opcode, dest_qp=dest_qp, psn=psn, ext=ext, dscp=dscp, ecn=ecn)
    frame.bth.ts = timestamp is not None
    frame.bth.rtx = rtx
    frame.bth.ack_req = ack_req
    frame.payload = bytes(payload)
    return frame


def control_frame(
    addr: Addressing,
    *,
    ev: int,
    opcode: Opcode,
    headers: list[Header],
    dest_qp: int = ENDPOINT_QPN,
    psn: int = 0,
    dscp: int = Dscp.CONTROL,
    ecn: int = Ecn.NOT_ECT,
) -> Frame:
    """An ACK, SACK, NACK, reliability probe or endpoint request/response."""
    opcode = Opcode(opcode)
    if opcode.is_write:
        raise ValueError(f"{opcode.name} is a data opcode; use data_frame()")
    return _frame(addr, ev=ev, opcode=opcode, dest_qp=dest_qp, psn=psn, ext=list(headers), dscp=dscp, ecn=ecn)
