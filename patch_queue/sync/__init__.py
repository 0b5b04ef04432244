"""`pq sync-gpu`'s porting of omni GPU-runner changes to the NPU runners: placement (:mod:`.placement`), the
translation rules (:mod:`.translation` + ``gpu_sync.toml``), what a port is (:mod:`.ports`), statement units
(:mod:`.statements`), whole helper methods (:mod:`.helpers`) and module functions (:mod:`.functions`), the omni GPU
code changed since the series' release (:mod:`.update`)."""
