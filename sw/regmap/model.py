"""The pieces of a self-describing register map: registers, blocks, and the linked list they form.

The host sees 32-bit registers at byte addresses. The map is a linked list of *register blocks*, as in
Corundum (``docs/source/rb/index.rst`` there): each block starts with a four-word header

    +0x0  TYPE     [31:16] = 0x4D52 ("MR"), [15:0] = :class:`BlockType`
    +0x4  VERSION  [31:16] major, [15:8] minor, [7:0] patch of the block's layout
    +0x8  NEXT     byte address of the next block; 0 ends the list
    +0xC  INFO     block-specific (the plane of a PORT block, the table of a TABLE block, ...)

followed by its registers from +0x10. A driver reads the first block at address 0 and walks ``NEXT``, so
it finds blocks by type and needs no address table; a register wider than 32 bits takes consecutive
words, least significant word first.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

__all__ = [
    "HEADER_WORDS",
    "TYPE_PREFIX",
    "Access",
    "Block",
    "BlockType",
    "Register",
    "RegisterMap",
]

TYPE_PREFIX = 0x4D52  # "MR"
HEADER_WORDS = 4
BLOCK_ALIGN = 0x40  # every block starts on a 64-byte boundary (easy to read in a hex dump)


class BlockType(enum.IntEnum):
    NIC_ID = 0x0001  # identity and capabilities
    PORT = 0x0002  # one plane port: link, addresses, frame counters
    TRANSPORT = 0x0003  # addressing and header fields of every packet
    RELIABILITY = 0x0004  # timers and budgets of the reliability layer
    PATHS = 0x0005  # EV state machine and prober parameters
    CONGESTION = 0x0006  # NSCC window parameters
    TABLE = 0x0010  # a write port into one of the NIC's tables (QP, MR, EV, route)
    QP_QUEUES = 0x0020  # the send queue and receive credits of one QP
    COMPLETION_QUEUE = 0x0021  # the completion queue
    COUNTERS = 0x0030  # event counters


class Access(enum.Enum):
    RW = "rw"  # read/write register
    RO = "ro"  # read-only status or counter (writes are ignored)
    WO = "wo"  # command: a write acts (reads return 0)


@dataclass(frozen=True)
class Register:
    """One register. ``binding``: what it connects to in the gateware: a port of the NIC core (``rto_cycles``,
    ``config.port_mac[1]``, ``stat_tx_packets``), or for a TABLE block a field of the record it stages.
    ``max_step``: for an event counter (32-bit, read-only), the most it can grow by in one core cycle;
    the register file keeps such counters in its counter bank (``mrcnic.hdl.host.counter_bank``), whose
    reads lag the events by a few hundred cycles at most. 0: read directly (status, byte counters)."""

    name: str
    doc: str
    width: int = 32
    access: Access = Access.RW
    reset: int = 0
    binding: str | None = None
    max_step: int = 0

    @property
    def words(self) -> int:
        return -(-self.width // 32)

    def __post_init__(self):
        if not 1 <= self.width <= 128:
            raise ValueError(f"register {self.name}: width {self.width} outside 1..128")
        if self.reset >> self.width:
            raise ValueError(f"register {self.name}: reset {self.reset:#x} does not fit {self.width} bits")
        if self.max_step and (self.width != 32 or self.access != Access.RO or self.binding is None):
            raise ValueError(f"register {self.name}: only a bound 32-bit read-only counter has a max_step")


@dataclass
class Block:
    """A register block. ``info`` is its header's INFO word; ``table``: for a TABLE block, the NIC stream
    its COMMAND register pushes the staged record into. ``read_back``: for a TABLE block whose entries can
    be read back (``COMMAND`` = 2), the NIC streams ``(request, answer)``: the request's record holds the
    key fields (those registers whose binding is one of its fields), the answer's the fields it loads
    into their registers."""

    kind: BlockType
    name: str
    doc: str
    registers: list[Register]
    version: tuple[int, int, int] = (0, 1, 0)
    info: int = 0
    table: str | None = None
    read_back: tuple[str, str] | None = None
    base: int = 0  # byte address, set by RegisterMap
    offsets: dict[str, int] = field(default_factory=dict)  # register name -> byte offset in the block

    @property
    def type_word(self) -> int:
        return (TYPE_PREFIX << 16) | int(self.kind)

    @property
    def version_word(self) -> int:
        major, minor, patch = self.version
        return (major << 16) | (minor << 8) | patch

    @property
    def size(self) -> int:
        """Bytes, header included."""
        return 4 * (HEADER_WORDS + sum(r.words for r in self.registers))

    def register(self, name: str) -> Register:
        for r in self.registers:
            if r.name == name:
                return r
        raise KeyError(f"block {self.name} has no register {name}")

    def address(self, name: str) -> int:
        return self.base + self.offsets[name]


class RegisterMap:
    """Blocks laid out from address 0, each on a :data:`BLOCK_ALIGN` boundary, linked in order."""

    def __init__(self, blocks: list[Block]):
        names = [b.name for b in blocks]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate block names in {names}")
        self.blocks = blocks
        address = 0
        for block in blocks:
            block.base = address
            offset = 4 * HEADER_WORDS
            block.offsets = {}
            for r in block.registers:
                if r.name in block.offsets:
                    raise ValueError(f"block {block.name}: duplicate register {r.name}")
                block.offsets[r.name] = offset
                offset += 4 * r.words
            address += -(-block.size // BLOCK_ALIGN) * BLOCK_ALIGN
        self.size = address

    def __getitem__(self, name: str) -> Block:
        for b in self.blocks:
            if b.name == name:
                return b
        raise KeyError(f"no register block {name!r}")

    def next_of(self, block: Block) -> int:
        i = self.blocks.index(block)
        return self.blocks[i + 1].base if i + 1 < len(self.blocks) else 0

    def header(self, block: Block) -> list[int]:
        """The four header words of ``block``."""
        return [block.type_word, block.version_word, self.next_of(block), block.info]

    def words(self):
        """Every word of the map: ``(address, block, register or None, word index)``; header words have
        ``register`` None and index 0..3."""
        for block in self.blocks:
            for i in range(HEADER_WORDS):
                yield block.base + 4 * i, block, None, i
            for r in block.registers:
                for w in range(r.words):
                    yield block.base + block.offsets[r.name] + 4 * w, block, r, w
