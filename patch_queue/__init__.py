"""pq: the omni NPU runners as a patch series on vendored vllm-ascend source."""

from __future__ import annotations

__version__ = "0.1.0"
