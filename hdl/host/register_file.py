"""Register file: the NIC's register map (``mrcnic.regmap``) behind an AXI4-Lite subordinate port.

Ref: docs/registers.md (generated from the same map); ARM IHI 0022 Part B (AXI4-Lite).

Built from a :class:`~mrcnic.regmap.RegisterMap` and the signature of the core it configures
(``MrcNic``): every register's ``binding`` names a core port, and the register file has a port of the same
name and shape facing the other way, so the top level connects them by name:

* an ``rw`` register bound to a core input (``rto_cycles``, ``config.port_mac[1]``, ``plane_up[2]``) holds
  its value (reset = the map's reset) and drives that input or field;
* an ``ro`` register bound to a core output (``stat_*``, ``now``) reads it; an unbound ``ro`` register
  (identity, capabilities) reads its reset value;
* a TABLE block has staging registers for every field of the record of its core stream, and a port of
  that stream: writing 1 to ``COMMAND`` makes the staged record valid until the core takes it. Writes to
  a table block wait while its record is pending (AXI backpressure: nothing is dropped, and the record
  cannot change under the core); ``STATUS`` = {records taken mod 2^16, readable, pending}.
* a TABLE block with ``read_back`` = (request, answer) also has ports of those two core streams (the
  request's record names the key fields, the answer's the fields it loads; ``Block.read_back``):
  writing 2 to ``COMMAND`` sends the staged key fields on the request stream, and the answer loads its
  fields into their registers. ``STATUS[1]`` reads 1, and ``STATUS[0]`` (pending) is 1 from the command
  until the answer has landed; meanwhile writes to the block wait as for a push, and so do reads of
  the block other than ``STATUS`` (a driver polls ``STATUS[0]``, or simply reads: either way it sees
  the answer). Other ``COMMAND`` values do nothing.

Bus behaviour. One write and one read at a time; a write is taken when address and data are both valid
(1 cycle, then B); a read returns in the next cycle, three cycles later for an event counter (a read is
not taken in a cycle that takes a write).
Strobes select byte lanes. A register wider than 32 bits is written word by word (the core sees each word
as it lands). Addresses inside the map that hold no register read 0 and ignore writes (OKAY); addresses
beyond the map answer DECERR. The address's low two bits are ignored.

Read-back memory. Words that only the bus changes (the block headers, constants, read/write registers
that no read-back answer loads) are read from a block RAM copy written along with the registers, so the
read multiplexer spans only the words the core drives (status, loaded fields): on the ECPIX-5 build the
read multiplexer went from about 2.8 k LUT4s to 1.9 k (docs/benchmarks.md). After a reset the register
file copies the memory's reset image into place before it takes any request: the bus waits
``2**ceil(log2(map words)) + 1`` cycles (513 for the NIC's map of 384 words, about 8 us at 62.5 MHz).

Counters. Event counters (registers with a ``max_step``) are read from a
:class:`~mrcnic.hdl.host.counter_bank.CounterBank`: it samples the low bits of each counter port and keeps
the 32-bit totals in block RAM, so the blocks' counters shrink to those bits in synthesis and the read
multiplexer loses them. A read of a counter is still exact (the bank brings the total up to date for
it) and answers two cycles later than other reads (R three cycles after AR); byte counters and status
words are read directly.
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mrcnic.regmap import Access, BlockType, RegisterMap

from ..dma.axi import AxiResp
from .axil import AxiLiteSignature
from .counter_bank import CounterBank, sample_width_for

__all__ = ["RegisterFile"]


def _port_name(binding: str) -> str:
    return binding.split(".")[0].split("[")[0]


def _fields(layout, prefix: str = "") -> set[str]:
    """The binding paths (``a.b``, ``a.c[2]``) of every leaf field of a record layout."""
    if isinstance(layout, data.StructLayout):
        return set().union(*(_fields(f.shape, f"{prefix}.{name}" if prefix else name) for name, f in layout))
    if isinstance(layout, data.ArrayLayout):
        return set().union(*(_fields(layout.elem_shape, f"{prefix}[{i}]") for i in range(layout.length)))
    return {prefix}


def _select(value, path: str):
    """The part of ``value`` (a port, or a record view) a binding path names: ``a.b[2].c``, ``x[3]``."""
    for part in path.split("."):
        name, _, index = part.partition("[")
        if name:
            value = getattr(value, name)
        if index:
            value = value[int(index[:-1])]
    return value


class RegisterFile(wiring.Component):
    def __init__(self, regmap: RegisterMap, core: wiring.Signature, *, addr_width: int = 16):
        if regmap.size > 1 << addr_width:
            raise ValueError(
                f"the register map ({regmap.size:#x} bytes) does not fit {addr_width} address bits"
            )
        self.regmap, self.addr_width = regmap, addr_width
        steps = [r.max_step for block in regmap.blocks for r in block.registers if r.max_step]
        # A counter read holds the bus until its answer is taken (request, two cycles to the bank's
        # answer, rvalid): the bank's reads come at least four cycles apart. The counters that can grow
        # by more than one a cycle come first in the bank (``fast``): the others keep a bit less.
        count, max_step, read_interval = max(1, len(steps)), max(steps, default=1), 4
        self._bank_params = dict(
            count=count, max_step=max_step, read_interval=read_interval, fast=sum(s > 1 for s in steps)
        )
        # bits the fast counters keep (the others one fewer, when there are fast ones)
        self.counter_sample_width = sample_width_for(count, max_step, read_interval)
        core_members = core.members
        members = {"bus": In(AxiLiteSignature(addr_width=addr_width))}
        for block in regmap.blocks:
            if block.kind == BlockType.TABLE:
                # the core's member is In(stream); its .signature is that stream flipped
                members[block.table] = Out(core_members[block.table].signature.flip())
                for name in block.read_back or ():
                    members[name] = core_members[name].flip()
                continue
            for r in block.registers:
                if r.binding is None:
                    continue
                name = _port_name(r.binding)
                member = core_members[name]
                members[name] = (Out if member.flow == In else In)(member.shape)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        reads: dict[int, object] = {}  # word index -> 32-bit value
        writes: dict[int, list] = {}  # word index -> [(signal, low bit, width)] byte-lane targets
        table_words: dict[int, int] = {}  # word index -> table number (writes wait while it is pending)
        commands: dict[int, tuple] = {}  # word index -> the table's (pending, reading or None) flags
        pending_of: list[Signal] = []
        read_held: dict[int, Signal] = {}  # word index -> reads wait while this is 1 (a read-back)
        # Words whose value only the bus changes (constants, and read/write registers that no read-back
        # answer loads) are read from the read-back memory instead: {word: (reset value, valid bits)}.
        shadowed: dict[int, tuple[int, int]] = {}
        # Event counters (``max_step``): read from the counter bank, {word: port value}.
        banked: dict[int, Value] = {}
        banked_step: dict[int, int] = {}  # word index -> its counter's max_step

        def word(address: int) -> int:
            return address >> 2

        for block in self.regmap.blocks:
            for i, value in enumerate(self.regmap.header(block)):
                shadowed[word(block.base) + i] = (value, 32)
            table = reading = None
            if block.kind == BlockType.TABLE:
                table = len(pending_of)
                record = getattr(self, block.table)
                pending = Signal(name=f"{block.name}_pending")
                taken = Signal(16, name=f"{block.name}_taken")
                pending_of.append(pending)
                if block.read_back:
                    reading = Signal(name=f"{block.name}_reading")  # the pending command is a read-back
                m.d.comb += record.valid.eq(pending if reading is None else pending & ~reading)
                with m.If(record.valid & record.ready):
                    m.d.sync += [pending.eq(0), taken.eq(taken + 1)]
            if reading is not None:
                # COMMAND = 2: the key fields go out on the request once, the answer ends the pending.
                request, answer = (getattr(self, name) for name in block.read_back)
                keys, loaded = _fields(request.payload.shape()), _fields(answer.payload.shape())
                asked = Signal(name=f"{block.name}_asked")
                m.d.comb += [request.valid.eq(pending & reading & ~asked), answer.ready.eq(1)]
                with m.If(request.valid & request.ready):
                    m.d.sync += asked.eq(1)
                with m.If(answer.valid):
                    m.d.sync += [pending.eq(0), reading.eq(0), asked.eq(0)]
            for r in block.registers:
                first = word(block.address(r.name))
                if table is not None:
                    for w in range(r.words):
                        table_words[first + w] = table
                        if reading is not None and r.name != "STATUS":
                            read_held[first + w] = reading
                if table is not None and r.name == "STATUS":
                    reads[first] = (taken << 16) | (int(reading is not None) << 1) | pending
                    continue
                if table is not None and r.name == "COMMAND":
                    commands[first] = (pending, reading)
                    continue
                if r.access == Access.RW:
                    store = Signal(r.width, init=r.reset, name=f"{block.name}_{r.name.lower()}")
                    target = record.payload if table is not None else self
                    target = _select(target, r.binding)
                    m.d.comb += target.eq(store)
                    if reading is not None and r.binding in keys:
                        m.d.comb += _select(request.payload, r.binding).eq(store)
                    if reading is not None and r.binding in loaded:
                        with m.If(answer.valid):
                            m.d.sync += store.eq(_select(answer.payload, r.binding))
                    for w in range(r.words):
                        writes[first + w] = [(store, 32 * w, min(32, r.width - 32 * w))]
                    if reading is not None and r.binding in loaded:
                        for w in range(r.words):
                            reads[first + w] = store[32 * w : 32 * w + 32]
                        continue
                elif r.binding is not None:
                    value = Value.cast(_select(self, r.binding))
                    if r.max_step:
                        banked[first] = value
                        banked_step[first] = r.max_step
                        continue
                    for w in range(r.words):
                        reads[first + w] = value[32 * w : 32 * w + 32]
                    continue
                for w in range(r.words):
                    shadowed[first + w] = ((r.reset >> 32 * w) & 0xFFFF_FFFF, min(32, r.width - 32 * w))

        # -- counter bank: the low bits of every event counter, totals in block RAM (see counter_bank.py)
        bank_words = sorted(banked, key=lambda w: (-banked_step[w], w))  # the fast counters first
        m.submodules.counters = bank = CounterBank(**self._bank_params)
        for i, w in enumerate(bank_words):
            m.d.comb += bank.sample[i].eq(banked[w][: bank.sample_width])

        # -- read-back memory: the bus's reads of ``shadowed`` words come from block RAM, not from a
        # multiplexer over the registers. Upper half: the live copy, written with the registers; lower
        # half: the reset image, never written. After reset the bus waits while a scrub copies the
        # image over the live copy (one word a cycle), so a reset without reconfiguration reads back
        # the reset values, as the registers hold.
        size_words = self.regmap.size >> 2
        half = 1 << max(0, (size_words - 1).bit_length())
        image = [0] * half
        for w, (value, _) in shadowed.items():
            image[w] = value
        m.submodules.shadow = shadow = Memory(shape=32, depth=2 * half, init=image + image)
        shadow_rd = shadow.read_port()
        shadow_wr = shadow.write_port(granularity=8)
        scrub = Signal(range(half + 1))  # next image word to read; ``half``: done
        scrub_copy = Signal()  # the word read last cycle (``scrub - 1``) goes to the live copy now
        scrubbing = Signal()
        m.d.comb += scrubbing.eq((scrub != half) | scrub_copy | ~bank.ready)
        m.d.sync += scrub_copy.eq(scrub != half)
        with m.If(scrub != half):
            m.d.sync += scrub.eq(scrub + 1)

        def one_of(address_word, words):
            hit = Signal()
            with m.Switch(address_word):
                with m.Case(*words):
                    m.d.comb += hit.eq(1)
            return hit

        written = [w for w in shadowed if w in writes]  # the rest are constants

        def valid_bits(address_word):
            """Mask of the bits a word keeps (a narrow register's upper bits read 0)."""
            mask = Signal(32)
            widths = {}
            for w, (_, width) in shadowed.items():
                widths.setdefault(width, []).append(w)
            with m.Switch(address_word):
                for width, words in widths.items():
                    with m.Case(*words):
                        m.d.comb += mask.eq((1 << width) - 1)
            return mask

        # -- write channel: address and data together, then the response
        aw_word = bus.awaddr[2:]
        blocked = Signal()
        with m.Switch(aw_word):
            for w, table in table_words.items():
                with m.Case(w):
                    m.d.comb += blocked.eq(pending_of[table])
        take_write = Signal()
        m.d.comb += take_write.eq(bus.awvalid & bus.wvalid & ~bus.bvalid & ~blocked & ~scrubbing)
        m.d.comb += [bus.awready.eq(take_write), bus.wready.eq(take_write)]
        with m.If(bus.bvalid & bus.bready):
            m.d.sync += bus.bvalid.eq(0)
        with m.If(take_write):
            m.d.sync += bus.bvalid.eq(1)
            with m.If(aw_word >= size_words):
                m.d.sync += bus.bresp.eq(AxiResp.DECERR)
            with m.Else():
                m.d.sync += bus.bresp.eq(AxiResp.OKAY)
            with m.Switch(aw_word):
                for w, targets in writes.items():
                    with m.Case(w):
                        for store, low, width in targets:
                            for lane in range(4):
                                lo = 8 * lane
                                if lo >= width:
                                    break
                                hi = min(lo + 8, width)
                                with m.If(bus.wstrb[lane]):
                                    m.d.sync += store[low + lo : low + hi].eq(bus.wdata[lo:hi])
                for w, (pending, reading) in commands.items():
                    with m.Case(w):
                        with m.If(bus.wstrb[0] & (bus.wdata[:2] == 1)):
                            m.d.sync += pending.eq(1)
                        if reading is not None:
                            with m.If(bus.wstrb[0] & (bus.wdata[:2] == 2)):
                                m.d.sync += [pending.eq(1), reading.eq(1)]

        with m.If(scrubbing):
            m.d.comb += [
                shadow_wr.addr.eq(half + scrub - 1),
                shadow_wr.data.eq(shadow_rd.data),
                shadow_wr.en.eq(Mux(scrub_copy, 0b1111, 0)),
            ]
        with m.Else():
            m.d.comb += [
                shadow_wr.addr.eq(half + aw_word),
                shadow_wr.data.eq(bus.wdata & valid_bits(aw_word)),
                shadow_wr.en.eq(Mux(take_write & one_of(aw_word, written), bus.wstrb, 0)),
            ]

        # -- read channel: the data of the address taken, one cycle later
        with m.If(bus.rvalid & bus.rready):
            m.d.sync += bus.rvalid.eq(0)
        ar_word = bus.araddr[2:]
        read_blocked = Signal()
        with m.Switch(ar_word):
            for w, reading in read_held.items():
                with m.Case(w):
                    m.d.comb += read_blocked.eq(reading)
        take_read = Signal()
        bank_reading = Signal()  # a counter read waits for the bank's answer
        # Not in a cycle that writes: the two memory ports must not meet on one word.
        m.d.comb += [
            take_read.eq(
                bus.arvalid & ~bus.rvalid & ~bank_reading & ~read_blocked & ~scrubbing & ~take_write
            ),
            bus.arready.eq(take_read),
        ]
        from_shadow = Signal()
        to_bank = Signal()
        m.d.comb += to_bank.eq(one_of(ar_word, bank_words) if bank_words else 0)
        register_data = Signal(32)
        with m.Switch(ar_word):
            for i, w in enumerate(bank_words):
                with m.Case(w):
                    m.d.comb += bank.read_addr.eq(i)
        m.d.comb += [
            shadow_rd.addr.eq(Mux(scrubbing, scrub, half + ar_word)),
            shadow_rd.en.eq(Mux(scrubbing, 1, take_read)),
            bank.read_en.eq(take_read & to_bank),
            bus.rdata.eq(Mux(from_shadow, shadow_rd.data, register_data)),
        ]
        with m.If(bank.read_valid):
            m.d.sync += [bus.rvalid.eq(1), bank_reading.eq(0), register_data.eq(bank.read_data)]
        with m.If(take_read):
            m.d.sync += [bus.rvalid.eq(~to_bank), register_data.eq(0), bus.rresp.eq(AxiResp.OKAY)]
            m.d.sync += [from_shadow.eq(one_of(ar_word, shadowed)), bank_reading.eq(to_bank)]
            with m.If(ar_word >= size_words):
                m.d.sync += bus.rresp.eq(AxiResp.DECERR)
            with m.Switch(ar_word):
                for w, value in reads.items():
                    with m.Case(w):
                        m.d.sync += register_data.eq(value)
        return m
