"""EV table: LFSR, rotation with the xor mask, skips, busy planes, state machine, floor, backups."""

from mrcnic.model.ev import EvState, EvTable, lfsr_step, lfsr_wrap
from mrcnic.wire import ev_fields


def test_lfsr_sequence_and_period():
    seq = [1]
    for _ in range(12):
        seq.append(lfsr_step(seq[-1]))
    assert seq == [
        0x0001,
        0xB400,
        0x5A00,
        0x2D00,
        0x1680,
        0x0B40,
        0x05A0,
        0x02D0,
        0x0168,
        0x00B4,
        0x005A,
        0x002D,
        0xB416,
    ]
    x, period = 1, 0
    while True:
        x = lfsr_step(x)
        period += 1
        if x == 1:
            break
    assert period == 0xFFFF  # maximal length


def table(**kw):
    args = dict(n=8, planes=2, uplinks=4, seed=7, backups=1, min_active=2, lfsr_seed=0xACE1)
    args.update(kw)
    n, planes, uplinks = args.pop("n"), args.pop("planes"), args.pop("uplinks")
    return EvTable(n, planes, uplinks, **args)


def test_slots_layout():
    t = table(n=16, planes=4, uplinks=4)
    for i, slot in enumerate(t.slots):
        plane, uplink, salt = ev_fields(slot.ev)
        assert plane == i % 4 and salt == i and 0 <= uplink < 4
    # uplinks dealt from a deck: each plane's 4 slots cover the 4 uplinks exactly once
    for p in range(4):
        assert sorted(ev_fields(s.ev)[1] for s in t.slots[p::4]) == [0, 1, 2, 3]
    assert [ev_fields(b[0])[0] for b in t.backups] == [0, 1, 2, 3]
    assert table().slots == table().slots  # deterministic for a seed


def test_rotation_order_and_mask_redraw():
    t = table()
    lfsr1 = lfsr_wrap(0xACE1)  # init: seed, then one redraw (16 steps)
    expected = [i ^ (lfsr1 & 7) for i in range(8)]
    lfsr2 = lfsr_wrap(lfsr1)
    expected += [i ^ (lfsr2 & 7) for i in range(8)]
    assert t.candidates(16) == expected
    chosen = [t.select(0b11) for _ in range(16)]
    assert chosen == [t.slots[i].ev for i in expected]
    assert t.lfsr == lfsr_wrap(lfsr2) and t.idx == 0  # redrawn at each of the two wraps
    # each round visits every slot exactly once
    assert sorted(expected[:8]) == list(range(8)) and sorted(expected[8:]) == list(range(8))


def test_skip_counter_and_busy_plane():
    t = table()
    order = t.candidates(8)
    first = t.slots[order[0]]
    t.penalise(first.ev, 2)
    assert first.state == EvState.SKIP and first.skip == 2
    assert t.select(0b11) == t.slots[order[1]].ev  # skipped once: counter 2 -> 1
    assert first.skip == 1
    # busy plane: passed without touching the counter
    t2 = table()
    order = t2.candidates(8)
    busy = t2.slots[order[0]].plane
    other = [i for i in order if t2.slots[i].plane != busy]
    t2.penalise(t2.slots[other[0]].ev, 1)
    chosen = t2.select(1 << (1 - busy))
    assert chosen == t2.slots[other[1]].ev
    assert t2.slots[other[0]].skip == 0
    # no usable plane: nothing after n visits, state unchanged apart from idx wrap
    t3 = table()
    assert t3.select(0) is None and t3.idx == 0


def test_skip_saturates():
    t = table()
    ev = t.slots[0].ev
    for _ in range(10):
        t.penalise(ev, 4)
    assert t.slots[0].skip == 15


def test_mark_bad_backup_floor_and_restore():
    t = table(n=4, planes=2, backups=1, min_active=2)
    ev0 = t.slots[0].ev
    backup = t.backups[0][0]
    assert t.mark_bad(ev0)
    assert t.slots[0].ev == backup and t.slots[0].state == EvState.GOOD
    assert t.probe_list == [ev0] and t.retired == 1
    ev2 = t.slots[2].ev  # plane 0, no backup left: the slot itself goes ASSUMED_BAD
    assert t.mark_bad(ev2)
    assert t.slots[2].state == EvState.ASSUMED_BAD and t.usable_count() == 3
    ev1 = t.slots[1].ev
    t.backups[1].clear()
    assert t.mark_bad(ev1)  # 3 -> 2 usable, still >= floor 2
    assert not t.mark_bad(t.slots[3].ev)  # would leave 1 < 2: unchanged
    assert t.slots[3].state == EvState.GOOD and t.usable_count() == 2
    # ASSUMED_BAD slots are never chosen
    for _ in range(8):
        assert t.select(0b11) in (t.slots[0].ev, t.slots[3].ev)
    t.restore(ev2)
    assert t.slots[2].state == EvState.GOOD and t.restored == 1
    t.restore(ev0)  # its slot was taken by the backup: it becomes a backup itself
    assert t.backups[0] == [ev0]
    t.deny(t.slots[0].ev)
    assert t.slots[0].state == EvState.DENIED


def test_mark_bad_on_down_planes():
    """§6.5: a loss on a down plane changes nothing; §6.4: the floor counts usable slots on up planes."""
    t = table(n=8, planes=2, backups=1, min_active=3)
    ev0 = t.slots[0].ev
    assert not t.mark_bad(ev0, plane_up=0b10)  # plane 0 down: not even the backup is taken
    assert t.slots[0].ev == ev0 and t.backups[0] and t.retired == 0
    t.backups[1].clear()
    assert t.usable_count(plane_up=0b10) == 4
    assert t.mark_bad(t.slots[1].ev, plane_up=0b10)  # 4 -> 3 usable on the up plane
    assert not t.mark_bad(t.slots[3].ev, plane_up=0b10)  # would leave 2 < 3
    assert t.mark_bad(t.slots[3].ev)  # all planes up: 7 usable, so it may go
    assert t.usable_count() == 6 and t.usable_count(plane_up=0b10) == 2


def test_rotation_matches_the_protocol_test_vector():
    # docs/protocol.md §6.2: N = 8, seed 0xACE1, LFSR advanced 16 steps per redraw (and at init).
    table = EvTable(8, 1, 8, seed=1, lfsr_seed=0xACE1)
    expected = [
        2,
        3,
        0,
        1,
        6,
        7,
        4,
        5,
        5,
        4,
        7,
        6,
        1,
        0,
        3,
        2,
        7,
        6,
        5,
        4,
        3,
        2,
        1,
        0,
        7,
        6,
        5,
        4,
        3,
        2,
        1,
        0,
    ]
    assert table.candidates(32) == expected
    chosen = [table.by_ev[table.select(plane_ok=1)] for _ in range(32)]
    assert chosen == expected
