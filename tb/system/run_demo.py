"""``make demo``: build the two-NIC Verilator model (shared with the system tests), run the demo, report.

Options (environment): ``DEMO_SIZE`` (bytes, default 4 MiB), ``SEED``, ``WAVES=1`` (waveforms; large).
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tb"))

from support.cocotb_runner import run_cocotb  # noqa: E402
from system import report  # noqa: E402
from system.cluster import BUILD_NAME, design  # noqa: E402
from system.test_system import BASE  # noqa: E402


def main() -> int:
    out = ROOT / "build" / "demo"
    (out / "timeline.json").unlink(missing_ok=True)
    size = int(os.environ.get("DEMO_SIZE", 4 << 20))
    params = BASE.build_params()
    print(
        f"mrcnic demo: 2 RTL NICs, {BASE.planes} planes, a {size / 2**20:.1f} MiB RDMA WRITE, "
        "a T0-T1 link of plane 1 fails mid-transfer and comes back"
    )
    os.environ.setdefault("SEED", "1")
    run_cocotb(
        design(params),
        name=BUILD_NAME,
        module="system.demo_test",
        params=params,
        testcase="demo",
        test_dir_suffix="-demo",
        run_params={"out": str(out), "size": size, "seed": int(os.environ["SEED"])},
        extra_env={"COCOTB_LOG_LEVEL": "WARNING", "PYTHONWARNINGS": "ignore::DeprecationWarning"},
    )
    if not (out / "timeline.json").exists():
        print("the simulation ended without results; its log is above", file=sys.stderr)
        return 1
    summary = report.main(str(out))
    print()
    report.print_summary(summary)
    print(f"\n  report: {out / 'summary.json'}, plot: {out / 'throughput.png'}, capture: {out / 'wire.pcap'}")
    return 0 if summary["data_verified"] else 1


if __name__ == "__main__":
    sys.exit(main())
