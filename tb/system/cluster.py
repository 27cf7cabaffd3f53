"""Several MRC NICs in one Verilator model, for system tests: ports ``nic<i>__<port>``.

One simulation with all NICs shares one clock and one cocotb process; the fabric between them is Python
(:mod:`mrcnic.fabric`), driven by :mod:`system.bench`.
"""

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mrcnic.hdl.host.nic_top import MrcNicTop

__all__ = ["BUILD_NAME", "NicCluster", "design"]

BUILD_NAME = "nic_cluster"  # one Verilator build per configuration, shared by the system and driver tests


class NicCluster(wiring.Component):
    """``count`` whole NICs (``MrcNicTop``: registers, queues in host memory, the core), or ``count``
    instances of another ``component`` taking the same parameters."""

    def __init__(self, count: int, component=MrcNicTop, **nic_params):
        self.count = count
        self.nic_params = nic_params
        self._nics = [component(**nic_params) for _ in range(count)]
        super().__init__({f"nic{i}": Out(nic.signature) for i, nic in enumerate(self._nics)})

    def elaborate(self, platform):
        m = Module()
        for i, nic in enumerate(self._nics):
            m.submodules[f"nic{i}"] = nic
            outer = getattr(self, f"nic{i}")
            # Port by port (wiring.connect cannot flip interfaces that hold arrays of interfaces).
            for path, member, inner in nic.signature.flatten(nic):
                port = outer
                for step in path:
                    port = port[step] if isinstance(step, int) else getattr(port, step)
                if member.flow == In:
                    m.d.comb += inner.eq(port)
                else:
                    m.d.comb += port.eq(inner)
        return m


def design(params: dict):
    """The cluster of a system configuration's ``build_params()`` (``system.bench.SystemConfig``)."""
    nic_params = {k: v for k, v in params.items() if k != "nics"}
    return lambda: NicCluster(params["nics"], **nic_params, clock_hz=250_000_000)
