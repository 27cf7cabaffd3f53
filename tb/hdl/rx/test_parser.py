"""Header parser (Amaranth simulator): every frame gives exactly one record, and the record says what
``mrcnic.wire.decode`` says - the same verdict (reason code) and, for good and trimmed frames, the same
field values. Frames: the codec's examples, random WRITEs, SRH-carrying frames, every malformation class,
every truncation, trimmed packets and garbage; random stalls on both sides."""

import random

import pytest

from mrcnic import wire
from mrcnic.hdl.rx.parser import MAX_SRH_SEGMENT_BYTES, HeaderParser, ParseStatus
from mrcnic.wire.examples import EXAMPLE_LOCATOR, example_addressing, example_frames

from support.mrc_frames import random_write, with_srh
from support.pysim import run, stream_get, stream_put

EXT_VIEWS = {  # codec header -> (presence flag, path of its view in the record)
    wire.Meth: ("meth", ("write", "meth")),
    wire.Tseth: ("tseth", ("write", "tseth")),
    wire.Reth: ("reth", ("write", "reth")),
    wire.ImmDt: ("imm_dt", ("write", "imm_dt")),
    wire.Aeth: ("aeth", ("aeth",)),
    wire.Seth: ("seth", ("sack", "seth")),
    wire.CcState: ("cc_state", ("sack", "cc_state")),
    wire.Neth: ("neth", ("neth",)),
    wire.Peth: ("peth", ("peth",)),
    wire.Erth: ("erth", ("erth",)),
    wire.Eeth: ("eeth", ("eeth",)),
}


# The parser's own addresses in these tests: the examples' receiver GID (fd00::6; the reverse frames go to
# fd00::1) and, as port addresses, the outer destinations of the examples' EV and of one more EV (random
# WRITEs have random EVs, so their outer destinations mostly differ).
GID = wire.ip6("fd00::6")
PLANES = 2
PORT_ADDRESSES = [
    example_addressing(True, ev=wire.make_ev(plane=1, uplink=3, salt=0x1234)).outer_dst,
    wire.port_address(EXAMPLE_LOCATOR, 1, 5),
]


def _for_us(frame, gid=GID, ports=PORT_ADDRESSES):
    """§7.5 row 3, as the validator applied it before the parser did."""
    return frame.ip.dst == gid and (not frame.srv6 or frame.outer.dst in (gid, *ports))


def _beats(raw, w, rng):
    out = []
    for i in range(0, max(len(raw), 1), w):
        chunk = raw[i : i + w]
        out.append(
            {
                "data": int.from_bytes(chunk + rng.randbytes(w - len(chunk)), "little"),
                "keep": (1 << len(chunk)) - 1,
                "last": int(i + w >= len(raw)),
            }
        )
    return out


def _parse(frames, w, *, stall=0.3, seed=0, gaps=None, holds=None, port_addresses=True):
    """Records the parser gives for the byte strings ``frames`` (one simulation, random stalls).
    ``gaps`` / ``holds``: idle cycles before each frame's first beat / before each record is taken, on
    top of the stalls (a list of per-frame counts)."""
    rng = random.Random(seed)
    dut = HeaderParser(data_width=w, planes=PLANES, port_addresses=port_addresses)
    records = []

    async def sender(ctx):
        ctx.set(dut.gid, GID)
        ctx.set(dut.port_address, PORT_ADDRESSES)
        for k, raw in enumerate(frames):
            for _ in range(gaps[k] if gaps else 0):
                await ctx.tick()
            for beat in _beats(raw, w, rng):
                await stream_put(ctx, dut.i, beat, stall=stall, rng=rng)

    async def receiver(ctx):
        local = random.Random(seed + 1)
        for k in range(len(frames)):
            for _ in range(holds[k] if holds else 0):
                await ctx.tick()
            records.append(await stream_get(ctx, dut.header, stall=stall, rng=local))
        for _ in range(20):  # and nothing more
            await ctx.tick()
            assert not ctx.get(dut.header.valid)

    run(dut, sender, receiver, name=f"parser_{w}")
    return records


def _fields(view, header):
    return {f.name: getattr(view, f.name) for f in header.FIELDS}, {
        f.name: getattr(header, f.name) for f in header.FIELDS
    }


def _check(raw, rec, *, skip_long_srh=False):
    try:
        frame = wire.decode(raw)
    except wire.WireError as error:
        status = ParseStatus[error.reason.upper()]
        frame = None
    else:
        status = ParseStatus.OK
    if skip_long_srh and len(raw) > 55 and raw[20] == 43 and raw[55] > MAX_SRH_SEGMENT_BYTES // 8:
        return
    assert rec.status == status, (raw.hex(), rec.status, status)
    assert rec.frame_length == len(raw)
    if frame is None:
        return
    assert rec.srv6 == frame.srv6
    assert rec.trimmed == frame.trimmed
    assert (rec.dscp, rec.ecn) == (frame.network.dscp, frame.network.ecn)
    assert rec.ce == (frame.network.ecn == wire.Ecn.CE)
    assert rec.for_us == _for_us(frame)
    assert (rec.src, rec.flow_label) == (frame.ip.src, frame.ip.flow_label)
    assert rec.sport == frame.udp.sport
    got, want = _fields(rec.bth, frame.bth)
    assert got == want
    for kind, (flag, path) in EXT_VIEWS.items():
        header = frame.get(kind)
        assert getattr(rec.present, flag) == (header is not None), kind.__name__
        if header is not None:
            view = rec.ext
            for step in path:
                view = getattr(view, step)
            got, want = _fields(view, header)
            assert got == want, kind.__name__
    if not frame.trimmed:
        assert rec.payload_offset == len(raw) - 4 - len(frame.payload)
        assert rec.payload_length == len(frame.payload)


def _examples(srv6):
    return [frame.encode() for _, frame in example_frames(srv6)]


@pytest.mark.parametrize("w", [1, 4])
def test_examples_and_random_writes_parse_like_decode(w):
    rng = random.Random(w)
    frames = _examples(True) if w == 1 else _examples(True) + _examples(False)
    frames += [random_write(rng, rng.random() < 0.5, 600).encode() for _ in range(0 if w == 1 else 6)]
    for raw, rec in zip(frames, _parse(frames, w, seed=w), strict=True):
        assert wire.decode(raw)  # all good frames
        _check(raw, rec)


@pytest.mark.parametrize("port_addresses", [True, False])
def test_for_us_compares_both_destinations(port_addresses):
    """§7.5 row 3 in the parser: the inner destination must be the GID; in SRv6 mode the outer one must
    be the GID or (unless built without SRv6) a port address of any plane. Every combination, both
    header stacks; a WRITE and a SACK each."""
    rng = random.Random(21)
    other = wire.ip6("fd00::77")
    cases = []  # (raw, expected)
    for srv6 in (True, False):
        for dst in (GID, other):
            for outer in (GID, *PORT_ADDRESSES, other) if srv6 else (None,):
                for frame in (random_write(rng, srv6, 40), example_frames(srv6)[7][1].copy()):
                    frame.ip.dst = dst
                    if srv6:
                        frame.outer.dst = outer
                    ports = PORT_ADDRESSES if port_addresses else ()
                    cases.append((frame.encode(), _for_us(frame, ports=ports)))
    assert {want for _, want in cases} == {True, False}
    records = _parse([raw for raw, _ in cases], 4, seed=21, port_addresses=port_addresses)
    for (raw, want), rec in zip(cases, records, strict=True):
        assert rec.status == ParseStatus.OK and rec.for_us == want, raw.hex()


def test_srh_is_skipped():
    w = 4
    rng = random.Random(10 + w)
    frames = []
    for units in range(MAX_SRH_SEGMENT_BYTES // 8 + 1):
        frames.append(with_srh(random_write(rng, True, 40), rng, units).encode())
        _, control = rng.choice(example_frames(True)[7:])
        frames.append(with_srh(control.copy(), rng, units).encode())
    # Bad SRHs: routing type, next header, and one longer than the parser skips.
    bad = [
        bytearray(frames[0]),
        bytearray(frames[2]),
        with_srh(random_write(rng, True, 0), rng, 9).encode(),
    ]
    bad[0][54 + 2] = 3
    bad[1][54] = 17
    frames += [bytes(b) for b in bad]
    records = _parse(frames, w, seed=w)
    for raw, rec in zip(frames[:-1], records, strict=False):
        _check(raw, rec)
    assert all(rec.status == ParseStatus.OK for rec in records[: 2 * (MAX_SRH_SEGMENT_BYTES // 8 + 1)])
    assert records[-1].status == ParseStatus.BAD_ROUTING_HEADER  # too long for the parser


def _malformed(srv6):
    """The malformation classes of tb/sw/test_wire.py, on a WRITE."""
    rng = random.Random(srv6)
    good = random_write(rng, srv6, 50).encode()
    ip_at = 14 + (40 if srv6 else 0)
    cases = []

    def case(offset, value):
        raw = bytearray(good)
        raw[offset : offset + len(value)] = value
        cases.append(bytes(raw))

    case(12, b"\x08\x00")
    case(ip_at, bytes([0x40 | (good[ip_at] & 0x0F)]))
    case(14, bytes([0x40 | (good[14] & 0x0F)]))
    case(ip_at + 6, b"\x06")
    case(20, b"\x06")
    case(ip_at + 42, (5000).to_bytes(2, "big"))
    for where in (ip_at + 4, 14 + 4, ip_at + 44):  # IPv6 (inner, outer) and UDP lengths
        for delta in (-1, 1):
            case(where, (int.from_bytes(good[where : where + 2], "big") + delta).to_bytes(2, "big"))
    case(ip_at + 48, b"\x04")
    case(ip_at + 49, bytes([good[ip_at + 49] | 0x01]))
    case(ip_at + 49, bytes([good[ip_at + 49] | 0x10]))
    case(ip_at + 53, b"\x00\x00\x02")
    # Control packets: a write opcode-less endpoint op to a normal QP, bytes after a control header.
    for _, frame in example_frames(srv6)[7:]:
        raw = frame.encode()
        cases.append(raw[: ip_at + 53] + b"\x00\x00\x33" + raw[ip_at + 56 :])
        extra = frame.copy()
        extra.payload = b"\x01\x02"
        cases.append(extra.encode())
    return cases


def test_malformed_frames_get_the_reason_decode_gives():
    frames = _malformed(True) + _malformed(False)
    reasons = set()
    for raw, rec in zip(frames, _parse(frames, 4, seed=1), strict=True):
        _check(raw, rec)
        reasons.add(rec.status)
    assert len(reasons) >= 9


def test_truncated_at_every_byte():
    """Every cut of an SRv6 WRITE with an SRH (every header boundary of the longest stack)."""
    rng = random.Random(20)
    srh = with_srh(random_write(rng, True, 2), rng, 2).encode()
    frames = [srh[:cut] for cut in range(1, len(srh) + 1)]
    for raw, rec in zip(frames, _parse(frames, 4, stall=0, seed=4), strict=True):
        _check(raw, rec)


@pytest.mark.slow
@pytest.mark.parametrize("w", [1, 4])
def test_truncated_at_every_byte_all_stacks(w):
    rng = random.Random(20 + w)
    frames = []
    for srv6 in (True, False) if w == 4 else (True,):
        good = random_write(rng, srv6, 6).encode()
        _, sack = example_frames(srv6)[8]
        frames += [good[:cut] for cut in range(1, len(good) + 1)]
        frames += [sack.encode()[:cut] for cut in range(1, len(sack.encode()) + 1)]
        if srv6:
            srh = with_srh(random_write(rng, True, 2), rng, 2).encode()
            frames += [srh[:cut] for cut in range(1, len(srh) + 1)]
    for raw, rec in zip(frames, _parse(frames, w, stall=0.1, seed=w), strict=True):
        _check(raw, rec)


def _trim(frame, dscp, srv6):
    frame.network.dscp = dscp
    raw = frame.encode()
    return raw[: 14 + (128 if srv6 else 88)]


def test_trimmed_packets_parse_as_headers():
    frames = []
    for srv6 in (True, False):
        frames += _trimmed(srv6)
    records = _parse(frames, 4, seed=3)
    for raw, rec in zip(frames, records, strict=True):
        _check(raw, rec)
    assert sum(rec.trimmed for rec in records) >= len(frames) - 10


def _trimmed(srv6):
    rng = random.Random(30 + srv6)
    frames = []
    for _, frame in example_frames(srv6):
        for dscp in (wire.Dscp.TRIMMED, wire.Dscp.TRIMMED_LASTHOP):
            frames.append(_trim(frame.copy(), dscp, srv6))
    for _ in range(3):
        frames.append(_trim(random_write(rng, srv6, 200), wire.Dscp.TRIMMED, srv6))
    good = random_write(rng, srv6, 200)
    good.network.dscp = wire.Dscp.TRIMMED
    raw = good.encode()
    frames += [raw[:cut] for cut in range(14 + (104 if srv6 else 64), 14 + (130 if srv6 else 90), 3)]
    return frames


def test_garbage_never_hangs_and_mutations_agree_with_decode():
    rng = random.Random(99)
    frames = [rng.randbytes(rng.randrange(0, 260)) for _ in range(12)]
    sources = _examples(True) + _examples(False)
    for _ in range(40):
        raw = bytearray(rng.choice(sources))
        for _ in range(rng.randrange(1, 3)):
            raw[rng.randrange(0, min(len(raw), 160))] = rng.getrandbits(8)
        frames.append(bytes(raw[: rng.choice([len(raw), rng.randrange(1, len(raw) + 1)])]))
    records = _parse(frames, 4, stall=0.2, seed=5)
    assert len(records) == len(frames)
    for raw, rec in zip(frames, records, strict=True):
        _check(raw, rec, skip_long_srh=True)


# -- streaming capture: the tail is captured at its start beat, which the frame's own bytes decide ----


def _ip_at(raw):
    """Offset of the IPv6 header before UDP, as the parser derives it (a too-long SRH counts as empty)."""
    if raw[20] == 41:
        return 54
    if raw[20] == 43:
        return 62 + 8 * (raw[55] if raw[55] <= MAX_SRH_SEGMENT_BYTES // 8 else 0)
    return 14


def _cut(raw, length):
    """``raw[:length]``, with each IPv6 / UDP length field the cut keeps set to agree with the cut, so that
    the truncation checks (not the length checks in front of them) decide the verdict."""
    out = bytearray(raw[:length])
    ip_at = _ip_at(raw)
    # (offset of the 16-bit length field, offset its length counts from)
    fields = [(14 + 4, 54), (ip_at + 4, ip_at + 40), (ip_at + 44, ip_at + 40)]
    for at, origin in fields:
        if at + 2 <= length and length >= origin:
            out[at : at + 2] = (length - origin).to_bytes(2, "big")
    return bytes(out)


_STACKS = ("plain", "outer", *range(MAX_SRH_SEGMENT_BYTES // 8 + 2))  # the last SRH: too long to skip


def _stacks(rng):
    """One WRITE (TS and immediate at random), one control frame and one trimmed WRITE for every header
    stack: no outer header ("plain"), outer IPv6 only ("outer"), SRH of every length the parser skips
    and one it does not (the number of 8-byte units)."""
    controls = {srv6: [frame for _, frame in example_frames(srv6)[7:]] for srv6 in (True, False)}
    out = []
    for stack in _STACKS:
        srv6, units = stack != "plain", stack if isinstance(stack, int) else None
        write = random_write(rng, srv6, 24)
        control = rng.choice(controls[srv6]).copy()
        trimmed = random_write(rng, srv6, 24)
        trimmed.network.dscp = rng.choice([wire.Dscp.TRIMMED, wire.Dscp.TRIMMED_LASTHOP])
        if units is not None:
            write, control, trimmed = (with_srh(f, rng, units) for f in (write, control, trimmed))
        out.append((stack, [f.encode() for f in (write, control, trimmed)]))
    return out


def _capture_frames(rng, *, every_cut):
    """Frames for the capture tests, with their header stack and the cut's region."""
    frames = []
    # Long frames (the capture state must saturate, not wrap), whole and cut inside the payload.
    for stack in ("plain", "outer", 3):
        for _ in range(2):
            frame = random_write(rng, stack != "plain", 0)
            frame.payload = rng.randbytes(rng.randrange(1500, 4000))
            raw = (with_srh(frame, rng, stack) if stack == 3 else frame).encode()
            cut = rng.choice([len(raw), rng.randrange(len(raw) - 1000, len(raw))])
            frames.append((_cut(raw, cut), stack, "long"))
    for stack, raws in _stacks(rng):
        for raw in raws:
            ip_at = _ip_at(raw)
            # The flow label's top bits (in the record) differ from frame to frame, so that a byte of
            # the inner header left from an earlier frame is seen.
            raw = bytearray(raw)
            raw[ip_at + 1] = (raw[ip_at + 1] & 0xF0) | rng.randrange(16)
            raw = bytes(raw)
            if every_cut:  # shorter cuts are alike for every stack; past the tail they change lengths only
                cuts = {*range(50, min(len(raw), ip_at + 100) + 1), len(raw), rng.randrange(1, 50)}
            else:  # the whole frame, around both ends of the SRH and the tail, and a few anywhere
                cuts = {len(raw), 54, 55, 56, 61, 62, ip_at - 1, ip_at, ip_at + 1, ip_at + 47, ip_at + 95}
                cuts |= {ip_at + 96, rng.randrange(1, 54), rng.randrange(ip_at, len(raw))}
                if ip_at > 62:
                    cuts.add(rng.randrange(62, ip_at))
            for cut in sorted(c for c in cuts if 0 < c <= len(raw)):
                region = "srh" if 54 <= cut < ip_at else "tail" if ip_at < cut < ip_at + 96 else "other"
                frames.append((_cut(raw, cut), stack, region))
    return frames


def _check_capture(w, frames, seed):
    """Parse ``frames`` in a random order with random gaps and holds; every record must agree with
    decode(), and the truncation checks inside the SRH and inside the tail must have been reached."""
    rng = random.Random(seed)
    rng.shuffle(frames)
    gaps = [0 if rng.random() < 0.7 else rng.randrange(1, 6) for _ in frames]  # mostly back to back
    holds = [0 if rng.random() < 0.5 else rng.randrange(1, 30) for _ in frames]  # header backpressure
    raws = [raw for raw, _, _ in frames]
    records = _parse(raws, w, stall=0.2, seed=seed, gaps=gaps, holds=holds)
    reached = set()
    for (raw, stack, region), rec in zip(frames, records, strict=True):
        _check(raw, rec, skip_long_srh=True)
        if stack == _STACKS[-1] and len(raw) >= 62:
            assert rec.status == ParseStatus.BAD_ROUTING_HEADER, raw.hex()
        reached.add((stack, region, rec.status))
    for stack in _STACKS[:-1]:
        assert (stack, "tail", ParseStatus.TRUNCATED) in reached, stack
        assert (stack, "tail", ParseStatus.OK) in reached, stack  # a trimmed WRITE cut in its headers
        if isinstance(stack, int):
            assert (stack, "srh", ParseStatus.TRUNCATED) in reached, stack


@pytest.mark.parametrize("w", [8, 16, 32, 64])
def test_streaming_capture_every_srh_length_and_cut(w):
    """Every header stack (no outer header, outer IPv6, SRH of 0..8 units, one too long to skip) at
    widths where the tail starts at one (8) or several (16, 32, 64) lanes of its first beat, and where
    each beat is written a cycle after it is taken (64). Whole frames and cuts inside the SRH, at the
    tail's start, inside and just past the tail, and shorter than the Ethernet + IPv6 headers, plus long
    frames; shuffled so the stacks follow each other at random, mostly back to back, records held."""
    seed = 4000 + w
    print(f"seed {seed}")
    frames = _capture_frames(random.Random(seed), every_cut=False)
    _check_capture(w, frames, seed)


@pytest.mark.slow
@pytest.mark.parametrize("w", [8, 16, 32, 64])
def test_streaming_capture_every_byte(w):
    """As above, with every cut from byte 50 to 100 bytes past the tail's start."""
    seed = 5000 + w
    print(f"seed {seed}")
    frames = _capture_frames(random.Random(seed), every_cut=True)
    _check_capture(w, frames, seed)
