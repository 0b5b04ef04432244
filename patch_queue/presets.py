"""The presets: the two real queues pq keeps, as data (in the spirit of Renovate's presets).

This is the one module of pq that names a queue's projects, files and classes; everything else is given a
:class:`~patch_queue.spec.QueueSpec` (``queue.toml``'s ``[queue]`` table, or one of these).

- ``npu`` (the default): vllm-ascend's ``NPUModelRunner`` copied into vllm-omni's NPU runners, fenced with
  ``Omni-new`` comments, built into ``npu_worker/``;
- ``gpu``: vLLM's ``GPUModelRunner`` copied into vllm-omni's GPU runners (no fences), built into ``gpu_worker/``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from patch_queue.spec import QueueSpec

NPU = QueueSpec(
    preset="npu",
    upstream_dist="vllm-ascend",
    upstream_file="vllm_ascend/worker/model_runner_v1.py",
    upstream_class="NPUModelRunner",
    upstream_git="https://github.com/vllm-project/vllm-ascend.git",
    downstream_dist="vllm-omni",
    package="vllm_omni/platforms/npu/worker",
    out="npu_worker",
    wheel="vllm-omni-npu-worker",
    wheel_requires=("torch-npu", "torch"),
    fence="Omni-new",
    rules="npu",
    gpu_reference="gpu",
)

GPU = QueueSpec(
    preset="gpu",
    upstream_dist="vllm",
    upstream_file="vllm/v1/worker/gpu_model_runner.py",
    upstream_class="GPUModelRunner",
    upstream_git="",
    downstream_dist="vllm-omni",
    package="vllm_omni/worker",
    out="gpu_worker",
    wheel="vllm-omni-gpu-worker",
    wheel_requires=("torch",),
    fence="",
    rules="",
    gpu_reference="",
)

PRESETS = {spec.preset: spec for spec in (NPU, GPU)}

# the built-in `pq check` rules of a rule set (a queue's ``rules``), a file of patch_queue/checks/: the NPU rules
# (CUDA graphs, forward contexts, ...) are errors on any GPU code, so they belong to the NPU queue alone
RULE_FILES = {"npu": "rules.toml"}
DEFAULT = NPU  # the queue of a queue.toml without a [queue] table (format 3), and of `pq adopt` without --preset


@dataclass(frozen=True)
class ImportStubs:
    """What the import test (:mod:`patch_queue.checks.import_stubs`) stubs for a rule set: the native packages no
    machine without the accelerator's toolkit can import, and the module the upstream's build writes."""

    packages: tuple[str, ...]  # top-level packages stubbed whole
    build_info: str  # the module the upstream's build writes (not in its sdist), stubbed with ``build_values``
    build_values: dict[str, str] = field(default_factory=dict)
    device: str = ""  # the torch device the stubbed package registers ("" = none)
    device_module: str = ""  # the stubbed module that is that device's module
    platform_plugin: str = ""  # the upstream's vLLM platform plugin entry point, when its metadata names none


IMPORT_STUBS = {
    "npu": ImportStubs(
        packages=("torch_npu", "acl"),
        build_info="vllm_ascend._build_info",
        build_values={"__device_type__": "A2"},
        device="npu",
        device_module="torch_npu.npu",
        platform_plugin="ascend = vllm_ascend:register",
    ),
}


# how messages name a preset's runners; a queue set by options has "the runners of <package>"
RUNNERS = {"npu": "the NPU runners", "gpu": "the GPU runners"}
# what a built wheel calls them (its summary and readme); a queue set by options has "model runners"
RUNNER_KINDS = {"npu": "Ascend NPU model runners", "gpu": "GPU model runners"}


def runners(spec: QueueSpec) -> str:
    """How messages name the runners of the queue ``spec``: "the NPU runners", "the GPU runners", or for a queue
    set by options "the runners of <its package>"."""
    return RUNNERS.get(spec.preset) or f"the runners of {spec.package}"


def other_pair(base: QueueSpec) -> QueueSpec:
    """``base`` (its upstream and downstream already set by options) as a pair of no preset: none of a preset's own
    upstream carries over (its git history, its fence, its check rules, the GPU runners it mirrors), and the wheel
    is named after the downstream and the output folder (as the presets' are) with no requirement of its own."""
    return replace(
        base,
        preset="",
        upstream_git="",
        fence="",
        rules="",
        gpu_reference="",
        wheel=f"{base.downstream_dist}-{base.out.replace('_', '-')}",
        wheel_requires=(),
    )


def runner_kind(spec: QueueSpec) -> str:
    """What a built wheel calls the runners of the queue ``spec`` (:data:`RUNNER_KINDS`)."""
    return RUNNER_KINDS.get(spec.preset, "model runners")


def preset(name: str) -> QueueSpec | None:
    return PRESETS.get(name)
