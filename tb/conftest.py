"""pytest configuration shared by every test: puts tb/ on sys.path for the `support` helpers."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
