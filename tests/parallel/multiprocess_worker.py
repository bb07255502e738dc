"""One process of the two-process learner test (run by test_multiprocess.py, not collected by pytest).

usage: python multiprocess_worker.py PORT PROCESS_ID NUM_PROCESSES
Prints one JSON line: the losses of a few learner steps on a (data=2) mesh spanning both processes.
"""

import json
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"

import jax  # noqa: E402

port, process_id, num_processes = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(coordinator_address=f"localhost:{port}", num_processes=num_processes,
                           process_id=process_id)

from jax.sharding import NamedSharding  # noqa: E402

from tests.parallel.test_sharding import CONFIG, _batches  # noqa: E402
from trace_jax.models import init_params  # noqa: E402
from trace_jax.parallel.mesh import make_mesh  # noqa: E402
from trace_jax.parallel.rules import batch_sharding  # noqa: E402
from trace_jax.rl import learner  # noqa: E402
from trace_jax.rl.losses import LossConfig  # noqa: E402

mesh = make_mesh(data=jax.device_count())
optimizer = learner.make_optimizer(learner.LearnerConfig(learning_rate=1e-3))
step, params, opt_state = learner.sharded_train_step(mesh, CONFIG, LossConfig(), optimizer, init_params(CONFIG, 0))
sharding: NamedSharding = batch_sharding(mesh)
losses = []
for batch in _batches():
    global_batch = {k: jax.make_array_from_callback(v.shape, sharding, lambda idx, v=v: v[idx])
                    for k, v in batch.items()}
    params, opt_state, metrics = step(params, opt_state, global_batch)
    losses.append(float(metrics["loss"]))
print(json.dumps({"process": process_id, "devices": jax.device_count(), "losses": losses}))
jax.distributed.shutdown()
