"""pq sync-gpu: the translation rules, then ports of vllm-omni 0.30.0's own unported GPU changes.

The real runs adopt vllm-omni 0.30.0 at the vllm-ascend commit its NPU runners match
(``cf0baa38dfb2``) and read vLLM 0.30.0's ``GPUModelRunner`` from the registry (cached in
``$PQ_CACHE``), as ``pq check``'s audit does.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import copy_project, git, new_project, pq, push_to_bare

from patch_queue import presets
from patch_queue.checks import gpu_audit
from patch_queue.errors import QueueError
from patch_queue.merge import anchors
from patch_queue.sync import helper_methods, placement, removals, translation
from patch_queue.sync import ports as gpu_ports

NPU_MIRROR = gpu_audit.mirror(presets.NPU)  # the two upstream classes of the NPU queue, whose GPU runners it mirrors

BASE_030 = "cf0baa38dfb2"


# -- the rules ----------------------------------------------------------------------------------


def test_builtin_rules_translate_the_renames_the_maintainers_apply() -> None:
    rules = translation.load_rules()
    t = rules.translate
    assert t("if not isinstance(self.talker_mtp, CUDAGraphWrapper):") == (
        "if not isinstance(self.talker_mtp, ACLGraphWrapper):"
    )
    assert t("BreakableCUDAGraphWrapper.clear_all_graphs()") == "BreakableCUDAGraphWrapper.clear_all_graphs()"
    assert t("with set_forward_context(") == "with set_ascend_forward_context("
    # vllm-omni's platform wrapper takes cudagraph_runtime_mode, which the keyword rule (a line at a time, the
    # keyword often on the next line) would rename: the call is written as vllm-ascend's, as the NPU runners do
    assert t("with current_omni_platform.set_forward_context(") == "with set_ascend_forward_context("
    assert t("    cudagraph_runtime_mode=CUDAGraphMode.NONE,") == "    aclgraph_runtime_mode=CUDAGraphMode.NONE,"
    assert t("if cudagraph_runtime_mode == CUDAGraphMode.FULL:") == "if cudagraph_runtime_mode == CUDAGraphMode.FULL:"
    assert t("ready = torch.cuda.Event()") == "ready = torch.npu.Event()"
    assert t('if value.device.type == "cuda":') == 'if value.device.type == "npu":'
    assert t("    from vllm_omni.worker.gpu_model_runner import CUDAGraphWrapper") == (
        "    from vllm_ascend.compilation.acl_graph import ACLGraphWrapper"
    )
    assert t("        from vllm.compilation.cuda_graph import CUDAGraphWrapper  # lazy") == (
        "        from vllm_ascend.compilation.acl_graph import ACLGraphWrapper  # lazy"
    )
    assert (
        t("from vllm.compilation.cuda_graph import CUDAGraphStat")
        == "from vllm.compilation.cuda_graph import CUDAGraphStat"
    )
    assert t("from vllm.distributed.parallel_state import graph_capture") == (
        "from vllm_ascend.worker.model_runner_v1 import graph_capture"
    )
    assert t("cuda_device=self.device,") == "cuda_device=self.device,"
    assert re.fullmatch(r"#\s+-+ Omni-new -+", rules.fence)


def test_user_rules_replace_by_id_and_extend(tmp_path: Path) -> None:
    (tmp_path / translation.USER_RULES).write_text(
        'fence = "# ---------- Omni-new ----------"\n'
        '[[rule]]\nid = "torch-npu"\nfind = "torch.cuda."\nreplace = "torch_npu.npu."\nregex = false\n'
        '[[rule]]\nid = "nccl"\nfind = \'\\bnccl\\b\'\nreplace = "hccl"\n'
    )
    rules = translation.load_rules(tmp_path)
    ids = [r.id for r in rules.rules]
    assert ids.index("torch-npu") < ids.index("device-string") and ids[-1] == "nccl"  # replaced in place, appended
    assert rules.translate("torch.cuda.synchronize()  # nccl") == "torch_npu.npu.synchronize()  # hccl"
    assert rules.fence == "# ---------- Omni-new ----------"


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ('[[rule]]\nid = "x"\nfind = "("\nreplace = "y"\n', 3, "rule[0] (x): bad find or replace"),
        ('[[rule]]\nid = "x"\nreplace = "y"\n', 1, "rule[0].find must be a non-empty string"),
        ('fence = "# Omni"\n', 1, "fence must be an Omni-new fence comment line"),
        ("[[rule]\n", 1, "not valid TOML"),
        (
            '[[rule]]\nid = "x"\nfind = "a"\nreplace = "b"\n\n'
            '[[decline]]\nfile = "gpu_x.py"\nmethod = ""\nfirst = "y"\n',
            8,
            "decline[0].method must be a non-empty string",
        ),
        (
            '[[decline]]\nfile = "gpu_x.py"\nmethod = "f"\nfirst = "y"\nnote = 3\n',
            5,
            "decline[0].note must be a string",
        ),
    ],
)
def test_bad_user_rules_name_the_file_and_line(tmp_path: Path, text: str, line: int | None, message: str) -> None:
    (tmp_path / translation.USER_RULES).write_text(text)
    with pytest.raises(QueueError) as err:
        translation.load_rules(tmp_path)
    where = f"{tmp_path / translation.USER_RULES}" + (f":{line}" if line else "")
    assert str(err.value).startswith(f"{where}: ") and message in str(err.value)


def test_declined_changes_are_read_and_written_back_alike(tmp_path: Path) -> None:
    entry = translation.Decline("gpu_ar_model_runner.py", "execute_model", 'x = {"a": "\\n"}  # é', note="not on NPU")
    (tmp_path / translation.USER_RULES).write_text(entry.toml())
    rules = translation.load_rules(tmp_path)
    assert rules.declined == (entry,)
    assert rules.decline_of("gpu_ar_model_runner.py", "execute_model", entry.first) == entry
    assert rules.decline_of("gpu_ar_model_runner.py", "sample_tokens", entry.first) is None
    assert len(rules.rules) == len(translation.load_rules().rules)  # declines add no rule


def test_declines_of_a_port_read_its_message_old_and_new() -> None:
    message = (
        "sync-gpu-execute-model-2: port the omni GPU change(s) into NPUARModelRunner.execute_model\n\n"
        "From the GPU runners of vllm-omni==0.30.0:\n"
        + translation.ported_line("gpu_ar_model_runner.py", 1184, "execute_model", "if self.x: # a: b")
        + "- gpu_model_runner.py:77: y = 1\n"  # a port written before the method was named: the subject's method
    )
    found = translation.declines_of("0017-sync-gpu-execute-model-1.patch", message)
    assert [d.key for d in found] == [
        ("gpu_ar_model_runner.py", "execute_model", "if self.x: # a: b"),
        ("gpu_model_runner.py", "execute_model", "y = 1"),
    ]
    assert found[0].note == "pq delete 0017-sync-gpu-execute-model-1.patch"
    assert translation.declines_of("0003-npu-ar-model-runner.patch", message) == []


# -- placement on small runners ----------------------------------------------------------------

_VLLM = """class GPUModelRunner:
    def execute_model(self, scheduler_output):
        num_reqs = self.input_batch.num_reqs
        attn_metadata = self._build_attention_metadata(num_tokens=num_reqs, pad=True)
        hidden_states = self.model(attn_metadata)
        return self.sample(hidden_states)
"""
_ASCEND = "class NPUModelRunner:\n    def execute_model(self, scheduler_output):\n        return None\n"


def _sync_small(
    gpu_body: str, npu_body: str, gpu_head: str = "", vllm: str = _VLLM
) -> tuple[list[gpu_ports.Port | gpu_ports.Unplaced], str]:
    """Sync one GPU copy of vLLM's execute_model (its body ``gpu_body``) into an NPU one (``npu_body``)."""
    from patch_queue.checks import gpu_audit

    head = "    def execute_model(self, scheduler_output):\n"
    omni = gpu_head + "class OmniGPUModelRunner:\n    pass\n\n\nclass GPUARModelRunner(OmniGPUModelRunner):\n"
    gpu = {"gpu_ar_model_runner.py": omni + head + gpu_body}
    npu = {"npu_ar_model_runner.py": "class NPUARModelRunner(NPUModelRunner):\n" + head + npu_body}
    changes = gpu_audit.audit(gpu, vllm, npu, _ASCEND, queue=presets.NPU)
    results, files = placement.sync(changes, gpu, vllm, npu, translation.load_rules(), mirror=NPU_MIRROR)
    return results, files["npu_ar_model_runner.py"]


_GPU_BODY = """        num_reqs = self.input_batch.num_reqs
        attn_metadata = self._build_attention_metadata(num_tokens=num_reqs, pad=True)
        self._attach_omni_extensions(attn_metadata, num_reqs=num_reqs)
        hidden_states = self.model(attn_metadata)
        return self.sample(hidden_states)
"""


def test_an_insertion_goes_after_the_npu_statement_most_like_its_gpu_neighbour() -> None:
    # neither neighbour is verbatim on NPU: the NPU call takes other arguments
    npu_body = """        num_reqs = self.input_batch.num_reqs
        attn_metadata = self._build_attention_metadata(num_tokens=num_reqs, pad=False, npu=True)
        hidden_states = self.model(attn_metadata, graph=True)
        return self.sample(hidden_states)
"""
    (port,), text = _sync_small(_GPU_BODY, npu_body)
    assert isinstance(port, gpu_ports.Port), port
    lines = text.splitlines()
    at = lines.index("        self._attach_omni_extensions(attn_metadata, num_reqs=num_reqs)")
    assert "_build_attention_metadata(num_tokens=num_reqs, pad=False, npu=True)" in lines[at - 2]
    assert "Omni-new" in lines[at - 1] and "Omni-new" in lines[at + 1]
    assert port.how.startswith("after the NPU statement most like the GPU one before it: attn_metadata = ")
    ast.parse(text)


def test_two_npu_statements_as_like_the_neighbour_place_nothing() -> None:
    npu_body = """        num_reqs = self.input_batch.num_reqs
        attn_metadata = self._build_attention_metadata(num_tokens=num_reqs, pad=False)
        if num_reqs:
            attn_metadata = self._build_attention_metadata(num_tokens=num_reqs, pad=False)
        hidden_states = self.model(attn_metadata, graph=True)
        return self.sample(hidden_states)
"""
    (unplaced,), _text = _sync_small(_GPU_BODY, npu_body)
    assert isinstance(unplaced, gpu_ports.Unplaced)
    assert unplaced.reason.startswith("neither the GPU code before it nor the code after it is in")


_REMEMBER_GPU = """        num_reqs = self.input_batch.num_reqs
        attn_metadata = self._build_attention_metadata(num_tokens=num_reqs, pad=True)
        hidden_states = self.model(attn_metadata)
        self._remember(hidden_states, attn_metadata)
        return self.sample(hidden_states)
"""


@pytest.mark.parametrize(
    "npu_body",
    [
        # the NPU method never binds attn_metadata
        "        num_reqs = self.input_batch.num_reqs\n        hidden_states = self.model(None)\n"
        "        return self.sample(hidden_states)\n",
        # it binds it only after where the port goes (vllm-omni 0.18.0's GPU _dummy_run binds model_kwargs early,
        # the NPU one further down: `model_kwargs["runtime_additional_information"] = ...` raised NameError)
        "        num_reqs = self.input_batch.num_reqs\n        hidden_states = self.model(None)\n"
        "        result = self.sample(hidden_states)\n        attn_metadata = None\n        return result\n",
    ],
)
def test_a_port_reading_a_gpu_local_the_npu_method_does_not_bind_before_it_is_not_placed(npu_body: str) -> None:
    (unplaced,), text = _sync_small(_REMEMBER_GPU, npu_body)
    assert isinstance(unplaced, gpu_ports.Unplaced) and "_remember" not in text
    assert unplaced.reason == (
        "it uses attn_metadata, which the GPU method binds and NPUARModelRunner.execute_model does not bind before it"
    )


def test_an_insertion_after_a_gpu_block_goes_past_the_lines_the_npu_block_goes_on_with() -> None:
    """vllm-omni 0.18.0's GPU sample_tokens inserts an `if` after `if grammar_output is not None:` whose last
    statement is the anchor; the NPU block goes on with a line of its own.  Inserted right after the anchor, at the
    GPU indentation, that line would become the body of the inserted `if`: the port goes after the NPU block."""
    vllm = """class GPUModelRunner:
    def execute_model(self, scheduler_output):
        logits = self.logits()
        if scheduler_output is not None:
            apply_bitmask(logits)
        return self.sample(logits)
"""
    gpu_body = """        logits = self.logits()
        if scheduler_output is not None:
            apply_bitmask(logits)
        if logits is not None and self.penalties:
            self._clamp(logits)
        return self.sample(logits)
"""
    npu_body = """        logits = self.logits()
        if scheduler_output is not None:
            logits = logits.cpu()
            apply_bitmask(logits)
            logits = logits.npu()

        return self.sample(logits, npu=True)
"""
    (port,), text = _sync_small(gpu_body, npu_body, vllm=vllm)
    assert isinstance(port, gpu_ports.Port), port
    lines = text.splitlines()
    at = lines.index("        if logits is not None and self.penalties:")
    assert lines[at - 2 : at] == ["            logits = logits.npu()", f"        {translation.load_rules().fence}"]
    tree = ast.parse(text)
    block = next(n for n in ast.walk(tree) if isinstance(n, ast.If) and "scheduler_output" in ast.unparse(n.test))
    assert [ast.unparse(s) for s in block.body][-1] == "logits = logits.npu()"
    # the same port right after the anchor would have moved that line into the inserted `if`
    method = npu_body.splitlines()
    row = method.index("            apply_bitmask(logits)") + 2  # the rows of the method text, def line first
    inserted = ["        if logits is not None and self.penalties:", "            self._clamp(logits)"]
    before = "    def execute_model(self, scheduler_output):\n" + npu_body
    after_lines = before.splitlines()
    after = "\n".join([*after_lines[:row], *inserted, *after_lines[row:]]) + "\n"
    assert placement._moved(before, after, (row, row), len(inserted)) == row + 1  # logits = logits.npu()
    fine = "\n".join([*after_lines[: row + 1], "", *inserted, *after_lines[row + 1 :]]) + "\n"
    assert placement._moved(before, fine, (row + 1, row + 1), len(inserted) + 1) is None
    # a replacement: the header replaced keeps its body there (fine), a header dropped moves it (not)
    header = after_lines.index("        if scheduler_output is not None:")
    kept = "\n".join([*after_lines[:header], "        if scheduler_output:", *after_lines[header + 1 :]]) + "\n"
    assert placement._moved(before, kept, (header, header + 1), 1) is None
    flat = [line[4:] if 0 < i - header < 4 else line for i, line in enumerate(after_lines)]
    dropped = "\n".join([*flat[:header], "        pass", *flat[header + 1 :]]) + "\n"
    assert placement._moved(before, dropped, (header, header + 1), 1) == header + 2


def test_a_port_replacing_the_binding_of_a_local_the_npu_method_still_reads_is_not_placed() -> None:
    gpu_body = """        num_reqs = self.input_batch.num_reqs
        meta = self._omni_metadata(num_reqs)
        hidden_states = self.model(meta)
        return self.sample(hidden_states)
"""
    npu_body = """        num_reqs = self.input_batch.num_reqs
        attn_metadata = self._build_attention_metadata(num_tokens=num_reqs, pad=True)
        hidden_states = self.model(attn_metadata)
        self.npu_post(attn_metadata)
        return self.sample(hidden_states)
"""
    (unplaced,), text = _sync_small(gpu_body, npu_body)
    assert isinstance(unplaced, gpu_ports.Unplaced) and "_omni_metadata" not in text
    assert unplaced.reason == (
        "it replaces the code binding attn_metadata, which the rest of NPUARModelRunner.execute_model still reads"
    )
    # the same change where nothing else reads it is placed
    (port,), text = _sync_small(gpu_body, npu_body.replace("        self.npu_post(attn_metadata)\n", ""))
    assert isinstance(port, gpu_ports.Port) and "meta = self._omni_metadata(num_reqs)" in text


def test_a_port_imports_the_names_it_uses_as_the_gpu_module_binds_them() -> None:
    gpu_head = "from vllm_omni.worker.sampling_utils import sanitize\n\n\ndef _local_helper(x):\n    return x\n\n\n"
    gpu_body = """        num_reqs = self.input_batch.num_reqs
        attn_metadata = self._build_attention_metadata(num_tokens=num_reqs, pad=True)
        attn_metadata = _local_helper(sanitize(attn_metadata))
        hidden_states = self.model(attn_metadata)
        return self.sample(hidden_states)
"""
    npu_body = _GPU_BODY.replace("        self._attach_omni_extensions(attn_metadata, num_reqs=num_reqs)\n", "")
    (port,), text = _sync_small(gpu_body, npu_body, gpu_head)
    assert isinstance(port, gpu_ports.Port), port
    assert "from vllm_omni.worker.sampling_utils import sanitize\n" in text
    # a helper the GPU module defines: imported from that module, which the NPU runners import from already
    assert "from vllm_omni.worker.gpu_ar_model_runner import _local_helper\n" in text
    assert len(port.imports) == 2 and port.missing_names == ()
    lines = text.splitlines()
    assert lines[port.line - 1].strip().startswith("#") and "Omni-new" in lines[port.line - 1]
    assert lines[port.line].strip() == "attn_metadata = _local_helper(sanitize(attn_metadata))"
    ast.parse(text)


def test_a_change_whose_vllm_code_the_npu_rewrote_is_merged_between_its_neighbours() -> None:
    # the GPU guards the model call with an omni condition; NPU wrote a statement of its own into that block
    vllm_call = "        hidden_states = self.model(attn_metadata)\n"
    gpu_body = _GPU_BODY.replace(
        vllm_call,
        "        for _ in range(2):\n            y = 0\n            hidden_states = self.model(attn_metadata)\n",
    )
    gpu_body = gpu_body.replace("for _ in range(2):", "for _ in range(self.omni_steps):")
    npu_body = _GPU_BODY.replace(
        vllm_call,
        "        for _ in range(2):\n            y = 0\n            torch.npu.synchronize()\n"
        "            hidden_states = self.model(attn_metadata)\n",
    )
    vllm = _VLLM.replace(
        vllm_call,
        "        for _ in range(2):\n            y = 0\n            hidden_states = self.model(attn_metadata)\n",
    )
    from patch_queue.checks import gpu_audit

    head = "    def execute_model(self, scheduler_output):\n"
    omni = "class OmniGPUModelRunner:\n    pass\n\n\nclass GPUARModelRunner(OmniGPUModelRunner):\n"
    gpu = {"gpu_ar_model_runner.py": omni + head + gpu_body}
    npu = {"npu_ar_model_runner.py": "class NPUARModelRunner(NPUModelRunner):\n" + head + npu_body}
    changes = gpu_audit.audit(gpu, vllm, npu, _ASCEND, queue=presets.NPU)
    (port,), files = placement.sync(changes, gpu, vllm, npu, translation.load_rules(), mirror=NPU_MIRROR)
    assert isinstance(port, gpu_ports.Port), port
    assert port.how.startswith("merged with the NPU code between ")
    body = [line.strip() for line in files["npu_ar_model_runner.py"].splitlines() if "Omni-new" not in line]
    assert body[body.index("for _ in range(self.omni_steps):") :][:4] == [
        "for _ in range(self.omni_steps):",
        "y = 0",
        "torch.npu.synchronize()",
        "hidden_states = self.model(attn_metadata)",
    ]
    assert "for _ in range(2):" not in body
    ast.parse(files["npu_ar_model_runner.py"])


def test_a_change_where_the_npu_code_diverged_places_nothing() -> None:
    gpu_body = _GPU_BODY.replace(
        "        hidden_states = self.model(attn_metadata)\n",
        "        hidden_states = self.model(attn_metadata, omni=True)\n        self.omni_post()\n",
    )
    npu_body = _GPU_BODY.replace(
        "        hidden_states = self.model(attn_metadata)\n",
        "        hidden_states = self.model(attn_metadata, graph=True)\n        self.npu_post()\n",
    )
    (unplaced,), text = _sync_small(gpu_body, npu_body)
    assert isinstance(unplaced, gpu_ports.Unplaced) and "omni_post" not in text
    assert unplaced.reason == (
        "the vLLM code it replaces (1 statement(s) from hidden_states = self.model(attn_metadata)) is nowhere in "
        "NPUARModelRunner.execute_model, and the NPU code where it goes is not like the code it replaces"
    )


def test_a_statement_of_the_change_the_vllm_method_holds_too_is_not_a_partial_port() -> None:
    # the GPU change repeats a statement vLLM's method has (and so the NPU copy): not a sign of a partial port
    gpu_body = _GPU_BODY.replace(
        "        self._attach_omni_extensions(attn_metadata, num_reqs=num_reqs)\n",
        "        if self.omni_refresh:\n            num_reqs = self.input_batch.num_reqs\n",
    )
    npu_body = _GPU_BODY.replace("        self._attach_omni_extensions(attn_metadata, num_reqs=num_reqs)\n", "")
    (port,), text = _sync_small(gpu_body, npu_body)
    assert isinstance(port, gpu_ports.Port), port
    assert text.count("num_reqs = self.input_batch.num_reqs") == 2 and "if self.omni_refresh:" in text
    # held once more than vLLM holds it: the NPU method has part of the change already
    again = "        num_reqs = self.input_batch.num_reqs\n        hidden_states"
    twice = npu_body.replace("        hidden_states", again)
    (unplaced,), _text = _sync_small(gpu_body, twice)
    assert isinstance(unplaced, gpu_ports.Unplaced)
    assert unplaced.reason == (
        "NPUARModelRunner.execute_model already holds part of it (num_reqs = self.input_batch.num_reqs): "
        "a partial port to finish by hand"
    )
    # held as often as the GPU method holds it outside the change (the NPU has that other change): not part of it
    gpu_body = _GPU_BODY.replace(
        "        return self.sample",
        "        if self.omni_refresh:\n            self._attach_omni_extensions(attn_metadata, num_reqs=num_reqs)\n"
        "        return self.sample",
    )
    (port,), text = _sync_small(gpu_body, _GPU_BODY)
    assert isinstance(port, gpu_ports.Port), port
    assert text.count("self._attach_omni_extensions(attn_metadata, num_reqs=num_reqs)") == 2


_FENCE = "        #  ---------- Omni-new ----------\n"
_NPU_BLOCK = (  # an omni block of the NPU method around the model call
    "        num_reqs = self.input_batch.num_reqs\n"
    "        attn_metadata = self._build_attention_metadata(num_tokens=num_reqs, pad=True)\n"
    f"{_FENCE}        hidden_states = self.model(attn_metadata)\n"
    f"        hidden_states = self._npu_post(hidden_states)\n{_FENCE}"
    "        return self.sample(hidden_states)\n"
)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (
            "hidden_states = self.model(attn_metadata)\n",
            "hidden_states = self.model(attn_metadata)\n        self._omni_hook(hidden_states)\n",
        ),
        ("self.model(attn_metadata)", "self.model(attn_metadata, omni=True)"),
    ],
    ids=["insertion", "replacement"],
)
def test_a_port_inside_an_omni_block_adds_no_fences_of_its_own(old: str, new: str) -> None:
    from patch_queue.checks import gpu_audit

    gpu_body = _VLLM.split(":\n", 2)[2].replace(old, new)
    (port,), text = _sync_small(gpu_body, _NPU_BLOCK)
    assert isinstance(port, gpu_ports.Port), port
    assert "Omni-new" not in port.result and port.how.endswith("inside an omni block, without fences of its own")
    assert text.splitlines()[port.line - 1] == port.result.splitlines()[0] and "self._npu_post(" in text
    # the fence parser reads the one block it read before, with the port inside it
    blocks, problems = anchors.parse_blocks(text)
    assert problems == [] and len(blocks) == 1 and text.count("Omni-new") == 2
    assert blocks[0].first == "hidden_states = self.model(attn_metadata" + (
        ", omni=True)" if "omni=True" in new else ")"
    )
    assert blocks[0].start < port.line and port.line + len(port.result.splitlines()) <= blocks[0].end
    # and the audit finds the change ported
    gpu = {
        "gpu_ar_model_runner.py": "class GPUARModelRunner:\n    def execute_model(self, scheduler_output):\n" + gpu_body
    }
    assert all(
        c.ported for c in gpu_audit.audit(gpu, _VLLM, {"npu_ar_model_runner.py": text}, _ASCEND, queue=presets.NPU)
    )


def test_a_port_over_one_fence_of_an_omni_block_is_not_placed() -> None:
    # the GPU rewrites two statements an omni block of the NPU starts between: replacing them would drop its opening
    # fence, leaving the closing one unpaired
    gpu_body = _VLLM.split(":\n", 2)[2].replace("(attn_metadata)", "(attn_metadata, omni=True)")
    gpu_body = gpu_body.replace("(hidden_states)", "(hidden_states, omni=True)")
    npu_body = _VLLM.split(":\n", 2)[2].replace("        return", f"{_FENCE}        return") + _FENCE
    assert anchors.parse_blocks("class A:\n    def f(self):\n" + npu_body)[1] == []
    (unplaced,), text = _sync_small(gpu_body, npu_body)
    assert isinstance(unplaced, gpu_ports.Unplaced), unplaced
    assert unplaced.reason.endswith("it would replace one fence of the omni block at line 6, not both")
    assert "omni=True" not in text


def test_an_insertion_before_an_omni_block_goes_before_its_opening_fence() -> None:
    # the GPU statement before the change is the last NPU one before an omni block: the port goes between them
    npu_body = _GPU_BODY.replace(
        "        self._attach_omni_extensions(attn_metadata, num_reqs=num_reqs)\n",
        f"{_FENCE}        self._npu_prepare(attn_metadata)\n{_FENCE}",
    )
    (port,), text = _sync_small(_GPU_BODY, npu_body)
    assert isinstance(port, gpu_ports.Port) and port.how == "", port
    blocks, problems = anchors.parse_blocks(text)
    assert problems == [] and [b.first for b in blocks] == [
        "self._attach_omni_extensions(attn_metadata, num_reqs=num_reqs)",
        "self._npu_prepare(attn_metadata)",
    ]
    assert text.splitlines()[port.line - 2].strip().startswith("attn_metadata = self._build_attention_metadata(")


_SINCE_OLD = """class OmniGPUModelRunner(GPUModelRunner):
    def _talker_forward(self, hidden):
        with set_forward_context(None):
            out = self.talker(hidden)
        return out
"""
_SINCE_NEW = """class OmniGPUModelRunner(GPUModelRunner):
    def _talker_forward(self, hidden):
        hidden = self._pad(hidden)
        with set_forward_context(None):
            out = self.talker(hidden, step=self.step)
        return out
"""
_SINCE_NPU = """class OmniNPUModelRunner(OmniGPUModelRunner, NPUModelRunner):
    def _talker_forward(self, hidden):
        with set_ascend_forward_context(None):
            out = self.talker(hidden)
        torch.npu.synchronize()
        return out
"""


def test_an_omni_method_changed_since_the_series_release_is_updated_on_npu() -> None:
    from patch_queue.sync import changed_since

    rules = translation.load_rules()
    since = gpu_ports.Since("vllm-omni==0.1.0", {"gpu_model_runner.py": _SINCE_OLD})
    gpu, npu = {"gpu_model_runner.py": _SINCE_NEW}, {"npu_model_runner.py": _SINCE_NPU}
    changes = changed_since.changes_since(since, gpu, npu, _VLLM, rules, mirror=NPU_MIRROR)
    assert [(c.method, c.gpu_line, c.reason) for c in changes] == [
        ("_talker_forward", 3, "OmniGPUModelRunner._talker_forward changed since vllm-omni==0.1.0"),
        ("_talker_forward", 5, "OmniGPUModelRunner._talker_forward changed since vllm-omni==0.1.0"),
    ]
    results, files = placement.sync(changes, gpu, _VLLM, npu, rules, since, mirror=NPU_MIRROR)
    assert all(isinstance(r, gpu_ports.Port) for r in results), results
    text = files["npu_model_runner.py"]
    code = [line.strip() for line in text.splitlines() if "Omni-new" not in line and not line.startswith("from ")]
    assert code == [
        "class OmniNPUModelRunner(OmniGPUModelRunner, NPUModelRunner):",
        "def _talker_forward(self, hidden):",
        "hidden = self._pad(hidden)",
        "with set_ascend_forward_context(None):",
        "out = self.talker(hidden, step=self.step)",
        "torch.npu.synchronize()",
        "return out",
    ]
    assert all(r.how.startswith("updating the omni code of vllm-omni==0.1.0's OmniGPUModelRunner._talker_forward")
               for r in results if isinstance(r, gpu_ports.Port))  # fmt: skip
    # without the release the series ports, an omni method is not compared with anything
    assert (
        changed_since.changes_since(
            gpu_ports.Since("x", {"gpu_model_runner.py": _SINCE_NEW}),
            gpu,
            npu,
            _VLLM,
            rules,
            mirror=NPU_MIRROR,
        )
        == []
    )


_PART_BLOCK = """        self._omni_a(attn_metadata)
        self._omni_b(attn_metadata)
        self._omni_c(attn_metadata)
"""
_PART_HEAD = "class OmniGPUModelRunner:\n    pass\n\n\nclass GPUARModelRunner(OmniGPUModelRunner):\n"


def test_a_change_ported_in_part_whose_lacking_lines_are_new_since_the_release_is_updated() -> None:
    from patch_queue.checks import gpu_audit
    from patch_queue.sync import changed_since

    rules = translation.load_rules()
    head = "    def execute_model(self, scheduler_output):\n"
    call = "        hidden_states = self.model(attn_metadata)\n"
    old_body = _VLLM.split(head)[1].replace(call, _PART_BLOCK + call)
    new_body = old_body.replace(
        "        self._omni_c(attn_metadata)\n", "        self._omni_c(attn_metadata)\n        self._omni_d()\n"
    )
    since = gpu_ports.Since("vllm-omni==0.1.0", {"gpu_ar_model_runner.py": _PART_HEAD + head + old_body})
    gpu = {"gpu_ar_model_runner.py": _PART_HEAD + head + new_body}
    npu = {"npu_ar_model_runner.py": "class NPUARModelRunner(NPUModelRunner):\n" + head + old_body}
    changes = gpu_audit.audit(gpu, _VLLM, npu, _ASCEND, queue=presets.NPU)
    assert [(c.ported, c.missing) for c in changes] == [(True, ("self._omni_d()",))]  # 3 of 4 lines: ported
    (partly,) = changed_since.partly_ported(since, changes, gpu)
    assert not partly.ported and partly.reason.endswith("; 1 line(s) new since vllm-omni==0.1.0 lacking")
    (port,), files = placement.sync([partly], gpu, _VLLM, npu, rules, since, mirror=NPU_MIRROR)
    assert isinstance(port, gpu_ports.Port), port
    assert port.how.startswith("updating the omni code of vllm-omni==0.1.0's GPUARModelRunner.execute_model")
    code = [s for line in files["npu_ar_model_runner.py"].splitlines() if (s := line.strip()) and "Omni-new" not in s]
    assert code[code.index("self._omni_a(attn_metadata)") :][:5] == [
        "self._omni_a(attn_metadata)",
        "self._omni_b(attn_metadata)",
        "self._omni_c(attn_metadata)",
        "self._omni_d()",
        "hidden_states = self.model(attn_metadata)",
    ]
    # a lacking line the release's GPU method had already is the NPU side's own way: the change stays ported
    assert changed_since.partly_ported(gpu_ports.Since("x", gpu), changes, gpu) == []


_ELSE_OLD = """class OmniGPUModelRunner(GPUModelRunner):
    def _talker_forward(self, hidden):
        if self.eager:
            mode = None
        size = hidden.size
        return self.talker(hidden, mode, size)
"""
_ELSE_NEW = _ELSE_OLD.replace(
    "            mode = None\n        size = hidden.size\n",
    "            mode = None\n            size = 1\n        else:\n            size = hidden.size\n",
)


def test_a_change_adding_an_else_clause_takes_its_whole_statement_along() -> None:
    from patch_queue.sync import changed_since

    # the new lines are `size = 1` and `else:`; the line after them is the same code, one level deeper
    rules = translation.load_rules()
    since = gpu_ports.Since("vllm-omni==0.1.0", {"gpu_model_runner.py": _ELSE_OLD})
    gpu = {"gpu_model_runner.py": _ELSE_NEW}
    npu = {"npu_model_runner.py": _ELSE_OLD.replace("OmniGPUModelRunner(GPUModelRunner)", "OmniNPUModelRunner")}
    changes = changed_since.changes_since(since, gpu, npu, _VLLM, rules, mirror=NPU_MIRROR)
    (port,), files = placement.sync(changes, gpu, _VLLM, npu, rules, since, mirror=NPU_MIRROR)
    assert isinstance(port, gpu_ports.Port), port
    body = files["npu_model_runner.py"].split("def _talker_forward(self, hidden):\n")[1]
    assert [line for line in body.splitlines() if "Omni-new" not in line] == [
        "        if self.eager:",
        "            mode = None",
        "            size = 1",
        "        else:",
        "            size = hidden.size",
        "        return self.talker(hidden, mode, size)",
    ]


_WIDE_OLD = """class OmniGPUModelRunner(GPUModelRunner):
    def load_model(self, *args):
        super().load_model(*args)
        model = getattr(self, "model", None)
        self._flag = bool(getattr(model, "flag", False))
        self._init_talker()
"""
_WIDE_NEW = _WIDE_OLD.replace(
    "        self._init_talker()\n", "        self._policy(model)\n        self._init_talker()\n        self._warm()\n"
)
_WIDE_NPU = """class OmniNPUModelRunner(OmniGPUModelRunner, NPUModelRunner):
    def load_model(self, *args):
        NPUModelRunner.load_model(self, *args)
        enable_sp(self.vllm_config)
        self._init_talker()
"""


def test_a_change_since_the_release_brings_the_omni_lines_next_to_it_the_npu_never_got() -> None:
    from patch_queue.sync import changed_since

    rules = translation.load_rules()
    since = gpu_ports.Since("vllm-omni==0.1.0", {"gpu_model_runner.py": _WIDE_OLD})
    gpu, npu = {"gpu_model_runner.py": _WIDE_NEW}, {"npu_model_runner.py": _WIDE_NPU}
    changes = changed_since.changes_since(since, gpu, npu, _VLLM, rules, mirror=NPU_MIRROR)
    # the new line reads `model`, bound by a line the release had and the NPU never got: both go together; the
    # super() call the NPU writes as NPUModelRunner.load_model(self, ...) stops the widening
    assert [(c.gpu_line, [line.strip() for line in c.lines]) for c in changes] == [
        (4, ['model = getattr(self, "model", None)', 'self._flag = bool(getattr(model, "flag", False))',
             "self._policy(model)"]),
        (8, ["self._warm()"]),
    ]  # fmt: skip
    results, files = placement.sync(changes, gpu, _VLLM, npu, rules, since, mirror=NPU_MIRROR)
    assert all(isinstance(r, gpu_ports.Port) for r in results), results
    text = files["npu_model_runner.py"]
    code = [
        s for line in text.splitlines() if (s := line.strip()) and "Omni-new" not in s and not s.startswith("from ")
    ]
    assert code == [
        "class OmniNPUModelRunner(OmniGPUModelRunner, NPUModelRunner):",
        "def load_model(self, *args):",
        "NPUModelRunner.load_model(self, *args)",
        "enable_sp(self.vllm_config)",
        'model = getattr(self, "model", None)',
        'self._flag = bool(getattr(model, "flag", False))',
        "self._policy(model)",
        "self._init_talker()",
        "self._warm()",
    ]


_BLOCK_OLD = """class OmniGPUModelRunner(GPUModelRunner):
    def _talker_forward(self, hidden):
        out = self.talker(hidden)
        cpu = out.to("cpu")
        for key in self.keys:
            cpu = self.fix(cpu, key)
        payload = {"hidden": cpu}
        return payload
"""
_BLOCK_NEW = _BLOCK_OLD.replace(
    """        cpu = out.to("cpu")
        for key in self.keys:
            cpu = self.fix(cpu, key)
        payload = {"hidden": cpu}
""",
    """        cpu = out.to("cpu", non_blocking=True)
        payload = {"hidden": cpu, "step": self.step}
""",
)
_BLOCK_NPU = (
    _BLOCK_OLD.replace("OmniGPUModelRunner(GPUModelRunner)", "OmniNPUModelRunner(OmniGPUModelRunner)")
    .replace("out = self.talker(hidden)", "out = self.npu_graph.replay(hidden)")
    .replace("return payload", "return self.npu_stage_output_builder.finish(payload)")
)


def test_an_omni_block_changed_around_lines_the_gpu_side_deleted_is_replaced_whole() -> None:
    from patch_queue.sync import changed_since

    rules = translation.load_rules()
    since = gpu_ports.Since("vllm-omni==0.1.0", {"gpu_model_runner.py": _BLOCK_OLD})
    gpu, npu = {"gpu_model_runner.py": _BLOCK_NEW}, {"npu_model_runner.py": _BLOCK_NPU}
    changes = changed_since.changes_since(since, gpu, npu, _VLLM, rules, mirror=NPU_MIRROR)
    (port,), files = placement.sync(changes, gpu, _VLLM, npu, rules, since, mirror=NPU_MIRROR)
    assert isinstance(port, gpu_ports.Port), port
    # the NPU method holds the release's block, loop included: the loop the GPU side deleted between the two changed
    # statements is part of what the port replaces (the NPU rewrote its neighbours, so no merge between them could)
    assert port.replaced.split("\n")[:4] == [
        '        cpu = out.to("cpu")',
        "        for key in self.keys:",
        "            cpu = self.fix(cpu, key)",
        '        payload = {"hidden": cpu}',
    ]
    text = files["npu_model_runner.py"]
    code = [
        s for line in text.splitlines() if (s := line.strip()) and "Omni-new" not in s and not s.startswith("from ")
    ]
    assert code == [
        "class OmniNPUModelRunner(OmniGPUModelRunner):",
        "def _talker_forward(self, hidden):",
        "out = self.npu_graph.replay(hidden)",
        'cpu = out.to("cpu", non_blocking=True)',
        'payload = {"hidden": cpu, "step": self.step}',
        "return self.npu_stage_output_builder.finish(payload)",
    ]


_HELPER_GPU = """class OmniGPUModelRunner(GPUModelRunner):
    pass


class GPUARModelRunner(OmniGPUModelRunner):
    def execute_model(self, scheduler_output):
        return self._omni_outputs(scheduler_output)

    def _omni_outputs(self, scheduler_output):
        if GPUARModelRunner._enabled(self.model):
            return self._inner(torch.cuda.Event())
        return None

    @staticmethod
    def _enabled(model):
        return model is not None

    def _inner(self, event):
        return (event, self.%s)
"""
_HELPER_NPU = """class NPUARModelRunner(NPUModelRunner):
    def __init__(self):
        self.model = None
        self.talker = None

    def execute_model(self, scheduler_output):
        return self._omni_outputs(scheduler_output)

    def load_model(self):
        pass
"""


def _copy(attr: str) -> tuple[list[gpu_ports.Port | gpu_ports.Unplaced], str]:
    gpu = {"gpu_ar_model_runner.py": _HELPER_GPU % attr}
    npu = {"npu_ar_model_runner.py": _HELPER_NPU}
    vllm = "class GPUModelRunner:\n    def execute_model(self, scheduler_output):\n        return None\n"
    ascend = "class NPUModelRunner(GPUModelRunner):\n    def __init__(self):\n        self.device = None\n"
    results, files = helper_methods.copy_helpers(npu, gpu, vllm, ascend, translation.load_rules(), mirror=NPU_MIRROR)
    return results, files["npu_ar_model_runner.py"]


def test_helpers_a_port_calls_are_copied_whole_and_transitively() -> None:
    results, text = _copy("talker")
    assert [r.symbol for r in results if isinstance(r, gpu_ports.Port)] == [
        "NPUARModelRunner._omni_outputs",
        "NPUARModelRunner._enabled",
        "NPUARModelRunner._inner",
    ]
    assert all(r.changes[0].reason == helper_methods.HELPER for r in results)
    tree = ast.parse(text)
    cls = tree.body[0]
    assert isinstance(cls, ast.ClassDef)
    names = [n.name for n in cls.body if isinstance(n, ast.FunctionDef)]
    assert names == ["__init__", "execute_model", "_omni_outputs", "_inner", "_enabled", "load_model"]
    assert "if NPUARModelRunner._enabled(self.model):" in text and "torch.npu.Event()" in text
    lines = text.splitlines()
    at = lines.index("    @staticmethod")
    assert "Omni-new" in lines[at - 1] and lines[at - 1].startswith("    #")
    assert text.count("Omni-new") == 6
    gpu = {"gpu_ar_model_runner.py": _HELPER_GPU % "talker"}
    vllm, ascend = "class GPUModelRunner:\n    pass\n", "class NPUModelRunner(GPUModelRunner):\n    pass\n"
    again, same = helper_methods.copy_helpers(
        {"npu_ar_model_runner.py": text},
        gpu,
        vllm,
        ascend,
        translation.load_rules(),
        mirror=NPU_MIRROR,
    )
    assert again == [] and same["npu_ar_model_runner.py"] == text


def test_a_helper_reading_an_attribute_the_npu_class_never_sets_is_not_copied() -> None:
    (unplaced,), text = _copy("talker_mtp_graphs")
    assert isinstance(unplaced, gpu_ports.Unplaced) and text == _HELPER_NPU
    assert unplaced.symbol == "NPUARModelRunner.execute_model"
    assert unplaced.reason == (
        "helper _omni_outputs of NPUARModelRunner.execute_model not copied: it calls _inner, which is not copied: "
        "GPUARModelRunner._inner reads self.talker_mtp_graphs, which NPUARModelRunner never sets"
    )


def test_a_helper_the_project_declines_is_not_copied() -> None:
    gpu = {"gpu_ar_model_runner.py": _HELPER_GPU % "talker"}
    npu = {"npu_ar_model_runner.py": _HELPER_NPU}
    vllm = "class GPUModelRunner:\n    pass\n"
    decline = translation.Decline(
        "gpu_ar_model_runner.py", "_omni_outputs", "def _omni_outputs(self, scheduler_output):"
    )
    rules = replace(translation.load_rules(), declined=(decline,))
    ascend = "class NPUModelRunner(GPUModelRunner):\n    pass\n"
    (unplaced,), files = helper_methods.copy_helpers(npu, gpu, vllm, ascend, rules, mirror=NPU_MIRROR)
    assert isinstance(unplaced, gpu_ports.Unplaced) and files == npu
    assert unplaced.reason == (
        "helper _omni_outputs of NPUARModelRunner.execute_model not copied: the project declines it "
        f"({translation.USER_RULES})"
    )


def test_a_helper_calling_super_is_not_copied() -> None:
    gpu = {"gpu_ar_model_runner.py": (_HELPER_GPU % "talker").replace("return None\n", "return super().x()\n", 1)}
    npu = {"npu_ar_model_runner.py": _HELPER_NPU}
    vllm = "class GPUModelRunner:\n    pass\n"
    ascend = "class NPUModelRunner(GPUModelRunner):\n    pass\n"
    (unplaced,), _files = helper_methods.copy_helpers(
        npu, gpu, vllm, ascend, translation.load_rules(), mirror=NPU_MIRROR
    )
    assert isinstance(unplaced, gpu_ports.Unplaced) and "calls super()" in unplaced.reason


def test_an_override_calling_super_is_copied_where_the_npu_class_runs_the_upstream_method() -> None:
    """GPUARModelRunner.capture_model calls vLLM's through super() and then an omni helper; NPUARModelRunner runs
    vllm-ascend's capture_model itself: the override is copied (super() reaches vllm-ascend's there), then the
    helper it calls; an override the NPU class's omni classes already have is not."""
    gpu_text = (_HELPER_GPU % "talker") + (
        "\n    def capture_model(self):\n        size = super().capture_model()\n"
        "        self._capture_talker()\n        return size\n\n"
        "    def _capture_talker(self):\n        return isinstance(self.talker, CUDAGraphWrapper)\n"
    )
    npu = {"npu_ar_model_runner.py": _HELPER_NPU.replace("return self._omni_outputs(scheduler_output)", "return None")}
    vllm = "class GPUModelRunner:\n    def capture_model(self):\n        return 0\n"
    ascend = "class NPUModelRunner(GPUModelRunner):\n    def capture_model(self):\n        return 1\n"
    results, files = helper_methods.copy_helpers(npu, {"gpu_ar_model_runner.py": gpu_text}, vllm, ascend,
                                              translation.load_rules(), mirror=NPU_MIRROR)  # fmt: skip
    assert [r.symbol for r in results if isinstance(r, gpu_ports.Port)] == [
        "NPUARModelRunner.capture_model",
        "NPUARModelRunner._capture_talker",
    ]
    text = files["npu_ar_model_runner.py"]
    assert "size = super().capture_model()" in text and "isinstance(self.talker, ACLGraphWrapper)" in text
    assert results[0].how.endswith(
        "an override of GPUModelRunner.capture_model calling super(), as GPUARModelRunner's)"
    )
    npu_has = {"npu_ar_model_runner.py": npu["npu_ar_model_runner.py"].replace(
        "    def load_model(self):", "    def capture_model(self):\n        return 2\n\n    def load_model(self):"
    )}  # fmt: skip
    again, _files = helper_methods.copy_helpers(npu_has, {"gpu_ar_model_runner.py": gpu_text}, vllm, ascend,
                                             translation.load_rules(), mirror=NPU_MIRROR)  # fmt: skip
    assert again == []


_FUNC_GPU_AR = """import torch

logger = init_logger(__name__)


def _inner_fn(value):
    return torch.cuda.Event() if value is None else value


def _tensor_values(payload):
    \"\"\"Every value as a tensor.\"\"\"
    return {k: _inner_fn(v) for k, v in payload.items()}


class ExecuteModelState(NamedTuple):
    hidden_states: torch.Tensor


class GPUARModelRunner(OmniGPUModelRunner):
    pass
"""
_FUNC_GPU_GEN = """from vllm_omni.worker.gpu_ar_model_runner import ExecuteModelState, _tensor_values


class GPUGenerationModelRunner(OmniGPUModelRunner):
    def sample_tokens(self, grammar_output):
        payloads = [_tensor_values(p) for p in self.outputs]
        return payloads
"""
_FUNC_NPU_AR = """import torch

logger = init_logger(__name__)


class ExecuteModelState(NamedTuple):
    hidden_states: torch.Tensor


class NPUARModelRunner(OmniNPUModelRunner):
    pass
"""


def test_module_functions_a_change_left_unplaced_calls_are_copied_into_the_defining_modules_counterpart() -> None:
    """The generation runner's unplaced change calls _tensor_values, which gpu_generation_model_runner.py imports
    from gpu_ar_model_runner.py: the whole function goes into npu_ar_model_runner.py, before its ExecuteModelState
    as on the GPU side, fenced, with the function it calls in turn; the copy names the change that needs it."""
    from patch_queue.checks.gpu_audit import GpuChange
    from patch_queue.sync import module_functions

    gpu = {"gpu_ar_model_runner.py": _FUNC_GPU_AR, "gpu_generation_model_runner.py": _FUNC_GPU_GEN}
    npu = {"npu_ar_model_runner.py": _FUNC_NPU_AR, "npu_generation_model_runner.py": "class NPUGen:\n    pass\n"}
    change = GpuChange("gpu_generation_model_runner.py", "sample_tokens", 6, (), False, "not found",
                       "npu_generation_model_runner.py", 2)  # fmt: skip
    hunk = "        payloads = [_tensor_values(p) for p in self.outputs]  # _inner_fn in a comment\n"
    unplaced = gpu_ports.Unplaced((change,), "diverged", "npu_generation_model_runner.py", "NPUGen.sample_tokens", hunk)
    rules = translation.load_rules()
    ports, files, declined = module_functions.copy_functions([unplaced], npu, gpu, rules, mirror=NPU_MIRROR)
    assert declined == []
    assert [(p.symbol, p.npu_file, p.changes[0].reason) for p in ports] == [
        ("_inner_fn", "npu_ar_model_runner.py", module_functions.FUNCTION),
        ("_tensor_values", "npu_ar_model_runner.py", module_functions.FUNCTION),
    ]
    assert ports[1].how == (
        "module function copied (as a whole module-level function before ExecuteModelState; nothing calls it yet: "
        "gpu_generation_model_runner.py:6 in NPUGen.sample_tokens, not placed, calls it)"
    )
    assert "yet: _tensor_values, copied for gpu_generation_model_runner.py:6 in NPUGen" in ports[0].how
    text = files["npu_ar_model_runner.py"]
    tree = ast.parse(text)
    assert [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))] == [
        "_inner_fn",
        "_tensor_values",
        "ExecuteModelState",
        "NPUARModelRunner",
    ]
    assert "torch.npu.Event()" in text and text.count("Omni-new") == 4
    lines = text.splitlines()
    for port in ports:
        assert lines[port.line - 1] == rules.fence and lines[port.line].startswith("def " + port.symbol)
    assert "logger = init_logger(__name__)\n\n\n" + rules.fence + "\ndef _inner_fn(value):\n" in text
    assert rules.fence + "\n\n\n" + rules.fence + "\ndef _tensor_values(payload):\n" in text
    assert rules.fence + "\n\n\nclass ExecuteModelState(NamedTuple):\n" in text
    assert files["npu_generation_model_runner.py"] == npu["npu_generation_model_runner.py"]
    # once there, nothing more; a placed change (its port imported what it uses) and a function the change's own
    # NPU module binds are left alone
    assert module_functions.copy_functions([unplaced], files, gpu, rules, mirror=NPU_MIRROR) == (
        [],
        files,
        [],
    )
    bound = dict(npu, **{"npu_generation_model_runner.py": "from x import _tensor_values\n"})
    assert module_functions.copy_functions([unplaced], bound, gpu, rules, mirror=NPU_MIRROR) == (
        [],
        bound,
        [],
    )
    # a function the project declines is not copied (nor what it alone calls), and is returned as declined
    first = next(line.strip() for line in _FUNC_GPU_AR.splitlines() if line.startswith("def _tensor_values"))
    decline = translation.Decline("gpu_ar_model_runner.py", "_tensor_values", first)
    declining = replace(rules, declined=(decline,))
    none, same, refused = module_functions.copy_functions([unplaced], npu, gpu, declining, mirror=NPU_MIRROR)
    assert (none, same) == ([], npu)
    assert [(c.gpu_file, c.method, c.first) for c in refused] == [decline.key]


_REMOVAL_FENCE = "        #  ---- Omni-new ----"


def _removal_case(gpu_old: str, gpu_new: str, npu_body: str, ascend: str = "class NPUModelRunner:\n    pass\n"):
    gpu = "class GPUARModelRunner(GPUModelRunner):\n    def execute_model(self, out):\n"
    npu = "class NPUARModelRunner(NPUModelRunner):\n    def execute_model(self, out):\n"
    since = gpu_ports.Since("vllm-omni==1.0", {"gpu_ar_model_runner.py": gpu + gpu_old})
    files = {"npu_ar_model_runner.py": npu + npu_body}
    rules = translation.load_rules(None)
    return removals.removals(since, {"gpu_ar_model_runner.py": gpu + gpu_new}, files, ascend, rules)


def test_a_dropped_feature_held_under_another_guard_goes_whole_with_its_fences() -> None:
    gpu_old = "        x = 1\n        if self.capture_on:\n            self.capturer.finish()\n        return x\n"
    guarded = "        if self.cfg.capture:\n            self.capturer.finish()\n"
    npu = f"        x = 1\n{_REMOVAL_FENCE}\n{guarded}{_REMOVAL_FENCE}\n        return x\n"
    (port,), files = _removal_case(gpu_old, "        x = 1\n        return x\n", npu)
    assert isinstance(port, gpu_ports.Port) and removals.is_dropped_feature(port)
    assert "capture_on" in port.changes[0].reason and "capturer" in port.changes[0].reason
    assert port.how == "the NPU block's header differs: `if self.cfg.capture:`"
    assert files["npu_ar_model_runner.py"].endswith(
        "    def execute_model(self, out):\n        x = 1\n        return x\n"
    )


def test_a_removal_of_code_the_gpu_side_moved_is_no_dropped_feature() -> None:
    """The GPU side took the debug line out of this method but still logs elsewhere: removable, not sure."""
    gpu_old = "        logger.debug(out)\n        return out\n"
    gpu_new = "        return out\n\n    def other(self, out):\n        logger.debug(out)\n"
    (port,), _files = _removal_case(gpu_old, gpu_new, "        logger.debug(out)\n        return out\n")
    assert isinstance(port, gpu_ports.Port) and removals.is_removal(port) and not removals.is_dropped_feature(port)


@pytest.mark.parametrize(
    ("npu_body", "why"),
    [
        ("        y = self.old_thing()\n        return y\n", "leaves y read but no longer bound"),
        ("        if out:\n            self.old_thing()\n        return out\n", "leaves the method uncompilable"),
        ("        self.old_thing()\n        return out\n", "the upstream method holds some of these statements"),
    ],
    ids=["local-still-read", "empty-block", "upstream-code"],
)
def test_a_removal_that_would_break_the_npu_method_is_not_made(npu_body: str, why: str) -> None:
    ascend = (
        "class NPUModelRunner:\n    def execute_model(self, out):\n        self.old_thing()\n"
        if why.startswith("the upstream method")
        else "class NPUModelRunner:\n    pass\n"
    )
    gpu_old = (
        "        y = self.old_thing()\n        return out\n"
        if "bound" in why
        else "        self.old_thing()\n        return out\n"
    )
    (result,), files = _removal_case(gpu_old, "        return out\n", npu_body, ascend)
    assert isinstance(result, gpu_ports.Unplaced) and why in result.reason
    assert files["npu_ar_model_runner.py"].endswith(npu_body)


def test_code_the_npu_never_had_is_nothing_to_remove() -> None:
    out, _files = _removal_case(
        "        self.gone()\n        return out\n", "        return out\n", "        return out\n"
    )
    assert out == []


# -- the real runners ---------------------------------------------------------------------------


def _adopt_and_sync(folder: Path, release: str, at: str, *sync: str) -> tuple[Path, str]:
    """A project adopted from vllm-omni ``release`` at upstream ``at``, synced once with ``sync``'s options:
    (project, what pq sync-gpu printed)."""
    from conftest import corpus_dir

    if corpus_dir() is None:
        pytest.skip("the real corpus is not here (set PQ_CORPUS)")
    proj = new_project(folder / "p")
    pq(proj, "adopt", f"vllm-omni=={release}", "--at", at)
    return proj, pq(proj, "sync-gpu", *sync).stdout


def _reproduced(work: Path, tmp_path: Path, message: str) -> tuple[Path, str]:
    """``work`` committed and pushed with refs/pq/resolutions, cloned afresh and reproduced: (the clone, what
    pq reproduce printed)."""
    origin = push_to_bare(work, message)
    git(work, "push", "-q", str(origin), "refs/pq/resolutions")
    fresh = tmp_path / "fresh"
    git(tmp_path, "clone", "-q", str(origin), str(fresh))
    git(fresh, "fetch", "-q", "origin", "refs/pq/resolutions:refs/pq/resolutions")
    out = pq(fresh, "reproduce").stdout
    for name in (work / "patches" / "series").read_text().split():
        if name.endswith(".patch"):
            assert (fresh / "patches" / name).read_bytes() == (work / "patches" / name).read_bytes(), name
    return fresh, out


@pytest.fixture(scope="module")
def synced(released_030_once: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A project adopted from vllm-omni 0.30.0, its own GPU runners' backlog synced once, every port applied:
    (project, what pq sync-gpu printed)."""
    proj = copy_project(released_030_once, tmp_path_factory.mktemp("sync") / "p")
    return proj, pq(proj, "sync-gpu", "--backlog", "--apply", "all").stdout


def _block(text: str, line: int) -> list[str]:
    """The fenced block whose opening fence is ``line``, fences included."""
    lines = text.splitlines()
    fence = lines[line - 1]
    assert "Omni-new" in fence, fence
    end = next(i for i in range(line, len(lines)) if lines[i] == fence)
    return lines[line - 1 : end + 1]


def test_real_ports_are_placed_fenced_and_compile(synced: tuple[Path, str]) -> None:
    proj, out = synced
    ports = re.findall(r"^synced: npu_worker/(\S+):(\d+) in (\S+) from (.+) \(patches/(\S+)\)$", out, re.M)
    assert [(f, sym, gpu, patch) for f, _l, sym, gpu, patch in ports] == [
        (
            "npu_ar_model_runner.py",
            "NPUARModelRunner.execute_model",
            "gpu_ar_model_runner.py:855",
            "0017-sync-gpu-execute-model-1.patch",
        ),
        (
            "npu_ar_model_runner.py",
            "NPUARModelRunner.execute_model",
            "gpu_ar_model_runner.py:1007, gpu_ar_model_runner.py:1010",
            "0017-sync-gpu-execute-model-1.patch",
        ),
        (
            "npu_ar_model_runner.py",
            "NPUARModelRunner.execute_model",
            "gpu_ar_model_runner.py:1035",
            "0017-sync-gpu-execute-model-1.patch",
        ),
        (
            "npu_ar_model_runner.py",
            "NPUARModelRunner.execute_model",
            "gpu_ar_model_runner.py:1113",
            "0017-sync-gpu-execute-model-1.patch",
        ),
        (
            "npu_generation_model_runner.py",
            "NPUGenerationModelRunner.execute_model",
            "gpu_generation_model_runner.py:106",
            "0018-sync-gpu-execute-model-2.patch",
        ),
        (
            "npu_generation_model_runner.py",
            "NPUGenerationModelRunner.execute_model",
            "gpu_generation_model_runner.py:290",
            "0018-sync-gpu-execute-model-2.patch",
        ),
        (
            "npu_generation_model_runner.py",
            "NPUGenerationModelRunner._dummy_run",
            "gpu_generation_model_runner.py:761",
            "0019-sync-gpu-dummy-run-1.patch",
        ),
        (
            "npu_model_runner.py",
            "OmniNPUModelRunner._dummy_run",
            "gpu_model_runner.py:1124",
            "0020-sync-gpu-dummy-run-2.patch",
        ),
        # whole helper methods the ports above call, copied from GPUARModelRunner
        (
            "npu_ar_model_runner.py",
            "NPUARModelRunner._get_runner_assisted_full_attention_metadata_request",
            "gpu_ar_model_runner.py:642",
            "0021-sync-gpu-get-runner-assisted-full-attention-metadata-request-1.patch",
        ),
        (
            "npu_ar_model_runner.py",
            "NPUARModelRunner._set_runner_assisted_full_attention_metadata_context",
            "gpu_ar_model_runner.py:714",
            "0022-sync-gpu-set-runner-assisted-full-attention-metadata-context-1.patch",
        ),
    ]
    assert (
        "sync-gpu: 38 unported omni GPU change(s) in vllm-omni==0.30.0: 9 ported in 4 patch(es), 0 proposed, "
        "26 not placed, 3 on NPU after those ports; 2 helper method(s) copied, 1 not copied\n"
    ) in out
    texts = {f: (proj / "npu_worker" / f).read_text() for f, *_ in ports}
    for text in texts.values():
        ast.parse(text)
    blocks = {gpu: _block(texts[f], int(line)) for f, line, _s, gpu, _p in ports}
    # the VoxCPM2 runner-assisted FULL attention request, after the padded request count
    request = blocks["gpu_ar_model_runner.py:1007, gpu_ar_model_runner.py:1010"]
    assert request[1].strip().startswith("num_reqs_padded = batch_desc.num_reqs")
    assert request[-2].strip() == "runner_assisted_full_attn = runner_assisted_full_attn_request is not None"
    # a replaced line: the NPU's pad_attn takes the GPU's extra condition, at the NPU's indentation
    pad = blocks["gpu_ar_model_runner.py:1035"]
    assert [line.strip() for line in pad[1:-1]] == [
        "pad_attn = cudagraph_mode == CUDAGraphMode.FULL or runner_assisted_full_attn"
    ]
    # anchored on the NPU statement most like the GPU one before it: the NPU's own _build_attention_metadata call
    for gpu in ("gpu_generation_model_runner.py:761", "gpu_model_runner.py:1124"):
        f = next(f for f, _l, _s, g, _p in ports if g == gpu)
        lines = texts[f].splitlines()
        at = int(next(line for f2, line, _s, g, _p in ports if g == gpu))
        assert blocks[gpu][1].strip() == "self._maybe_attach_attention_metadata_extensions("
        assert lines[at - 2].strip() == ")"  # the call before it ends right above the fence
        call = max(i for i in range(at - 1) if "self._build_attention_metadata(" in lines[i])
        assert lines[call].strip() == "attn_metadata, _ = self._build_attention_metadata(" and at - call < 20
    assert out.count("note: placed after the NPU statement most like the GPU one before it: ") == 3
    ar = texts["npu_ar_model_runner.py"]
    assert "pad_attn = cudagraph_mode == CUDAGraphMode.FULL\n" not in ar
    assert ar.count("self.routed_experts_capturer.clear_buffer()") == 1
    # one patch per NPU method: the four ports into NPUARModelRunner.execute_model, one file, the GPU lines listed
    body = (proj / "patches" / "0017-sync-gpu-execute-model-1.patch").read_text()
    assert body.count("\ndiff --git ") == 1 and "diff --git a/npu_ar_model_runner.py" in body
    listed = re.findall(r"^- (gpu_\w+\.py:\d+) execute_model: ", body, re.M)
    assert listed == ["gpu_ar_model_runner.py:855", "gpu_ar_model_runner.py:1007", "gpu_ar_model_runner.py:1010",
                      "gpu_ar_model_runner.py:1035", "gpu_ar_model_runner.py:1113"]  # fmt: skip


def test_real_helpers_are_copied_whole_once_fenced(synced: tuple[Path, str]) -> None:
    """The VoxCPM2 request port calls two helpers only GPUARModelRunner defines: each copied once, fenced, at
    class-body indentation, after the method calling it, with the imports it needs; a second sync copies nothing."""
    proj, out = synced
    text = (proj / "npu_worker" / "npu_ar_model_runner.py").read_text()
    tree = ast.parse(text)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "NPUARModelRunner")
    names = [n.name for n in cls.body if isinstance(n, ast.FunctionDef)]
    lines = text.splitlines()
    for helper in (
        "_get_runner_assisted_full_attention_metadata_request",
        "_set_runner_assisted_full_attention_metadata_context",
    ):
        assert names.count(helper) == 1, helper
        assert f"self.{helper}(" in text
        node = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == helper)
        above, below = lines[node.lineno - 2], lines[(node.end_lineno or node.lineno)]
        assert above.startswith("    #  ---") and "Omni-new" in above and below == above
    assert names.index("execute_model") < names.index("_get_runner_assisted_full_attention_metadata_request")
    assert "from vllm_omni.worker.runner_assisted_metadata import RunnerAssistedFullAttentionMetadataRequest" in text
    assert out.count("note: placed helper method copied (as a whole method after NPUARModelRunner.execute_model)") == 2
    # a second sync copies them no more: test_second_sync_ports_nothing_and_check_agrees


def test_real_unplaced_changes_say_why(synced: tuple[Path, str]) -> None:
    _proj, out = synced
    unplaced = re.findall(r"^unplaced: (.+?) in (\S+): (.+)$", out, re.M)
    assert sum(len(gpu.split(", ")) for gpu, _s, _r in unplaced) == 27  # 26 changes, and an override not copied
    reasons = {gpu: reason for gpu, _s, reason in unplaced}
    # `if self.is_pooling_model:` is vLLM's statement too, not a sign of a partial port; the prefix-cache call is
    assert reasons["gpu_ar_model_runner.py:1184"].startswith(
        "NPUARModelRunner.execute_model already holds part of it (prefix_cache_step_id = self._prefix_cache_save_step("
    )
    assert "is nowhere in NPUARModelRunner.sample_tokens" in reasons["gpu_ar_model_runner.py:2012"]
    assert reasons["gpu_ar_model_runner.py:1235"].endswith(", and merging it with the NPU code there conflicts")
    assert reasons["gpu_ar_model_runner.py:520"] == (
        "override GPUARModelRunner.shutdown not copied: GPUARModelRunner.shutdown reads self._clear_duplex_sampling, "
        "which NPUARModelRunner never sets"
    )
    assert all(reason for reason in reasons.values())


def test_second_sync_ports_nothing_and_check_agrees(synced: tuple[Path, str], tmp_path: Path) -> None:
    proj, _out = synced
    import shutil

    again = shutil.copytree(proj, tmp_path / "again", symlinks=True)
    out = pq(again, "sync-gpu", "--backlog", "--apply", "all").stdout
    assert "ported in" in out and " 0 ported in 0 patch(es)" in out
    assert "synced:" not in out and "helper method(s) copied" not in out  # the helpers are copied once
    assert (again / "patches" / "series").read_text() == (proj / "patches" / "series").read_text()


def test_synced_series_is_reproduced_from_a_fresh_clone(synced: tuple[Path, str], tmp_path: Path) -> None:
    proj, _out = synced
    import shutil

    work = shutil.copytree(proj, tmp_path / "work", symlinks=True)
    queue = (work / "patches" / "queue.toml").read_text()
    assert (
        'command = "sync-gpu"' in queue
        and '"0022-sync-gpu-set-runner-assisted-full-attention-metadata-context-1.patch"' in queue
    )
    fresh, out = _reproduced(work, tmp_path, "sync the GPU side")
    assert "6 recorded edit(s) applied" in out
    for module in sorted((work / "npu_worker").glob("*.py")):
        assert (fresh / "npu_worker" / module.name).read_bytes() == module.read_bytes()


def test_sync_is_deterministic(synced: tuple[Path, str], released_030_once: Path, tmp_path: Path) -> None:
    """A second project synced from the same inputs writes byte-identical patches."""
    proj, _out = synced
    other = copy_project(released_030_once, tmp_path / "other")
    pq(other, "sync-gpu", "--backlog", "--apply", "all")
    for name in (proj / "patches" / "series").read_text().split():
        if name.endswith(".patch"):
            assert (other / "patches" / name).read_bytes() == (proj / "patches" / name).read_bytes(), name


def test_refresh_sync_gpu_takes_the_delta_since_the_series_release(released_030_once: Path, tmp_path: Path) -> None:
    """`pq refresh --sync-gpu` after a clean refresh syncs the default delta: from the release the series last took
    in to its pinned one, here both 0.30.0, so nothing (the backlog is `pq check`'s to list, not the sync's)."""
    other = copy_project(released_030_once, tmp_path / "other")
    series = (other / "patches" / "series").read_text()
    out = pq(other, "refresh", "--to", BASE_030, "--sync-gpu", "--no-check").stdout
    assert "no conflicts" in out
    assert "sync-gpu: nothing to do: the series ports vllm-omni==0.30.0, whose GPU runners are the ones synced" in out
    assert (other / "patches" / "series").read_text() == series


@pytest.fixture(scope="module")
def delta(released_030_once: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A project adopted from vllm-omni 0.30.0, synced by default from 0.31.0rc1 (the GPU delta of that release),
    with its JSON and Markdown reports: (project, what pq sync-gpu printed)."""
    proj = copy_project(released_030_once, tmp_path_factory.mktemp("delta") / "p")
    sync = ("--omni", "0.31.0rc1", "--report", "r.json", "--markdown", "r.md")
    return proj, pq(proj, "sync-gpu", *sync).stdout


def test_the_delta_removes_what_both_sides_held_and_proposes_the_rest(delta: tuple[Path, str]) -> None:
    """0.31.0rc1's GPU runners dropped the routed-experts capture; the NPU runners held it the same way (their own
    guard around the same body): removed, one patch per NPU method.  The insertions are proposals, with an id,
    the GPU hunk and the port; the older backlog (the runner-assisted attention of 0.30.0) is not among them."""
    import json

    proj, out = delta
    synced = re.findall(r"^synced: npu_worker/(\S+):\d+ in (\S+) from (\S+) \(patches/(\S+)\)$", out, re.M)
    assert [(f, sym, gpu, patch) for f, sym, gpu, patch in synced] == [
        ("npu_ar_model_runner.py", "NPUARModelRunner.execute_model", "gpu_ar_model_runner.py:889",
         "0017-sync-gpu-execute-model-1.patch"),
        ("npu_ar_model_runner.py", "NPUARModelRunner.execute_model", "gpu_ar_model_runner.py:1285",
         "0017-sync-gpu-execute-model-1.patch"),
        ("npu_generation_model_runner.py", "NPUGenerationModelRunner.execute_model",
         "gpu_generation_model_runner.py:119", "0018-sync-gpu-execute-model-2.patch"),
        ("npu_generation_model_runner.py", "NPUGenerationModelRunner.execute_model",
         "gpu_generation_model_runner.py:370", "0018-sync-gpu-execute-model-2.patch"),
        ("npu_generation_model_runner.py", "NPUGenerationModelRunner.sample_tokens",
         "gpu_generation_model_runner.py:504", "0019-sync-gpu-sample-tokens-1.patch"),
    ]  # fmt: skip
    for name in ("npu_ar_model_runner.py", "npu_generation_model_runner.py"):
        text = (proj / "npu_worker" / name).read_text()
        ast.parse(text)
        assert "capturer.finalize_pending_copy()" not in text
        assert "self._omni_routed_experts_d2h(scheduler_output)" not in text
    report = json.loads((proj / "r.json").read_text())
    assert report["source"] == "vllm-omni==0.31.0rc1" and report["since"] == "vllm-omni==0.30.0"
    assert len(report["applied"]) == 5 and all(a["result"] == "" and a["replaced"] for a in report["applied"])
    proposals = report["proposals"]
    assert proposals and all(re.fullmatch(r"[0-9a-f]{8}", p["id"]) for p in proposals)
    assert len({p["id"] for p in proposals}) == len(proposals)
    assert all(
        p["gpu_hunk"] and (p["result"] or p["replaced"]) and p["file"].startswith("npu_worker/") for p in proposals
    )
    assert not any("runner_assisted_full_attn" in p["result"] for p in proposals)
    md = (proj / "r.md").read_text()
    assert md.startswith("## GPU-side sync: vllm-omni==0.31.0rc1 since vllm-omni==0.30.0\n")
    assert all(f"#### `{p['id']}`" in md for p in proposals)
    for p in proposals:
        assert f"proposed {p['id']}: {p['file']}:{p['line']} in {p['symbol']} from " in out
    assert f"5 ported in 3 patch(es), {len(proposals)} proposed" in out
    check = pq(proj, "check", check=None)
    assert check.returncode == 0 and ": error: " not in check.stdout, check.stdout[-2000:]


def test_a_proposal_is_applied_or_declined_on_request_and_reproduced(delta: tuple[Path, str], tmp_path: Path) -> None:
    """`--apply ID` writes that proposal as a patch of its own (the sure ports stay applied), `--decline ID` writes
    a [[decline]] the next sync honours, an unknown id is refused with nothing written, `pq undo` takes a
    decline back, and a fresh clone reproduces the applied proposal byte for byte."""
    import json
    import shutil

    proj, _out = delta
    work = shutil.copytree(proj, tmp_path / "work", symlinks=True)
    proposals = json.loads((work / "r.json").read_text())["proposals"]
    chosen = next(p for p in proposals if "load_model" in p["symbol"])
    series = (work / "patches" / "series").read_text()
    refused = pq(work, "sync-gpu", "--omni", "0.31.0rc1", "--apply", "0badc0de", check=1)
    assert "no proposal 0badc0de in this sync" in refused.stderr
    assert (work / "patches" / "series").read_text() == series

    out = pq(work, "sync-gpu", "--omni", "0.31.0rc1", "--apply", chosen["id"], "--report", "r2.json").stdout
    assert "synced: npu_worker/npu_model_runner.py:" in out and "(patches/0020-sync-gpu-load-model-1.patch)" in out
    text = (work / "npu_worker" / "npu_model_runner.py").read_text()
    assert all(line in text for line in chosen["result"].splitlines() if line.strip())
    left = json.loads((work / "r2.json").read_text())["proposals"]
    assert sorted(p["id"] for p in left) == sorted(p["id"] for p in proposals if p["id"] != chosen["id"])

    other = left[0]
    before = (work / "patches" / "series").read_text()
    out = pq(work, "sync-gpu", "--omni", "0.31.0rc1", "--decline", other["id"], "--report", "r3.json").stdout
    rules = (work / "patches" / translation.USER_RULES).read_text()
    assert f'note = "pq sync-gpu --decline {other["id"]}"' in rules and "declined now: " in out
    assert other["id"] not in {p["id"] for p in json.loads((work / "r3.json").read_text())["proposals"]}
    assert (work / "patches" / "series").read_text() == before
    pq(work, "undo")
    assert not (work / "patches" / translation.USER_RULES).exists()

    fresh, _printed = _reproduced(work, tmp_path, "apply a GPU-side proposal")
    for module in sorted((work / "npu_worker").glob("*.py")):
        assert (fresh / "npu_worker" / module.name).read_bytes() == module.read_bytes()


def test_a_deleted_port_is_declined_and_not_ported_again(synced: tuple[Path, str], tmp_path: Path) -> None:
    """`pq delete` of a sync-gpu patch declines its GPU changes in patches/gpu-sync-rules.toml: the next sync
    lists them and ports them no more; `pq undo` takes the delete and the declines back together."""
    proj, _out = synced
    import shutil

    work = shutil.copytree(proj, tmp_path / "work", symlinks=True)
    series = (work / "patches" / "series").read_text()
    name = next(n for n in series.split() if "-sync-gpu-execute-model-" in n)
    message = git(work, "log", "-1", "--format=%B", f"refs/pq/patches/{name}")
    ported = re.findall(r"^- (gpu_\w+\.py):(\d+) (\w+): (.+)$", message, re.M)
    assert ported
    out = pq(work, "delete", name).stdout
    assert f"declined: {ported[0][0]} {ported[0][2]}: `{ported[0][3]}`" in out
    declined = translation.load_rules(work / "patches").declined
    assert [d.key for d in declined] == [(f, m, first) for f, _line, m, first in ported]
    assert all(d.note == f"pq delete {name}" for d in declined)

    again = pq(work, "sync-gpu", "--backlog", "--apply", "all").stdout
    for f, line, m, first in ported:
        assert f"declined: {f}:{line} in {m}: `{first}`" in again
    assert "synced:" not in again and f", {len(ported)} declined" in again
    assert name not in (work / "patches" / "series").read_text()

    pq(work, "undo")
    assert not (work / "patches" / translation.USER_RULES).exists()
    assert (work / "patches" / "series").read_text() == series


def test_a_port_reading_what_only_a_gpu_base_provides_names_the_base() -> None:
    """GPUARModelRunner gets register_chunk_recv from a mixin (re-exported, defined on the mixin's own base in a
    third module); NPUARModelRunner lacks the mixin: a port calling it says so.  What the NPU class's own MRO
    provides (self.model, a method of vLLM's runner) is not listed, and an NPU class with the mixin needs nothing."""
    from patch_queue.checks import gpu_needs
    from patch_queue.checks.gpu_audit import GpuChange

    gpu = {
        "gpu_ar_model_runner.py": "from pkg.mixin import ConnectorMixin\n\n\n"
        "class GPUARModelRunner(GPUModelRunner, ConnectorMixin):\n"
        "    def execute_model(self, out):\n        self.register_chunk_recv(out)\n        return self.model\n"
    }
    modules = {
        "pkg.mixin": "from pkg.transport import _Transport\n\n\nclass ConnectorMixin(_Transport):\n    pass\n",
        "pkg.transport": "class _Transport:\n    def register_chunk_recv(self, r):\n        self._pending = r\n",
    }
    vllm = "class GPUModelRunner:\n    def execute_model(self, out):\n        self.model = None\n"
    ascend = "class NPUModelRunner(GPUModelRunner):\n    pass\n"
    result = "        self.register_chunk_recv(out)  # self.not_read_in_a_comment\n        x = self.model\n"
    npu_text = f"class NPUARModelRunner(NPUModelRunner):\n    def execute_model(self, out):\n{result}"
    change = GpuChange("gpu_ar_model_runner.py", "execute_model", 6, (), False, "not found")
    port = gpu_ports.Port((change,), "npu_ar_model_runner.py", "NPUARModelRunner.execute_model", 3, "", "", result,
                          npu_text)  # fmt: skip
    files = {"npu_ar_model_runner.py": npu_text}
    code = [(port.npu_file, "NPUARModelRunner", port.result)]
    (needs,) = gpu_needs.needed_bases(code, files, gpu, vllm, ascend, modules.get, mirror=NPU_MIRROR)
    assert needs == [gpu_needs.Need("ConnectorMixin", ("register_chunk_recv",))]
    assert needs[0].message("NPUARModelRunner") == (
        "reads self.register_chunk_recv, which only ConnectorMixin provides: NPUARModelRunner lacks that base "
        "(it fails at run time)"
    )
    assert gpu_needs.self_reads(result) == ["register_chunk_recv", "model"]
    with_mixin = {"npu_ar_model_runner.py": npu_text.replace("(NPUModelRunner)", "(NPUModelRunner, ConnectorMixin)")}
    assert gpu_needs.needed_bases(code, with_mixin, gpu, vllm, ascend, modules.get, mirror=NPU_MIRROR) == [[]]
    # pq check says it of the module as it is, at the line reading it
    (finding,) = gpu_needs.findings(files, gpu, vllm, ascend, modules.get, mirror=NPU_MIRROR)
    assert (finding.file, finding.line, finding.rule) == ("npu_ar_model_runner.py", 3, "gpu-base-missing")
    assert finding.message == needs[0].message("NPUARModelRunner")
    assert gpu_needs.findings(with_mixin, gpu, vllm, ascend, modules.get, mirror=NPU_MIRROR) == []


def test_only_a_newer_release_of_the_downstream_moves_the_pin() -> None:
    from patch_queue.commands.sync_gpu import newer_release
    from patch_queue.series.queue import Queue, UpstreamPin

    pin = UpstreamPin("vllm-ascend", "git", "git:x@0", "0", "git 0", "0")
    queue = Queue(pin, "vllm-omni", "0.22.0", "vllm_omni/platforms/npu/worker", ())
    assert newer_release(queue, "vllm-omni==0.24.0") == "0.24.0"
    assert newer_release(queue, "vllm-omni==0.30.0rc1") == "0.30.0rc1"
    assert newer_release(queue, "vllm-omni==0.22.0") is None  # the series' own release
    assert newer_release(queue, "vllm-omni==0.20.0") is None  # an older one: the series stays where it is
    assert newer_release(queue, "vllm-omni==x.y") is None  # no version
    assert newer_release(queue, "vllm==0.24.0") is None  # another package
    assert newer_release(queue, "/work/vllm-omni/vllm_omni/worker") is None  # a folder
    assert newer_release(replace(queue, downstream_release=""), "vllm-omni==0.24.0") == "0.24.0"


@pytest.fixture(scope="module")
def synced_newer(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A project adopted from vllm-omni 0.22.0, synced from 0.24.0's GPU runners, every proposal of that delta
    applied: (project, what it printed)."""
    return _adopt_and_sync(
        tmp_path_factory.mktemp("sync-newer"), "0.22.0", "3e1b977b05c1", "--omni", "0.24.0", "--apply", "all"
    )


def test_a_sync_from_a_newer_release_moves_the_pin_and_carries_forward(
    synced_newer: tuple[Path, str], tmp_path: Path
) -> None:
    """The ports make the series 0.24.0's NPU runners: queue.toml pins 0.24.0 (and its lineage step says so), so
    `pq check` resolves the ported imports in 0.24.0 (`vllm_omni.worker.runner_assisted_metadata`, new there)
    and the next `pq sync-gpu`, from the pinned release, has nothing more to port; `pq undo` puts 0.22.0 back."""
    import shutil

    proj, out = synced_newer
    assert "downstream: vllm-omni 0.22.0 -> 0.24.0 in patches/queue.toml" in out
    queue = (proj / "patches" / "queue.toml").read_text()
    assert '[downstream]\nname = "vllm-omni"\nrelease = "0.24.0"' in queue
    assert 'command = "sync-gpu"\ndownstream = "vllm-omni==0.24.0"' in queue
    ported = "".join(p.read_text() for p in (proj / "npu_worker").glob("*.py"))
    assert "vllm_omni.worker.runner_assisted_metadata" in ported
    check = pq(proj, "check", check=None)
    assert check.returncode == 0 and "[import-unresolved]" not in check.stdout, check.stdout[-2000:]
    assert "Reading vllm-omni 0.24.0 and vllm 0.24.0" in check.stderr + check.stdout

    work = shutil.copytree(proj, tmp_path / "work", symlinks=True)
    series = (work / "patches" / "series").read_text()
    assert "\ndownstream: vllm-omni 0.24.0\n" in pq(work, "status").stdout
    again = pq(work, "sync-gpu").stdout
    assert "synced:" not in again and "in vllm-omni==0.24.0 since vllm-omni==0.22.0:" in again
    assert "downstream:" not in again
    assert (work / "patches" / "series").read_text() == series
    pq(work, "undo")
    queue_toml = work / "patches" / "queue.toml"
    assert '[downstream]\nname = "vllm-omni"\nrelease = "0.22.0"' in queue_toml.read_text()
    assert "\ndownstream: vllm-omni 0.22.0\n" in pq(work, "status").stdout
    assert "sync-gpu" not in (work / "patches" / "series").read_text()

    # every change already ported (by an earlier sync, or by hand) and the pin behind: it moves all the same
    again = shutil.copytree(proj, tmp_path / "again", symlinks=True)
    queue_toml = again / "patches" / "queue.toml"
    queue_toml.write_text(queue_toml.read_text().replace('release = "0.24.0"', 'release = "0.22.0"', 1))
    out = pq(again, "sync-gpu", "--omni", "0.24.0").stdout
    assert "synced:" not in out and "downstream: vllm-omni 0.22.0 -> 0.24.0 in patches/queue.toml" in out
    assert (again / "patches" / "series").read_text() == series
    assert '[downstream]\nname = "vllm-omni"\nrelease = "0.24.0"' in queue_toml.read_text()
    pq(again, "undo")
    assert '[downstream]\nname = "vllm-omni"\nrelease = "0.22.0"' in queue_toml.read_text()


def test_a_moved_pin_is_reproduced_from_a_fresh_clone(synced_newer: tuple[Path, str], tmp_path: Path) -> None:
    import shutil

    proj, _out = synced_newer
    work = shutil.copytree(proj, tmp_path / "work", symlinks=True)
    fresh, _out = _reproduced(work, tmp_path, "sync the GPU side of 0.24.0")
    assert pq(fresh, "status").stdout == pq(work, "status").stdout
