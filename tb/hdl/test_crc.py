"""CRC-32 network generator (hdl/crc.py) against zlib.crc32, in Python and in the Amaranth simulator."""

import random
import zlib

import pytest
from amaranth import Module, Signal
from amaranth.sim import Simulator

from mrcnic.hdl.crc import (
    Crc32Network,
    crc32_rewind,
    crc32_rewind_zeros,
    crc32_step,
    crc32_update,
)

MASK32 = 0xFFFFFFFF
WIDTHS = (1, 2, 3, 4, 5, 8, 16, 32, 64)


def zlib_step(register: int, data: bytes) -> int:
    """The raw register after ``data``, via zlib (which inverts the register on entry and exit)."""
    return ~zlib.crc32(data, register ^ MASK32) & MASK32


def test_software_step_matches_zlib():
    rng = random.Random(1)
    for n in range(0, 70):
        register, data = rng.getrandbits(32), rng.randbytes(n)
        assert crc32_step(register, data) == zlib_step(register, data)
    assert ~crc32_step(MASK32, b"123456789") & MASK32 == 0xCBF43926  # the CRC-32 check value


@pytest.mark.parametrize("n_bytes", WIDTHS)
def test_matrix_matches_zlib(n_bytes):
    rng = random.Random(n_bytes)
    network = Crc32Network.update(n_bytes)
    for _ in range(50):
        register, data = rng.getrandbits(32), rng.randbytes(n_bytes)
        assert network.evaluate(register, data) == zlib_step(register, data)


@pytest.mark.parametrize("n_bytes", (1, 2, 4, 8, 32))
def test_rewind_inverts_zero_steps(n_bytes):
    rng = random.Random(n_bytes)
    network = Crc32Network.rewind(n_bytes)
    for _ in range(50):
        register = rng.getrandbits(32)
        assert crc32_step(network.evaluate(register), bytes(n_bytes)) == register
        assert crc32_rewind_zeros(register, n_bytes) == network.evaluate(register)


def test_networks_in_simulator():
    """The emitted XOR networks (full step, data-only, register-only, rewind) for every width at once."""
    m = Module()
    register = Signal(32)
    data = {n: Signal(8 * n, name=f"data{n}") for n in WIDTHS}
    full = {n: Signal(32, name=f"full{n}") for n in WIDTHS}
    data_only = {n: Signal(32, name=f"data_only{n}") for n in WIDTHS}
    register_only = {n: Signal(32, name=f"register_only{n}") for n in WIDTHS}
    rewound = {n: Signal(32, name=f"rewound{n}") for n in (1, 3, 8)}
    for n in WIDTHS:
        m.d.comb += [
            full[n].eq(crc32_update(register, data[n], n)),
            data_only[n].eq(crc32_update(None, data[n], n)),
            register_only[n].eq(crc32_update(register, None, n)),
        ]
    for n, out in rewound.items():
        m.d.comb += out.eq(crc32_rewind(register, n))
    # A wide data part split over byte groups (as the ICRC engine pipelines it) XORs back to the whole.
    split = Signal(32)
    halves = [crc32_update(None, data[16], 16, data_bytes=lanes) for lanes in (range(0, 5), range(5, 16))]
    m.d.comb += split.eq(halves[0] ^ halves[1])

    async def testbench(ctx):
        rng = random.Random(7)
        for _ in range(20):
            reg = rng.getrandbits(32)
            ctx.set(register, reg)
            payload = {n: rng.randbytes(n) for n in WIDTHS}
            for n in WIDTHS:
                ctx.set(data[n], int.from_bytes(payload[n], "little"))
            for n in WIDTHS:
                assert ctx.get(full[n]) == zlib_step(reg, payload[n]), n
                assert ctx.get(data_only[n]) == zlib_step(0, payload[n]), n
                assert ctx.get(register_only[n]) == zlib_step(reg, bytes(n)), n
            for n, out in rewound.items():
                assert zlib_step(ctx.get(out), bytes(n)) == reg
            assert ctx.get(split) == zlib_step(0, payload[16])

    sim = Simulator(m)
    sim.add_testbench(testbench)
    sim.run()
