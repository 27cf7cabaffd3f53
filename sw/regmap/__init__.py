"""The NIC's register map: one description from which the gateware's register file, the driver's view
of the device and ``docs/registers.md`` are all made (``python -m mrcnic.regmap`` writes the docs)."""

from .model import HEADER_WORDS, TYPE_PREFIX, Access, Block, BlockType, Register, RegisterMap
from .nic import (
    COUNTERS,
    HOST_COUNTERS,
    HOST_LINK_COUNTERS,
    MAC_COUNTERS,
    MAGIC,
    READ_BACK,
    Capabilities,
    nic_register_map,
)
from .queues import CQE_BYTES, WQE_BYTES, Cqe, CqeKind, CqeStatus, Wqe, WqeOpcode, cqe_phase

__all__ = [
    "COUNTERS",
    "CQE_BYTES",
    "HOST_COUNTERS",
    "HOST_LINK_COUNTERS",
    "MAC_COUNTERS",
    "WQE_BYTES",
    "Cqe",
    "CqeKind",
    "CqeStatus",
    "Wqe",
    "WqeOpcode",
    "cqe_phase",
    "HEADER_WORDS",
    "MAGIC",
    "READ_BACK",
    "TYPE_PREFIX",
    "Access",
    "Block",
    "BlockType",
    "Capabilities",
    "Register",
    "RegisterMap",
    "nic_register_map",
]
