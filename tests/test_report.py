"""outputs/report.py: the pull-request body, the workflow commands and the terminal line of a refresh report."""

# no ``from __future__ import annotations``: report.annotations is imported by that name
import copy
import html
import json
import re
from pathlib import Path

import pytest

from patch_queue import presets
from patch_queue.outputs import report
from patch_queue.outputs.report import (
    BODY_BUDGET,
    JOB_SUMMARY_BUDGET,
    TRUNCATED_NOTE,
    annotations,
    github_chars,
    markdown,
    summary_line,
)

URL = "https://github.com/vllm-project/vllm-ascend"
SHA_A = "3f2c9e1d8b7a6c5d4e3f2a1b0c9d8e7f6a5b4c3d"
SHA_B = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678"
SHA_BASE = "cf0baa38dfb2c4e1a7d6b5f4e3d2c1b0a9f8e7d6"
SHA_TARGET = "0123456789abcdef0123456789abcdef01234567"

BASE_EXECUTE = """\
        if self.execute_model_state is not None:
            raise RuntimeError("State error: sample_tokens() must be called after execute_model() returns None.")
        self._update_states(scheduler_output)
"""
UPSTREAM_EXECUTE = """\
        if self.execute_model_state is not None:
            raise RuntimeError("State error: sample_tokens() must be called after execute_model() returns None.")
        with record_function_or_nullcontext("prepare input"):
            self._update_states(scheduler_output)
"""
PATCH_EXECUTE = """\
        if self.execute_model_state is not None:
            raise RuntimeError("State error: sample_tokens() must be called after execute_model() returns None.")
        #  -------------------------------------- Omni-new -------------------------------------------------
        # [Omni] Handle KV transfer BEFORE updating states (which removes finished requests)
        if not getattr(self, "_warmup_state_cleared", False):
            self._warmup_state_cleared = True
        #  -------------------------------------- Omni-new -------------------------------------------------
        self._update_states(scheduler_output)
"""
OMNI_REGISTER = """\
        if hasattr(self, "_omni_connector"):
            for request in getattr(scheduler_output, "pending_input_registrations", []):
                self.register_chunk_recv(request)
"""
DIFF_SIDE = """\
@@ -101,3 +101,4 @@
         req_data = scheduler_output.scheduled_cached_reqs
-        if self.use_async_scheduling:
+        if self.use_async_scheduling and not self.is_pooling_model:
+            self._sync_async_state()
"""


def conflict(**over: object) -> dict[str, object]:
    entry: dict[str, object] = {
        "patch": "0005-npu-ar-model-runner-execute-model.patch",
        "file": "npu_ar_model_runner.py",
        "line": 331,
        "symbol": "NPUARModelRunner.execute_model",
        "kind": "both-changed",
        "message": "upstream wrapped _update_states in a profiling context where the omni block sits",
        "anchor": {"index": 3, "line": 329, "text": "if self.execute_model_state is not None:"},
        "culprits": [
            {"commit": SHA_A, "subject": "[Perf] profile input preparation", "pr": 4321, "date": "2026-05-02"}
        ],
        "sides": {"base": BASE_EXECUTE, "upstream": UPSTREAM_EXECUTE, "patch": PATCH_EXECUTE},
        "reused": False,
    }
    entry.update(over)
    return entry


def flag(**over: object) -> dict[str, object]:
    entry: dict[str, object] = {
        "patch": "0005-npu-ar-model-runner-execute-model.patch",
        "file": "npu_ar_model_runner.py",
        "line": 365,
        "symbol": "NPUARModelRunner.execute_model",
        "kind": "block-moved",
        "message": "omni block 4 moved below its anchor, which upstream moved 6 lines down",
        "anchor": {"index": 4, "line": 359, "text": 'if hasattr(self, "_omni_connector"):'},
        "culprits": [{"commit": SHA_B, "subject": "Refactor KV transfer hand-off", "pr": None, "date": "2026-04-28"}],
        "sides": {"base": OMNI_REGISTER, "upstream": OMNI_REGISTER, "patch": OMNI_REGISTER},
        "resolution": OMNI_REGISTER,
        "reused": False,
    }
    entry.update(over)
    return entry


def make_report(
    conflicts: list[dict[str, object]] | None = None, flags: list[dict[str, object]] | None = None, **over: object
) -> dict[str, object]:
    data: dict[str, object] = {
        "format": 2,
        "upstream": {
            "base": "v0.18.0rc1",
            "target": "v0.20.0rc1",
            "base_commit": SHA_BASE,
            "target_commit": SHA_TARGET,
        },
        "downstream": {"name": "vllm-omni", "release": "0.30.0"},
        "out": "npu_worker",
        "patches": [
            {"name": "0003-npu-ar-model-runner.patch", "status": "unchanged"},
            {"name": "0005-npu-ar-model-runner-execute-model.patch", "status": "conflict"},
            {"name": "0014-npu-model-runner-update-states.patch", "status": "modified"},
            {"name": "0016-npu-model-runner-model-forward.patch", "status": "unchanged"},
        ],
        "conflicts": conflicts if conflicts is not None else [],
        "flags": flags if flags is not None else [],
        "removed_symbols": [],
        "blocks": {"before": 24, "after": 24},
        "finished": True,
        "stopped_at": None,
    }
    data.update(over)
    return data


def full_report() -> dict[str, object]:
    return make_report(
        conflicts=[
            conflict(),
            conflict(
                patch="0014-npu-model-runner-update-states.patch",
                file="npu_model_runner.py",
                line=104,
                symbol="NPUModelRunner._update_states",
                kind="anchor-lost",
                message="the line omni block 1 followed is gone upstream",
                anchor=None,
                sides={"base": DIFF_SIDE, "upstream": "", "patch": OMNI_REGISTER},
            ),
        ],
        flags=[
            flag(),
            flag(
                patch="0014-npu-model-runner-update-states.patch",
                file="npu_model_runner.py",
                line=120,
                symbol="NPUModelRunner._update_states",
                kind="reused",
                reused=True,
                message="applied the recorded resolution of 2026-04-30",
                culprits=[],
            ),
            flag(kind="near-block", line=402, culprits=[], anchor=None),
        ],
        removed_symbols=["npu_model_runner.py: NPUModelRunner._foo"],
        blocks={"before": 24, "after": 23},
    )


def sections(body: str) -> list[str]:
    return re.findall(r"<details>.*?</details>", body, re.DOTALL)


def table(body: str, header: str) -> list[list[str]]:
    lines = body.splitlines()
    start = lines.index(header)
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


# ---------------------------------------------------------------------------------------------
# markdown


def test_title_and_status_paragraph() -> None:
    body = markdown(full_report(), queue=presets.NPU)
    lines = body.splitlines()
    assert lines[0] == "## NPU runners: v0.18.0rc1 → v0.20.0rc1"
    status = lines[2]
    assert "vllm-omni 0.30.0's NPU model runners" in status
    assert f"`v0.18.0rc1` ([cf0baa3]({URL}/commit/{SHA_BASE}))" in status
    assert f"`v0.20.0rc1` ([0123456]({URL}/commit/{SHA_TARGET}))" in status
    assert "**2 conflicts need resolution:**" in status
    assert "3 review flags (1 reused resolution)" in status
    assert "Omni blocks: 24 before → 23 after (**1 block lost**)." in status
    assert "`npu_model_runner.py: NPUModelRunner._foo`" in status
    assert lines[3] == ""  # one paragraph


def test_clean_status() -> None:
    body = markdown(make_report(), queue=presets.NPU)
    status = body.splitlines()[2]
    assert "**Clean:** 4 patches replayed without conflicts." in status
    assert "No review flags." in status
    assert "Omni blocks: 24 before → 24 after." in status
    assert "No upstream symbols removed." in status
    assert "| patch |" not in body and "### Conflicts" not in body and "### Review flags" not in body


def test_stopped_refresh_is_said() -> None:
    body = markdown(
        make_report([conflict()], finished=False, stopped_at="0005-npu-ar-model-runner-execute-model.patch"),
        queue=presets.NPU,
    )
    assert "**1 conflict needs resolution:**" in body
    assert "stopped at `0005-npu-ar-model-runner-execute-model.patch`" in body


def test_patch_table_lists_only_patches_with_entries_in_series_order() -> None:
    data = full_report()
    data["conflicts"].append(conflict(patch="0099-not-in-series.patch"))  # type: ignore[attr-defined]
    rows = table(markdown(data, queue=presets.NPU), "| patch | status | conflicts | flags |")
    assert rows == [
        ["`0005-npu-ar-model-runner-execute-model.patch`", "conflict", "1", "2"],
        ["`0014-npu-model-runner-update-states.patch`", "modified", "1", "1"],
        ["`0099-not-in-series.patch`", "", "1", "0"],
    ]


def test_kind_table_counts_both_lists_in_schema_order() -> None:
    data = full_report()
    data["flags"].append(flag(kind="both-inserted"))  # type: ignore[attr-defined]
    data["conflicts"].append(conflict(kind="both-inserted"))  # type: ignore[attr-defined]
    data["flags"].append(flag(kind="zz-new-kind"))  # type: ignore[attr-defined]
    rows = table(markdown(data, queue=presets.NPU), "| kind | conflicts | flags |")
    assert rows == [
        ["`both-changed`", "1", "0"],
        ["`anchor-lost`", "1", "0"],
        ["`both-inserted`", "1", "1"],
        ["`block-moved`", "0", "1"],
        ["`near-block`", "0", "1"],
        ["`reused`", "0", "1"],
        ["`zz-new-kind`", "0", "1"],
    ]


def test_details_sections() -> None:
    body = markdown(full_report(), queue=presets.NPU)
    conflicts_at, flags_at = body.index("### Conflicts"), body.index("### Review flags")
    assert conflicts_at < flags_at
    found = sections(body)
    assert len(found) == 5
    assert all(body.index(s) < flags_at for s in found[:2]) and all(body.index(s) > flags_at for s in found[2:])
    first = found[0]
    assert first.startswith(
        "<details><summary><code>npu_worker/npu_ar_model_runner.py:331</code> — both-changed — "
        "<code>NPUARModelRunner.execute_model</code></summary>\n\n"
    )
    assert "**Patch:** `0005-npu-ar-model-runner-execute-model.patch`" in first
    assert "upstream wrapped _update_states in a profiling context" in first
    assert "**Anchor:** omni block 3, line 329: `if self.execute_model_state is not None:`" in first
    # sides in order base, upstream, patch, each fenced as python with the text intact
    order = [first.index(f"**{name}**") for name in ("base", "upstream", "patch")]
    assert order == sorted(order)
    assert f"```python\n{BASE_EXECUTE}```" in first
    assert f"```python\n{UPSTREAM_EXECUTE}```" in first
    assert f"```python\n{PATCH_EXECUTE}```" in first
    assert "**resolution**" not in first
    assert first.endswith("\n\n</details>")


def test_culprit_links() -> None:
    first = sections(markdown(full_report(), queue=presets.NPU))[0]
    assert (
        f"- [3f2c9e1]({URL}/commit/{SHA_A}) [#4321]({URL}/pull/4321) [Perf] profile input preparation (2026-05-02)"
    ) in first
    # no PR: only the commit link
    moved = sections(markdown(full_report(), queue=presets.NPU))[2]
    assert f"- [a1b2c3d]({URL}/commit/{SHA_B}) Refactor KV transfer hand-off (2026-04-28)" in moved
    assert "/pull/" not in moved


def test_upstream_url_option() -> None:
    fork = "https://github.com/someone/vllm-ascend"
    body = markdown(full_report(), upstream_url=fork + "/", queue=presets.NPU)
    assert f"[3f2c9e1]({fork}/commit/{SHA_A})" in body and f"[#4321]({fork}/pull/4321)" in body
    assert URL not in body


def test_diff_sides_empty_sides_and_flag_resolution() -> None:
    found = sections(markdown(full_report(), queue=presets.NPU))
    lost = found[1]
    assert "<summary><code>npu_worker/npu_model_runner.py:104</code> — anchor-lost — " in lost
    assert f"```diff\n{DIFF_SIDE}```" in lost
    assert "(new upstream `v0.20.0rc1`): _(empty)_" in lost
    assert "**Anchor:**" not in lost
    moved = found[2]
    assert "**resolution** (what the tool wrote)" in moved
    assert moved.count(f"```python\n{OMNI_REGISTER}```") == 4
    reused = found[4]  # the flags are grouped by kind: block-moved, near-block, reused
    assert "— reused — <code>NPUModelRunner._update_states</code></summary>" in reused
    assert "a recorded maintainer resolution was applied" in reused


def test_html_in_text_is_escaped() -> None:
    body = markdown(
        make_report([conflict(message="markers <<<<<<< and </details> & more", symbol="Runner.<lambda>")]),
        queue=presets.NPU,
    )
    assert "markers &lt;&lt;&lt;&lt;&lt;&lt;&lt; and &lt;/details&gt; &amp; more" in body
    assert "<code>Runner.&lt;lambda&gt;</code>" in body
    assert body.count("</details>") == 1


def test_backtick_fence_grows() -> None:
    code = 'doc = """\n```python\nx = 1\n```\n"""\nquad = "````"\n'
    body = markdown(
        make_report([conflict(sides={"base": code, "upstream": "", "patch": "y = `1`\n"})]), queue=presets.NPU
    )
    assert f"`````python\n{code}`````" in body  # longest run is 4, so the fence is 5
    assert "```python\ny = `1`\n```" in body  # a run of 1 keeps the usual fence of 3
    anchored = markdown(make_report([conflict(anchor={"index": 1, "line": 2, "text": "s = '``'"})]), queue=presets.NPU)
    assert "**Anchor:** omni block 1, line 2: ```s = '``'```" in anchored


def test_deterministic() -> None:
    data = full_report()
    first = markdown(data, queue=presets.NPU)
    assert markdown(copy.deepcopy(data), queue=presets.NPU) == first
    assert markdown(json.loads(json.dumps(data, sort_keys=True)), queue=presets.NPU) == first
    assert annotations(json.loads(json.dumps(data)), queue=presets.NPU) == annotations(data, presets.NPU)
    assert data == full_report()  # the input is not touched


def test_format_1_report_renders() -> None:
    old = {
        "format": 1,
        "upstream": {"base": "v0.18.0rc1", "target": "v0.20.0rc1"},
        "patches": [{"name": "0005-npu-ar-model-runner-execute-model.patch", "status": "conflict"}],
        "conflicts": [
            {
                "patch": "0005-npu-ar-model-runner-execute-model.patch",
                "file": "npu_ar_model_runner.py",
                "line": 331,
                "symbol": "NPUARModelRunner.execute_model",
            }
        ],
        "removed_symbols": [],
        "finished": False,
        "stopped_at": "0005-npu-ar-model-runner-execute-model.patch",
    }
    body = markdown(old, queue=presets.NPU)
    assert "<code>npu_worker/npu_ar_model_runner.py:331</code> — conflict — " in body
    assert annotations(old, queue=presets.NPU) == [
        "::error file=npu_worker/npu_ar_model_runner.py,line=331,title=conflict::conflict "
        "(NPUARModelRunner.execute_model)"
    ]
    assert (
        summary_line(old, queue=presets.NPU)
        == "1 conflict, 0 review flags, stopped at 0005-npu-ar-model-runner-execute-model.patch"
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"format": 3}, "format 3"),
        ({"format": 2, "conflicts": [{"line": "331"}]}, r"conflicts\[0\]\.line: expected an integer, got str"),
        ({"format": 2, "flags": [{"culprits": [{"pr": "12"}]}]}, r"flags\[0\].culprits\[0\].pr"),
        ({"format": 2, "upstream": "v0.18.0"}, "upstream: expected an object"),
    ],
)
def test_bad_report_names_the_key(data: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        markdown(data, queue=presets.NPU)


# ---------------------------------------------------------------------------------------------
# the budget

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def well_formed(body: str) -> None:
    """Every code fence closed, ``<details>`` and ``</details>`` balanced and nested outside the fences."""
    fence, depth = "", 0
    for n, line in enumerate(body.splitlines(), 1):
        m = FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not m.group(2).strip():
                fence = ""
            continue
        if m:
            fence = m.group(1)
            continue
        for tag in re.findall(r"</?details>", line):
            depth += 1 if tag == "<details>" else -1
            assert depth >= 0, f"line {n}: </details> without <details>"
    assert not fence, "a code block is not closed"
    assert depth == 0, f"{depth} <details> not closed"


def test_well_formed_can_fail() -> None:
    well_formed("<details>\n\n```python\n</details>\n```\n\n</details>\n")
    for bad in ("<details>\n", "</details>\n<details>\n", "```python\nx\n", "````\n```\n", "```\n</details>\n"):
        with pytest.raises(AssertionError):
            well_formed(bad)


def big_report(
    n_conflicts: int, n_flags: int, side_lines: int, kinds: tuple[str, ...] = ("block-moved",)
) -> dict[str, object]:
    side = "".join(
        f"        self.omni_state_{i} = compute_state(scheduler_output, index={i})\n" for i in range(side_lines)
    )
    sides = {"base": side, "upstream": side.replace("compute_state", "compute_state_v2"), "patch": side}
    return make_report(
        conflicts=[conflict(line=100 + i, sides=sides) for i in range(n_conflicts)],
        flags=[
            flag(line=100_000 + i, sides=sides, resolution=side, kind=kinds[i % len(kinds)]) for i in range(n_flags)
        ],
    )


def named(body: str, entry: dict[str, object]) -> bool:
    where = f"npu_worker/{entry['file']}:{entry['line']}"
    return f"<code>{where}</code>" in body or f"`{where}`" in body


def test_github_chars_counts_at_least_what_github_counts() -> None:
    assert github_chars("abc") == 3
    assert github_chars("é") == 1  # one character, two UTF-8 bytes
    assert github_chars("😀") == 2  # two UTF-16 units (a browser counts two)
    assert github_chars("a\nb") == 4  # a form posts CRLF


def test_under_the_budget_nothing_is_cut() -> None:
    data = big_report(3, 3, 10)
    body = markdown(data, queue=presets.NPU)
    assert body == markdown(data, limit=None, queue=presets.NPU)
    assert TRUNCATED_NOTE not in body and "not shown" not in body and "shortened" not in body


def test_flags_grouped_by_kind() -> None:
    data = big_report(1, 6, 2, kinds=("near-block", "block-moved", "zz-new"))
    body = markdown(data, queue=presets.NPU)
    heads = re.findall(r"^#### (.*)$", body, re.MULTILINE)
    assert heads == ["`block-moved`: 2 flags", "`near-block`: 2 flags", "`zz-new`: 2 flags"]
    groups = body.split("#### ")[1:]
    assert [g.count("<details>") for g in groups] == [2, 2, 2]
    assert "100001" in groups[0] and "100004" in groups[0]  # report order within a kind


def test_flags_give_way_before_conflicts() -> None:
    data = big_report(2, 4, 50)
    full = markdown(data, limit=None, queue=presets.NPU)
    assert github_chars(full) > BODY_BUDGET
    body = markdown(data, queue=presets.NPU)
    assert github_chars(body) <= BODY_BUDGET
    well_formed(body)
    found, whole = sections(body), sections(full)
    assert len(found) == 6 and "not shown" not in body  # every section kept
    assert found[:2] == whole[:2]  # the conflicts whole
    assert TRUNCATED_NOTE in found[-1]
    assert "self.omni_state_0 = " in found[-1]  # an excerpt: the first lines stay
    assert "self.omni_state_49 = " not in found[-1]
    assert body.rstrip().endswith("Everything is in the JSON report (`pq refresh --report`)._")
    assert re.search(r"shortened to fit in 60,000 characters: \d+ entr(y|ies) with their code cut to an excerpt", body)


def test_synthetic_500_conflicts_and_5000_flags() -> None:
    kinds = ("block-moved", "near-block", "import-added", "kept-replacement", "merged-words")
    data = big_report(500, 5000, 12, kinds=kinds)
    for i, c in enumerate(data["conflicts"]):  # type: ignore[arg-type]
        c["file"] = ("npu_ar_model_runner.py", "npu_model_runner.py", "npu_generation_model_runner.py")[i % 3]
        c["kind"] = ("both-changed", "anchor-lost", "upstream-changed-replaced")[i % 3]
    full = markdown(data, limit=None, queue=presets.NPU)
    body = markdown(data, full_report="[the full report](https://example.invalid/run)", queue=presets.NPU)
    summary = markdown(data, limit=JOB_SUMMARY_BUDGET, in_bytes=True, queue=presets.NPU)
    print(
        f"synthetic 500/5000: body {github_chars(body):,} characters ({len(body):,} code points), "
        f"summary {len(summary.encode()):,} bytes, full {len(full):,} characters"
    )
    assert github_chars(body) <= BODY_BUDGET and len(body) <= BODY_BUDGET
    assert len(summary.encode()) <= JOB_SUMMARY_BUDGET < len(full.encode())
    for text in (full, body, summary):
        well_formed(text)
    conflicts = data["conflicts"]
    assert isinstance(conflicts, list)
    assert all(named(body, c) for c in conflicts)  # every conflict is named in the body
    assert all(named(summary, c) for c in conflicts)
    assert len(sections(full)) == 5500  # and the whole report has everything
    # the flags: every kind with its count, what is not shown counted, the pointer at the end
    for kind in kinds:
        assert f"#### `{kind}`: 1000 flags" in body
    left = [int(n) for n in re.findall(r"^_(\d+) of these 1000 not shown\._$", body, re.MULTILINE)]
    assert len(left) == 5 and max(left) - min(left) <= 1  # the kinds give way evenly
    assert "Everything is in [the full report](https://example.invalid/run)._" in body
    assert table(body, "| kind | conflicts | flags |")[0] == ["`both-changed`", "167", "0"]


def test_conflicts_shrink_to_a_line_then_leave() -> None:
    data = big_report(40, 40, 5)
    head = markdown(data, queue=presets.NPU).split("### Conflicts")[0]
    for limit in (github_chars(head) + 3_000, github_chars(head) + 6_000, github_chars(head) + 12_000):
        body = markdown(data, limit=limit, queue=presets.NPU)
        assert github_chars(body) <= limit
        well_formed(body)
        assert "of these 40 not shown" in body  # the flags went first
        lines = re.findall(r"^- `npu_worker/npu_ar_model_runner.py:(\d+)` — both-changed", body, re.MULTILINE)
        assert lines, body[-2000:]
    tight = markdown(data, limit=github_chars(head) + 1_500, queue=presets.NPU)
    assert re.search(r"^_\d+ of 40 conflicts not shown: see the JSON report", tight, re.MULTILINE)
    assert sections(tight) == []
    well_formed(tight)


def test_limit_is_exact() -> None:
    data = big_report(6, 6, 40)
    full = markdown(data, limit=None, queue=presets.NPU)
    for limit in (github_chars(full), github_chars(full) - 1, 20_000, 9_000, 3_000, 500):
        body = markdown(data, limit=limit, queue=presets.NPU)
        assert github_chars(body) <= limit, limit
        well_formed(body)
    assert markdown(data, limit=github_chars(full), queue=presets.NPU) == full
    assert markdown(data, limit=github_chars(full) - 1, queue=presets.NPU) != full


def test_astral_characters_and_the_utf8_budget() -> None:
    emoji = "".join(f"        x_{i} = '😀é'\n" for i in range(200))
    data = make_report([conflict(line=i, sides={"base": emoji, "upstream": emoji, "patch": emoji}) for i in range(20)])
    body = markdown(data, limit=20_000, queue=presets.NPU)
    assert github_chars(body) <= 20_000 and len(body.encode("utf-16-le")) // 2 <= 20_000
    summary = markdown(data, limit=20_000, in_bytes=True, queue=presets.NPU)
    assert len(summary.encode()) <= 20_000 < github_chars(markdown(data, limit=None, queue=presets.NPU))
    for text in (body, summary):
        well_formed(text)
        text.encode("utf-8")  # no half of a character anywhere


def test_real_refresh_body(reported_030_once: tuple[Path, str]) -> None:
    """0.30.0's series onto vllm-ascend 0.30.0rc2 (the session's `pq refresh --no-stop --report --markdown`, only
    read): a report over the budget gives a body under it."""
    proj, _stdout = reported_030_once
    out, md = proj / "reports" / "refresh.json", proj / "reports" / "refresh.md"
    data = json.loads(out.read_text())
    full, body = markdown(data, limit=None, queue=presets.NPU), md.read_text(encoding="utf-8")
    assert body == markdown(data, queue=presets.NPU)  # pq refresh --markdown writes the budgeted body
    print(f"0.30.0 -> 0.30.0rc2: body {github_chars(body):,} characters, full {github_chars(full):,}")
    assert github_chars(full) > BODY_BUDGET >= github_chars(body)
    well_formed(full)
    well_formed(body)
    assert data["conflicts"] and all(named(body, c) for c in data["conflicts"])
    assert len(sections(full)) == len(data["conflicts"]) + len(data["flags"])
    explained = [c["explanation"]["upstream"] for c in data["conflicts"]]
    assert all(html.escape(e, quote=False) in body for e in explained)  # each conflict with its explanation


# ---------------------------------------------------------------------------------------------
# annotations


def test_annotations_one_per_entry() -> None:
    lines = annotations(full_report(), queue=presets.NPU)
    assert lines == [
        "::error file=npu_worker/npu_ar_model_runner.py,line=331,title=both-changed::upstream wrapped _update_states"
        " in a profiling context where the omni block sits (NPUARModelRunner.execute_model; culprits: 3f2c9e1 #4321)",
        "::error file=npu_worker/npu_model_runner.py,line=104,title=anchor-lost::the line omni block 1 followed is"
        " gone upstream (NPUModelRunner._update_states; culprits: 3f2c9e1 #4321)",
        "::warning file=npu_worker/npu_ar_model_runner.py,line=365,title=block-moved::omni block 4 moved below its"
        " anchor, which upstream moved 6 lines down (NPUARModelRunner.execute_model; culprits: a1b2c3d)",
        "::warning file=npu_worker/npu_model_runner.py,line=120,title=reused::applied the recorded resolution of"
        " 2026-04-30 (NPUModelRunner._update_states)",
        "::warning file=npu_worker/npu_ar_model_runner.py,line=402,title=near-block::omni block 4 moved below its"
        " anchor, which upstream moved 6 lines down (NPUARModelRunner.execute_model)",
    ]


def test_annotation_escaping() -> None:
    entry = conflict(
        file="odd:dir,x/npu_model_runner.py",
        kind="both-changed",
        symbol="",
        message="100% of a,b: line one\r\nline two\n",
        culprits=[
            {"commit": SHA_A, "subject": "", "pr": 7, "date": ""},
            {"commit": SHA_B, "subject": "", "pr": None, "date": ""},
        ],
    )
    (line,) = annotations(make_report([entry], out="out%dir"), queue=presets.NPU)
    assert line == (
        "::error file=out%25dir/odd%3Adir%2Cx/npu_model_runner.py,line=331,title=both-changed::"
        "100%25 of a,b: line one%0D%0Aline two%0A (culprits: 3f2c9e1 #7, a1b2c3d)"
    )
    assert "\n" not in line and "\r" not in line


def test_annotation_without_file_or_details() -> None:
    (line,) = annotations(
        make_report(
            flags=[
                flag(
                    file="",
                    line=None,
                    symbol="",
                    culprits=[],
                    kind="merged-words",
                    message="merged the argument lists word by word",
                )
            ]
        ),
        queue=presets.NPU,
    )
    assert line == "::warning title=merged-words::merged the argument lists word by word"


def test_escaping_matches_actions_toolkit() -> None:
    # @actions/core command.ts: escapeData and escapeProperty
    assert report._escape_data("a%b\rc\nd:e,f") == "a%25b%0Dc%0Ad:e,f"
    assert report._escape_property("a%b\rc\nd:e,f") == "a%25b%0Dc%0Ad%3Ae%2Cf"
    assert report._escape_property("%3A") == "%253A"  # percent first, so nothing is escaped twice


# ---------------------------------------------------------------------------------------------
# summary line


def test_summary_line() -> None:
    assert summary_line(full_report(), queue=presets.NPU) == (
        "2 conflicts, 3 review flags (1 reused), 23/24 omni blocks kept, 1 upstream symbol removed"
    )
    assert summary_line(make_report([conflict(), conflict(), conflict()], [flag()] * 12), queue=presets.NPU) == (
        "3 conflicts, 12 review flags, 24/24 omni blocks kept"
    )
    assert summary_line(make_report(), queue=presets.NPU) == "no conflicts, 0 review flags, 24/24 omni blocks kept"
    reused = [flag(reused=True), flag(kind="reused", reused=True)] + [flag()] * 10
    assert summary_line(make_report([conflict()] * 3, reused), queue=presets.NPU) == (
        "3 conflicts, 12 review flags (2 reused), 24/24 omni blocks kept"
    )
    stopped = summary_line(make_report([conflict()], finished=False, stopped_at="0005-x\n.patch"), queue=presets.NPU)
    assert stopped.endswith(", stopped at 0005-x .patch") and "\n" not in stopped


CHECK = {
    "format": 1,
    "errors": 2,
    "warnings": 1,
    "findings": [
        {"file": "npu_ar_model_runner.py", "line": 0, "rule": "omni-block-missing", "severity": "error",
         "message": "omni block 11 of the previous build (line 1024: 'x = y') is gone"},
        {"file": "npu_model_runner.py", "line": 12, "rule": "name-undefined", "severity": "error",
         "message": "Undefined name `planted`"},
        {"file": "npu_model_runner.py", "line": 3, "rule": "import-unused", "severity": "warning",
         "message": "`os` imported but unused"},
    ],
}  # fmt: skip


def test_check_errors_in_the_report() -> None:
    """A result `pq check` finds errors in: pending (not finished), or finished over them (--accept-errors); the
    body lists the errors, the annotations hold one ::error each, the terminal line counts them."""
    pending = make_report(check=CHECK, pending=True, accepted_errors=[])
    body = markdown(pending, queue=presets.NPU)
    assert "**Not finished: `pq check` reports 2 errors in the result:** fix them in `npu_worker/`" in body
    assert "- `npu_worker/npu_ar_model_runner.py`: `omni-block-missing` omni block 11" in body
    assert "- `npu_worker/npu_model_runner.py:12`: `name-undefined` Undefined name `planted`" in body
    assert "import-unused" not in body  # warnings are pq check's own business
    accepted = markdown(make_report(check=CHECK, accepted_errors=["a", "b"]), queue=presets.NPU)
    assert "**Finished over 2 errors of `pq check`** (`--accept-errors`, recorded in the lineage)" in accepted
    assert "Not finished" not in accepted
    clean = markdown(make_report(check={**CHECK, "errors": 0, "findings": CHECK["findings"][2:]}), queue=presets.NPU)  # type: ignore[index]
    assert "pq check" not in clean
    assert [a for a in annotations(pending, queue=presets.NPU) if "title=pq check" in a] == [
        "::error file=npu_worker/npu_ar_model_runner.py,title=pq check%3A omni-block-missing::omni block 11 of the"
        " previous build (line 1024: 'x = y') is gone",
        "::error file=npu_worker/npu_model_runner.py,line=12,title=pq check%3A name-undefined::Undefined name"
        " `planted`",
    ]
    assert summary_line(pending, queue=presets.NPU).endswith(", 2 pq check errors")
    assert summary_line(make_report(check=CHECK, accepted_errors=["a", "b"]), queue=presets.NPU).endswith(
        ", 2 pq check errors (accepted)"
    )


def test_flags_to_read() -> None:
    """The flags the terminal lists: decisions that change what the code does; a both-inserted or block-moved
    of blank lines only is counted with the rest."""
    from patch_queue.merge.conflict import Conflict
    from patch_queue.outputs.report_parts import to_read

    def read(kind: str, **sides: str) -> bool:
        return to_read(Conflict(kind, conflict=False, **sides))

    for kind in (
        "kept-replacement",
        "already-upstream",
        "merged-words",
        "merged-tokens",
        "api-replaced",
        "import-stale",
        "import-removed",
    ):
        assert read(kind), kind
    for kind in ("near-block", "layout-only", "comment-only", "reformatted", "import-added", "reused", "gpu-synced"):
        assert not read(kind), kind
    assert read("both-inserted", ours="x = 1\n", theirs="y = 2\n")
    assert not read("both-inserted", ours="\n", theirs="class A:\n    pass\n")
    assert not read("both-inserted", ours="# a note\n", theirs="y = 2\n")
    assert read("block-moved", resolution="\n    if x:\n        y()\n")
    assert not read("block-moved", resolution="\n")


def test_a_conflict_section_says_where_upstream_moved_its_deleted_lines() -> None:
    """`explanation.moved` (issue 48, point 3) is shown under the upstream change of its conflict, and only there."""
    said = "upstream moved these lines into `_start_timing`, which the new code calls (3 of 3 deleted statement(s)"
    data = make_report(
        conflicts=[
            conflict(explanation={"upstream": "", "block": "", "suggestion": None, "moved": said}),
            conflict(line=400),
        ]
    )
    first, second = sections(report.markdown(data, queue=presets.NPU))
    assert f"**Moved:** {said}" in first and "**Moved:**" not in second, first


def test_a_merge_report_names_the_queues_own_runners() -> None:
    """The Markdown head of a merge (and of a refresh) names the runners of the queue it was written for: the GPU
    queue's are no NPU runners, and a queue set by options names its package."""
    from dataclasses import replace

    from patch_queue.outputs import report_parts

    data = {
        "format": 1,
        "upstream": {"base": "vllm 0.23.0", "target": "vllm 0.23.0", "base_commit": "", "target_commit": ""},
        "downstream": {"name": "vllm-omni", "release": "0.24.0"},
        "blocks": {"before": 0, "after": 0},
        "merged": "vllm-omni==0.26.0",
    }
    heads = {}
    pair = replace(presets.GPU, preset="", package="vllm_omni/worker_v2")
    for name, spec in (("npu", presets.NPU), ("gpu", presets.GPU), ("pair", pair)):
        for merged in ("vllm-omni==0.26.0", ""):
            heads[name, bool(merged)] = report_parts.head(report_parts.read({**data, "merged": merged}, spec), "")
    assert heads["npu", True].startswith("## NPU runners: vllm-omni 0.26.0 merged\n")
    assert "The NPU model runners of vllm-omni 0.26.0 merged" in heads["npu", True]
    assert heads["gpu", True].startswith("## GPU runners: vllm-omni 0.26.0 merged\n")
    assert "The GPU model runners of vllm-omni 0.26.0 merged" in heads["gpu", True]
    assert "vllm-omni 0.24.0's GPU model runners replayed from" in heads["gpu", False]
    assert heads["pair", True].startswith("## Runners of vllm_omni/worker_v2: vllm-omni 0.26.0 merged\n")
    assert "NPU" not in heads["gpu", True] + heads["gpu", False] + heads["pair", True] + heads["pair", False]
