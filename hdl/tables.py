"""Where a small table lives on the FPGA.

Yosys maps every ``lib.memory.Memory`` it can to LUT RAM on the ECP5: TRELLIS_DPR16X4, 16 words of 4 bits,
which nextpnr counts as six logic cells (two slices of RAM and its write port's). A per-QP table of a
NIC built for one or two QPs uses one or two of those 16 words: 1.5 logic cells per bit for almost
nothing. In flip-flops the same table costs one flip-flop per bit and word (their clock enable is the
word's write enable, so writing takes no LUT) and a 2:1 multiplexer per bit to read: a LUT4 per bit
(measured: a 190-bit table of two words, 288 logic cells and 190 flip-flops in LUT RAM, 192 LUT4 and
570 flip-flops in logic). Logic cells are what the two-plane boards run out of, so small tables go to
flip-flops (docs/boards.md, "LUT-RAM costs three times what it seems").
"""

__all__ = [
    "REGISTER_TABLE_MAX_DEPTH",
    "UNDEFINED_COLLISIONS",
    "YOSYS_UNDEFINED_COLLISIONS",
    "small_table_attrs",
]

# Deepest table kept in flip-flops: at three words and more the read multiplexer costs more than the
# LUT RAM saves.
REGISTER_TABLE_MAX_DEPTH = 2


def small_table_attrs(depth: int) -> dict[str, str]:
    """``Memory(attrs=...)`` for a table of ``depth`` words: flip-flops (Yosys ``ram_style = "logic"``)
    up to :data:`REGISTER_TABLE_MAX_DEPTH` words, the synthesiser's choice above."""
    return {"ram_style": "logic"} if depth <= REGISTER_TABLE_MAX_DEPTH else {}


# ``Memory(attrs=...)`` of a table whose read port never reads, in a cycle that matters, the word its
# write port is writing in that cycle (the block's own sequencing rules it out). Yosys may then leave
# read-during-write undefined (``no_rw_check``; boards/build.py applies it) and map the table to block RAM
# as it is. Without it Yosys keeps Amaranth's semantics (old data), which the ECP5's pseudo dual-port
# block RAM does not have, by a copy of the written word and a multiplexer after the RAM: one flip-flop
# and one LUT4 per bit (the retransmitter's 250-bit descriptors: 261 cells).
UNDEFINED_COLLISIONS = {"no_rw_check": 1}

# Yosys script step (after ``memory_collect``; boards/build.py): the memories marked ``no_rw_check`` (the
# host memory, 2 read x 2 write ports; the NIC's tables, 1 x 1) have undefined read-during-write between
# their ports, which lets ``memory_libmap`` use the block RAM as it is (here DP16KD true dual-port
# blocks). The mask has a bit per (read port, write port) pair, so one step per shape.
YOSYS_UNDEFINED_COLLISIONS = "; ".join(
    f"setparam -set RD_COLLISION_X_MASK {r * w}'b{'1' * (r * w)} "
    f"t:$mem_v2 a:no_rw_check %i r:RD_PORTS={r} %i r:WR_PORTS={w} %i"
    for r in (1, 2)
    for w in (1, 2)
)
