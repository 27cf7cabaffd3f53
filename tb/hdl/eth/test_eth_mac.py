"""TX and RX MAC (hdl/eth/tx_mac.py, rx_mac.py) on the Amaranth simulator, one clock domain.

TX: frames of 1..70 octets and a few longer ones, from a source that offers each frame whole and back to
back (as the TX buffer does) after random idle times; the GMII trace is cut into bursts and each burst
must be 7 x 0x55, 0xD5, the frame padded to 60 octets, its FCS, with ``TX_ER`` never set; the gap
before each burst is exactly ``ifg`` when the frame was waiting, never less; status lengths match.

RX: bursts with preambles of 0..7 octets, good frames, bad FCS, ``RX_ER`` inside the frame, runts, frames
over ``max_frame``, bursts without an SFD and ``RX_ER`` outside frames, separated by 1..13 idle cycles;
every frame with an SFD gives its octets without FCS and one verdict (outcome, length) as the reference.
"""

from __future__ import annotations

import pytest
from eth_reference import PREAMBLE, SFD, fcs, new_rng, outcome, padded, split_bursts, wire

from mrcnic.hdl.eth.frame import RxOutcome
from mrcnic.hdl.eth.rx_mac import RxMac
from mrcnic.hdl.eth.tx_mac import TxMac

from support.pysim import run


@pytest.mark.parametrize("ifg", [12, 3])
def test_tx_mac_framing(ifg):
    rng = new_rng("tx_mac")
    dut = TxMac(ifg=ifg)
    sizes = list(range(1, 71)) + [rng.randint(71, 400) for _ in range(4)]
    rng.shuffle(sizes)
    frames = [rng.randbytes(n) for n in sizes]
    # Idle cycles the source waits before offering each frame (0: it is waiting when the gap ends).
    waits = [rng.choice([0, 0, 0, 1, 7, 40]) for _ in frames]
    trace, statuses = [], []

    async def source(ctx):
        for frame, wait in zip(frames, waits, strict=True):
            if wait:
                await ctx.tick().repeat(wait)
            for k, byte in enumerate(frame):
                ctx.set(dut.i.payload, {"data": byte, "last": k == len(frame) - 1})
                ctx.set(dut.i.valid, 1)
                await ctx.tick().until(dut.i.ready)
            ctx.set(dut.i.valid, 0)
        # Let the last frame and one more gap go out.
        await ctx.tick().repeat(200)

    async def monitor(ctx):
        async for _, _, txd, en, er, sv, sl in ctx.tick().sample(
            dut.txd, dut.tx_en, dut.tx_er, dut.status.valid, dut.status.payload.length
        ):
            trace.append((txd, en, er))
            if sv:
                statuses.append(sl)

    run(dut, source, processes=[monitor], name=f"tx_mac_ifg{ifg}")

    bursts, gaps = split_bursts(trace)
    assert len(bursts) == len(frames)
    for k, ((octets, errors), frame) in enumerate(zip(bursts, frames, strict=True)):
        assert not any(errors), f"frame {k}: TX_ER"
        assert octets == wire(frame), f"frame {k} of {len(frame)} octets"
        if k:
            assert gaps[k] >= ifg, f"gap {gaps[k]} before frame {k}"
            if waits[k] == 0:
                assert gaps[k] == ifg, f"gap {gaps[k]} before frame {k}, which was waiting"
    assert statuses == [len(padded(f)) for f in frames]


def rx_burst(rng, kind: str, max_frame: int, size: int | None = None):
    """(cycles, expected) for one burst: cycles are (rxd, rx_dv, rx_er); expected is None for a burst
    without an SFD, else (body octets after the SFD, error flag). ``size``: octets after the SFD (FCS
    included) for the kinds "good", "runt" and "oversize"; random if None."""
    preamble = PREAMBLE[: rng.randint(0, 7)] + SFD
    error = False
    if kind == "garbage":  # something other than 0x55 or the SFD first: ignored to its end, SFDs too
        octets = PREAMBLE[: rng.randint(0, 3)] + bytes([0x12]) + rng.randbytes(rng.randint(0, 30)) + SFD
        return [(b, 1, 0) for b in octets], None
    if kind == "good":
        frame = rng.randbytes(
            size - 4 if size else rng.choice([rng.randint(60, 100), rng.randint(60, max_frame - 4)])
        )
        body = frame + fcs(frame)
    elif kind == "bad_fcs":
        body = bytearray(rng.randbytes(rng.randint(60, max_frame - 4)))
        body += fcs(bytes(body))
        body[rng.randrange(len(body))] ^= 1 << rng.randrange(8)
        body = bytes(body)
    elif kind == "runt":
        frame = rng.randbytes(size - 4 if size else rng.randint(0, 59))
        body = frame + fcs(frame)
    elif kind == "oversize":
        frame = rng.randbytes(size - 4 if size else rng.randint(max_frame - 3, max_frame + 20))
        body = frame + fcs(frame)
    else:  # "error": a good frame with RX_ER on one octet
        frame = padded(rng.randbytes(rng.randint(14, 100)))
        body = frame + fcs(frame)
        error = True
    flags = [0] * len(body)
    if error:
        flags[rng.randrange(len(body))] = 1
    cycles = [(b, 1, 0) for b in preamble] + [(b, 1, e) for b, e in zip(body, flags, strict=True)]
    return cycles, (bytes(body), error)


def test_rx_mac_verdicts():
    rng = new_rng("rx_mac")
    max_frame = 200
    dut = RxMac(max_frame=max_frame)
    kinds = [("good", None)] * 30 + [("bad_fcs", None)] * 6 + [("runt", None)] * 8 + [("oversize", None)] * 4
    kinds += [("error", None)] * 6 + [("garbage", None)] * 5
    # The length limits exactly: 63 / 64 octets, max_frame / max_frame + 1, and the tiniest bursts.
    kinds += [("runt", 63), ("good", 64), ("good", max_frame), ("oversize", max_frame + 1)]
    kinds += [("runt", n) for n in (4, 5, 6)] + [("runt", 63), ("good", 64)]
    rng.shuffle(kinds)
    cycles, expected = [(0, 0, 0)] * 3, []
    for kind, size in kinds:
        burst, want = rx_burst(rng, kind, max_frame, size)
        cycles += burst
        if want is not None:
            expected.append(want)
        gap = rng.choice([1, 2, 5, 12, 13])
        # RX_ER without RX_DV between frames (false carrier) must be ignored.
        cycles += [(0x0E, 0, int(rng.random() < 0.3)) for _ in range(gap)]
    cycles += [(0, 0, 0)] * 10
    beats = []

    async def drive(ctx):
        for rxd, dv, er in cycles:
            ctx.set(dut.rxd, rxd)
            ctx.set(dut.rx_dv, dv)
            ctx.set(dut.rx_er, er)
            await ctx.tick()

    async def monitor(ctx):
        async for _, _, valid, payload in ctx.tick().sample(dut.o.valid, dut.o.payload):
            if valid:
                beats.append((payload.data, payload.last, payload.outcome, payload.length))

    run(dut, drive, processes=[monitor], name="rx_mac")

    frames, current = [], []
    for data, last, result, length in beats:
        current.append(data)
        if last:
            frames.append((bytes(current), RxOutcome(result), length))
            current = []
    assert not current
    assert len(frames) == len(expected)
    for k, ((octets, result, length), (body, error)) in enumerate(zip(frames, expected, strict=True)):
        want = outcome(body, error, max_frame)
        assert result == want, f"frame {k}: {result} != {want} ({len(body)} octets)"
        assert length == min(max(len(body) - 4, 0), max_frame - 3)
        if 5 <= len(body) <= max_frame:
            assert octets == body[:-4], f"frame {k} octets"
        elif len(body) > max_frame:
            assert octets[:-1] == body[: max_frame - 4]
