"""Upstream sources and pq's cache, one module each: :mod:`.cache` (the cache folder, sealed files, derived
results), :mod:`.registry` (pip's configuration, the index client, downloads), :mod:`.archives` (a
release's verified archive and its files), :mod:`.snapshot` (releases, commits and folders behind one
interface), :mod:`.vllm_release` (the vLLM release a vllm-omni release goes with)."""
