"""The verbs-shaped driver: open a NIC, register memory, create and connect QPs, post RDMA WRITEs and
WRITEs with immediate, post receives, poll completions, read counters.

Every action is register writes and host-memory accesses through a :class:`~.transport.Transport`, so the
same code drives the reference model, a simulated NIC and a board. The register blocks are found by
walking the list from address 0 (docs/registers.md); the queues follow docs/host-interface.md.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field

from ..model.ev import EvTable
from ..regmap import (
    CQE_BYTES,
    MAC_COUNTERS,
    MAGIC,
    TYPE_PREFIX,
    WQE_BYTES,
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
from ..regmap.model import HEADER_WORDS, Access, Block, Register, RegisterMap
from ..wire import RouteTemplate
from ..wire.usid import NO_T1_SLOT
from .transport import HostMemoryAllocator, Transport

__all__ = [
    "Completion",
    "DriverError",
    "EvProfile",
    "InvalidParameter",
    "MemoryRegion",
    "Nic",
    "Qp",
    "QpState",
    "QueueFull",
    "WrongQpState",
]

MAX_LENGTH = 1 << 31
NO_SRV6 = "this NIC was built without SRv6 (DESTINATIONS is 0): no route templates, single-IPv6 frames only"
QPN_BASE = 0x100  # QPN = QPN_BASE | QP index


class DriverError(Exception):
    """Anything the driver refuses or the device reports; the message says what and why."""


class InvalidParameter(DriverError, ValueError):
    pass


class WrongQpState(DriverError):
    pass


class QueueFull(DriverError):
    pass


class QpState(enum.Enum):
    RESET = "reset"  # created: queues set up, not connected
    RTS = "rts"  # connected: ready to send and receive
    ERROR = "error"  # an error completion: every outstanding WQE completes FLUSHED


@dataclass
class Completion:
    """One completion: of a posted WRITE (``kind`` SEND, the ``wr_id`` it was posted with) or of a
    received WRITE-with-immediate (``kind`` RECV_IMM, the ``wr_id`` of the receive it consumed)."""

    qp: int
    kind: CqeKind
    status: CqeStatus
    wr_id: object
    byte_len: int = 0
    imm: int | None = None
    msn: int = 0

    @property
    def ok(self) -> bool:
        return self.status == CqeStatus.SUCCESS


@dataclass
class MemoryRegion:
    index: int
    rkey: int
    address: int
    length: int


@dataclass
class EvProfile:
    """A QP's EV slots, its backup EVs per plane and its rotation seed (docs/protocol.md §6).

    ``table``: the reference model's :class:`~mrcnic.model.ev.EvTable` the profile was drawn from, if any
    (a testbench replays the NIC's path decisions into it)."""

    slots: list[int]
    backups: list[list[int]]
    seed: int
    table: EvTable | None = field(default=None, repr=False, compare=False)

    @classmethod
    def draw(cls, caps: Capabilities, uplinks: int, seed: int, *, min_active: int | None = None) -> EvProfile:
        """The profile the reference model draws: slots spread evenly over ``uplinks`` T1 uplinks of each
        plane. ``min_active``: the floor guard of the model's table (by default the NIC's reset value of
        MIN_ACTIVE)."""
        if min_active is None:
            min_active = max(1, caps.ev_slots // 4)
        t = EvTable(
            caps.ev_slots, caps.planes, uplinks, seed=seed, backups=caps.backups, min_active=min_active
        )
        return cls([s.ev for s in t.slots], [list(b) for b in t.backups], t.lfsr_seed, t)


@dataclass
class PeerAddress:
    """How to reach the other end of a QP: its GID, its QPN and the route template index (``dest``)."""

    gid: int
    qpn: int
    dest: int


class Registers:
    """The NIC's register blocks, found by walking the list from address 0."""

    def __init__(self, transport: Transport):
        self.t = transport
        self.map: RegisterMap | None = None
        self.bases: dict[tuple[BlockType, int], int] = {}

    async def discover(self) -> Capabilities:
        t = self.t
        found: list[tuple[BlockType, int, int]] = []
        address, seen = 0, set()
        while True:
            if address in seen or len(seen) > 1024:
                raise DriverError(f"the register block list loops at {address:#x}")
            seen.add(address)
            type_word, _, nxt, info = await t.read_block(address, HEADER_WORDS)
            if type_word >> 16 != TYPE_PREFIX:
                raise DriverError(
                    f"no MRC register block at {address:#x} (type word {type_word:#010x}): "
                    "not an mrcnic device?"
                )
            try:
                kind = BlockType(type_word & 0xFFFF)
            except ValueError:
                kind = None  # a block this driver does not know: skip it
            if kind is not None:
                found.append((kind, info, address))
            if nxt == 0:
                break
            address = nxt
        self.bases = {(kind, info): base for kind, info, base in found}
        ident = self.bases.get((BlockType.NIC_ID, 1))
        if ident is None:
            raise DriverError("the device has no NIC_ID block of layout version 1")
        default = nic_register_map(Capabilities())["nic_id"]
        names = ("MAGIC", "DATA_WIDTH", "PLANES", "QPS", "EV_SLOTS", "BACKUPS", "WINDOW", "MRS")
        names += ("DESTINATIONS", "CLOCK_HZ", "ADDR_WIDTH", "MAX_PMTU", "RX_TIMER_WIDTH")
        first = min(default.offsets[n] for n in names)
        words = await t.read_block(ident + first, (max(default.offsets[n] for n in names) - first) // 4 + 1)
        ident_reg = {n: words[(default.offsets[n] - first) // 4] for n in names}
        if ident_reg["MAGIC"] != MAGIC:
            raise DriverError("NIC_ID block without the MRCN magic")
        caps = Capabilities(
            data_width=ident_reg["DATA_WIDTH"],
            planes=ident_reg["PLANES"],
            qps=ident_reg["QPS"],
            ev_slots=ident_reg["EV_SLOTS"],
            backups=ident_reg["BACKUPS"],
            window=ident_reg["WINDOW"],
            mrs=ident_reg["MRS"],
            destinations=ident_reg["DESTINATIONS"],
            clock_hz=ident_reg["CLOCK_HZ"],
            addr_width=ident_reg["ADDR_WIDTH"],
            max_pmtu=ident_reg["MAX_PMTU"],
            rx_timer_width=ident_reg["RX_TIMER_WIDTH"],
            host_queues=(BlockType.COMPLETION_QUEUE, 0) in self.bases,
        )
        self.map = nic_register_map(caps)
        for block in self.map.blocks:
            if (block.kind, block.info) not in self.bases:
                raise DriverError(f"the device lacks register block {block.name} ({block.kind.name})")
        return caps

    def block(self, name: str) -> tuple[Block, int]:
        block = self.map[name]
        return block, self.bases[(block.kind, block.info)]

    async def read(self, block_name: str, reg: str) -> int:
        return (await self.read_many(block_name, [reg]))[reg]

    async def write(self, block_name: str, reg: str, value: int) -> None:
        await self.write_many(block_name, {reg: value})

    def _runs(self, block_name: str, names) -> list[tuple[int, list[Register]]]:
        """The registers ``names`` of a block as runs of consecutive addresses: ``(address, registers)``,
        in address order, so each run is one block transfer."""
        block, base = self.block(block_name)
        runs: list[tuple[int, list[Register]]] = []
        end = None
        for r in sorted((block.register(n) for n in names), key=lambda r: block.offsets[r.name]):
            address = base + block.offsets[r.name]
            if address != end:
                runs.append((address, []))
            runs[-1][1].append(r)
            end = address + 4 * r.words
        return runs

    async def write_many(self, block_name: str, values: dict[str, int]) -> None:
        """Write several registers of a block, consecutive ones in one transfer each (address order)."""
        runs = self._runs(block_name, values)
        for r in (r for _, regs in runs for r in regs):  # every value checked before anything is written
            if values[r.name] < 0 or values[r.name] >> r.width:
                raise InvalidParameter(
                    f"{block_name}.{r.name}: {values[r.name]:#x} does not fit its {r.width} bits"
                )
        for address, regs in runs:
            words = [(values[r.name] >> (32 * w)) & 0xFFFFFFFF for r in regs for w in range(r.words)]
            await self.t.write_block(address, words)

    async def read_many(self, block_name: str, names) -> dict[str, int]:
        """Read several registers of a block, consecutive ones in one transfer each."""
        values = {}
        for address, regs in self._runs(block_name, names):
            words = await self.t.read_block(address, sum(r.words for r in regs))
            for r in regs:
                values[r.name] = sum(word << (32 * w) for w, word in enumerate(words[: r.words]))
                words = words[r.words :]
        return values

    async def push(self, table: str, fields: dict[str, int]) -> None:
        """Stage a record in a TABLE block and push it (the device holds our writes while it is busy)."""
        block, _ = self.block(table)
        names = {r.name for r in block.registers} - {"STATUS", "COMMAND"}
        if set(fields) != names:
            raise DriverError(f"table {table}: fields {sorted(fields)} but the block has {sorted(names)}")
        await self.write_many(table, fields)
        await self.write(table, "COMMAND", 1)  # after every field: it takes the staged record

    async def read_back(self, table: str, keys: dict[str, int], polls: int = 1000) -> dict[str, int]:
        """Read one entry of a TABLE block that can be read back (STATUS[1]): stage the key fields, write 2
        to COMMAND, wait until STATUS[0] (pending) is 0, then read every other field."""
        block, _ = self.block(table)
        names = {r.name for r in block.registers} - {"STATUS", "COMMAND"}
        if not set(keys) < names:
            raise DriverError(f"table {table}: keys {sorted(keys)} are not some of {sorted(names)}")
        await self.write_many(table, keys)
        await self.write(table, "COMMAND", 2)
        for _ in range(polls):
            if not (await self.read(table, "STATUS")) & 1:
                break
        else:
            raise DriverError(f"table {table}: no answer to a read-back after {polls} polls")
        return dict(sorted((await self.read_many(table, names - set(keys))).items()))


class Qp:
    """A queue pair: its send queue ring in host memory, its posted receives, its state."""

    def __init__(self, nic: Nic, index: int, sq_address: int, sq_log2: int):
        self.nic, self.index = nic, index
        self.qpn = QPN_BASE | index
        self.sq_address, self.sq_log2 = sq_address, sq_log2
        self.state = QpState.RESET
        self.sq_producer = 0  # WQEs posted
        self.sq_wr_ids: dict[int, object] = {}  # SQ index (mod 2^16) -> wr_id, until completed
        self.rq_producer = 0
        self.rq_wr_ids: deque = deque()  # receives posted, in order
        self.outstanding = 0
        self.peer: PeerAddress | None = None
        self.profile: EvProfile | None = None
        self.psn = self.peer_psn = None  # first PSNs of the two directions, once connected

    @property
    def sq_depth(self) -> int:
        return 1 << self.sq_log2

    def __repr__(self):
        return f"Qp({self.index}, qpn={self.qpn:#x}, {self.state.value}, {self.outstanding} outstanding)"

    async def set_ev_profile(self, profile: EvProfile) -> None:
        caps, regs = self.nic.caps, self.nic.regs
        if len(profile.slots) != caps.ev_slots:
            raise InvalidParameter(f"EV profile with {len(profile.slots)} slots; the NIC has {caps.ev_slots}")
        for s, ev in enumerate(profile.slots):
            if ev >> 29 != s % caps.planes:
                raise InvalidParameter(f"EV slot {s} is on plane {s % caps.planes}, EV {ev:#x} on {ev >> 29}")
        if len(profile.backups) > caps.planes or any(len(b) > caps.backups for b in profile.backups):
            raise InvalidParameter(f"at most {caps.backups} backup EVs per plane, {caps.planes} planes")
        for s, ev in enumerate(profile.slots):
            await regs.push("ev_slot", {"QP": self.index, "SLOT": s, "EV": ev, "STATE": 0})
        for plane in range(caps.planes):
            evs = profile.backups[plane] if plane < len(profile.backups) else []
            for i in range(caps.backups):
                if i < len(evs) and evs[i] >> 29 != plane:
                    raise InvalidParameter(f"backup EV {evs[i]:#x} is not on plane {plane}")
                ev = evs[i] if i < len(evs) else 0
                await regs.push(
                    "ev_reserve",
                    {"QP": self.index, "PLANE": plane, "INDEX": i, "EV": ev, "VALID": int(i < len(evs))},
                )
        await regs.push("ev_seed", {"QP": self.index, "SEED": profile.seed & 0xFFFF})
        self.profile = profile

    async def connect(
        self,
        peer: PeerAddress,
        *,
        psn: int,
        peer_psn: int,
        pd: int = 1,
        pmtu: int | None = None,
        profile: EvProfile | None = None,
    ) -> None:
        """Connect to ``peer``: ``psn`` is our first PSN, ``peer_psn`` the peer's (both ends must agree);
        ``pmtu``: the path MTU, by default the NIC's PMTU_LOG2 register."""
        caps, regs = self.nic.caps, self.nic.regs
        if self.state != QpState.RESET:
            raise WrongQpState(f"QP {self.index} is {self.state.value}: connect needs a QP in reset")
        if not caps.srv6 and peer.dest != 0:
            raise InvalidParameter(f"route template {peer.dest}: {NO_SRV6}")
        if caps.srv6 and not 0 <= peer.dest < caps.destinations:
            raise InvalidParameter(f"route template {peer.dest} outside 0..{caps.destinations - 1}")
        if pmtu is None:  # the NIC's path MTU (both ends must agree on it)
            pmtu = 1 << await regs.read("transport", "PMTU_LOG2")
        pmtus = [size for size in (256, 512, 1024, 2048, 4096) if size <= caps.max_pmtu]
        if pmtu not in pmtus:
            allowed = ", ".join(map(str, pmtus))
            raise InvalidParameter(f"PMTU {pmtu}: one of {allowed} (MAX_PMTU {caps.max_pmtu})")
        for name, value in (("psn", psn), ("peer_psn", peer_psn)):
            if not 0 <= value < 1 << 24:
                raise InvalidParameter(f"{name} {value} is not a 24-bit PSN")
        if profile is not None:
            await self.set_ev_profile(profile)
        if self.profile is None:
            raise WrongQpState(f"QP {self.index} has no EV profile: set_ev_profile() or connect(profile=)")
        await regs.push(
            "tx_qp",
            {
                "QP": self.index,
                "QPN": self.qpn,
                "PEER_QPN": peer.qpn,
                "PEER_GID": peer.gid,
                "DEST": peer.dest,
            },
        )
        await regs.push(
            "rx_qp",
            {
                "QP": self.index,
                "CONNECTED": 1,
                "QPN": self.qpn,
                "PEER_QPN": peer.qpn,
                "PEER_GID": peer.gid,
                "DEST": peer.dest,
                "PD": pd,
                "PMTU_LOG2": pmtu.bit_length() - 1,
                "INITIAL_PSN": peer_psn,
                "INITIAL_RQMSN": 0,
            },
        )
        await regs.push("connect", {"QP": self.index, "PSN": psn, "MSN": 0, "RQMSN": 0})
        self.peer, self.psn, self.peer_psn = peer, psn, peer_psn
        self.state = QpState.RTS

    async def post_write(self, local_addr: int, remote_va: int, rkey: int, length: int, *, wr_id=None) -> int:
        """Post an RDMA WRITE of ``length`` bytes from host address ``local_addr``; returns its SQ index."""
        return await self._post(WqeOpcode.WRITE, local_addr, remote_va, rkey, length, 0, wr_id)

    async def post_write_imm(
        self, local_addr: int, remote_va: int, rkey: int, length: int, imm: int, *, wr_id=None
    ) -> int:
        """Post an RDMA WRITE-with-immediate: the peer gets a RECV_IMM completion carrying ``imm``."""
        if not 0 <= imm < 1 << 32:
            raise InvalidParameter(f"immediate {imm} is not a 32-bit value")
        return await self._post(WqeOpcode.WRITE_IMM, local_addr, remote_va, rkey, length, imm, wr_id)

    async def _post(self, opcode, local_addr, remote_va, rkey, length, imm, wr_id) -> int:
        if self.state != QpState.RTS:
            raise WrongQpState(f"QP {self.index} is {self.state.value}: posting needs a connected QP")
        if not 1 <= length <= MAX_LENGTH:
            raise InvalidParameter(f"length {length}: a WRITE moves 1 to 2^31 bytes")
        for name, value, bits in (
            ("local_addr", local_addr, 64),
            ("remote_va", remote_va, 64),
            ("rkey", rkey, 32),
        ):
            if not 0 <= value < 1 << bits:
                raise InvalidParameter(f"{name} {value:#x} is not a {bits}-bit value")
        self.nic.check_reach(local_addr, length, "the source buffer")
        if self.outstanding >= self.sq_depth:
            raise QueueFull(f"QP {self.index}: send queue full ({self.sq_depth} WQEs outstanding)")
        index = self.sq_producer & 0xFFFF
        wqe = Wqe(opcode, length, local_addr, remote_va, rkey, imm=imm, wr_id=index)
        slot = self.sq_producer % self.sq_depth
        await self.nic.t.mem_write(self.sq_address + slot * WQE_BYTES, wqe.encode())
        self.sq_wr_ids[index] = wr_id
        self.sq_producer += 1
        self.outstanding += 1
        await self.nic.regs.write(f"qp{self.index}_queues", "SQ_PRODUCER", self.sq_producer & 0xFFFF)
        return index

    async def post_recv(self, wr_id=None) -> None:
        """Post a receive: the next WRITE-with-immediate from the peer consumes it."""
        if self.state == QpState.ERROR:
            raise WrongQpState(f"QP {self.index} is in error")
        self.rq_wr_ids.append(wr_id)
        self.rq_producer += 1
        await self.nic.regs.write(f"qp{self.index}_queues", "RQ_PRODUCER", self.rq_producer & 0xFFFF)


class Nic:
    """An open NIC. Use :func:`open`."""

    def __init__(self, transport: Transport):
        self.t = transport
        self.regs = Registers(transport)
        self.caps: Capabilities | None = None
        self.memory: HostMemoryAllocator | None = None
        self.qps: dict[int, Qp] = {}
        self.mrs: dict[int, MemoryRegion] = {}
        self.cq_address = 0
        self.cq_log2 = 0
        self.cq_consumer = 0
        self._mr_tag = 0x5A

    async def _init(self, cq_depth: int) -> None:
        self.caps = await self.regs.discover()
        if not self.caps.host_queues:
            raise DriverError(
                "this device has no host queues (a core-only build): the driver cannot post work"
            )
        self.check_reach(self.t.memory_base, self.t.memory_size, "the host memory window (its queues)")
        self.memory = HostMemoryAllocator(self.t.memory_base, self.t.memory_size)
        self.cq_log2 = _log2_depth(cq_depth, "completion queue")
        self.cq_address = self.memory.allocate(CQE_BYTES << self.cq_log2)
        await self.t.mem_write(self.cq_address, bytes(CQE_BYTES << self.cq_log2))
        await self.regs.write("cq", "CQ_BASE", self.cq_address)
        await self.regs.write("cq", "CQ_CONSUMER", 0)
        await self.regs.write("cq", "CQ_SIZE_LOG2", self.cq_log2)

    # -- information ------------------------------------------------------------------------------
    async def query(self) -> dict:
        ports = [bool(await self.regs.read(f"port{p}", "LINK_UP")) for p in range(self.caps.planes)]
        return {"capabilities": self.caps, "ports_up": ports, "transport": self.t.describe()}

    async def ev_slots(self, qp: int) -> list[tuple[int, str]]:
        """The EV slots of QP ``qp`` as the NIC holds them now: ``(ev, state)`` per slot."""
        if not (await self.regs.read("ev_slot", "STATUS")) & 2:
            raise DriverError("this device cannot read back its EV table (ev_slot STATUS[1] = 0)")
        if not 0 <= qp < self.caps.qps:
            raise InvalidParameter(f"QP {qp} outside 0..{self.caps.qps - 1}")
        names = {0: "GOOD", 1: "GOOD", 2: "ASSUMED_BAD", 3: "DENIED"}
        out = []
        for slot in range(self.caps.ev_slots):
            entry = await self.regs.read_back("ev_slot", {"QP": qp, "SLOT": slot})
            out.append((entry["EV"], names[entry["STATE"]]))
        return out

    async def queue_state(self, qp: int) -> dict[str, int]:
        """The queue registers of QP ``qp`` (producer and consumer indices, status)."""
        block, _ = self.regs.block(f"qp{qp}_queues")
        names = [r.name for r in block.registers if r.width <= 32]
        values = await self.regs.read_many(block.name, names)
        return {name.lower(): values[name] for name in names}

    async def counters(self) -> dict[str, int]:
        block, _ = self.regs.block("counters")
        values = await self.regs.read_many("counters", [r.name for r in block.registers])
        return {r.name.lower(): values[r.name] for r in block.registers}

    async def port_counters(self) -> list[dict[str, int]]:
        """Per plane port: frames and bytes received and transmitted (mod 2^32), and the Ethernet MAC's
        drop counters (``mac_rx_bad_fcs``, ...; 0 without a MAC)."""
        macs = (f"MAC_{n.upper()}" for n in MAC_COUNTERS)
        names = ("RX_FRAMES", "RX_BYTES", "TX_FRAMES", "TX_BYTES", *macs)
        out = []
        for p in range(self.caps.planes):
            values = await self.regs.read_many(f"port{p}", names)
            out.append({name.lower(): values[name] for name in names})
        return out

    # -- configuration ----------------------------------------------------------------------------
    async def set_addresses(
        self, *, gid: int, port_macs=None, next_hop_macs=None, port_addresses=None
    ) -> None:
        if port_addresses is not None and not self.caps.srv6:
            raise InvalidParameter(f"port addresses (SRv6 outer source addresses): {NO_SRV6}")
        await self.regs.write("transport", "OWN_GID", gid)
        for p in range(self.caps.planes):
            values = {
                reg: value[p]
                for value, reg in (
                    (port_macs, "MAC"),
                    (next_hop_macs, "NEXT_HOP_MAC"),
                    (port_addresses, "PORT_ADDRESS"),
                )
                if value is not None
            }
            await self.regs.write_many(f"port{p}", values)

    TUNABLE_BLOCKS = ("transport", "reliability", "paths", "congestion")

    async def set_parameters(self, **values: int) -> None:
        """Set NIC parameters by register name, e.g. ``rto_cycles=4000, cc_max_cwnd=65536`` (the registers
        of the transport, reliability, paths and congestion blocks: docs/registers.md)."""
        where = {}
        for name in self.TUNABLE_BLOCKS:
            block, _ = self.regs.block(name)
            for r in block.registers:
                where[r.name.lower()] = name
        per_block: dict[str, dict[str, int]] = {}
        for key, value in values.items():
            if key not in where:
                raise InvalidParameter(f"no NIC parameter {key!r}; known: {', '.join(sorted(where))}")
            reg = self.regs.map[where[key]].register(key.upper())
            if reg.access == Access.RO:  # fixed by the build (SRV6 without SRv6): only its value is accepted
                if int(value) != reg.reset:
                    raise InvalidParameter(f"{key} is fixed at {reg.reset} in this NIC: {reg.doc}")
                continue
            largest = self.caps.max_pmtu.bit_length() - 1
            if key == "pmtu_log2" and not 8 <= int(value) <= largest:
                raise InvalidParameter(f"pmtu_log2 {value}: 8..{largest} (MAX_PMTU {self.caps.max_pmtu})")
            per_block.setdefault(where[key], {})[key.upper()] = int(value)
        for name, block_values in per_block.items():
            await self.regs.write_many(name, block_values)

    async def set_route(self, dest: int, template: RouteTemplate) -> None:
        if not self.caps.srv6:
            raise InvalidParameter(f"route template {dest}: {NO_SRV6}")
        if not 0 <= dest < self.caps.destinations:
            raise InvalidParameter(f"route template {dest} outside 0..{self.caps.destinations - 1}")
        usids = list(template.usids) + [0] * (6 - len(template.usids))
        fields = {"DEST": dest, "LOCATOR": template.locator, "COUNT": len(template.usids)}
        fields.update({f"USID{i}": u for i, u in enumerate(usids)})
        fields["T1_SLOT"] = template.t1_slot if template.t1_slot != NO_T1_SLOT else 7
        await self.regs.push("route", fields)

    async def register_memory(
        self, address: int, length: int, *, remote_write: bool = True, pd: int = 1
    ) -> MemoryRegion:
        """Let the peer write ``[address, address + length)``; returns the region and its R_Key."""
        if length <= 0 or address < 0 or address + length > 1 << 64:
            raise InvalidParameter(f"memory region [{address:#x}, +{length}) is empty or outside 64 bits")
        self.check_reach(address, length, "the memory region")
        free = [i for i in range(self.caps.mrs) if i not in self.mrs]
        if not free:
            raise DriverError(f"all {self.caps.mrs} memory-region entries are in use")
        index = free[0]
        self._mr_tag = (self._mr_tag + 1) & 0xFFFFFF or 1
        rkey = (self._mr_tag << 8) | index
        await self.regs.push(
            "mr",
            {
                "INDEX": index,
                "VALID": 1,
                "RKEY": rkey,
                "PD": pd,
                "REMOTE_WRITE": int(remote_write),
                "BASE": address,
                "LENGTH": length,
            },
        )
        mr = MemoryRegion(index, rkey, address, length)
        self.mrs[index] = mr
        return mr

    async def deregister_memory(self, mr: MemoryRegion) -> None:
        await self.regs.push(
            "mr",
            {"INDEX": mr.index, "VALID": 0, "RKEY": 0, "PD": 0, "REMOTE_WRITE": 0, "BASE": 0, "LENGTH": 0},
        )
        self.mrs.pop(mr.index, None)

    def check_reach(self, address: int, length: int, what: str) -> None:
        """Refuse ``[address, address + length)`` past the NIC's reach (ADDR_WIDTH). The NIC would refuse it
        too (LOCAL_DMA_ERROR, an invalid region), never cut the address short; this says why at once."""
        reach = 1 << self.caps.addr_width
        if address + length > reach:
            raise InvalidParameter(
                f"{what} [{address:#x}, +{length:#x}) lies past this NIC's reach: ADDR_WIDTH is "
                f"{self.caps.addr_width}, so host addresses must be below {reach:#x}"
            )

    async def create_qp(self, *, sq_depth: int = 64) -> Qp:
        free = [i for i in range(self.caps.qps) if i not in self.qps]
        if not free:
            raise DriverError(f"all {self.caps.qps} QPs are in use")
        index = free[0]
        log2 = _log2_depth(sq_depth, "send queue")
        address = self.memory.allocate(WQE_BYTES << log2)
        block = f"qp{index}_queues"
        await self.regs.write(block, "SQ_SIZE_LOG2", 0)
        await self.regs.write(block, "SQ_BASE", address)
        await self.regs.write(block, "SQ_PRODUCER", await self.regs.read(block, "SQ_CONSUMER"))
        await self.regs.write(block, "SQ_SIZE_LOG2", log2)
        qp = Qp(self, index, address, log2)
        qp.sq_producer = await self.regs.read(block, "SQ_CONSUMER")
        qp.rq_producer = await self.regs.read(block, "RQ_CONSUMER")
        await self.regs.write(block, "RQ_PRODUCER", qp.rq_producer)
        self.qps[index] = qp
        return qp

    # -- completions ------------------------------------------------------------------------------
    async def poll_cq(self, max_entries: int = 64) -> list[Completion]:
        """The completions written since the last call (at most ``max_entries``), oldest first."""
        out = []
        depth = 1 << self.cq_log2
        while len(out) < max_entries:
            slot = self.cq_consumer % depth
            raw = await self.t.mem_read(self.cq_address + slot * CQE_BYTES, CQE_BYTES)
            cqe = Cqe.decode(raw)
            if cqe.phase != cqe_phase(self.cq_consumer, self.cq_log2):
                break
            self.cq_consumer += 1
            out.append(self._complete(cqe))
        if out:
            await self.regs.write("cq", "CQ_CONSUMER", self.cq_consumer & 0xFFFF)
        return out

    def _complete(self, cqe: Cqe) -> Completion:
        qp = self.qps.get(cqe.qp)
        if qp is None:
            raise DriverError(f"completion for QP {cqe.qp}, which this driver did not create: {cqe}")
        kind, status = CqeKind(cqe.kind), CqeStatus(cqe.status)
        if kind == CqeKind.SEND:
            if cqe.index not in qp.sq_wr_ids:
                raise DriverError(
                    f"QP {qp.index}: completion for SQ index {cqe.index}, which is not outstanding"
                )
            wr_id = qp.sq_wr_ids.pop(cqe.index)
            qp.outstanding -= 1
            if status != CqeStatus.SUCCESS:
                qp.state = QpState.ERROR
            return Completion(qp.index, kind, status, wr_id, msn=cqe.msn)
        wr_id = qp.rq_wr_ids.popleft() if qp.rq_wr_ids else None
        return Completion(qp.index, kind, status, wr_id, byte_len=cqe.byte_len, imm=cqe.imm, msn=cqe.msn)

    async def wait_completions(
        self, count: int, *, timeout_ns: float = 1e7, step_ns: float = 1000
    ) -> list[Completion]:
        """Poll until ``count`` completions arrived (or ``timeout_ns`` of device time passed)."""
        out: list[Completion] = []
        waited = 0.0
        while len(out) < count:
            out += await self.poll_cq(count - len(out))
            if len(out) >= count:
                break
            if waited >= timeout_ns:
                raise DriverError(f"{len(out)} of {count} completions after {timeout_ns / 1000:g} us")
            await self.t.idle(step_ns)
            waited += step_ns
        return out

    async def close(self) -> None:
        await self.t.close()


def _log2_depth(depth: int, what: str) -> int:
    if depth < 2 or depth > 1 << 15 or depth & (depth - 1):
        raise InvalidParameter(f"{what} depth {depth}: a power of two from 2 to 32768")
    return depth.bit_length() - 1


async def open_nic(transport: Transport, *, cq_depth: int = 256) -> Nic:
    """Open the NIC behind ``transport``: discover its registers, set up the completion queue."""
    nic = Nic(transport)
    await nic._init(cq_depth)
    return nic
