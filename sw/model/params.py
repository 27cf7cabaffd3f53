"""Every parameter of the MRC endpoint model, with its default, in one dataclass.

Times are integer picoseconds (``*_ps``), sizes bytes. The gateware implements the same algorithms with
the same defaults (they become registers); see docs/protocol.md for the protocol side of each value.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..wire import Opcode, header_length

__all__ = ["NS", "US", "Params", "frame_overhead", "wire_bytes"]

NS = 1_000
US = 1_000_000

ICRC = 4
FCS = 4
PREAMBLE_IFG = 20  # 8 preamble/SFD + 12 inter-frame gap


def frame_overhead(srv6: bool = True) -> int:
    """Bytes on the link per data packet besides its payload (headers, ICRC, FCS, preamble, IFG)."""
    return header_length(Opcode.WRITE_MIDDLE, True, srv6) + ICRC + FCS + PREAMBLE_IFG


def wire_bytes(payload: int, srv6: bool = True) -> int:
    return payload + frame_overhead(srv6)


@dataclass
class Params:
    # -- packets -------------------------------------------------------------------------------
    mtu: int = 4096  # payload bytes per data packet (PMTU)
    srv6: bool = True  # SRv6 uSID mode (False: single-IPv6, structured EV)
    hop_limit: int = 8  # >= switch hops + 1
    # -- EV set ----------------------------------------------------------------------------------
    n_evs: int = 128  # EV slots per QP (power of two); slot i is on plane i mod planes
    backup_evs: int = 2  # backup EVs per plane
    ev_min_active: int = 4  # never fewer usable (GOOD or SKIP) slots than this
    lfsr_taps: int = 0xB400
    skip_ecn: int = 1
    skip_trim: int = 4
    skip_max: int = 15
    # -- reliability -----------------------------------------------------------------------------
    window: int = 256  # PSNs
    retry_budget: int = 7
    loss_delta_extra_ps: int = 2 * US  # time rule: delta = target_qdelay + this
    rto_factor: int = 4  # RTO = rto_factor * base_rtt
    # -- receiver -------------------------------------------------------------------------------
    sack_bytes: int = 16384  # coalesced SACK after this much new payload
    sack_delay_ps: int = 2 * US  # ... or this long after the first un-SACKed arrival
    ack_coalesce_ps: int = 1 * US  # transport ACKs: at most one per this period
    # -- probes -----------------------------------------------------------------------------------
    probe_first_ps: int = 20 * US
    probe_max_ps: int = 1000 * US
    probe_successes: int = 3
    # -- NSCC -------------------------------------------------------------------------------------
    base_rtt_ps: int = 8 * US  # set from the topology by the fabric
    line_rate_bps: int = 400_000_000_000  # host aggregate rate (all planes)
    cwnd_bdp_factor: float = 1.5  # initial and max cwnd = factor * BDP
    target_factor: float = 0.75  # target_qdelay = factor * base_rtt
    alpha: float = 1.0  # proportional increase gain
    eta: float = 0.15  # fair increase, MTUs per cwnd of acked bytes
    gamma: float = 0.8
    max_md_jump: float = 0.5
    qa_gate: int = 3  # quick adapt only when bytes acked in the last base_rtt < max_cwnd >> qa_gate
    cc_enabled: bool = True
    # -- DSCP -------------------------------------------------------------------------------------
    trimmable: bool = True  # send data as TRIMMABLE (else NO_TRIM)

    @property
    def target_qdelay_ps(self) -> int:
        return int(self.target_factor * self.base_rtt_ps)

    @property
    def loss_delta_ps(self) -> int:
        return self.target_qdelay_ps + self.loss_delta_extra_ps

    @property
    def rto_ps(self) -> int:
        return self.rto_factor * self.base_rtt_ps

    @property
    def bdp_bytes(self) -> int:
        return int(self.line_rate_bps * self.base_rtt_ps // (8 * 10**12))

    @property
    def max_cwnd(self) -> int:
        return max(int(self.cwnd_bdp_factor * self.bdp_bytes), 2 * self.mtu)
