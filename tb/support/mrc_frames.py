"""MRC frames for the ICRC tests: random WRITEs in SRv6 and single-IPv6 mode, SRHs, frames with a
covered byte flipped, tiny and truncated frames, and the Python model of the receive side's ICRC verdict
(used by the RX frame buffer's and the Ethernet port's ICRC tests)."""

from __future__ import annotations

import zlib

from mrcnic import wire
from mrcnic.hdl.icrc import skip_for
from mrcnic.wire.examples import example_addressing, example_frames
from mrcnic.wire.icrc import ICRC_MASKED_OFFSETS, ICRC_PREFIX, ICRC_RESIDUE, mask_variant_fields

MASKS = dict(ICRC_MASKED_OFFSETS)


# -- frames ---------------------------------------------------------------------------------------------
def random_write(rng, srv6: bool, payload_max: int = 300, payload_len: int | None = None):
    op = rng.choice([op for op in wire.Opcode if op.is_write])
    ev = rng.getrandbits(32)
    frame = wire.data_frame(
        example_addressing(srv6, ev=ev),
        ev=ev,
        opcode=op,
        dest_qp=rng.randrange(3, 1 << 24),
        psn=rng.getrandbits(24),
        msn=rng.getrandbits(16),
        rqmsn=rng.getrandbits(16),
        va=rng.getrandbits(64),
        rkey=rng.getrandbits(32),
        dma_length=rng.getrandbits(32),
        payload=rng.randbytes(rng.randrange(payload_max + 1) if payload_len is None else payload_len),
        imm=rng.getrandbits(32) if op.has_immediate else None,
        timestamp=rng.choice([None, rng.getrandbits(16)]),
        rtx=rng.random() < 0.5,
        ack_req=rng.random() < 0.5,
        ecn=rng.randrange(4),
    )
    frame.ip.flow_label = rng.getrandbits(20)  # masked fields: must not matter
    frame.udp.checksum = rng.getrandbits(16)
    return frame


def with_srh(frame, rng, units: int):
    frame.srh = wire.Srh(segments_left=rng.randrange(4), last_entry=rng.randrange(4))
    frame.srh_segments = rng.randbytes(8 * units)
    return frame


def flip_covered_byte(rng, raw: bytes) -> bytes:
    """One byte changed in the ICRC coverage, in bits the ICRC does not mask."""
    skip = skip_for(raw)
    while True:
        offset = rng.randrange(len(raw) - skip)
        free_bits = ~MASKS.get(offset, 0) & 0xFF
        if free_bits and skip + offset not in (20, 55):  # keep the coverage itself where it was
            flipped = bytearray(raw)
            flipped[skip + offset] ^= rng.randint(1, 255) & free_bits or free_bits & -free_bits
            return bytes(flipped)


def icrc_ok_model(raw: bytes) -> bool:
    covered = raw[skip_for(raw) :]
    return len(covered) >= 4 and zlib.crc32(ICRC_PREFIX + mask_variant_fields(covered)) == ICRC_RESIDUE


def payload_range(raw: bytes):
    """(offset, length) of the decoded payload of a good frame, else None."""
    try:
        frame = wire.decode(raw, check_icrc=True)
    except wire.WireError:
        return None
    return len(raw) - 4 - len(frame.payload), len(frame.payload)


def mixed_frames(rng, count: int, max_frame_bytes: int):
    """A few of the codec's examples, then one frame of every kind below, then random kinds."""

    def write():
        return random_write(rng, rng.random() < 0.5).encode()

    def srh():
        return with_srh(random_write(rng, True), rng, rng.randrange(0, 9)).encode()

    def flipped():
        src = rng.random()
        good = with_srh(random_write(rng, True), rng, 2) if src < 0.3 else random_write(rng, src < 0.6)
        return flip_covered_byte(rng, good.encode())

    def tiny():
        return rng.randbytes(rng.randint(1, 60))

    def prefix():  # a prefix of a real frame: Next Header 17/41/43 and an SRH length byte
        good = with_srh(random_write(rng, True, 20), rng, rng.randrange(3)).encode()
        return good[: rng.randint(1, 70)]

    def around_max():
        return rng.randbytes(rng.randint(max_frame_bytes - 3, max_frame_bytes + 3))

    def oversize():
        return random_write(rng, rng.random() < 0.5, payload_len=max_frame_bytes - 100).encode()

    big = 5 if max_frame_bytes < 1024 else 0  # long frames: one of each below, more only when cheap
    kinds = [
        (write, 30),
        (srh, 15),
        (flipped, 15),
        (tiny, 15),
        (prefix, 15),
        (around_max, big),
        (oversize, big),
    ]
    examples = [f.encode() for _, f in example_frames(True)] + [f.encode() for _, f in example_frames(False)]
    frames = rng.sample(examples, 4) + [make() for make, _ in kinds]
    makers = [make for make, weight in kinds for _ in range(weight)]
    frames += [rng.choice(makers)() for _ in range(count - len(frames))]
    rng.shuffle(frames)
    return frames
