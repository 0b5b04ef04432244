"""The progress module: messages go through the caller's callable or to stderr; bars show only on a terminal."""

from __future__ import annotations

from pathlib import Path

import pytest

from patch_queue import progress


def test_say_goes_through_the_callable_else_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    heard: list[str] = []
    progress.say(heard.append, "Downloading x")
    assert heard == ["Downloading x"]
    assert capsys.readouterr().err == ""
    progress.say(None, "Cloning y")
    assert capsys.readouterr().err == "Cloning y\n"


def test_bar_is_silent_when_stderr_is_no_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    with progress.bar("x.whl", unit="bytes") as shown:
        assert not shown.shown
        shown.update(10, 100)
        shown.update(100, 100, what="done")
    assert capsys.readouterr() == ("", "")


def test_bar_on_a_terminal_takes_updates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "_terminal", lambda: True)
    for unit in ("bytes", ""):
        with progress.bar("Cloning", unit=unit) as shown:
            assert shown.shown
            shown.update(0, None)
            shown.update(5, 10, what="Receiving objects")
            shown.update(10, 10)


def test_timed_phases_go_to_pq_timings_without_their_nested_phases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with progress.timed("download"):  # no PQ_TIMINGS: nothing written anywhere
        pass
    timings = tmp_path / "timings.txt"
    monkeypatch.setenv("PQ_TIMINGS", str(timings))
    clock = iter([0.0, 1.0, 1.5, 4.0])  # check starts, download starts, download ends, check ends
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    with progress.timed("check"), progress.timed("download"):
        pass
    # the inner phase is written when it ends; the outer one without the inner's 0.5 s
    assert timings.read_text(encoding="utf-8") == "within download 0.500\nwithin check 3.500\n"


@progress.timed("download")
def _fetch() -> str:
    return "fetched"


def test_timed_decorates_a_function_each_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    timings = tmp_path / "timings.txt"
    monkeypatch.setenv("PQ_TIMINGS", str(timings))
    assert _fetch() == "fetched" and _fetch() == "fetched"
    lines = timings.read_text(encoding="utf-8").splitlines()
    assert [line.split()[:2] for line in lines] == [["within", "download"]] * 2
    assert all(float(line.split()[2]) >= 0 for line in lines)
