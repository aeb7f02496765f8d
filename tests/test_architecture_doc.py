"""docs/architecture.md's rooms table is the tree (issue 34, item 6): a row for every room of stability/ and
no row for a room that is gone, and every module a row names (``name.py``) is in its room."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text()
ROWS = dict(re.findall(r"^\| `(\w+)/`[^|]*\| (.*)$", DOC, re.M))


def test_every_room_has_a_row_and_every_row_a_room():
    rooms = {path.name for path in (ROOT / "stability").iterdir() if (path / "__init__.py").is_file()}
    rows = set(ROWS) - {"pages"}  # pages/ and app.py: outside the package, a row of their own
    assert rooms == rows, f"rooms without a row: {sorted(rooms - rows)}; rows without a room: {sorted(rows - rooms)}"


def test_every_module_a_row_names_is_in_its_room():
    missing = [f"{room}/{name}" for room, text in ROWS.items() if room != "pages"
               for name in re.findall(r"`([a-z_]+\.py)`", text) if not (ROOT / "stability" / room / name).is_file()]
    assert not missing, f"docs/architecture.md names modules that are not there: {missing}"


def test_no_design_note_outside_the_repository():
    for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "stability").rglob("*.py")]:
        assert "shared/DESIGN.md" not in path.read_text(), f"{path.relative_to(ROOT)} points outside the repository"
    assert "](cli.md)" in DOC and (ROOT / "docs" / "cli.md").is_file()
