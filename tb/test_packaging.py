"""Packaging and repository contracts: imports, no stray packages, the CLI, generated docs are current."""

import importlib
import importlib.util
import re
import shutil
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


def test_plain_wheel_install_imports_every_package(tmp_path):
    # A non-editable install: build the wheel offline from a copy of the sources (setuptools writes
    # build/ and *.egg-info next to them), unpack it into a folder, import from there only.
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "sw", "hdl", "boards"):
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        copy(ROOT / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + ["-w", tmp_path, source],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    (wheel,) = tmp_path.glob("mrcnic-*.whl")
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", target, wheel],
        check=True,
        capture_output=True,
    )
    top_level = {p.name for p in target.iterdir() if not p.name.endswith((".dist-info", ".data"))} - {"bin"}
    assert top_level == {"mrcnic"}
    probe = (
        f"import sys; sys.path.insert(0, {str(target)!r}); "
        "import mrcnic, mrcnic.hdl, mrcnic.boards, mrcnic.wire, mrcnic.model, mrcnic.fabric; "
        "print(mrcnic.__file__)"
    )
    # -S: no site-packages, so the editable install of the checkout cannot answer the import.
    out = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith(str(target))
