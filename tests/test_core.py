"""Unit tests of the pure core on small synthetic cases: symbols, projection, queue format, replay helpers."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from patch_queue.errors import PqError, QueueError
from patch_queue.git.repo import ProjectRepo
from patch_queue.merge import checked, symbols
from patch_queue.series import adopt, queue, replay, rerere, stack

UP_FILE = "vllm_ascend/worker/model_runner_v1.py"

SOURCE = '''import x


# about Runner
class Runner(Base):
    attr = 1

    # glued comment
    @decorator
    def first(self,
              a):
        return a
        # trailing comment of first

    def second(self):
        """Doc."""
        pass


def helper():
    return 1
'''


def test_symbol_extents_keep_decorators_and_comments() -> None:
    found = symbols.symbols_ast(SOURCE)
    first = found["Runner.first"]
    assert first.text.startswith("    # glued comment\n    @decorator\n    def first(")
    assert first.text.endswith("        # trailing comment of first\n")
    assert found["Runner.second"].text.endswith("        pass\n")
    assert found["Runner"].text.startswith("# about Runner\nclass Runner")
    assert found["helper"].text == "def helper():\n    return 1\n"


def test_scan_methods_agrees_with_ast_on_the_synthetic_class() -> None:
    scanned = symbols.scan_methods(SOURCE, "Runner")
    exact = {k.split(".")[1]: v.text for k, v in symbols.symbols_ast(SOURCE).items() if k.startswith("Runner.")}
    assert scanned == exact


def test_scan_methods_reads_other_line_breaks_the_same_way() -> None:
    """A source with CRLF line breaks (or a form feed in it) takes the slow path: the same methods, each with
    its own line breaks, trailing blank lines dropped."""
    crlf = SOURCE.replace("\n", "\r\n")
    scanned = symbols.scan_methods(crlf, "Runner")
    lf = symbols.scan_methods(SOURCE, "Runner")
    assert list(scanned) == list(lf) == ["first", "second"]
    assert {k: v.replace("\r\n", "\n") for k, v in scanned.items()} == lf
    assert scanned["second"].endswith("pass\r\n")
    assert symbols.scan_methods(crlf.replace("class Runner", "class Other"), "Runner") == {}


def test_syntax_error_names_file_and_line() -> None:
    with pytest.raises(PqError, match=r"^up\.py:2: does not parse"):
        symbols.symbols_ast("x = 1\ndef (:\n", path="up.py")


def test_projection_order_and_spacing() -> None:
    found = symbols.symbols_ast(SOURCE)
    text = symbols.project([found["Runner.second"], found["Runner.first"], found["helper"]])
    assert text.index("def second") < text.index("def first")
    assert "        pass\n\n    # glued comment" in text
    assert "# trailing comment of first\n\n\ndef helper" in text


def test_classify_skips_overrides_that_call_super() -> None:
    upstream = "class NPUModelRunner:\n    def go(self, a):\n        x = a + 1\n        y = x * 2\n        return y\n"
    copy = "class Mine(NPUModelRunner):\n    def go(self, a):\n        x = a + 1\n        y = x * 3\n        return y\n"
    override = "class Mine(NPUModelRunner):\n    def go(self, a):\n        return super().go(a)\n"
    assert [
        c.upstream for c in adopt.classify({"m.py": copy}, upstream, upstream_path=UP_FILE, cls="NPUModelRunner")
    ] == ["NPUModelRunner.go"]
    assert adopt.classify({"m.py": override}, upstream, upstream_path=UP_FILE, cls="NPUModelRunner") == []


def test_queue_round_trip_and_errors() -> None:
    q = queue.Queue(
        upstream=queue.UpstreamPin("vllm-ascend", "git", "abc", "def", 'label "q"', "abc", {"a/b.py": "00"}),
        downstream_name="vllm-omni",
        downstream_release="0.30.0",
        package="vllm_omni/platforms/npu/worker",
        modules=(queue.Module("m.py", "a/b.py", ("C.f", "C.g")), queue.Module("w.py", "", ())),
        lineage=(
            queue.Step("adopt", "adopt", (("0001-a.patch", "0" * 64),), None, "vllm-omni==0.30.0"),
            queue.Step(
                "refresh",
                "continue",
                (("0001-a.patch", "1" * 64),),
                queue.UpstreamPin("vllm-ascend", "release", "x==1", "p", "x 1", "", {"a/b.py": "11"}),
                edited=("0001-a.patch",),
                accepted_errors=('m.py:3: error: [name-undefined] Undefined name `x` "q"',),
                bases=(("0001-a.patch", "3" * 64),),
            ),
        ),
        build={"m.py": "2" * 64},
    )
    text = queue.render_queue(q)
    assert queue.parse_queue(text) == q
    assert text.count("bases = [") == 1  # a step without bases writes none (the format before them)
    assert f'bases = [\n    "{"3" * 64} 0001-a.patch",\n]' in text
    older = text.replace(f'bases = [\n    "{"3" * 64} 0001-a.patch",\n]\n', "")
    assert queue.parse_queue(older).lineage[1] == replace(q.lineage[1], bases=())  # an older queue.toml is read
    with pytest.raises(QueueError, match="bases names a patch twice or one the step's edited does not list"):
        queue.parse_queue(text.replace(f'"{"3" * 64} 0001-a.patch"', f'"{"3" * 64} 0002-b.patch"'))
    with pytest.raises(QueueError, match="lineage\\[1\\].bases: 'x 0001-a.patch' is not"):
        queue.parse_queue(text.replace(f'"{"3" * 64} 0001-a.patch"', '"x 0001-a.patch"'))
    # a step over no accepted errors writes no key for them (the queue.toml of older pq versions, byte for byte)
    plain = replace(q, lineage=(q.lineage[0], replace(q.lineage[1], accepted_errors=())))
    assert "accepted_errors" not in queue.render_queue(plain) and queue.parse_queue(queue.render_queue(plain)) == plain
    with pytest.raises(QueueError, match=r"lineage\[1\]\.accepted_errors must be a list of strings"):
        queue.parse_queue(queue.render_queue(q).replace("accepted_errors = [", "accepted_errors = [1, "))
    with pytest.raises(QueueError, match="only a refresh or merge step finishes over errors"):
        queue.parse_queue(queue.render_queue(q).replace('kind = "refresh"', 'kind = "edit"'))
    with pytest.raises(QueueError, match="needs a \\[\\[lineage\\]\\]"):
        queue.parse_queue(queue.render_queue(replace(q, lineage=())))
    with pytest.raises(QueueError, match="edited names a patch the step does not list"):
        queue.parse_queue(queue.render_queue(q).replace('    "0001-a.patch",\n]', '    "0002-b.patch",\n]'))
    with pytest.raises(QueueError, match="format 9 is newer"):
        queue.parse_queue("format = 9\n")
    with pytest.raises(QueueError, match="must be a plain file name"):
        queue.parse_queue(queue.render_queue(q).replace('path = "m.py"', 'path = "../m.py"'))
    assert queue.parse_series("# c\n\n0001-a.patch  # why\n0002-b.patch\n") == ["0001-a.patch", "0002-b.patch"]


def test_enclosing_symbol_and_conflict_lines() -> None:
    text = (
        "class A:\n"
        "    def m(\n"
        "        self,\n"
        "<<<<<<< upstream\n"
        "    ) -> int:\n"
        "||||||| base\n"
        "    ):\n"
        "=======\n"
        "    ) -> str:\n"
        ">>>>>>> 0001-x.patch\n"
        "        return 1\n"
    )
    assert replay.conflict_lines(text.encode()) == [4]
    assert replay.conflict_lines(text.encode(), "0002-y.patch") == []
    assert replay.enclosing_symbol(text, 4) == "A.m"
    assert replay.has_markers(text.encode()) == 4


def test_enclosing_symbol_at_each_line() -> None:
    """The region at 1-based ``line`` (its marker line) is inside the def or class above it that is shallower
    than the first code line below; module level when that line is at the top level."""
    text = (
        "class A:\n"
        "    def m(self):\n"
        "        x = 1\n"
        "        y = 2\n"
        "\n"
        "    def n(self):\n"
        "        return 3\n"
        "def top():\n"
        "    pass\n"
    )
    found = [replay.enclosing_symbol(text, k) for k in range(11)]
    assert found == ["", "", "A", "A.m", "A", "A", "A.m", "", "A", "", ""]


def test_one_side_reads_each_region_as_one_side() -> None:
    """Each region as its upstream or patch side, with or without its base section; a marker-like line out of
    place is a line of the text; ``blank`` keeps every line number."""
    text = (
        "a\n<<<<<<< up\nU\n||||||| base\nB\n=======\nP\n>>>>>>> p1\n=======\n<<<<<<< up\nV\n=======\nQ\n>>>>>>> p2\nz"
    )
    assert checked.one_side(text) == ("a\nU\n=======\nV\nz", [1, 3, 9, 11, 15])
    assert checked.one_side(text, "theirs") == ("a\nP\n=======\nQ\nz", [1, 7, 9, 13, 15])
    blanked, where = checked.one_side(text, "theirs", blank=True)
    assert blanked == "a\n" + "\n" * 5 + "P\n\n=======\n" + "\n" * 3 + "Q\n\nz"
    assert where == list(range(1, 16))
    assert checked.one_side("a\n=======\nb") == ("a\n=======\nb", [1, 2, 3])


def test_carry_resolutions_places_each_region() -> None:
    top = b"a\n<<<<<<< u\nX\n||||||| b\nY\n=======\nZ\n>>>>>>> p1\nmid\n<<<<<<< u\nQ\n=======\nR\n>>>>>>> p2\nend\n"
    resolved = b"a\nXZ\nmid\nQR\nend\n"
    mine = b"a\n<<<<<<< u\nX\n||||||| b\nY\n=======\nZ\n>>>>>>> p1\nmid\nold\nend\n"
    assert replay.carry_resolutions(top, resolved, mine) == b"a\nXZ\nmid\nold\nend\n"


def test_merge_file_in_memory(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    repo = ProjectRepo(tmp_path)
    clean = repo.merge_file(
        b"1\n2\n3\n4\n5\n6\n",
        b"one\n2\n3\n4\n5\n6\n",
        b"1\n2\n3\n4\n5\nsix\n",
        labels=("base", "ours", "theirs"),
        path="f.py",
    )
    assert clean.clean and clean.text == b"one\n2\n3\n4\n5\nsix\n"
    conflict = repo.merge_file(
        b"a\nb\nc\n", b"a\nB\nc\n", b"a\nb2\nc\n", labels=("base", "ours", "theirs"), path="f.py"
    )
    assert not conflict.clean
    assert conflict.text == b"a\n<<<<<<< ours\nB\n||||||| base\nb\n=======\nb2\n>>>>>>> theirs\nc\n"


def test_layout_of_carried_symbols_is_cached_by_its_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from patch_queue.series import fmt

    monkeypatch.setenv("PQ_CACHE", str(tmp_path / "cache"))
    text = "class Runner(Base):\n    def first(self, a,\n              b):\n        return f(a,\n                 b)\n"
    other = text.replace("return", "return  1 +")
    runs: list[str] = []
    real_run = fmt.format_source

    def counting(source: str, line_length: int) -> str | None:
        runs.append(source)
        return real_run(source, line_length)

    monkeypatch.setattr(fmt, "format_source", counting)
    first = fmt.format_carried_many([(text, ["Runner.first"])], formatter="ruff", line_length=120)
    assert first == ["class Runner(Base):\n    def first(self, a, b):\n        return f(a, b)\n"] and len(runs) == 1
    # the same inputs again: from the cache, no formatter run; other inputs: one run for the new text only
    assert fmt.format_carried_many([(text, ["Runner.first"])], formatter="ruff", line_length=120) == first
    assert len(runs) == 1
    both = fmt.format_carried_many(
        [(text, ["Runner.first"]), (other, ["Runner.first"])], formatter="ruff", line_length=120
    )
    assert both[0] == first[0] and both[1].endswith("return 1 + f(a, b)\n") and len(runs) == 2
    assert fmt.format_carried_many([(text, ["Runner.first"])], formatter="ruff", line_length=20) != first
    # a damaged entry is not used
    for entry in (tmp_path / "cache" / "derived" / "layout").rglob("*"):
        if entry.is_file():
            entry.write_bytes(entry.read_bytes().replace(b"f(a, b)", b"g(a, b)"))
    assert fmt.format_carried_many([(text, ["Runner.first"])], formatter="ruff", line_length=120) == first


def test_projection_is_cached_by_its_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from patch_queue.series import stack

    monkeypatch.setenv("PQ_CACHE", str(tmp_path / "cache"))
    upstream = SOURCE.replace("class Runner(Base)", "class NPUModelRunner(Base)").encode()
    q = queue.Queue(
        upstream=queue.UpstreamPin("vllm-ascend", "git", "abc", "def", "label", "abc", {"a/b.py": "00"}),
        downstream_name="vllm-omni",
        downstream_release="0.30.0",
        package="pkg",
        modules=(queue.Module("m.py", "a/b.py", ("NPUModelRunner.second", "NPUModelRunner.first", "gone")),),
        formatter="ruff",
    )
    first = stack.project_modules(q, {"a/b.py": upstream}.__getitem__, label="test")
    assert first.missing == ("m.py: gone",) and list(first.files) == [stack.VENDOR + "a/b.py", "m.py"]
    assert first.files["m.py"].startswith(b"    def second(self):")

    def no_parse(*_args: object, **_kwargs: object) -> object:
        raise AssertionError("parsed again")

    monkeypatch.setattr(symbols, "symbols_ast", no_parse)
    assert stack.project_modules(q, {"a/b.py": upstream}.__getitem__, label="test") == first  # from the cache
    with pytest.raises(AssertionError, match="parsed again"):  # another upstream text is projected anew
        stack.project_modules(q, {"a/b.py": upstream + b"\n"}.__getitem__, label="test")


def test_a_recorded_edit_merges_onto_another_merge_result(tmp_path: Path) -> None:
    """The store keeps the module files an edit changed; onto another merge of its patch it merges three-way: a
    line changed far away merges, the edited lines changed too clash (at the lines of that merge), and the sides
    may hold the diff3 regions of pq's own merge (a conflicted patch's merge result)."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    repo = ProjectRepo(tmp_path)
    store = rerere.Store(repo)
    region = "<<<<<<< upstream\nu = 1\n||||||| base\nu = 0\n=======\nu = 2\n>>>>>>> 0001-a.patch\n"
    lines = [f"line {i}\n" for i in range(20)]
    base = "".join(lines[:10]) + region + "".join(lines[10:])
    final = "".join(lines[:10]) + "u = 2\n" + "".join(lines[10:])  # the region resolved to the patch side
    like = repo.commit_info(repo.commit(repo.write_tree({"m.py": b""}), [], "a\n", stack.PERSON, stack.PERSON))
    sides = {"m.py": base.encode()}, {"m.py": final.encode()}
    edit = rerere.Edit("0001-a.patch", b"body before\n", b"body after\n", *sides, like)
    assert store.record_edits([edit], "test\n") == 1
    found = store.find_edit("0001-a.patch", before=stack.sha256(b"body before\n"))
    assert found is not None and found.files is not None and found.message == "a\n"
    assert store.find_edit("0001-a.patch", after=stack.sha256(b"body after\n")) == found
    assert store.find_edit("0002-b.patch", after=stack.sha256(b"body after\n")) is None
    assert store.lookup_edit("0001-a.patch", b"body before\n") == b"body after\n"
    far = base.replace("line 18\n", "line 18 (another merge)\n")
    files, clashes = store.onto(found, {"m.py": far.encode()})
    assert clashes == [] and files == {"m.py": final.replace("line 18\n", "line 18 (another merge)\n").encode()}
    near = base.replace("u = 2\n", "u = 3\n")
    files, clashes = store.onto(found, {"m.py": near.encode()})
    assert clashes == [rerere.Clash("m.py", 11, 17)]  # the lines of pq's region in the other merge
    assert store.onto(found, {"m.py": base.encode()}) == ({"m.py": final.encode()}, [])
    assert store.onto(found, {})[1] == [rerere.Clash("m.py", 1, 1)]  # the file the edit changed is not there
