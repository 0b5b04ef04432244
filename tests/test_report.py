"""outputs/report.py: the pull-request body, the workflow commands and the terminal line of a refresh report."""

# no ``from __future__ import annotations``: report.annotations is imported by that name
import copy
import json
import re

import pytest

from patch_queue.outputs import report
from patch_queue.outputs.report import GITHUB_BODY_LIMIT, TRUNCATED_NOTE, annotations, markdown, summary_line

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
    body = markdown(full_report())
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
    body = markdown(make_report())
    status = body.splitlines()[2]
    assert "**Clean:** 4 patches replayed without conflicts." in status
    assert "No review flags." in status
    assert "Omni blocks: 24 before → 24 after." in status
    assert "No upstream symbols removed." in status
    assert "| patch |" not in body and "### Conflicts" not in body and "### Review flags" not in body


def test_stopped_refresh_is_said() -> None:
    body = markdown(
        make_report([conflict()], finished=False, stopped_at="0005-npu-ar-model-runner-execute-model.patch")
    )
    assert "**1 conflict needs resolution:**" in body
    assert "stopped at `0005-npu-ar-model-runner-execute-model.patch`" in body


def test_patch_table_lists_only_patches_with_entries_in_series_order() -> None:
    data = full_report()
    data["conflicts"].append(conflict(patch="0099-not-in-series.patch"))  # type: ignore[attr-defined]
    rows = table(markdown(data), "| patch | status | conflicts | flags |")
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
    rows = table(markdown(data), "| kind | conflicts | flags |")
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
    body = markdown(full_report())
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
    first = sections(markdown(full_report()))[0]
    assert (
        f"- [3f2c9e1]({URL}/commit/{SHA_A}) [#4321]({URL}/pull/4321) [Perf] profile input preparation (2026-05-02)"
    ) in first
    # no PR: only the commit link
    moved = sections(markdown(full_report()))[2]
    assert f"- [a1b2c3d]({URL}/commit/{SHA_B}) Refactor KV transfer hand-off (2026-04-28)" in moved
    assert "/pull/" not in moved


def test_upstream_url_option() -> None:
    fork = "https://github.com/someone/vllm-ascend"
    body = markdown(full_report(), upstream_url=fork + "/")
    assert f"[3f2c9e1]({fork}/commit/{SHA_A})" in body and f"[#4321]({fork}/pull/4321)" in body
    assert URL not in body


def test_diff_sides_empty_sides_and_flag_resolution() -> None:
    found = sections(markdown(full_report()))
    lost = found[1]
    assert "<summary><code>npu_worker/npu_model_runner.py:104</code> — anchor-lost — " in lost
    assert f"```diff\n{DIFF_SIDE}```" in lost
    assert "(new upstream `v0.20.0rc1`): _(empty)_" in lost
    assert "**Anchor:**" not in lost
    moved = found[2]
    assert "**resolution** (what the tool wrote)" in moved
    assert moved.count(f"```python\n{OMNI_REGISTER}```") == 4
    reused = found[3]
    assert "— reused — <code>NPUModelRunner._update_states</code></summary>" in reused
    assert "a recorded maintainer resolution was applied" in reused


def test_html_in_text_is_escaped() -> None:
    body = markdown(make_report([conflict(message="markers <<<<<<< and </details> & more", symbol="Runner.<lambda>")]))
    assert "markers &lt;&lt;&lt;&lt;&lt;&lt;&lt; and &lt;/details&gt; &amp; more" in body
    assert "<code>Runner.&lt;lambda&gt;</code>" in body
    assert body.count("</details>") == 1


def test_backtick_fence_grows() -> None:
    code = 'doc = """\n```python\nx = 1\n```\n"""\nquad = "````"\n'
    body = markdown(make_report([conflict(sides={"base": code, "upstream": "", "patch": "y = `1`\n"})]))
    assert f"`````python\n{code}`````" in body  # longest run is 4, so the fence is 5
    assert "```python\ny = `1`\n```" in body  # a run of 1 keeps the usual fence of 3
    anchored = markdown(make_report([conflict(anchor={"index": 1, "line": 2, "text": "s = '``'"})]))
    assert "**Anchor:** omni block 1, line 2: ```s = '``'```" in anchored


def test_deterministic() -> None:
    data = full_report()
    first = markdown(data)
    assert markdown(copy.deepcopy(data)) == first
    assert markdown(json.loads(json.dumps(data, sort_keys=True))) == first
    assert annotations(json.loads(json.dumps(data))) == annotations(data)
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
    body = markdown(old)
    assert "<code>npu_worker/npu_ar_model_runner.py:331</code> — conflict — " in body
    assert annotations(old) == [
        "::error file=npu_worker/npu_ar_model_runner.py,line=331,title=conflict::conflict "
        "(NPUARModelRunner.execute_model)"
    ]
    assert summary_line(old) == "1 conflict, 0 review flags, stopped at 0005-npu-ar-model-runner-execute-model.patch"


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
        markdown(data)


# ---------------------------------------------------------------------------------------------
# the size limit


def big_report(n_conflicts: int, n_flags: int, side_lines: int) -> dict[str, object]:
    side = "".join(
        f"        self.omni_state_{i} = compute_state(scheduler_output, index={i})\n" for i in range(side_lines)
    )
    sides = {"base": side, "upstream": side.replace("compute_state", "compute_state_v2"), "patch": side}
    return make_report(
        conflicts=[conflict(line=100 + i, sides=sides) for i in range(n_conflicts)],
        flags=[flag(line=1000 + i, sides=sides, resolution=side) for i in range(n_flags)],
    )


def test_under_the_limit_nothing_is_cut() -> None:
    body = markdown(big_report(3, 3, 10))
    assert TRUNCATED_NOTE not in body and "omitted" not in body


def test_sides_of_later_entries_are_truncated_first() -> None:
    data = big_report(3, 3, 100)
    full = markdown(data, limit=10**9)
    assert len(full.encode()) > GITHUB_BODY_LIMIT
    body = markdown(data)
    assert len(body.encode()) <= GITHUB_BODY_LIMIT
    found = sections(body)
    assert len(found) == 6 and "omitted" not in body  # all sections kept
    cut = [TRUNCATED_NOTE in s for s in found]
    assert cut[-1] and not cut[0]
    first_cut = cut.index(True)
    assert all(cut[first_cut:])  # a suffix is cut, the earlier ones are whole
    assert found[0] == sections(full)[0]
    assert "self.omni_state_0 = " in found[-1]  # an excerpt: the first lines stay
    assert "self.omni_state_99 = " not in found[-1]


def test_sections_are_dropped_last_with_a_count() -> None:
    data = big_report(40, 300, 30)
    body = markdown(data)
    assert len(body.encode()) <= GITHUB_BODY_LIMIT
    assert body.startswith("## NPU runners: v0.18.0rc1 → v0.20.0rc1\n")
    found = sections(body)
    assert 0 < len(found) < 340
    assert all(TRUNCATED_NOTE in s for s in found)
    omitted = re.findall(r"^_(\d+) of (\d+) (conflicts|review flags) omitted .*JSON report\._$", body, re.MULTILINE)
    assert [(int(n), int(t), w) for n, t, w in omitted] == [(340 - len(found), 300, "review flags")]
    assert body.index("### Review flags") < body.index("review flags omitted")
    # the tables still count everything
    assert table(body, "| kind | conflicts | flags |") == [["`both-changed`", "40", "0"], ["`block-moved`", "0", "300"]]


def test_small_limit_drops_conflicts_too() -> None:
    data = big_report(5, 5, 5)
    body = markdown(data, limit=len(markdown(data).split("### Conflicts")[0].encode()) + 400)
    assert sections(body) == []
    assert "_5 of 5 conflicts omitted" in body and "_5 of 5 review flags omitted" in body


def test_limit_is_exact() -> None:
    data = big_report(6, 6, 40)
    full = markdown(data, limit=10**9)
    for limit in (len(full.encode()), len(full.encode()) - 1, 20_000, 9_000):
        body = markdown(data, limit=limit)
        assert len(body.encode()) <= limit
    assert markdown(data, limit=len(full.encode())) == full


# ---------------------------------------------------------------------------------------------
# annotations


def test_annotations_one_per_entry() -> None:
    lines = annotations(full_report())
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
    (line,) = annotations(make_report([entry], out="out%dir"))
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
        )
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
    assert summary_line(full_report()) == (
        "2 conflicts, 3 review flags (1 reused), 23/24 omni blocks kept, 1 upstream symbol removed"
    )
    assert summary_line(make_report([conflict(), conflict(), conflict()], [flag()] * 12)) == (
        "3 conflicts, 12 review flags, 24/24 omni blocks kept"
    )
    assert summary_line(make_report()) == "no conflicts, 0 review flags, 24/24 omni blocks kept"
    reused = [flag(reused=True), flag(kind="reused", reused=True)] + [flag()] * 10
    assert summary_line(make_report([conflict()] * 3, reused)) == (
        "3 conflicts, 12 review flags (2 reused), 24/24 omni blocks kept"
    )
    stopped = summary_line(make_report([conflict()], finished=False, stopped_at="0005-x\n.patch"))
    assert stopped.endswith(", stopped at 0005-x .patch") and "\n" not in stopped
