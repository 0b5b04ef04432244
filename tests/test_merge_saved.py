"""bench/merge_saved.py's statement measure on synthetic modules: what the maintainers added, per enclosing
function, and when a merge output holds it (outside conflict regions, or on the release's side of one)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import merge_saved as ms  # noqa: E402

OLD = """\
import os


class Runner:
    def run(self, x):
        y = x + 1
        if y:
            return y
        return 0

    def stop(self):
        pass
"""

NEW = """\
import os
import sys


class Runner:
    def run(self, x):
        if y:
            return y
        y = x  +  1
        try:
            self.log(y)
        except ValueError as exc:
            raise
        return 0

    def stop(self):
        y = x + 1
        pass
"""


def _added(old: str = OLD, new: str = NEW) -> list[tuple[str, str]]:
    return [(s.function, s.text) for s in ms.added_statements({"m.py": old}, {"m.py": new})]


def test_added_per_enclosing_function_layout_and_order_aside() -> None:
    assert _added() == [
        ("<module>", "import sys"),
        ("Runner.run", "try:"),
        ("Runner.run", "self.log(y)"),
        ("Runner.run", "except ValueError as exc:"),
        ("Runner.run", "raise"),
        # the same text in another function is new there
        ("Runner.stop", "y = x + 1"),
    ]


def test_added_a_new_module_whole_and_each_text_once() -> None:
    got = ms.added_statements({}, {"n.py": "a = 1\na = 1\ndef f():\n    a = 1\n"})
    assert [(s.function, s.text, s.line) for s in got] == [
        ("<module>", "a = 1", 1),
        ("<module>", "def f():", 3),
        ("f", "a = 1", 4),
    ]


def _region(series: str, base: str, release: str) -> str:
    return f"<<<<<<< series\n{series}||||||| ancestor\n{base}=======\n{release}>>>>>>> release\n"


def test_missing_counts_the_release_side_of_a_region_and_not_the_series_side() -> None:
    wanted = ms.added_statements({"m.py": "def f():\n    a = 1\n"}, {"m.py": "def f():\n    a = 1\n    b = 2\n"})
    on_release = "def f():\n    a = 1\n" + _region("    c = 3\n", "", "    b = 2\n")
    on_series = "def f():\n    a = 1\n" + _region("    b = 2\n", "", "    c = 3\n")
    elsewhere = "b = 2\ndef f():\n    a = 1\n"  # outside its function: not the statement
    assert ms.missing(wanted, {"m.py": on_release}) == ([], [])
    assert [s.text for s in ms.missing(wanted, {"m.py": on_series})[0]] == ["b = 2"]
    assert [s.text for s in ms.missing(wanted, {"m.py": elsewhere})[0]] == ["b = 2"]
    assert [s.text for s in ms.missing(wanted, {})[0]] == ["b = 2"]


def test_missing_reads_a_module_that_does_not_parse_by_first_lines() -> None:
    wanted = ms.added_statements({"m.py": "def f():\n    a = 1\n"}, {"m.py": "def f():\n    a = 1\n    b  =  2\n"})
    broken = "def f(:\n    a = 1\n    b = 2\n"
    assert ms.missing(wanted, {"m.py": broken}) == ([], ["m.py"])
    assert ms.missing(wanted, {"m.py": "def f(:\n    a = 1\n"})[1] == ["m.py"]
    assert len(ms.missing(wanted, {"m.py": "def f(:\n    a = 1\n"})[0]) == 1


def test_marker_problems() -> None:
    assert ms.marker_problems("m.py", "x\n" + _region("a\n", "b\n", "c\n")) == []
    two_way = "<<<<<<< series\na\n=======\nc\n>>>>>>> release\n"
    assert ms.marker_problems("m.py", two_way) == ["m.py:3: `=======` where `|||||||` was due (region from line 1)"]
    assert ms.marker_problems("m.py", "<<<<<<< series\na\n||||||| b\n") == ["m.py:1: region not closed"]


def test_held_merged_a_statement_the_series_added_an_argument_to() -> None:
    old = {"m.py": "def f():\n    g(\n        a=1,\n    )\n"}
    new = {"m.py": "def f():\n    g(\n        a=1,\n        b=2,\n    )\n"}
    (wanted,) = ms.added_statements(old, new)
    merged = {"m.py": "def f():\n    g(\n        a=1,\n        c=3,\n        b=2,\n    )\n"}
    dropped = {"m.py": "def f():\n    g(\n        a=1,\n        c=3,\n    )\n"}
    assert ms.missing([wanted], merged)[0] == [wanted]  # not as the release wrote it
    assert ms.held_merged(wanted, old, new, merged)  # but every line it wrote new is there
    assert not ms.held_merged(wanted, old, new, dropped)


def test_duplicated_counts_what_neither_side_holds_as_often() -> None:
    ours = {"m.py": "import a\nx = 1\n"}
    theirs = {"m.py": "import a\ny = 2\n"}
    out = {"m.py": "import a\nimport a\nx = 1\ny = 2\n"}
    assert ms.duplicated(out, ours, theirs) == [{"file": "m.py", "line": "import a", "extra": 1}]
