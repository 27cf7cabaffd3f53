"""Compiler wrapper for Verilator's ``OBJCACHE`` hook: Verilator's runtime library is compiled once.

Every Verilator build folder compiles the same runtime sources (``verilated.cpp``, its VPI, thread and
DPI parts: about 20 s of g++) with the same command, although they depend only on Verilator's own
files. :func:`support.cocotb_runner.run_cocotb` points make's ``OBJCACHE`` at this script, so each
compile command comes here first (``python objcache.py <compiler> <arguments>``):

* a command that compiles a file from ``$VERILATOR_ROOT/include`` into ``-o <name>.o`` is looked up in
  ``$MRCNIC_OBJCACHE_DIR`` by a hash of the whole command line, the compiler and the source file's size
  and time. A hit copies the object and its ``-MMD`` dependency file into place (fresh times, so make
  sees them newer than the generated makefile); a miss compiles and stores them (whole, or not at all).
* any other command (the design's own code, cocotb's ``verilator.cpp``, which includes the design's
  header) runs unchanged.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def _key(command: list[str], source: Path) -> str:
    compiler = shutil.which(command[0]) or command[0]
    facts = [*command, compiler, str(os.stat(compiler).st_mtime_ns if os.path.exists(compiler) else 0)]
    stat = source.stat()
    facts += [str(stat.st_size), str(stat.st_mtime_ns)]
    return hashlib.sha1("\0".join(facts).encode()).hexdigest()[:24]


def main(command: list[str]) -> int:
    cache = os.environ.get("MRCNIC_OBJCACHE_DIR")
    include = Path(os.environ.get("VERILATOR_ROOT", "/nonexistent")) / "include"
    source = Path(command[-1]) if command else Path()
    if not cache or "-o" not in command or include not in source.parents or not source.exists():
        return subprocess.call(command)
    output = Path(command[command.index("-o") + 1])
    depend = output.with_suffix(".d")
    entry = Path(cache) / _key(command, source)
    if (entry / "object").exists():
        shutil.copyfile(entry / "object", output)
        if (entry / "depend").exists():
            shutil.copyfile(entry / "depend", depend)
        return 0
    status = subprocess.call(command)
    if status == 0 and output.exists():
        Path(cache).mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=cache, prefix=".new-"))
        shutil.copyfile(output, staging / "object")
        if depend.exists():
            shutil.copyfile(depend, staging / "depend")
        try:
            staging.rename(entry)  # atomic: a parallel build sees the whole entry or none
        except OSError:  # another build stored it first
            shutil.rmtree(staging, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
