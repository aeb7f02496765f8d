"""Damaged store files for the tests of the store and the CLI."""
from pathlib import Path


def corrupt(path: Path, where: str) -> None:
    """Overwrite pages with garbage (what a bad disk or a stray write leaves): every page after
    the first ("all but the header") or the second half of the file, where the metric rows are
    ("the metric pages": the runs table still reads)."""
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    start = page if where == "all but the header" else len(data) // 2 // page * page
    data[start:] = bytes((i * 37 + 11) % 256 for i in range(len(data) - start))
    path.write_bytes(bytes(data))
