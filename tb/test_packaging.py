"""Packaging and repository contracts: imports, no stray packages, the CLI, generated docs are current."""

import importlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

import mrcnic
from mrcnic.wire.doc import update_document

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIRS = {"mrcnic": ROOT / "sw", "mrcnic.hdl": ROOT / "hdl", "mrcnic.boards": ROOT / "boards"}


def _declared_packages():
    text = (ROOT / "pyproject.toml").read_text()
    line = next(line for line in text.splitlines() if line.startswith("packages = ["))
    return re.findall(r'"([^"]+)"', line)


def test_every_package_folder_is_declared():
    # setuptools installs only the packages listed in pyproject.toml: a new sub-package must be added.
    found = set()
    for prefix, folder in PACKAGE_DIRS.items():
        for init in folder.rglob("__init__.py"):
            rel = init.parent.relative_to(folder)
            found.add(".".join([prefix, *rel.parts]))
    assert found == set(_declared_packages())


@pytest.mark.parametrize("name", ["mrcnic", "mrcnic.wire", "mrcnic.hdl", "mrcnic.boards"])
def test_imports(name):
    importlib.import_module(name)


def test_no_stray_top_level_packages():
    for stray in ("sw", "hdl", "boards"):
        spec = importlib.util.find_spec(stray)
        assert spec is None or Path(spec.origin or "").parent.parent != ROOT / ".venv", stray


def test_console_entry_point():
    out = subprocess.run(
        [sys.executable, "-m", "mrcnic", "--help"], capture_output=True, text=True, check=True
    )
    assert "wire" in out.stdout
    assert mrcnic.__version__


def test_protocol_document_field_tables_are_current(tmp_path):
    doc = ROOT / "docs" / "protocol.md"
    copy = tmp_path / "protocol.md"
    copy.write_text(doc.read_text())
    assert not update_document(copy), (
        "docs/protocol.md is stale: run python -m mrcnic.wire.doc --write docs/protocol.md"
    )
