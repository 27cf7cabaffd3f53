"""The port's ICRC (hdl/eth/octet_icrc.py) on the Amaranth simulator, random stalls on both sides.

* Appender: the codec's frames without their ICRC go in (WRITEs of every opcode and the control frames'
  templates, single-IPv6 and SRv6, SRHs of 0-8 units, variant fields random); out must come the codec's
  frames, ICRC included, and for single-IPv6 frames scapy's RoCEv2 ICRC. Unstalled, a frame of n octets
  takes exactly n + 4 cycles, back to back.
* Checker: the frame buffer's mix (good frames, a covered byte flipped, tiny frames, prefixes of real
  frames that stop inside the IPv6 header or the SRH) plus frames whose variant fields and uncovered
  octets were scrambled; every octet comes out unchanged, and the last one's ``user`` equals the Python
  model's verdict (``support.mrc_frames.icrc_ok_model``, from ``mrcnic.wire.icrc``).
"""

from __future__ import annotations

from eth_reference import new_rng

from mrcnic.hdl.eth.octet_icrc import IcrcAppender, IcrcChecker
from mrcnic.hdl.icrc import skip_for
from mrcnic.wire.examples import example_frames

from support.mrc_frames import MASKS, icrc_ok_model, mixed_frames, random_write, with_srh
from support.pysim import run, stream_get, stream_put


def sent_frames(rng, count: int) -> list[bytes]:
    """Frames a NIC sends (with their ICRC, as the codec encodes them)."""
    frames = [f.encode() for srv6 in (True, False) for _, f in example_frames(srv6)]
    for _ in range(count):
        frame = random_write(rng, rng.random() < 0.5, payload_max=200)
        frame.ip.hop_limit = rng.getrandbits(8)
        frame.bth.resv8 = rng.getrandbits(8)
        if frame.outer is not None and rng.random() < 0.3:
            frame = with_srh(frame, rng, rng.randrange(9))
        frames.append(frame.encode())
    rng.shuffle(frames)
    return frames


def scramble_uncovered(rng, raw: bytes) -> bytes:
    """New values in masked fields and in octets before the coverage (not the two that place it)."""
    skip = skip_for(raw)
    changed = bytearray(raw)
    for offset, mask in MASKS.items():
        if rng.random() < 0.5:
            changed[skip + offset] ^= rng.getrandbits(8) & mask
    for _ in range(3):
        at = rng.randrange(skip)
        if at not in (20, 55):
            changed[at] ^= rng.randint(1, 255)
    return bytes(changed)


def octets_of(frames):
    return [(octet, int(k == len(raw) - 1)) for raw in frames for k, octet in enumerate(raw)]


def test_appender_matches_codec(stall=0.3):
    rng = new_rng("icrc appender")
    frames = sent_frames(rng, 24)
    dut = IcrcAppender()
    expected = octets_of(frames)
    received = []

    async def source(ctx):
        for octet, last in octets_of(raw[:-4] for raw in frames):
            await stream_put(ctx, dut.i, {"data": octet, "last": last}, stall=stall, rng=rng)

    async def sink(ctx):
        for _ in expected:
            payload = await stream_get(ctx, dut.o, stall=stall, rng=rng)
            received.append((payload.data, payload.last))

    run(dut, source, sink, name=f"icrc_appender_{stall}", deadline=1e-3)
    assert received == expected


def test_appender_matches_scapy():
    """Independent decoder: scapy's RoCEv2 ICRC over single-IPv6 frames."""
    from scapy.contrib.roce import BTH
    from scapy.layers.inet6 import IPv6

    rng = new_rng("icrc appender scapy")
    frames = [random_write(rng, False, payload_max=64).encode() for _ in range(8)]
    dut = IcrcAppender()
    out = bytearray()

    async def source(ctx):
        for octet, last in octets_of(raw[:-4] for raw in frames):
            await stream_put(ctx, dut.i, {"data": octet, "last": last})

    async def sink(ctx):
        for _ in range(sum(map(len, frames))):
            out.append((await stream_get(ctx, dut.o)).data)

    run(dut, source, sink, name="icrc_appender_scapy", deadline=1e-3)
    at = 0
    for raw in frames:
        sent = bytes(out[at : at + len(raw)])
        at += len(raw)
        assert sent[-4:] == IPv6(sent[14:])[BTH].compute_icrc(None)


def stream_at_line_rate(dut, frames, total, name):
    """Feed ``frames`` an octet per cycle with the output always ready; the first ``total`` octets out,
    each as (cycle, payload)."""
    out = []

    async def source(ctx):
        for octet, last in octets_of(frames):
            await stream_put(ctx, dut.i, {"data": octet, "last": last})

    async def sink(ctx):
        ctx.set(dut.o.ready, 1)
        cycle = 0
        while len(out) < total:
            *_, valid, payload = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            if valid:
                out.append((cycle, payload))
            cycle += 1

    run(dut, source, sink, name=name, deadline=1e-3)
    return out


def test_appender_line_rate():
    """An octet every cycle: a frame of n octets without ICRC leaves in n + 4 cycles, frames back to back."""
    rng = new_rng("icrc appender rate")
    frames = [random_write(rng, k % 2 == 0, payload_max=100).encode()[:-4] for k in range(6)]
    total = sum(len(raw) + 4 for raw in frames)
    cycles = [c for c, _ in stream_at_line_rate(IcrcAppender(), frames, total, "icrc_appender_rate")]
    assert cycles == list(range(cycles[0], cycles[0] + total))


def test_checker_verdicts(stall=0.3):
    rng = new_rng("icrc checker")
    frames = mixed_frames(rng, 60, 4096 + 256)
    frames += [scramble_uncovered(rng, raw) for raw in sent_frames(rng, 12)]
    # Frames that end where the coverage restarts or begins: at the Next Header (octet 20) of an SRv6
    # frame and of one with an SRH, and around octets 54-55, each followed by a good frame. (The register
    # then holds the prefix's value, which equals the CRC residue: such a frame once passed; and a frame
    # ending at octet 20 or 55 once left its coverage start to the next frame.)
    srv6, srh = random_write(rng, True).encode(), with_srh(random_write(rng, True), rng, 1).encode()
    rng.shuffle(frames)
    for raw in (srv6, srh):
        for n in (20, 21, 22, 54, 55, 56, 57):
            at = rng.randrange(len(frames) + 1)
            frames[at:at] = [raw[:n], random_write(rng, rng.random() < 0.5, payload_max=40).encode()]
    dut = IcrcChecker()
    expected = [
        (octet, last, int(icrc_ok_model(raw)) if last else None)
        for raw in frames
        for octet, last in octets_of([raw])
    ]
    assert sum(1 for *_, ok in expected if ok) >= 20 and sum(1 for *_, ok in expected if ok == 0) >= 15
    received = []

    async def source(ctx):
        for octet, last, _ in expected:
            await stream_put(ctx, dut.i, {"data": octet, "last": last}, stall=stall, rng=rng)

    async def sink(ctx):
        for _ in expected:
            payload = await stream_get(ctx, dut.o, stall=stall, rng=rng)
            received.append((payload.data, payload.last, payload.user if payload.last else None))

    run(dut, source, sink, name=f"icrc_checker_{stall}", deadline=5e-3)
    assert received == expected


def test_checker_line_rate():
    """An octet every cycle in, an octet every cycle out, frames back to back, each with its verdict."""
    rng = new_rng("icrc checker rate")
    frames = [random_write(rng, k % 2 == 0, payload_max=100).encode() for k in range(6)]
    frames[3] = frames[3][:-1] + bytes([frames[3][-1] ^ 1])  # one bad ICRC
    total = sum(len(raw) for raw in frames)
    out = stream_at_line_rate(IcrcChecker(), frames, total, "icrc_checker_rate")
    assert [c for c, _ in out] == list(range(out[0][0], out[0][0] + total))
    assert bytes(p.data for _, p in out) == b"".join(frames)
    assert [p.user for _, p in out if p.last] == [1, 1, 1, 0, 1, 1]
