"""The gateware header layouts agree with the Python codec, field by field, in both directions.

Bytes packed by :mod:`mrcnic.wire.headers` are decoded by :func:`mrcnic.hdl.headers.from_wire` in the
Amaranth simulator; and struct values set in gateware come out of :func:`to_wire` as bytes that the
codec unpacks to the same fields.
"""

import random

import pytest
from amaranth import Module, Signal
from amaranth.lib import data
from amaranth.sim import Simulator

from mrcnic import wire
from mrcnic.hdl import headers as gw
from mrcnic.wire.examples import example_frames

CODEC = {kind.NAME: kind for kind in wire.HEADER_TYPES}


def _random_fields(kind, rng):
    values = {}
    for f in kind.FIELDS:
        if f.signed:
            values[f.name] = rng.randrange(-(1 << (f.bits - 1)), 1 << (f.bits - 1))
        else:
            values[f.name] = rng.randrange(1 << f.bits)
    return values


def test_same_headers_and_fields():
    assert set(gw.HEADER_LAYOUTS) == set(CODEC)
    for name, layout in gw.HEADER_LAYOUTS.items():
        gateware = [(n, f.width, f.offset) for n, f in data.Layout.cast(layout)]
        offset, codec = 0, []
        for f in CODEC[name].FIELDS:
            codec.append((f.name, f.bits, offset))
            offset += f.bits
        assert gateware == codec, name
        assert gw.wire_bytes(layout) == CODEC[name].SIZE


@pytest.mark.parametrize("name", sorted(gw.HEADER_LAYOUTS))
def test_codec_bytes_decode_in_gateware_and_back(name):
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    kind, layout = CODEC[name], gw.HEADER_LAYOUTS[name]
    nbits = 8 * kind.SIZE
    wire_in = Signal(nbits)
    decoded = gw.from_wire(layout, wire_in)
    struct_in = Signal(layout)
    wire_out = Signal(nbits)
    m = Module()
    m.d.comb += wire_out.eq(gw.to_wire(struct_in))
    samples = [kind(**_random_fields(kind, rng)) for _ in range(25)]
    # Real headers too: every header of every example frame.
    for srv6 in (True, False):
        for _, frame in example_frames(srv6):
            frame = frame.copy().fix()
            for h in [frame.eth, frame.outer, frame.ip, frame.udp, frame.bth, *frame.ext]:
                if type(h) is kind:
                    samples.append(h)

    async def bench(ctx):
        for header in samples:
            raw = header.pack()
            # Python bytes -> gateware fields
            ctx.set(wire_in, int.from_bytes(raw, "little"))
            for f in kind.FIELDS:
                got = ctx.get(getattr(decoded, f.name))
                assert got == getattr(header, f.name), (name, f.name)
            # gateware fields -> bytes -> Python fields
            ctx.set(struct_in, {f.name: getattr(header, f.name) for f in kind.FIELDS})
            back = ctx.get(wire_out).to_bytes(kind.SIZE, "little")
            assert back == raw, name
            assert kind.unpack(back) == header

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()


def test_nested_layouts_are_refused():
    nested = data.StructLayout({"a": 8, "b": data.StructLayout({"c": 8})})
    with pytest.raises(TypeError):
        gw.from_wire(nested, Signal(16))
