"""One process of the two-process rollout test (run by test_multiprocess.py, not collected by pytest).

usage: python rollout_worker.py PORT PROCESS_ID NUM_PROCESSES TOKENIZER_DIR
Grows the trees of `tests/rollout/test_continuous.grow` (greedy) on a (data=NUM_PROCESSES) mesh spanning
every process, continuously batched with the tools run in a worker thread while the devices decode, and
prints one JSON line: the trees' leaf paths, the per-process rollout and turn counts, the tool ledger.
(Whole-turn calls, the default schedule, are tested by tests/parallel/mesh/test_multihost_rl.py.)
"""

import json
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"

import jax  # noqa: E402

port, process_id, num_processes, tokenizer_dir = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(coordinator_address=f"localhost:{port}", num_processes=num_processes,
                           process_id=process_id, initialization_timeout=120)

from tests.rollout.test_continuous import grow, leaf_paths  # noqa: E402
from trace_jax.parallel.mesh import make_mesh  # noqa: E402
from trace_jax.parallel.rules import to_sampling_layout  # noqa: E402
from trace_jax.rollout.continuous import Batching  # noqa: E402
from trace_jax.testing import tiny_world  # noqa: E402

tokenizer_dir = os.path.join(tokenizer_dir, str(process_id))  # each its own: no two processes write one file
os.makedirs(tokenizer_dir, exist_ok=True)
world = tiny_world(tokenizer_dir)
params = to_sampling_layout(world.policy.params, make_mesh(data=jax.device_count()))
engine, trees, _ = grow(world, Batching(chunk=3, slots=4, overlap_tools=True), temperature=0.0, params=params)
out = {"process": process_id, "leaves": leaf_paths(trees), "turns_by_process": engine.counters.turns_by_process,
       "rollouts_by_process": engine.counters.rollouts_by_process, "tool_errors": dict(engine.counters.tool_errors),
       "tool_calls": engine.ledger.tool_calls}
print(json.dumps(out))
jax.distributed.shutdown()
