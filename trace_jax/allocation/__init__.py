"""Where the rollout budget goes: the shared success predictor, the solvers, the allocators."""
