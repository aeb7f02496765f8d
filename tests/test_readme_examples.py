"""Every Python example in README.md runs as written (as Django and Lightning test their documented
examples): each ```python block is written to a file and run in a child process, in a temporary working
folder, with ``$STABILITY_STORE`` (and ``$STABILITY_HOME``, ``$STABILITY_DATA``) in a temporary folder so
nothing touches ``~/.stability``. A block fails on any error (a ``NameError`` from a name it never
defined first of all); a block that prints shows what it prints (every line it prints stands in its
text, as a comment); the watch examples leave a completed run with its readings in the store.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
TIMEOUT_S = 120  # each block trains 100 steps at most: seconds on one core, minutes only on a machine in trouble

FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[ \t]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
                   re.MULTILINE | re.DOTALL)


def python_blocks() -> list[tuple[str, str]]:
    """(name, code) of every ```python block of the README: the name is the section it stands in and its
    place there (``watch-your-own-model-2``)."""
    text = README.read_text(encoding="utf-8")
    blocks, seen = [], {}
    for match in FENCE.finditer(text):
        if match.group("lang").lower() not in ("python", "py", "python3"):
            continue
        headings = re.findall(r"^#+ (.+)$", text[: match.start()], re.MULTILINE)
        section = re.sub(r"\W+", "-", headings[-1].lower()).strip("-") if headings else "top"
        seen[section] = seen.get(section, 0) + 1
        blocks.append((f"{section}-{seen[section]}", textwrap.dedent(match.group("body"))))
    return blocks


BLOCKS = python_blocks()


def test_the_readme_has_its_examples():
    """The extraction sees the blocks (a fence it cannot read would make every other test here vacuous)."""
    text = README.read_text(encoding="utf-8")
    assert len(BLOCKS) == text.count("```python") >= 5
    watching = [code for _, code in BLOCKS if "stability.watch" in code]
    assert len(watching) == 2, "the plain loop and the Lightning callback"
    for code in watching:
        assert "nn.LSTM(" in code and 'tasks.build("adding"' in code, code


def _run(code: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    script = work / "example.py"
    script.write_text(code, encoding="utf-8")
    store = tmp_path / "store" / "runs.db"
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "STABILITY_STORE": str(store), "STABILITY_HOME": str(home), "STABILITY_DATA": str(home / "data"),
           "OMP_NUM_THREADS": "1",  # one core each: the test's speed, not the example's; the example is as written
           "PYTHONUNBUFFERED": "1"}
    try:
        done = subprocess.run([sys.executable, str(script)], cwd=work, env=env, capture_output=True, text=True,
                              timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"the example did not end within {TIMEOUT_S} s:\n{code}\n{error.stderr or ''}")
    return done, store


@pytest.mark.parametrize("code", [code for _, code in BLOCKS], ids=[name for name, _ in BLOCKS])
def test_a_readme_example_runs_as_written(code, tmp_path):
    if re.search(r"^\s*(import|from) (lightning|pytorch_lightning)\b", code, re.MULTILINE):
        pytest.importorskip("lightning", reason="the Lightning example needs the [lightning] extra")
    done, store = _run(code, tmp_path)
    assert done.returncode == 0, (f"the README example stopped (exit {done.returncode}):\n{code}\n"
                                  f"--- its last lines:\n{done.stderr[-3000:]}")
    if re.search(r"\bprint\(", code):
        shown = [line.strip() for line in done.stdout.splitlines() if line.strip()]
        assert shown, "the example prints nothing though it calls print"
        for line in shown:
            assert line in code, f"the example prints {line!r}, which the README does not show beside it"
    if store.exists():
        from stability import RunStore

        with RunStore(store) as runs:
            records = runs.records()
            assert all(record.status != "failed" for record in records), [(r.name, r.error) for r in records]
            if "stability.watch" in code:  # the plain loop and the Lightning callback: a whole watched run
                (record,) = records
                assert (record.name, record.status, record.step) == ("my lstm", "completed", 100)
                names = set(runs.metrics(record.id)["name"])
                assert {"train/loss", "grad/h0_norm_train", "sv/max", "gate/forget"} <= names, sorted(names)
    elif "stability.watch" in code or "RunStore(" in code:
        pytest.fail("the example was to store its run in $STABILITY_STORE, and there is no store")
