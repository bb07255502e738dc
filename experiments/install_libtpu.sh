#!/usr/bin/env bash
# The TPU compiler for `experiments/dry_run.py --target` in an environment of its own (default /tmp/tpu): a venv
# that sees this environment's packages (jax, flax, trace_jax, ...) and adds libtpu for the same jax version,
# so the CPU install and its tests never load a TPU runtime.
#   bash experiments/install_libtpu.sh [/path/to/venv]
#   /tmp/tpu/bin/python experiments/dry_run.py --config configs/qwen3_14b_multihop.py --target v5e:4x4
set -euo pipefail
VENV="${1:-/tmp/tpu}"
JAX="$(python -c 'import jax; print(jax.__version__)')"
python -m venv --system-site-packages "$VENV"
"$VENV/bin/python" -m pip install -q "jax[tpu]==$JAX"
"$VENV/bin/python" -c 'import importlib.metadata as m; print("libtpu", m.version("libtpu"), "for jax", m.version("jax"))'
