"""Run cocotb tests on Verilator against an Amaranth design, from pytest.

One call, :func:`run_cocotb`, does everything a test needs:

* converts the Amaranth component to Verilog (``build/sim/<design>/<config>/<top>.v``) and fails with
  the module's name if any module is over ``MODULE_VERILOG_LIMIT`` (:func:`check_verilog_size`),
* builds it with Verilator once per design configuration (the folder is shared by every test of that
  configuration and guarded by a file lock, so parallel pytest workers never build it twice at once),
* runs the named cocotb test module in its own run folder and fails the pytest test if any cocotb
  test failed.

Environment knobs:

``SEED=<n>``
    random seed for the cocotb run (printed on every run, so a failure can be reproduced).
``WAVES=1``
    record waveforms (FST when the system has ``lz4.h`` for Verilator's FST writer, VCD otherwise)
    into the run folder; the path is printed.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import random
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from amaranth.back import verilog

from mrcnic.toolchain import apply_tool_environment

__all__ = ["BUILD_ROOT", "MODULE_VERILOG_LIMIT", "run_cocotb", "dut_params", "check_verilog_size"]

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_ROOT = REPO_ROOT / "build" / "sim"
PARAMS_ENV = "MRCNIC_TEST_PARAMS"


def _slug(params: Mapping[str, object]) -> str:
    if not params:
        return "default"
    text = "-".join(f"{k}{v}" for k, v in sorted(params.items()))
    text = re.sub(r"[^A-Za-z0-9_.=-]+", "_", text)
    if len(text) > 60:
        text = text[:40] + "-" + hashlib.sha1(text.encode()).hexdigest()[:10]
    return text


# The largest module any test builds is the NIC's register file, about 0.6 MB of Verilog. A block whose
# description grows much past that has usually lost its structure (a 256-PSN SACK tracker once came out
# as 9.4 MB where 86 kB do, and took the system tests' Verilator build from minutes to over a quarter of
# an hour): that is a failure with the module's name, not a slower suite.
MODULE_VERILOG_LIMIT = 1_500_000


def check_verilog_size(text: str, limit: int = MODULE_VERILOG_LIMIT) -> None:
    """Raises ``ValueError`` naming every module of the Verilog ``text`` larger than ``limit``
    characters, largest first."""
    modules = re.split(r"(?m)^module ", text)[1:]
    sizes = sorted(((len(body), body.split("(", 1)[0].strip()) for body in modules), reverse=True)
    over = [f"{name} ({size:,} characters)" for size, name in sizes if size > limit]
    if over:
        raise ValueError(
            f"generated Verilog modules over {limit:,} characters: {', '.join(over)}; a block that big "
            "usually lost its structure (see MODULE_VERILOG_LIMIT)"
        )


def _fst_available() -> bool:
    return Path("/usr/include/lz4.h").exists()


def _forget_other_compile_flags(build_dir: Path, toplevel: str) -> None:
    """make does not track compiler flags: objects (and precompiled headers, which g++ must not mix
    with other optimisation levels) built with other flags are removed, so everything is rebuilt."""
    words = os.environ.get("MAKEFLAGS", "").split()  # also make's own flags under `make test`: skip them
    flags = " ".join(w for w in words if w.startswith(("OPT", "CFG_CXXFLAGS")))
    stamp = build_dir / "compile_flags.txt"
    if stamp.exists() and stamp.read_text() == flags:
        return
    for pattern in ("*.o", "*.gch", "*.a", toplevel):
        for path in build_dir.glob(pattern):
            path.unlink()
    stamp.write_text(flags)


def dut_params() -> dict:
    """Inside a cocotb test: the parameters the pytest side passed to :func:`run_cocotb`."""
    return json.loads(os.environ.get(PARAMS_ENV, "{}"))


def run_cocotb(
    design: Callable[[], object],
    *,
    name: str,
    module: str,
    params: Mapping[str, object] | None = None,
    testcase: str | list[str] | None = None,
    toplevel: str = "top",
    extra_env: Mapping[str, str] | None = None,
    build_args: list[str] | None = None,
    test_dir_suffix: str = "",
    run_params: Mapping[str, object] | None = None,
) -> Path:
    """Build ``design()`` (an Amaranth component) for Verilator and run cocotb tests on it.

    ``name`` and ``params`` identify the configuration: every call with the same pair shares one
    Verilator build. ``params`` are also handed to the cocotb test as :func:`dut_params`, unless
    ``run_params`` is given (extra run-time settings that must not change the build).
    Returns the path of the results file.
    """
    apply_tool_environment()
    from cocotb_tools.runner import get_runner

    params = dict(params or {})
    waves = os.environ.get("WAVES", "0") not in ("", "0")
    config = _slug(params) + ("-waves" if waves else "")
    build_dir = BUILD_ROOT / name / config
    build_dir.mkdir(parents=True, exist_ok=True)

    seed = int(os.environ["SEED"]) if os.environ.get("SEED") else random.randrange(1 << 31)
    print(f"[cocotb] design {name}/{config} module {module} seed {seed} (SEED={seed} reproduces)")

    # Only the top level's own signals are made visible to cocotb: cocotb's default (every signal of
    # every module public) makes Verilator emit a huge symbol-table constructor that takes g++ minutes
    # on large designs. Tests use top-level ports only. Simulation code is built with -O1, the
    # run-once construction code without optimisation (Verilator's OPT_FAST/OPT_SLOW).
    visibility = build_dir / "top_public.vlt"
    visibility.write_text(f'`verilator_config\npublic_flat_rw -module "{toplevel}" -var "*"\n')
    args = ["-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "--no-public-flat-rw", str(visibility)]
    if waves and _fst_available():
        args.append("--trace-fst")
    args += list(build_args or [])

    # Verilator's runtime library is compiled once for all builds (support/objcache.py).
    os.environ["OBJCACHE"] = f"{sys.executable} {Path(__file__).with_name('objcache.py')}"
    os.environ["MRCNIC_OBJCACHE_DIR"] = str(BUILD_ROOT / "objcache")
    runner = get_runner("verilator")
    with open(build_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        source = build_dir / f"{toplevel}.v"
        text = verilog.convert(design(), name=toplevel, emit_src=False)
        check_verilog_size(text)
        # Rewrite only on change, so Verilator and make see an up-to-date build and skip it.
        if not source.exists() or source.read_text() != text:
            source.write_text(text)
        _forget_other_compile_flags(build_dir, toplevel)
        runner.build(
            sources=[source],
            hdl_toplevel=toplevel,
            build_dir=build_dir,
            build_args=args,
            timescale=("1ns", "1ps"),
            waves=waves,
            always=False,
            log_file=build_dir / "build.log",
        )

    test_name = os.environ.get("PYTEST_CURRENT_TEST", "manual").split(" ")[0]
    run_id = re.sub(r"[^A-Za-z0-9_.-]+", "_", test_name.split("::")[-1])[:80] + test_dir_suffix
    test_dir = build_dir / "runs" / run_id
    env = {PARAMS_ENV: json.dumps(dict(run_params) if run_params is not None else params)}
    env.update(extra_env or {})
    results = runner.test(
        test_module=module,
        hdl_toplevel=toplevel,
        testcase=testcase,
        seed=seed,
        build_dir=build_dir,
        test_dir=test_dir,
        extra_env=env,
        waves=waves,
        timescale=("1ns", "1ps"),
    )
    if waves:
        for wave in sorted(test_dir.glob("*.fst")) + sorted(test_dir.glob("*.vcd")):
            print(f"[cocotb] waveform: {wave}", file=sys.stderr)
    return results
