"""The progress module: messages go through the caller's callable or to stderr; bars show only on a terminal."""

from __future__ import annotations

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
