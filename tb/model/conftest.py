"""Helpers of the model tests: a fake NIC environment and a connected pair of endpoints."""

import heapq

import pytest

from mrcnic.model.endpoint import Endpoint, FabricInfo
from mrcnic.model.memory import BytesSource, MemoryRegion
from mrcnic.model.params import US, Params


class FakeNic:
    """Records control frames, runs scheduled callbacks on demand, counts wake-ups."""

    def __init__(self):
        self.now = 0
        self.heap = []
        self.seq = 0
        self.control = []
        self.woken = 0

    def schedule(self, time, fn, *args):
        self.seq += 1
        heapq.heappush(self.heap, (time, self.seq, fn, args))

    def send_control(self, plane, frame):
        self.control.append((plane, frame))

    def wake(self):
        self.woken += 1

    def advance(self, until):
        while self.heap and self.heap[0][0] <= until:
            time, _, fn, args = heapq.heappop(self.heap)
            self.now = time
            fn(time, *args)
        self.now = until

    def take(self):
        out, self.control = self.control, []
        return out


class Pair:
    """Endpoint A (host 0) sends to endpoint B (host 3) on QP 16; frames are handed over by the test."""

    def __init__(self, params=None, planes=2, uplinks=2, n_evs=8, length=64 * 1024):
        self.params = params or Params(
            mtu=4096,
            base_rtt_ps=8 * US,
            line_rate_bps=200_000_000_000,
            n_evs=n_evs,
            backup_evs=1,
            ev_min_active=2,
        )
        info = FabricInfo(planes=planes, uplinks=uplinks, hosts_per_t0=2)
        self.na, self.nb = FakeNic(), FakeNic()
        self.a = Endpoint(0, self.params, info, self.na, seed=1)
        self.b = Endpoint(3, self.params, info, self.nb, seed=2)
        self.qa = self.a.create_qp(16, 3, 16)
        self.qb = self.b.create_qp(16, 0, 16)
        self.data = bytes((i * 7 + 3) & 0xFF for i in range(length))
        self.region = self.b.register(5, MemoryRegion(0x2000, length + 4096, buffer=True))

    def post(self, length=None, imm=None, offset=0):
        length = len(self.data) if length is None else length
        return self.a.post_write(
            16, 0x2000 + offset, 5, length, BytesSource(self.data[offset : offset + length]), imm=imm
        )

    def send(self, now, planes=0xFF):
        """One transmission opportunity at A; returns the frame or None."""
        out = self.a.next_data(now, planes)
        return None if out is None else out[1]

    def send_all(self, now, planes=0xFF):
        frames = []
        while (f := self.send(now, planes)) is not None:
            frames.append(f)
        return frames


@pytest.fixture
def pair():
    return Pair()


@pytest.fixture
def make_pair():
    """:class:`Pair` itself, for a test that needs other parameters."""
    return Pair
