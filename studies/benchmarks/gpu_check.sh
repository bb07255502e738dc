#!/usr/bin/env bash
# The sampler on one GPU (under 8 minutes): installs jax's CUDA wheel when jax has no GPU backend yet, then
# runs studies/benchmarks/gpu_check.py (Qwen3-0.6B shapes, bfloat16, random weights), whose last line is one JSON
# object: tokens/s and decode's fraction of HBM bandwidth per batch size, the fused attention path against
# the einsum path. Run from the repository root after `pip install -e .`.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! python -c "import jax, sys; sys.exit(jax.default_backend() != 'gpu')" 2>/dev/null; then
  python -m pip install -q "jax[cuda12]==$(python -c 'import jax; print(jax.__version__)')"
fi
timeout 450 python studies/benchmarks/gpu_check.py
