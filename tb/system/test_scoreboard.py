"""The system scoreboards catch what they are for: an EV decision the model would not make, a data frame
on a retired EV, a SACK acknowledging a PSN that never arrived or missing one processed before its
trigger, a NACK for a packet that was not trimmed."""

from types import SimpleNamespace

from mrcnic import wire
from mrcnic.hdl.tx.layouts import FeedbackEvent as Ev
from mrcnic.hdl.tx.path_selector import TraceOutcome as T
from mrcnic.model.ev import EvTable
from mrcnic.wire.examples import example_addressing

from system.scoreboard import PathScoreboard, ReceiveModel, SackScoreboard

N, PLANES = 8, 4
ALL_UP = (1 << PLANES) - 1


def _table(backups=1):
    return EvTable(N, PLANES, 4, seed=7, backups=backups, min_active=2)


def _trace(table_before, slot, event, outcome, new_ev=0, plane_up=ALL_UP, ev=None):
    ev = table_before.slots[slot].ev if ev is None else ev
    return SimpleNamespace(
        qp=0, target=slot, ev=ev, event=event, outcome=outcome, new_ev=new_ev, plane_up=plane_up
    )


def test_ev_decisions_follow_the_model():
    sb = PathScoreboard("nic", N, grace_ps=1000)
    table = _table()
    sb.attach(0, table)
    reference = _table()  # the same draw: what the configuration was
    backup = reference.backups[1][0]
    sb.on_trace(_trace(reference, 0, Ev.ECN, T.SKIP), 10)
    sb.on_trace(_trace(reference, 1, Ev.LOSS, T.REPLACED, new_ev=backup), 20)  # plane 1's backup
    sb.on_trace(_trace(reference, 1, Ev.LOSS, T.STALE), 30)  # about the EV that left the slot
    sb.on_trace(_trace(reference, 5, Ev.LOSS, T.RETIRED), 40)  # plane 1 again: no backup left
    sb.on_trace(_trace(reference, 2, Ev.LOSS, T.UNCHANGED, plane_up=ALL_UP & ~4), 50)  # plane 2 down
    assert sb.mismatches == []
    assert [c[3] for c in sb.changes] == ["REPLACED", "RETIRED"]
    # Wrong outcome, wrong replacement EV: both reported.
    sb.on_trace(_trace(reference, 3, Ev.LOSS, T.RETIRED), 60)  # the model replaces (plane 3 backup)
    sb.on_trace(_trace(reference, 6, Ev.LOSS, T.REPLACED, new_ev=backup), 70)  # plane 2's backup instead
    assert len(sb.mismatches) == 2 and "model REPLACED" in sb.mismatches[0]
    # The probed EV of slot 1 comes back to the backups from its reserve target.
    sb.mismatches.clear()
    sb.on_trace(_trace(reference, N + 1 * 1, Ev.PROBE_OK, T.RESTORED, ev=reference.slots[1].ev), 80)
    sb.on_trace(_trace(reference, 5, Ev.PROBE_OK_SKIP, T.RESTORED), 90)
    assert sb.mismatches == []
    assert table.slots[5].skip == 1 and reference.slots[1].ev in table.backups[1]
    sb.check_counters({"path_retired": 4, "path_restored": 2})
    assert sb.mismatches == []
    sb.check_counters({"path_retired": 3, "path_restored": 2})
    assert len(sb.mismatches) == 1


def test_floor_guard_counts_up_planes_only():
    table = EvTable(N, PLANES, 4, seed=3, backups=0, min_active=4)
    sb = PathScoreboard("nic", N, grace_ps=0)
    sb.attach(0, table)
    slots = [s.ev for s in table.slots]
    up = ALL_UP & ~1  # plane 0 down: 6 usable slots on up planes
    sb.on_trace(
        SimpleNamespace(qp=0, target=1, ev=slots[1], event=Ev.LOSS, outcome=T.RETIRED, new_ev=0, plane_up=up),
        1,
    )
    sb.on_trace(
        SimpleNamespace(qp=0, target=2, ev=slots[2], event=Ev.LOSS, outcome=T.RETIRED, new_ev=0, plane_up=up),
        2,
    )
    # 4 usable on up planes now: the next loss would leave 3 < 4
    sb.on_trace(
        SimpleNamespace(qp=0, target=3, ev=slots[3], event=Ev.LOSS, outcome=T.GUARDED, new_ev=0, plane_up=up),
        3,
    )
    assert sb.mismatches == []


def test_data_frames_only_on_usable_evs():
    table = _table(backups=0)
    sb = PathScoreboard("nic", N, grace_ps=1000)
    sb.attach(0, table)
    ev = table.slots[4].ev
    sb.on_data_frame(0, ev, 5)
    sb.on_trace(
        SimpleNamespace(qp=0, target=4, ev=ev, event=Ev.LOSS, outcome=T.RETIRED, new_ev=0, plane_up=ALL_UP),
        100,
    )
    sb.on_data_frame(0, ev, 900)  # chosen before the retirement, still queued: within the grace
    assert sb.mismatches == []
    sb.on_data_frame(0, ev, 1200)
    sb.on_data_frame(0, 0x12345, 1300)  # never a slot
    assert len(sb.mismatches) == 2 and sb.frames_checked == 4


class _Frame:
    def __init__(self, opcode, psn=0, ev=0, trimmed=False, headers=()):
        self.opcode = opcode
        self.bth = SimpleNamespace(psn=psn)
        self.ev, self.trimmed = ev, trimmed
        self.network = SimpleNamespace(dscp=wire.Dscp.TRIMMABLE)
        self.headers = {type(h): h for h in headers}

    def __getitem__(self, kind):
        return self.headers[kind]


def _data(psn, ev, trimmed=False):
    return _Frame(wire.Opcode.WRITE_MIDDLE, psn, ev, trimmed)


def _sack(cack, trigger, ev, received):
    base = max(trigger - 56, cack + 1) & ~7
    bits = sum(1 << (p - base) for p in received if base <= p < base + 64)
    seth = wire.Seth(
        cack_psn=cack % (1 << 24),
        ack_psn_offset=trigger - cack,
        entropy=ev,
        sack_offset=base - cack,
        sack_bitmap=bits,
    )
    return _Frame(wire.Opcode.SACK, headers=[seth])


def test_sacks_are_sound_and_complete():
    start = (1 << 24) - 4  # the PSNs wrap during the test
    sb = SackScoreboard("nic")
    sb.attach(0, start)
    plane_ev = [wire.make_ev(p, 0, p) for p in range(2)]
    psns = [start + i for i in range(8)]
    # plane 0 gets 0, 1, 3, 4; plane 1 gets 2, 6 (5 and 7 lost)
    for i, plane in ((0, 0), (1, 0), (2, 1), (3, 0), (4, 0), (6, 1)):
        sb.on_arrival(0, plane, _data(psns[i] % (1 << 24), plane_ev[plane]), True)
    got = {psns[i] for i in (0, 1, 2, 3, 4, 6)}
    sb.on_control(0, _sack(psns[4], psns[6], plane_ev[1], got), 1)
    assert sb.mismatches == [] and sb.sacks_checked == 1
    # Sound: claiming 5 (never arrived).
    sb.on_control(0, _sack(psns[4], psns[6], plane_ev[1], got | {psns[5]}), 2)
    assert "never received" in sb.mismatches[-1]
    # Complete: the trigger 4 came after 3 on plane 0, but 3 is claimed missing (cack stays at 2).
    sb.mismatches.clear()
    sb2 = SackScoreboard("nic")
    sb2.attach(0, start)
    for i, plane in ((0, 0), (1, 0), (2, 1), (3, 0), (4, 0)):
        sb2.on_arrival(0, plane, _data(psns[i] % (1 << 24), plane_ev[plane]), True)
    sb2.on_control(0, _sack(psns[2], psns[4], plane_ev[0], {psns[i] for i in (0, 1, 2, 4)}), 3)
    assert len(sb2.mismatches) == 1 and "arrived before the trigger" in sb2.mismatches[0]
    # A trigger that never arrived; a corrupted copy does not count as an arrival.
    sb2.on_arrival(0, 0, _data(psns[5] % (1 << 24), plane_ev[0]), False)
    sb2.on_control(0, _sack(psns[4], psns[5], plane_ev[0], {psns[i] for i in range(5)}), 4)
    assert "never arrived" in sb2.mismatches[-1]


def test_cack_never_goes_back_on_one_port_but_may_across_ports():
    """A SACK waiting behind another frame on one plane port can leave after a newer one on another
    (whole_plane_fails, SEED=2009355216): cack is checked per port."""
    sb = SackScoreboard("nic")
    sb.attach(0, 100)
    plane_ev = [wire.make_ev(p, 0, p) for p in range(2)]
    for psn in range(100, 106):
        sb.on_arrival(0, psn % 2, _data(psn, plane_ev[psn % 2]), True)
    got = set(range(100, 106))
    sb.on_control(0, _sack(104, 104, plane_ev[0], got), 1, plane=1)
    sb.on_control(0, _sack(102, 102, plane_ev[0], got), 2, plane=0)  # older, out of the other port
    assert sb.mismatches == [] and sb.sacks_checked == 2
    sb.on_control(0, _sack(101, 101, plane_ev[1], got), 3, plane=1)  # older than 104, the same port
    assert len(sb.mismatches) == 1 and "cack went back from 104 on the same port" in sb.mismatches[0]


def test_trimmed_nacks_name_a_trimmed_arrival():
    sb = SackScoreboard("nic")
    sb.attach(0, 100)
    sb.on_arrival(0, 0, _data(100, 7, trimmed=True), True)
    for psn, ev in ((100, 7), (101, 7)):
        neth = wire.Neth(nack_reason=wire.NackReason.TRIMMED, nack_psn=psn, entropy=ev)
        sb.on_control(0, _Frame(wire.Opcode.NACK, headers=[neth]), 5)
    assert sb.nacks_checked == 2 and len(sb.mismatches) == 1 and "101" in sb.mismatches[0]


def test_receive_model_places_and_counts_like_the_nic():
    """Three packets of one message with PSNs wrapping, one duplicated; the model's placement and
    counters against a memory and counters that agree, then ones that do not."""
    rm = ReceiveModel("nic", window=256)
    rm.register(0x5A00, 0x1000, 4096)
    first = (1 << 24) - 1
    rm.attach(0, 0x100, 0x101, first)
    payload = bytes(range(256)) * 3
    ops = (wire.Opcode.WRITE_FIRST, wire.Opcode.WRITE_MIDDLE, wire.Opcode.WRITE_LAST)
    frames = [
        wire.data_frame(
            example_addressing(),
            ev=0,
            opcode=op,
            dest_qp=0x100,
            psn=(first + i) % (1 << 24),
            msn=0,
            rqmsn=0,
            va=0x1000 + 256 * i,
            rkey=0x5A00,
            dma_length=768,
            payload=payload[256 * i : 256 * (i + 1)],
        )
        for i, op in enumerate(ops)
    ]
    for i in (2, 0, 1, 0):
        rm.on_arrival(0, frames[i], 10 * i)
    memory = bytearray(8192)
    memory[0x1000 : 0x1000 + 768] = payload
    counters = {"rx_placed": 3, "rx_placed_bytes": 768, "rx_duplicate": 1}
    rm.check(counters, lambda address, length: bytes(memory[address : address + length]))
    assert rm.mismatches == [] and rm.summary() == {"placed": 3, "bytes": 768}
    memory[0x1000 + 300] ^= 1
    rm.check(
        {**counters, "rx_duplicate": 0}, lambda address, length: bytes(memory[address : address + length])
    )
    assert len(rm.mismatches) == 2
