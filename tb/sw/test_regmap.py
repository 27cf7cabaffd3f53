"""The register map: its linked list, the generated docs, and its agreement with the NIC core it
describes (every binding names a port of the right width and default, every table block stages exactly
the record of its NIC stream, every counter of the core has a register)."""

from dataclasses import replace
from pathlib import Path

import pytest
from amaranth.hdl import Shape, unsigned
from amaranth.lib import data

from mrcnic.hdl.eth.counters import COUNTERS as ETH_COUNTERS
from mrcnic.hdl.host.nic_top import MrcNicTop
from mrcnic.hdl.host.uart_bridge import COUNTERS as UART_COUNTERS
from mrcnic.hdl.nic import STATS, MrcNic, layout_only
from mrcnic.regmap import (
    COUNTERS,
    CQE_BYTES,
    HEADER_WORDS,
    HOST_LINK_COUNTERS,
    MAC_COUNTERS,
    TYPE_PREFIX,
    WQE_BYTES,
    Access,
    BlockType,
    Capabilities,
    Cqe,
    CqeKind,
    CqeStatus,
    Wqe,
    WqeOpcode,
    cqe_phase,
    nic_register_map,
)
from mrcnic.regmap.markdown import registers_markdown

DOCS = Path(__file__).resolve().parents[2] / "docs" / "registers.md"
CAPS = [
    Capabilities(),
    Capabilities(planes=2, qps=2, ev_slots=8, backups=1, mrs=4, destinations=2),
    # the reduced two-plane board NIC, built without SRv6
    Capabilities(data_width=4, planes=2, qps=1, ev_slots=4, backups=1, window=64, mrs=4, destinations=0),
]
CAPS_IDS = ["default", "small", "without-srv6"]


def test_docs_are_generated_from_the_map():
    assert DOCS.read_text() == registers_markdown(), (
        "docs/registers.md is stale: python -m mrcnic.regmap docs/registers.md"
    )


@pytest.mark.parametrize("caps", CAPS, ids=CAPS_IDS)
def test_linked_list(caps):
    regmap = nic_register_map(caps)
    words = {}
    for address, block, register, _index in regmap.words():
        assert address not in words, f"{block.name}: word {address:#x} used twice"
        words[address] = (block.name, register)
    # Walk from address 0 as a driver does.
    seen, address = [], 0
    while True:
        block = next(b for b in regmap.blocks if b.base == address)
        t, version, nxt, info = regmap.header(block)
        assert t >> 16 == TYPE_PREFIX and BlockType(t & 0xFFFF) == block.kind
        assert version == block.version_word and info == block.info
        seen.append(block.name)
        if nxt == 0:
            break
        assert nxt > address and nxt % 0x40 == 0
        address = nxt
    assert seen == [b.name for b in regmap.blocks]
    assert [b.info for b in regmap.blocks if b.kind == BlockType.PORT] == list(range(caps.planes))
    assert regmap["nic_id"].base == 0 and regmap["nic_id"].offsets["MAGIC"] == 4 * HEADER_WORDS
    assert max(words) < regmap.size


def _leaves(shape, path=""):
    """(path, width) of every leaf field of a layout."""
    if isinstance(shape, data.StructLayout):
        for name, field in shape:
            yield from _leaves(field.shape, f"{path}.{name}" if path else name)
    elif isinstance(shape, data.ArrayLayout):
        for i in range(shape.length):
            yield from _leaves(shape.elem_shape, f"{path}[{i}]")
    else:
        yield path, Shape.cast(shape).width


def _resolve(nic, binding):
    """(width, reset) of the NIC port a binding names: ``name``, ``name[i]`` (a bit) or ``name.field``."""
    port, _, rest = binding.partition(".")
    index = None
    if "[" in port:
        port, index = port[:-1].split("[")
    member = nic.signature.members[port]
    if rest:
        widths = dict(_leaves(member.shape))
        return widths[rest], None
    if isinstance(member.shape, data.ArrayLayout):  # an element: a per-plane counter
        return Shape.cast(member.shape.elem_shape).width, None
    width = Shape.cast(member.shape).width
    init = member.init if not isinstance(member.init, (dict, list)) else None
    if index is not None:
        return 1, None if init is None else (int(init) >> int(index)) & 1
    return width, None if init is None else int(init)


@pytest.mark.parametrize("caps", CAPS, ids=CAPS_IDS)
def test_bindings_match_the_nic(caps):
    nic = layout_only(
        MrcNic(
            data_width=caps.data_width,
            planes=caps.planes,
            qps=caps.qps,
            ev_slots=caps.ev_slots,
            backups=caps.backups,
            window=caps.window,
            mrs=caps.mrs,
            destinations=caps.destinations,
            clock_hz=caps.clock_hz,
        )
    )
    # The queue blocks bind to the host interface's queue engine, not to the core.
    regmap = nic_register_map(replace(caps, host_queues=False))
    bound, mac_bindings, link_bindings = set(), set(), set()
    for block in regmap.blocks:
        if block.kind == BlockType.TABLE:
            record = nic.signature.members[block.table].signature.members["payload"].shape
            fields = {r.binding: r.width for r in block.registers if r.binding}
            assert fields == dict(_leaves(record)), f"table {block.name} differs from {block.table}"
            if block.read_back:
                # the request carries key fields, the answer the others: together every field, once
                request, answer = (nic.signature.members[name] for name in block.read_back)
                assert (request.flow.name, answer.flow.name) == ("In", "Out"), block.name
                keys = dict(_leaves(request.signature.members["payload"].shape))
                loaded = dict(_leaves(answer.signature.members["payload"].shape))
                assert not keys.keys() & loaded.keys() and {**keys, **loaded} == fields, block.name
            continue
        for r in block.registers:
            if r.binding is None:
                continue
            if r.binding.startswith("mac_"):  # the MACs' counters: inputs of MrcNicTop, not of the core
                mac_bindings.add(r.binding)
                continue
            if r.binding.startswith("stat_host_link_"):  # the host link's: also inputs of MrcNicTop
                link_bindings.add(r.binding)
                continue
            width, init = _resolve(nic, r.binding)
            assert r.width >= width, f"{block.name}.{r.name} narrower than {r.binding}"
            if r.access == Access.RW and init is not None:
                assert r.reset == init, f"{block.name}.{r.name} reset {r.reset} != NIC default {init}"
            bound.add(r.binding.split(".")[0].split("[")[0])
    assert mac_bindings == {f"mac_{n}[{p}]" for n in MAC_COUNTERS for p in range(caps.planes)}
    top = MrcNicTop(**{k: getattr(caps, k) for k in ("data_width", "planes", "qps", "window", "clock_hz")})
    for name in MAC_COUNTERS:
        member = top.signature.members[f"mac_{name}"]
        assert member.flow.name == "In" and member.shape == data.ArrayLayout(32, caps.planes), name
    assert set(MAC_COUNTERS) <= set(ETH_COUNTERS), "a MAC counter the Ethernet port does not keep"
    assert link_bindings == {f"stat_host_link_{n}" for n, _ in HOST_LINK_COUNTERS}
    for name in link_bindings:
        member = top.signature.members[name]
        assert member.flow.name == "In" and Shape.cast(member.shape) == unsigned(32), name
    # the UART bridge keeps every one of them, under the same names
    assert tuple(n for n, _ in HOST_LINK_COUNTERS) == UART_COUNTERS
    counters = {f"stat_{b}_{n}" for b, names in STATS.items() for n in names}
    assert {f"stat_{b}_{n}" for b, entries in COUNTERS.items() for n, _ in entries} == counters
    # every register input of the core is reachable from the host
    inputs = {name for name, m in nic.signature.members.items() if m.is_port and m.flow.name == "In"}
    assert inputs <= bound, f"NIC inputs without a register: {sorted(inputs - bound)}"
    assert {b.name: b.read_back for b in regmap.blocks if b.read_back} == {
        "ev_slot": ("ev_read", "ev_read_answer")
    }
    tables = {b.table for b in regmap.blocks if b.table}
    assert tables == {
        "tx_qp_configure",
        "rx_qp_configure",
        "connect",
        "ev_configure",
        "reserve_configure",
        "ev_seed",
        *(["route_configure"] if caps.srv6 else []),  # no route templates without SRv6
        "mr_configure",
    }


def test_queue_blocks_and_entry_formats():
    regmap = nic_register_map(Capabilities(qps=3))
    queues = [b for b in regmap.blocks if b.kind == BlockType.QP_QUEUES]
    assert [b.info for b in queues] == [0, 1, 2]
    assert regmap["cq"].kind == BlockType.COMPLETION_QUEUE
    assert "HOST_DMA_ERRORS" in {r.name for r in regmap["counters"].registers}
    wqe = Wqe(WqeOpcode.WRITE_IMM, 4096, 0x1000, 0xABCD_0000_1234, 0x5A01, imm=0xC0DE, wr_id=77)
    raw = wqe.encode()
    assert len(raw) == WQE_BYTES and Wqe.decode(raw) == wqe
    assert raw[0] == 1 and int.from_bytes(raw[4:8], "little") == 4096
    cqe = Cqe(
        index=0xFFFF,
        kind=CqeKind.RECV_IMM,
        status=CqeStatus.SUCCESS,
        qp=2,
        msn=9,
        byte_len=100,
        imm=5,
        phase=0,
    )
    raw = cqe.encode()
    assert len(raw) == CQE_BYTES and Cqe.decode(raw) == cqe and raw[31] == 0
    assert [cqe_phase(n, 2) for n in (0, 3, 4, 7, 8)] == [1, 1, 0, 0, 1]


def test_a_nic_without_srv6_has_no_route_templates():
    """DESTINATIONS 0: no route table, no port addresses, SRV6 fixed at 0; the other tables keep their
    numbers, so a driver finds them where it would on a NIC with SRv6."""
    full, bare = nic_register_map(CAPS[1]), nic_register_map(CAPS[2])
    assert not CAPS[2].srv6 and CAPS[1].srv6
    assert "route" not in [b.name for b in bare.blocks] and "route" in [b.name for b in full.blocks]
    for p in range(2):
        names = [r.name for r in bare[f"port{p}"].registers]
        assert "PORT_ADDRESS" not in names and "MAC" in names
    srv6 = bare["transport"].register("SRV6")
    assert (srv6.access, srv6.reset, srv6.width, srv6.binding) == (Access.RO, 0, 1, None)
    assert bare["nic_id"].register("DESTINATIONS").reset == 0
    tables = {b.name: b.info for b in full.blocks if b.kind == BlockType.TABLE}
    assert {b.name: b.info for b in bare.blocks if b.kind == BlockType.TABLE} == {
        name: info for name, info in tables.items() if name != "route"
    }
