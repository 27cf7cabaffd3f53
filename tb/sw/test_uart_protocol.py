"""The UART bridge protocol codec (mrcnic.driver.uart_protocol) and the ``uart:`` backend over the bridge's
reference model: COBS round trips (zero runs, 254-byte blocks), CRC, every malformed request and answer
rejected with a reason and the bridge's reaction, retried writes performed once, the transport's retries
over a lossy line, URL parsing. Seeds printed (``UART_PROTOCOL_SEED=<seed>`` reruns one)."""

import asyncio
import os
import random
import select
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrcnic.driver import DriverError, InvalidParameter
from mrcnic.driver.uart_backend import UartTransport, open_uart, parse_uart_url
from mrcnic.driver.uart_protocol import (
    MAX_WORDS,
    Answer,
    BridgeModel,
    Deframer,
    FrameError,
    Request,
    Space,
    Status,
    cobs_decode,
    cobs_encode,
    crc32,
    decode_answer,
    decode_request,
    request_frame,
)


def new_rng() -> random.Random:
    seed = int(os.environ.get("UART_PROTOCOL_SEED", random.randrange(1 << 30)))
    print(f"seed {seed} (UART_PROTOCOL_SEED={seed} reproduces)")
    return random.Random(seed)


# -- COBS and CRC -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "data, encoded",
    [
        (b"", b"\x01"),
        (b"\x00", b"\x01\x01"),
        (b"\x00\x00", b"\x01\x01\x01"),
        (b"\x11\x22\x00\x33", b"\x03\x11\x22\x02\x33"),
        (b"\x11\x00\x00\x00", b"\x02\x11\x01\x01\x01"),
        (bytes(range(1, 255)), b"\xff" + bytes(range(1, 255)) + b"\x01"),
        (bytes(range(1, 256)), b"\xff" + bytes(range(1, 255)) + b"\x02\xff"),
        (bytes(range(0, 255)), b"\x01\xff" + bytes(range(1, 255)) + b"\x01"),
    ],
)
def test_cobs_vectors(data, encoded):
    assert cobs_encode(data) == encoded
    assert cobs_decode(encoded) == data


def test_cobs_blocks_of_254_and_zero_runs():
    for n in (253, 254, 255, 508, 509, 1000):
        data = bytes((i % 255) + 1 for i in range(n))
        encoded = cobs_encode(data)
        assert 0 not in encoded and len(encoded) == n + 1 + n // 254
        assert cobs_decode(encoded) == data
    for run in range(1, 600, 37):
        data = b"\x05" + bytes(run) + b"\x06"
        assert cobs_decode(cobs_encode(data)) == data
    # a frame that ends right after a 255 block decodes without the final 0x01 block as well
    assert cobs_decode(b"\xff" + bytes(range(1, 255))) == bytes(range(1, 255))


@given(st.binary(max_size=1200))
@settings(max_examples=300, deadline=None)
def test_cobs_round_trip(data):
    encoded = cobs_encode(data)
    assert 0 not in encoded
    assert len(encoded) <= len(data) + 1 + len(data) // 254
    assert cobs_decode(encoded) == data


@pytest.mark.parametrize(
    "encoded, reason",
    [
        (b"\x03\x11", "wants 2 bytes, 1 left"),
        (b"\x05\x11\x22\x33\x44\x02", "wants 1 bytes, 0 left"),
        (b"\x03\x11\x00", "zero byte at offset 2"),
        (b"\x00", "zero byte at offset 0"),
    ],
)
def test_cobs_rejects_with_reason(encoded, reason):
    with pytest.raises(FrameError, match=reason):
        cobs_decode(encoded)


def test_crc_is_crc32_iso_hdlc():
    assert crc32(b"123456789") == 0xCBF43926  # the catalogue's check value


def test_deframer_splits_streams_in_any_chunks():
    rng = new_rng()
    frames = [cobs_encode(bytes(rng.randrange(4) for _ in range(rng.randrange(1, 40)))) for _ in range(30)]
    stream = b"\x00\x00" + b"\x00".join(frames) + b"\x00\x00\x00"
    deframer, got, i = Deframer(), [], 0
    while i < len(stream):
        n = rng.randrange(1, 20)
        got += deframer.feed(stream[i : i + n])
        i += n
    assert got == frames
    limited = Deframer(limit=8)
    assert limited.feed(bytes(range(1, 30)) + b"\x00") == [bytes(range(1, 9))]


# -- requests ------------------------------------------------------------------------------------------------
def test_request_bytes_exact():
    request = Request(0x1234, True, Space.MEMORY, 0x00010020, 2, bytes.fromhex("0011223344556677"))
    body = bytes.fromhex("3412 03 02 20000100 0011223344556677")
    assert request.body() == body
    wire = request.encode()
    assert wire[-1] == 0 and 0 not in wire[:-1]
    assert cobs_decode(wire[:-1]) == body + crc32(body).to_bytes(4, "little")
    assert decode_request(wire[:-1]) == request
    read = Request(7, False, Space.REGISTERS, 0x40, 16)
    assert read.body() == bytes.fromhex("0700 00 10 40000000") and decode_request(read.encode()[:-1]) == read


@given(
    seq=st.integers(0, 0xFFFF),
    write=st.booleans(),
    space=st.sampled_from(Space),
    count=st.integers(1, MAX_WORDS),
    word_address=st.integers(0, (1 << 14) - MAX_WORDS),
    data=st.randoms(use_true_random=False),
)
@settings(max_examples=200, deadline=None)
def test_request_round_trip(seq, write, space, count, word_address, data):
    payload = bytes(data.choice((0, 0, data.randrange(256))) for _ in range(4 * count)) if write else b""
    request = Request(seq, write, space, 4 * word_address, count, payload)
    assert decode_request(request.encode()[:-1]) == request


def malformed():
    return [
        ("short", cobs_encode(bytes(range(1, 12))), None, "frame of 11 bytes, shorter than a request"),
        ("cobs", b"\x09\x01\x02", None, "COBS"),
        ("crc", request_frame(0x4242, 0, 1, 0, crc=0x12345678), Status.BAD_CRC, "CRC mismatch"),
        ("cmd", request_frame(3, 0x04, 1, 0), Status.BAD_REQUEST, "reserved bits"),
        ("count0", request_frame(3, 0, 0, 0), Status.BAD_REQUEST, "COUNT 0 outside"),
        ("count65", request_frame(3, 0, 65, 0), Status.BAD_REQUEST, "COUNT 65 outside"),
        ("write short", request_frame(3, 1, 2, 0, bytes(4)), Status.BAD_REQUEST, "in 16 bytes, not 20"),
        ("write long", request_frame(3, 1, 1, 0, bytes(8)), Status.BAD_REQUEST, "in 20 bytes, not 16"),
        ("read data", request_frame(3, 0, 1, 0, bytes(4)), Status.BAD_REQUEST, "in 16 bytes, not 12"),
        ("align", request_frame(3, 0, 1, 2), Status.BAD_REQUEST, "not a multiple of 4"),
        ("reg range", request_frame(3, 0, 2, 0xFFFC), Status.BAD_REQUEST, "beyond 16 bits"),
        ("mem range", request_frame(3, 2, 2, 0xFFFF_FFFC), Status.BAD_REQUEST, "beyond 32 bits"),
        ("overlong", request_frame(3, 1, 64, 0, bytes(4 * 70)), Status.BAD_REQUEST, "not 268"),
    ]


@pytest.mark.parametrize("name, wire, status, reason", malformed(), ids=[m[0] for m in malformed()])
def test_malformed_requests_rejected(name, wire, status, reason):
    encoded = wire[:-1] if wire.endswith(b"\x00") else wire
    with pytest.raises(FrameError, match=reason) as caught:
        decode_request(encoded)
    assert caught.value.status == status
    if status is not None:
        assert caught.value.seq == int.from_bytes(cobs_decode(encoded)[:2], "little")
    # the bridge model never touches the bus for it, and answers (or drops) as decode says
    touched = []
    model = BridgeModel(lambda s, a: touched.append(a) or (0, 0), lambda s, a, v: touched.append(a) or 0)
    answer = model.receive(encoded)
    assert not touched
    if status is None:
        assert answer is None and model.counters["bad_frame"] == 1
    else:
        assert decode_answer(answer[:-1]) == Answer(caught.value.seq, status)


def test_every_bit_flip_of_a_request_is_rejected():
    rng = new_rng()
    for request in (
        Request(0x0100, True, Space.MEMORY, 0x200, 3, bytes(rng.randrange(256) for _ in range(12))),
        Request(0xFFFF, False, Space.REGISTERS, 0x10, 1),
    ):
        wire = request.encode()
        for bit in range(8 * len(wire)):
            flipped = bytearray(wire)
            flipped[bit // 8] ^= 1 << (bit % 8)
            for frame in Deframer().feed(bytes(flipped) + b"\x00"):
                with pytest.raises(FrameError):
                    decode_request(frame)


# -- answers -----------------------------------------------------------------------------------------------
def test_answer_bytes_and_round_trip():
    answer = Answer(0xBEEF, Status.OK, 2, bytes.fromhex("0100000002000000"))
    body = bytes.fromhex("efbe 00 02 0100000002000000")
    assert answer.body() == body and decode_answer(answer.encode()[:-1]) == answer
    repeated = Answer(9, Status.SLVERR, 3, repeated=True)
    assert (
        repeated.body() == bytes.fromhex("0900 83 03") and decode_answer(repeated.encode()[:-1]) == repeated
    )


@pytest.mark.parametrize(
    "body, reason",
    [
        (bytes.fromhex("0100 00"), "shorter than 8"),
        (bytes.fromhex("0100 06 00"), "STATUS 0x06 unknown"),
        (bytes.fromhex("0100 40 00"), "STATUS 0x40 unknown"),
        (bytes.fromhex("0100 00 02 01000000"), "DONE 2 carries 4 data bytes"),
    ],
)
def test_malformed_answers_rejected(body, reason):
    with pytest.raises(FrameError, match=reason):
        decode_answer(cobs_encode(body + crc32(body).to_bytes(4, "little")))
    if len(body) >= 4:
        bad_crc = cobs_encode(body + (crc32(body) ^ 1).to_bytes(4, "little"))
        with pytest.raises(FrameError, match="CRC"):
            decode_answer(bad_crc)


# -- the bridge's reference behaviour ---------------------------------------------------------------------
class Bus:
    """Registers (16-bit space: DECERR from 0x100, SLVERR at 0xF0, no answer at 0xF4) and memory."""

    def __init__(self):
        self.words = {Space.REGISTERS: {}, Space.MEMORY: {}}
        self.writes = []  # every word write performed, in order

    def resp(self, space, address):
        if space == Space.REGISTERS and address >= 0x100:
            return 3
        if space == Space.REGISTERS and address == 0xF0:
            return 2
        if space == Space.REGISTERS and address == 0xF4:
            return None
        return 0

    def read(self, space, address):
        return self.resp(space, address), self.words[space].get(address, address * 3 & 0xFFFFFFFF)

    def write(self, space, address, value):
        resp = self.resp(space, address)
        if resp == 0:
            self.words[space][address] = value
            self.writes.append((space, address, value))
        return resp


def test_model_repeats_a_retried_write_once():
    bus = Bus()
    model = BridgeModel(bus.read, bus.write)
    write = Request(5, True, Space.MEMORY, 0x40, 2, bytes(range(8))).encode()[:-1]
    first = decode_answer(model.receive(write)[:-1])
    again = decode_answer(model.receive(write)[:-1])
    assert first == Answer(5, Status.OK, 2) and again == Answer(5, Status.OK, 2, repeated=True)
    assert len(bus.writes) == 2 and model.counters["repeated"] == 1
    # junk and bad frames in between do not make it forget
    assert model.receive(b"\x05\x01\x02") is None
    assert decode_answer(model.receive(write)[:-1]).repeated
    # a performed read does; so does a different write
    model.receive(Request(6, False, Space.REGISTERS, 0, 1).encode()[:-1])
    assert not decode_answer(model.receive(write)[:-1]).repeated and len(bus.writes) == 4
    other = Request(5, True, Space.MEMORY, 0x40, 2, bytes(8)).encode()[:-1]  # same SEQ, other CRC
    assert not decode_answer(model.receive(other)[:-1]).repeated
    # a write that stopped on an error is remembered with its status
    failing = Request(7, True, Space.REGISTERS, 0xE8, 4, bytes(16)).encode()[:-1]
    assert decode_answer(model.receive(failing)[:-1]) == Answer(7, Status.SLVERR, 2)
    assert decode_answer(model.receive(failing)[:-1]) == Answer(7, Status.SLVERR, 2, repeated=True)
    read = Request(8, False, Space.REGISTERS, 0xEC, 4).encode()[:-1]
    assert decode_answer(model.receive(read)[:-1]) == Answer(8, Status.SLVERR, 1, bytes(4))
    timeout = Request(9, False, Space.REGISTERS, 0xF4, 1).encode()[:-1]
    assert decode_answer(model.receive(timeout)[:-1]) == Answer(9, Status.TIMEOUT, 0)


# -- the backend over the model and a lossy line -------------------------------------------------------------
class LossyLine:
    """A byte stream to a :class:`BridgeModel` through a line that flips, drops or adds bytes with the
    given probability each way; time is virtual (``now``), advanced by the line and by idle reads."""

    BYTE_TIME = 1e-5

    def __init__(self, model, rng, error_rate=0.0):
        self.model, self.rng, self.error_rate = model, rng, error_rate
        self.clock = 0.0
        self.to_host = bytearray()
        self.deframer = Deframer()
        self.byte_time = self.BYTE_TIME
        self.faults = 0
        self.drop_answers = 0  # answers to lose on purpose, next first

    def now(self):
        return self.clock

    def sleep(self, seconds):
        self.clock += seconds

    def damage(self, data):
        out = bytearray()
        for byte in data:
            roll = self.rng.random()
            if roll < self.error_rate / 3:
                out.append(byte ^ (1 << self.rng.randrange(8)))
            elif roll < 2 * self.error_rate / 3:
                pass  # lost
            elif roll < self.error_rate:
                out += bytes([byte, self.rng.randrange(256)])  # noise added
            else:
                out.append(byte)
                continue
            self.faults += 1
        return bytes(out)

    def write(self, data):
        self.clock += len(data) * self.BYTE_TIME
        for frame in self.deframer.feed(self.damage(data)):
            answer = self.model.receive(frame)
            if answer is not None and self.drop_answers:
                self.drop_answers -= 1
            elif answer is not None:
                self.to_host += self.damage(answer)

    async def read(self, size):
        await asyncio.sleep(0)
        if not self.to_host:
            self.clock += 1e-3  # nothing came within the poll interval
            return b""
        chunk = bytes(self.to_host[:size])
        del self.to_host[:size]
        self.clock += len(chunk) * self.BYTE_TIME
        return chunk


def test_transport_over_model_registers_memory_and_errors():
    rng = new_rng()
    bus = Bus()
    line = LossyLine(BridgeModel(bus.read, bus.write), rng)
    transport = UartTransport(line, memory_base=0x1000, memory_size=0x1000, seq=0xFFFE)

    async def body():
        await transport.write32(0x10, 0xDEADBEEF)
        assert await transport.read32(0x10) == 0xDEADBEEF
        data = bytes(rng.randrange(256) for _ in range(300))
        await transport.mem_write(0x1003, data)  # unaligned at both ends, several requests
        assert await transport.mem_read(0x1003, 300) == data
        assert await transport.mem_read(0x1000, 3) == (0x1000 * 3).to_bytes(4, "little")[:3]
        await transport.mem_write(0x2001, b"\xaa\xbb")  # inside one word
        assert await transport.mem_read(0x2000, 4) == bytes([0x00, 0xAA, 0xBB, 0x00])  # was 0x6000
        words = await transport.read_words(Space.MEMORY, 0x1000, 130)
        assert b"".join(w.to_bytes(4, "little") for w in words)[3:303] == data
        with pytest.raises(DriverError, match=r"read of 1 word at registers 0x100: AXI DECERR after 0 of 1"):
            await transport.read32(0x100)
        with pytest.raises(DriverError, match=r"write of 4 words at registers 0xe8: AXI SLVERR after 2 of 4"):
            await transport.write_words(Space.REGISTERS, 0xE8, [1, 2, 3, 4])
        with pytest.raises(DriverError, match=r"no answer from the bus after 0 of 1 words"):
            await transport.read32(0xF4)
        assert transport.stats["retries"] == 0
        # a write whose answer is lost is sent again and answered REPEATED, performed once
        line.drop_answers = 1
        before = len(bus.writes)
        await transport.write_words(Space.MEMORY, 0x1800, [7, 8, 9])
        assert bus.writes[before:] == [(Space.MEMORY, 0x1800 + 4 * k, v) for k, v in enumerate((7, 8, 9))]
        assert transport.stats["retries"] == 1 and transport.stats["repeated"] == 1
        # a read whose answer is lost is simply read again
        line.drop_answers = 2
        assert await transport.read_words(Space.MEMORY, 0x1800, 3) == [7, 8, 9]
        assert transport.stats["retries"] == 3 and transport.stats["lost"] == 3

    asyncio.run(body())
    # the SEQ wrapped (0xFFFE + the sync read + ...) and the first request was the sync read of register 0
    assert transport.seq < 0x100


def test_register_blocks_are_one_request_each():
    """``write_block`` / ``read_block`` (the driver's consecutive registers) are one bridge request each,
    split at ``max_words``; the words land in address order and come back byte for byte."""
    rng = new_rng()
    bus = Bus()
    line = LossyLine(BridgeModel(bus.read, bus.write), rng)
    transport = UartTransport(line, max_words=8)
    words = [rng.getrandbits(32) for _ in range(11)]

    async def body():
        await transport.sync()
        before = transport.stats["requests"]
        await transport.write_block(0x20, words)
        assert bus.writes == [(Space.REGISTERS, 0x20 + 4 * k, w) for k, w in enumerate(words)]
        assert await transport.read_block(0x20, 11) == words
        assert transport.stats["requests"] - before == 4  # 8 + 3 words each way
        assert await transport.read_block(0x24, 1) == [words[1]] and await transport.read32(0x28) == words[2]

    asyncio.run(body())
    assert line.model.counters["frames_ok"] == 7  # sync, 2 writes, 2 reads, 2 single reads


def test_transport_retries_over_a_lossy_line_and_writes_once():
    rng = new_rng()
    bus = Bus()
    line = LossyLine(BridgeModel(bus.read, bus.write), rng, error_rate=0.001)
    transport = UartTransport(line, retries=10)
    expected = {}
    host_writes = []

    async def body():
        for _ in range(300):
            address = 4 * rng.randrange(64)
            if rng.random() < 0.5:
                words = [rng.getrandbits(32) for _ in range(rng.randrange(1, 40))]
                await transport.write_words(Space.MEMORY, address, words)
                expected.update({address + 4 * k: w for k, w in enumerate(words)})
                host_writes.extend((address + 4 * k, w) for k, w in enumerate(words))
            else:
                count = rng.randrange(1, 70)
                got = await transport.read_words(Space.MEMORY, address, count)
                assert got == [expected.get(address + 4 * k, (address + 4 * k) * 3) for k in range(count)]

    asyncio.run(body())
    print(f"faults {line.faults}, transport {transport.stats}, bridge {line.model.counters}")
    assert line.faults > 20 and transport.stats["retries"] > 5
    # every word written landed exactly once, in order, even when its answer was lost
    assert [(a, v) for _, a, v in bus.writes] == host_writes
    assert transport.stats["repeated"] <= line.model.counters["repeated"]


def test_transport_gives_a_clear_error_when_nothing_answers():
    class Silent:
        clock = 0.0
        byte_time = 1e-5

        def now(self):
            return self.clock

        def write(self, data):
            self.clock += len(data) * self.byte_time

        def read(self, size):
            self.clock += 1e-3
            return b""

    transport = UartTransport(Silent(), name="/dev/ttyTEST", timeout=0.01, retries=2)
    with pytest.raises(
        DriverError,
        match=r"^UART bridge on /dev/ttyTEST: no answer to a read of 1 word at registers "
        r"0x0 after 3 attempts \(\d+\.\d ms each\)$",
    ):
        asyncio.run(transport.read32(0x40))


def test_uart_urls():
    assert parse_uart_url("uart:///dev/ttyUSB1?baud=1000000&memory=0x10000:64K") == (
        "/dev/ttyUSB1",
        {"baud": 1_000_000, "memory_base": 0x10000, "memory_size": 0x10000},
    )
    assert parse_uart_url("uart:/dev/ttyUSB0") == ("/dev/ttyUSB0", {"baud": 1_000_000})
    assert parse_uart_url("uart:COM3?timeout=0.2&retries=2") == (
        "COM3",
        {"baud": 1_000_000, "timeout": 0.2, "retries": 2},
    )
    for url, reason in (
        ("uart:", "expected uart:<port>"),
        ("uart:/dev/x?speed=9600", "unknown option 'speed'"),
        ("uart:/dev/x?baud=fast", "not a number"),
        ("uart:/dev/x?memory=4096", "expected BASE:SIZE"),
        ("uart:/dev/x?timeout=soon", "expected seconds"),
    ):
        with pytest.raises(InvalidParameter, match=reason):
            parse_uart_url(url)


def test_serial_port_end_to_end_on_a_pty():
    """open_uart on a real tty (a pseudo-terminal, through pyserial), the bridge model on its other end."""
    bus = Bus()
    model = BridgeModel(bus.read, bus.write)
    master, slave = os.openpty()
    stop = threading.Event()

    def bridge():
        deframer = Deframer()
        while not stop.is_set():
            if select.select([master], [], [], 0.02)[0]:
                for frame in deframer.feed(os.read(master, 4096)):
                    answer = model.receive(frame)
                    if answer is not None:
                        os.write(master, answer)

    thread = threading.Thread(target=bridge, daemon=True)
    thread.start()
    try:
        transport = open_uart(f"uart://{os.ttyname(slave)}?baud=115200&memory=0x100:4K&timeout=1")
        assert (transport.memory_base, transport.memory_size) == (0x100, 0x1000)
        assert transport.describe() == f"NIC behind the UART bridge on {os.ttyname(slave)} at 115200 baud"

        async def body():
            await transport.write32(0x20, 0x12345678)
            assert await transport.read32(0x20) == 0x12345678
            await transport.mem_write(0x100, bytes(range(200)))
            assert await transport.mem_read(0x100, 200) == bytes(range(200))
            await transport.close()

        asyncio.run(body())
        # the sync read, two register accesses, two memory requests
        assert transport.stats["retries"] == 0 and model.counters["frames_ok"] == 5
    finally:
        stop.set()
        thread.join()
        os.close(master)
        os.close(slave)
