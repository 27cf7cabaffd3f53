"""pytest configuration shared by every test: puts tb/ on sys.path for the `support` helpers, and starts
the long tests first.

Tests marked ``long`` (a Verilator build of a large design and minutes of simulation) are moved to the
front of the run, longest first by their ``seconds`` estimate. pytest-xdist hands tests out in this
order, so the long ones run side by side from the start and the many short tests fill the gaps, instead
of one long test starting last and running alone at the end.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def pytest_collection_modifyitems(config, items):
    def estimate(item) -> float:
        marker = item.get_closest_marker("long")
        return float(marker.kwargs.get("seconds", 60)) if marker is not None else 0.0

    items.sort(key=estimate, reverse=True)  # stable: the rest keeps its collection order
