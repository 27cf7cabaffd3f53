"""One frame of every MRC packet type, with valid lengths and ICRC: `mrcnic wire example`.

The two NICs are host 0 and host 5 of a two-tier Clos plane (different T0 switches), locator
``fcbb:bb00::/32``; data packets travel on plane 1 through T1 number 3.
"""

from __future__ import annotations

from .build import Addressing, control_frame, data_frame
from .constants import (
    ENDPOINT_QPN,
    AethSyndrome,
    Dscp,
    Ecn,
    EndpointOp,
    NackReason,
    Opcode,
    SackVerdict,
)
from .frame import Frame
from .headers import Aeth, CcState, Eeth, Erth, Neth, Peth, Seth, ip6, mac
from .usid import RouteTemplate, make_ev, port_address

__all__ = ["EXAMPLE_LOCATOR", "example_addressing", "example_frames"]

EXAMPLE_LOCATOR = 0xFCBBBB00


def example_addressing(srv6: bool = True, *, reverse: bool = False, ev: int = 0) -> Addressing:
    a, b = (0, 5), (5, 0)
    src, dst = (b, a) if reverse else (a, b)
    hosts_per_t0 = 4
    plane = (ev >> 29) & 7
    addr = Addressing(
        src_mac=mac(f"02:00:00:00:{plane:02x}:{src[0]:02x}"),
        dst_mac=mac(f"02:00:00:ff:{plane:02x}:{src[0] // hosts_per_t0:02x}"),
        src_gid=ip6(f"fd00::{src[0] + 1:x}"),
        dst_gid=ip6(f"fd00::{dst[0] + 1:x}"),
    )
    if srv6:
        route = RouteTemplate.for_clos(
            EXAMPLE_LOCATOR, src[0] // hosts_per_t0, dst[0] // hosts_per_t0, dst[0]
        )
        addr.outer_src = port_address(EXAMPLE_LOCATOR, plane, src[0])
        addr.outer_dst = route.destination(ev)
    return addr


def example_frames(srv6: bool = True) -> list[tuple[str, Frame]]:
    """(name, frame) for every packet type; data frames carry a 100-byte patterned payload."""
    ev = make_ev(plane=1, uplink=3, salt=0x1234)
    fwd = example_addressing(srv6, ev=ev)
    rev = example_addressing(srv6, reverse=True, ev=ev)
    qp_a, qp_b = 0x11, 0x22
    pmtu = 256
    common = dict(dest_qp=qp_b, rkey=0xA5A50001, timestamp=0x3F21)
    frames: list[tuple[str, Frame]] = []
    # Message 7: 612 bytes in three packets; message 8: 356 bytes with immediate (its last packet
    # shown); messages 9 and 10: one packet each. PMTU 256.
    # (name, opcode, psn, msn, rqmsn, message VA, message length, packet index in message, extra)
    writes = [
        ("write_first", Opcode.WRITE_FIRST, 100, 7, 1, 0x1000_0000, 612, 0, {}),
        ("write_middle", Opcode.WRITE_MIDDLE, 101, 7, 1, 0x1000_0000, 612, 1, {}),
        ("write_last", Opcode.WRITE_LAST, 102, 7, 1, 0x1000_0000, 612, 2, {}),
        ("write_last_imm", Opcode.WRITE_LAST_IMM, 104, 8, 2, 0x1000_1000, 356, 1, {"imm": 0xC0FFEE01}),
        ("write_only", Opcode.WRITE_ONLY, 105, 9, 2, 0x1000_2000, 100, 0, {}),
        ("write_only_imm", Opcode.WRITE_ONLY_IMM, 106, 10, 3, 0x1000_3000, 100, 0, {"imm": 0xC0FFEE02}),
    ]
    for name, op, psn, msn, rqmsn, base, length, k, extra in writes:
        size = min(pmtu, length - k * pmtu)
        payload = bytes((k * pmtu + i) & 0xFF for i in range(size))
        frame = data_frame(
            fwd,
            ev=ev,
            opcode=op,
            psn=psn,
            msn=msn,
            rqmsn=rqmsn,
            va=base + k * pmtu,
            dma_length=length,
            payload=payload,
            **common,
            **extra,
        )
        frames.append((name, frame))
    # The middle packet again, retransmitted on another path (another T1 of the same plane).
    retx_ev = make_ev(plane=1, uplink=5, salt=0x0777)
    retransmit = data_frame(
        example_addressing(srv6, ev=retx_ev),
        ev=retx_ev,
        opcode=Opcode.WRITE_MIDDLE,
        psn=101,
        msn=7,
        rqmsn=1,
        va=0x1000_0000 + pmtu,
        dma_length=612,
        payload=frames[1][1].payload,
        rtx=True,
        **common,
    )
    frames.append(("write_retransmit", retransmit))
    frames.append(
        (
            "ack",
            control_frame(
                rev,
                ev=ev,
                opcode=Opcode.ACK,
                dest_qp=qp_a,
                psn=106,
                headers=[Aeth(syndrome=AethSyndrome.ACK, msn=10)],
            ),
        )
    )
    frames.append(
        (
            "sack",
            control_frame(
                rev,
                ev=ev,
                opcode=Opcode.SACK,
                dest_qp=qp_a,
                psn=0,
                headers=[
                    Seth(
                        m=SackVerdict.SKIP_ONCE,
                        ack_psn_offset=5,
                        entropy=ev,
                        spdcid=qp_b,
                        dpdcid=qp_a,
                        cack_psn=99,
                        sack_offset=-3,
                        sack_bitmap=0b1_0110_1111,  # base 96: PSNs 96-99 (<= cack), 101, 102, 104
                    ),
                    CcState(tx_timestamp=0x3F21, ooo_count=3, rcvd_bytes=4),
                ],
            ),
        )
    )
    frames.append(
        (
            "nack",
            control_frame(
                rev,
                ev=ev,
                opcode=Opcode.NACK,
                dest_qp=qp_a,
                headers=[
                    Neth(
                        nack_reason=NackReason.TRIMMED,
                        entropy=ev,
                        spdcid=qp_b,
                        dpdcid=qp_a,
                        nack_psn=101,
                        tx_timestamp=0x3F21,
                    )
                ],
            ),
        )
    )
    frames.append(
        (
            "probe",
            control_frame(
                fwd,
                ev=ev,
                opcode=Opcode.PROBE,
                dest_qp=qp_b,
                dscp=Dscp.TRIMMABLE,
                ecn=Ecn.ECT0,
                headers=[Peth(probe_id=0x0042, spdcid=qp_a, dpdcid=qp_b, tx_timestamp=0x3F30)],
            ),
        )
    )
    frames.append(
        (
            "probe_reply",
            control_frame(
                rev,
                ev=ev,
                opcode=Opcode.SACK,
                dest_qp=qp_a,
                headers=[
                    Seth(
                        pr=1,
                        ack_psn_offset=0x0042,
                        entropy=ev,
                        spdcid=qp_b,
                        dpdcid=qp_a,
                        cack_psn=106,
                        sack_offset=-2,
                        sack_bitmap=0b111,  # base 104 = align8_down(cack + 1); <= cack set
                    ),
                    CcState(tx_timestamp=0x3F30, rcvd_bytes=34),
                ],
            ),
        )
    )
    frames.append(
        (
            "port_status_update",
            control_frame(
                fwd,
                ev=ev,
                opcode=Opcode.ENDPOINT_REQUEST,
                dest_qp=ENDPOINT_QPN,
                psn=0x0007,
                headers=[
                    Erth(op=EndpointOp.PORT_STATUS_UPDATE, port_status_mask=0b1101, tx_timestamp=0x3F40)
                ],
            ),
        )
    )
    frames.append(
        (
            "ev_probe",
            control_frame(
                fwd,
                ev=ev,
                opcode=Opcode.ENDPOINT_REQUEST,
                dest_qp=ENDPOINT_QPN,
                psn=0x0008,
                headers=[Erth(op=EndpointOp.EV_PROBE, port_status_mask=0b1111, tx_timestamp=0x3F41)],
            ),
        )
    )
    frames.append(
        (
            "ev_probe_response",
            control_frame(
                rev,
                ev=ev,
                opcode=Opcode.ENDPOINT_RESPONSE,
                dest_qp=ENDPOINT_QPN,
                psn=0x0008,
                headers=[
                    Eeth(
                        op=EndpointOp.EV_PROBE, port_status_mask=0b1111, service_time=312, tx_timestamp=0x3F41
                    )
                ],
            ),
        )
    )
    return frames
