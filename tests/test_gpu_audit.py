"""The GPU-side sync audit: synthetic cases for each rule, then the real vllm-omni 0.30.0 runners.

The real run reads the corpus (``gpu/`` and ``npu/`` of vllm-omni 0.30.0), vllm-ascend's runner
at the NPU runners' base from the corpus bundle, and vLLM 0.30.0's ``GPUModelRunner`` from the
package registry (its sdist, about 40 MiB, cached in ``PQ_CACHE``); it skips without the corpus
or the registry.
"""

from __future__ import annotations

import json
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from patch_queue import presets
from patch_queue.checks import gpu_audit
from patch_queue.checks.findings import WARNING
from patch_queue.checks.gpu_audit import GpuChange, audit, findings
from patch_queue.errors import SourceError
from patch_queue.sources import registry
from patch_queue.sources.cache import cache_dir
from patch_queue.sources.snapshot import resolve_upstream

# -- synthetic runners -----------------------------------------------------------------------

VLLM = """
class GPUModelRunner:
    def execute_model(self, scheduler_output, intermediate_tensors=None) -> "ModelRunnerOutput":
        num_reqs = self.input_batch.num_reqs
        inputs = self._prepare_inputs(scheduler_output, num_reqs)
        hidden_states = self._model_forward(inputs)
        logits = self.model.compute_logits(hidden_states)
        self.execute_model_state = ExecuteModelState(scheduler_output, logits)
        return None

    def sample_tokens(self, grammar_output):
        state = self.execute_model_state
        sampler_output = self._sample(state.logits, state.spec_decode_metadata)
        valid_ids = self._bookkeeping_sync(state.scheduler_output, sampler_output, state.logits)
        output = ModelRunnerOutput(req_ids=self.input_batch.req_ids, sampled_token_ids=valid_ids)
        return output

    def _dummy_run(self, num_tokens):
        hidden_states = self._model_forward(self.input_ids.gpu[:num_tokens])
        logit_indices = np.cumsum(num_tokens) - 1
        return hidden_states, hidden_states[logit_indices]

    def _update_states(self, scheduler_output):
        for req_id in scheduler_output.finished_req_ids:
            self.requests.pop(req_id, None)
        self.input_batch.refresh_metadata()

    def load_model(self):
        self.model = get_model(self.vllm_config)
        hook = getattr(self.model, "post_load", None)
        if callable(hook):
            hook()
"""

ASCEND = """
class NPUModelRunner(GPUModelRunner):
    def execute_model(self, scheduler_output, intermediate_tensors=None):
        num_reqs = self.input_batch.num_reqs
        inputs = self._prepare_inputs(scheduler_output, num_reqs)
        with set_ascend_forward_context(self.vllm_config):
            hidden_states = self._model_forward(inputs)
        logits = self.model.compute_logits(hidden_states)
        self.execute_model_state = ExecuteModelState(scheduler_output, logits)
        return None

    def sample_tokens(self, grammar_output):
        state = self.execute_model_state
        sampler_output = self._sample(state.logits, state.spec_decode_metadata)
        valid_ids = self._bookkeeping_sync(state.scheduler_output, sampler_output, state.logits)
        return ModelRunnerOutput(req_ids=self.input_batch.req_ids, sampled_token_ids=valid_ids)

    def _update_states(self, scheduler_output):
        self._apply_npu_corrections(scheduler_output)
        return super()._update_states(scheduler_output)
"""

GPU_BASE = """
class OmniGPUModelRunner(GPUModelRunner):
    def _dummy_run(self, num_tokens):
        hidden_states = self._model_forward(self.input_ids.gpu[:num_tokens])
        hidden_states, multimodal_outputs = self.extract_multimodal_outputs(hidden_states)
        logit_indices = np.cumsum(num_tokens) - 1
        return hidden_states, hidden_states[logit_indices]

    def _update_states(self, scheduler_output):
        for req_id in scheduler_output.finished_req_ids:
            self.requests.pop(req_id, None)
            self.model_intermediate_buffer.pop(req_id, None)
        self.input_batch.refresh_metadata()
"""

GPU_AR = """
class GPUARModelRunner(OmniGPUModelRunner):
    def execute_model(self, scheduler_output, intermediate_tensors=None) -> "OmniModelRunnerOutput":
        num_reqs = self.input_batch.num_reqs
        inputs = self._prepare_inputs(scheduler_output, num_reqs)
        prepare_runner_inputs = getattr(self.model, "prepare_runner_inputs", None)
        if callable(prepare_runner_inputs):
            inputs = prepare_runner_inputs(inputs, req_ids=self.input_batch.req_ids)

        hidden_states = self._model_forward(inputs)
        self._omni_talker_mtp_step(hidden_states, num_reqs=num_reqs)
        logits = self.model.compute_logits(hidden_states)
        self.execute_model_state = ExecuteModelState(scheduler_output, logits)
        return None

    def sample_tokens(self, grammar_output):
        state = self.execute_model_state
        # Omni: the same call, wrapped and commented
        sampler_output = self._sample(
            state.logits,
            state.spec_decode_metadata,
        )
        valid_ids = self._bookkeeping_sync(state.scheduler_output, sampler_output, state.logits)
        output = ModelRunnerOutput(req_ids=self.input_batch.req_ids, sampled_token_ids=valid_ids)
        self.attach_omni_connector_output(output)
        return output
"""

NPU_BASE = """
class OmniNPUModelRunner(OmniGPUModelRunner, NPUModelRunner):
    def load_model(self):
        NPUModelRunner.load_model(self)

    def _update_states(self, scheduler_output):
        self._apply_npu_corrections(scheduler_output)
        return OmniGPUModelRunner._update_states(self, scheduler_output)
"""

NPU_AR = """
class NPUARModelRunner(OmniNPUModelRunner):
    @torch.inference_mode()
    def execute_model(self, scheduler_output, intermediate_tensors=None):
        num_reqs = self.input_batch.num_reqs
        inputs = self._prepare_inputs(scheduler_output, num_reqs)
        if hasattr(self.model, "prepare_runner_inputs"):
            inputs = self.model.prepare_runner_inputs(inputs, req_ids=self.input_batch.req_ids)
        with set_ascend_forward_context(self.vllm_config):
            hidden_states = self._model_forward(inputs)
        logits = self.model.compute_logits(hidden_states)
        self.execute_model_state = ExecuteModelState(scheduler_output, logits)
        return None
"""


def _files(**texts: str) -> dict[str, str]:
    return {f"{name}.py": textwrap.dedent(text).lstrip() for name, text in texts.items()}


def _run(gpu_ar: str = GPU_AR, npu_ar: str = NPU_AR, **kwargs: tuple[str, ...]) -> list[GpuChange]:
    gpu = _files(gpu_model_runner=GPU_BASE, gpu_ar_model_runner=gpu_ar)
    npu = _files(npu_model_runner=NPU_BASE, npu_ar_model_runner=npu_ar)
    return audit(gpu, textwrap.dedent(VLLM), npu, textwrap.dedent(ASCEND), queue=presets.NPU, **kwargs)


def _one(changes: list[GpuChange], method: str, first: str) -> GpuChange:
    found = [c for c in changes if c.method == method and c.first.startswith(first)]
    assert len(found) == 1, [(c.method, c.first) for c in changes]
    return found[0]


def test_synthetic_changes_and_verdicts() -> None:
    changes = _run()
    # ar: the prepare_runner_inputs block, the talker step, the connector output in sample_tokens;
    # base: the multimodal extraction in _dummy_run and the buffer pop in _update_states
    assert [(c.gpu_file, c.method, c.gpu_line) for c in changes] == [
        ("gpu_ar_model_runner.py", "execute_model", 5),
        ("gpu_ar_model_runner.py", "execute_model", 10),
        ("gpu_ar_model_runner.py", "sample_tokens", 24),
        ("gpu_model_runner.py", "_dummy_run", 4),
        ("gpu_model_runner.py", "_update_states", 11),
    ]

    # ported, although the NPU copy rewrites the guard (hasattr) and the call (self.model.x)
    ported = _one(changes, "execute_model", "prepare_runner_inputs = getattr")
    assert ported.ported
    assert ported.reason == "found in NPUARModelRunner.execute_model (3/3 lines)"
    assert ported.lines == (
        '        prepare_runner_inputs = getattr(self.model, "prepare_runner_inputs", None)',
        "        if callable(prepare_runner_inputs):",
        "            inputs = prepare_runner_inputs(inputs, req_ids=self.input_batch.req_ids)",
    )
    assert (ported.npu_file, ported.npu_line) == ("npu_ar_model_runner.py", 2)

    # not ported: the talker step is nowhere on the NPU side
    missing = _one(changes, "execute_model", "self._omni_talker_mtp_step")
    assert not missing.ported
    assert missing.reason == "not found in NPUARModelRunner.execute_model (0/1 lines)"
    assert missing.missing == ("self._omni_talker_mtp_step(hidden_states, num_reqs=num_reqs)",)

    # the wrapped, commented _sample call of sample_tokens is layout only: no change for it; the
    # NPU class does not override sample_tokens and NPUModelRunner does: vllm-ascend's runs
    shadowed = _one(changes, "sample_tokens", "self.attach_omni_connector_output")
    assert not shadowed.ported
    assert shadowed.reason == "shadowed by NPUModelRunner.sample_tokens"
    assert (shadowed.npu_file, shadowed.npu_line) == ("npu_ar_model_runner.py", 0)

    # OmniNPUModelRunner lists OmniGPUModelRunner first: its _dummy_run runs on NPU as written
    inherited = _one(changes, "_dummy_run", "hidden_states, multimodal_outputs")
    assert inherited.ported
    assert inherited.reason == "runs on NPU as OmniGPUModelRunner._dummy_run (inherited)"
    # ... and an NPU override that calls the GPU method explicitly keeps it
    delegated = _one(changes, "_update_states", "self.model_intermediate_buffer.pop")
    assert delegated.ported
    assert delegated.reason == (
        "runs on NPU as OmniGPUModelRunner._update_states (OmniNPUModelRunner._update_states calls it)"
    )
    # the return annotation changed in GPUARModelRunner.execute_model: no change
    assert not any("OmniModelRunnerOutput" in c.first for c in changes)


def test_layout_and_comment_only_copies_have_no_change() -> None:
    wrapped = (
        GPU_AR.replace("        self.attach_omni_connector_output(output)\n", "")
        .replace("        self._omni_talker_mtp_step(hidden_states, num_reqs=num_reqs)\n", "")
        .replace(
            """        prepare_runner_inputs = getattr(self.model, "prepare_runner_inputs", None)
        if callable(prepare_runner_inputs):
            inputs = prepare_runner_inputs(inputs, req_ids=self.input_batch.req_ids)

""",
            "",
        )
        .replace(
            "        num_reqs = self.input_batch.num_reqs\n",
            '        """Omni: run the model."""\n        num_reqs = (  # the batch size\n'
            "            self.input_batch.num_reqs\n        )\n",
        )
    )
    changes = [c for c in _run(gpu_ar=wrapped) if c.gpu_file == "gpu_ar_model_runner.py"]
    assert changes == []


def test_missing_npu_method_and_delegation_through_super() -> None:
    # the NPU class overrides execute_model but delegates to super(): the chain ends in
    # NPUModelRunner.execute_model, and the GPU change is not there
    npu_ar = """
    class NPUARModelRunner(OmniNPUModelRunner):
        def execute_model(self, scheduler_output, intermediate_tensors=None):
            self._npu_only_setup()
            return super().execute_model(scheduler_output, intermediate_tensors)
    """
    changes = [c for c in _run(npu_ar=npu_ar) if c.method == "execute_model"]
    assert [c.ported for c in changes] == [False, False]
    assert {c.reason for c in changes} == {
        "not found in NPUARModelRunner.execute_model (0/3 lines)",
        "not found in NPUARModelRunner.execute_model (0/1 lines)",
    }
    # without an NPU module for the AR runner every change of it is reported
    gpu = _files(gpu_model_runner=GPU_BASE, gpu_ar_model_runner=GPU_AR)
    npu = _files(npu_model_runner=NPU_BASE)
    changes = audit(gpu, textwrap.dedent(VLLM), npu, textwrap.dedent(ASCEND), queue=presets.NPU)
    ar = [c for c in changes if c.gpu_file == "gpu_ar_model_runner.py"]
    assert len(ar) == 3 and all(not c.ported and c.reason == "no NPU module for gpu_ar_model_runner.py" for c in ar)


def test_change_found_elsewhere_in_the_npu_modules() -> None:
    # the talker step was ported into a helper the NPU execute_model calls
    npu_ar = NPU_AR.replace(
        "        return None\n", "        self._npu_post(hidden_states, num_reqs)\n        return None\n"
    )
    npu_ar += """
    def _npu_post(self, hidden_states, num_reqs):
        self._omni_talker_mtp_step(hidden_states, num_reqs=num_reqs)
"""
    change = _one(_run(npu_ar=npu_ar), "execute_model", "self._omni_talker_mtp_step")
    assert change.ported
    assert change.reason == (
        "not found in NPUARModelRunner.execute_model (0/1 lines), but found elsewhere in "
        "npu_ar_model_runner.py, npu_model_runner.py (1/1 lines)"
    )


def test_history_marks_stale_upstream_code() -> None:
    # the GPU copy still holds a line an older vLLM had: with that release given, it is upstream
    old = VLLM.replace(
        "        hidden_states = self._model_forward(inputs)\n",
        "        hidden_states = self._model_forward(inputs)\n"
        "        self._omni_talker_mtp_step(hidden_states, num_reqs=num_reqs)\n",
    )
    assert any(c.first.startswith("self._omni_talker_mtp_step") for c in _run())
    changes = _run(history=(textwrap.dedent(old),))
    assert not any(c.first.startswith("self._omni_talker_mtp_step") for c in changes)
    assert len(changes) == 4


def test_findings() -> None:
    changes = _run()
    found = findings(changes)
    assert [(f.file, f.line, f.rule, f.severity) for f in found] == [
        ("npu_ar_model_runner.py", 2, "gpu-unported", WARNING),
        ("npu_ar_model_runner.py", 0, "gpu-unported", WARNING),
    ]
    assert found[0].message == (
        "omni GPU change gpu_ar_model_runner.py:10 in execute_model not on NPU "
        "(not found in NPUARModelRunner.execute_model (0/1 lines)): "
        "self._omni_talker_mtp_step(hidden_states, num_reqs=num_reqs)"
    )
    assert found[1].render() == (
        "npu_ar_model_runner.py: warning: [gpu-unported] omni GPU change gpu_ar_model_runner.py:24 in "
        "sample_tokens not on NPU (shadowed by NPUModelRunner.sample_tokens): self.attach_omni_connector_output(output)"
    )


def test_code_lines_normalisation() -> None:
    code = gpu_audit.code_lines(
        textwrap.dedent('''
        def f(a, b):
            """A docstring."""
            x = g(a,  # a comment
                  b)
            return {"k": 'v'}
    ''')
    ).code
    assert code == {2: "deffab:", 4: "x=ga", 5: "b", 6: "return{k:v}"}
    # a method's signature is its parameters: annotations and wrapping do not count
    one = gpu_audit.method_code("    def m(self, x: int = 1) -> str:\n        return x\n").code
    two = gpu_audit.method_code(
        "    def m(\n        self,\n        x: float = 1,\n    ) -> None:\n        return x\n"
    ).code
    assert list(one.values()) == list(two.values()) == ["defmselfx=1:", "returnx"]


# -- the real runners ------------------------------------------------------------------------

RELEASE = "0.30.0"
ASCEND_BASE = "cf0baa38dfb2"  # the vllm-ascend commit the 0.30.0 NPU runners match best (see test_end_to_end)
RUNNERS = ("gpu_model_runner.py", "gpu_ar_model_runner.py", "gpu_generation_model_runner.py")


@dataclass(frozen=True)
class RealRun:
    changes: list[GpuChange]
    seconds: float
    pin: dict[str, str]


@pytest.fixture(scope="module")
def real(corpus: Path) -> Iterator[RealRun]:
    omni = corpus / f"vllm-omni-{RELEASE}"
    if not omni.is_dir():
        pytest.skip(f"no vllm-omni {RELEASE} in the corpus")
    try:
        vllm = gpu_audit.load_vllm_runner(RELEASE, queue=presets.NPU)
    except SourceError as exc:
        pytest.skip(f"vLLM {RELEASE} not available from the registry: {exc}")
    pin = json.loads((cache_dir() / "dist" / f"vllm=={RELEASE}.json").read_text())
    snap = resolve_upstream(
        ASCEND_BASE, upstream_git=str(corpus / "vllm-ascend.bundle"), progress=lambda _: None, queue=presets.NPU
    )
    ascend = snap.read("vllm_ascend/worker/model_runner_v1.py").decode("utf-8")
    gpu = {name: (omni / "gpu" / name).read_text() for name in RUNNERS}
    npu = {name.replace("gpu_", "npu_"): (omni / "npu" / name.replace("gpu_", "npu_")).read_text() for name in RUNNERS}
    start = time.perf_counter()
    changes = audit(gpu, vllm, npu, ascend, queue=presets.NPU)
    yield RealRun(changes, time.perf_counter() - start, pin)


def test_real_vllm_runner_comes_from_the_sdist(real: RealRun) -> None:
    assert real.pin["kind"] == "sdist" and real.pin["filename"] == f"vllm-{RELEASE}.tar.gz"


def test_real_counts(real: RealRun) -> None:
    changes = real.changes
    assert len(changes) == 130
    by_method = Counter((c.gpu_file, c.method, c.ported) for c in changes)
    assert by_method == {
        ("gpu_ar_model_runner.py", "execute_model", True): 23,
        ("gpu_ar_model_runner.py", "execute_model", False): 17,
        ("gpu_ar_model_runner.py", "sample_tokens", True): 11,
        ("gpu_ar_model_runner.py", "sample_tokens", False): 13,
        ("gpu_generation_model_runner.py", "execute_model", True): 17,
        ("gpu_generation_model_runner.py", "execute_model", False): 4,
        ("gpu_generation_model_runner.py", "_dummy_run", True): 4,
        ("gpu_generation_model_runner.py", "_dummy_run", False): 1,
        ("gpu_generation_model_runner.py", "profile_run", True): 1,
        ("gpu_model_runner.py", "_update_states", True): 8,
        ("gpu_model_runner.py", "_dummy_run", True): 2,
        ("gpu_model_runner.py", "_dummy_run", False): 3,
        ("gpu_model_runner.py", "_preprocess", True): 26,
    }
    kinds = Counter(
        "runs-gpu"
        if c.reason.startswith("runs on NPU")
        else "elsewhere"
        if "found elsewhere" in c.reason
        else "found"
        if c.ported
        else "unported"
        for c in changes
    )
    assert kinds == {"runs-gpu": 34, "found": 55, "elsewhere": 3, "unported": 38}
    # OmniGPUModelRunner._preprocess runs on NPU (inherited ahead of NPUModelRunner); _update_states
    # through OmniNPUModelRunner's explicit call
    assert {c.reason for c in changes if c.method in ("_preprocess", "_update_states")} == {
        "runs on NPU as OmniGPUModelRunner._preprocess (inherited)",
        "runs on NPU as OmniGPUModelRunner._update_states (OmniNPUModelRunner._update_states calls it)",
    }
    assert not any("shadowed" in c.reason for c in changes)
    assert real.seconds < 20


def test_real_scores_leave_a_gap_at_the_threshold(real: RealRun) -> None:
    scored = [c for c in real.changes if not c.reason.startswith("runs on NPU")]
    ported = [c.found / len(c.meaningful) for c in scored if c.ported]
    unported = [c.found / len(c.meaningful) for c in scored if not c.ported]
    assert min(ported) == pytest.approx(3 / 5)
    assert max(unported) == pytest.approx(5 / 9)
    assert all(c.found + len(c.missing) == len(c.meaningful) for c in real.changes)


def test_real_unported_list(real: RealRun) -> None:
    unported = [(c.gpu_file.removesuffix("_model_runner.py"), c.gpu_line) for c in real.changes if not c.ported]
    assert unported == [
        *(
            ("gpu_ar", line)
            for line in (
                855,
                1007,
                1010,
                1035,
                1057,
                1064,
                1068,
                1078,
                1080,
                1113,
                1128,
                1134,
                1151,
                1169,
                1184,
                1235,
                1285,
                1943,
                2012,
                2042,
                2047,
                2062,
                2071,
                2098,
                2109,
                2129,
                2132,
                2160,
                2165,
                2175,
            )
        ),
        *(("gpu_generation", line) for line in (106, 183, 290, 335, 761)),
        *(("gpu", line) for line in (1124, 1224, 1282)),
    ]
    by_first = {c.first: c for c in real.changes}
    # VoxCPM2's runner-assisted FULL attention metadata: GPU only
    runner_assisted = by_first[
        "runner_assisted_full_attn_request = self._get_runner_assisted_full_attention_metadata_request("
    ]
    assert (runner_assisted.gpu_line, runner_assisted.ported) == (1010, False)
    # the post-sample talker MTP of sample_tokens: GPU only
    assert not by_first["multimodal_outputs = self._run_post_sample_talker_mtp("].ported
    # ported with a rewritten guard
    assert by_first['prepare_runner_inputs = getattr(self.model, "prepare_runner_inputs", None)'].ported


def test_real_findings(real: RealRun) -> None:
    found = findings(real.changes)
    assert len(found) == 38
    assert Counter((f.file, f.line) for f in found) == {
        ("npu_ar_model_runner.py", 312): 17,  # NPUARModelRunner.execute_model (from its decorator)
        ("npu_ar_model_runner.py", 838): 13,  # NPUARModelRunner.sample_tokens
        ("npu_generation_model_runner.py", 86): 4,
        ("npu_generation_model_runner.py", 622): 1,
        ("npu_model_runner.py", 115): 3,
    }
    assert {(f.rule, f.severity) for f in found} == {("gpu-unported", WARNING)}
    assert all("\n" not in f.message and f.message.startswith("omni GPU change gpu_") for f in found)


def test_real_runs_without_the_registry_when_cached(
    real: RealRun, monkeypatch: pytest.MonkeyPatch, pq_cache: Path
) -> None:
    # the pinned, cached sdist is read again without asking the index
    def offline(name: str) -> list[registry.DistFile]:
        raise AssertionError(f"the index was asked for {name}")

    monkeypatch.setenv("PQ_CACHE", str(pq_cache))
    monkeypatch.setattr(registry, "project_files", offline)
    assert "class GPUModelRunner" in gpu_audit.load_vllm_runner(RELEASE, queue=presets.NPU)
