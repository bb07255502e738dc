"""Launcher: SFT warm start then RL (`trace_jax.train.train_and_evaluate`).

  python experiments/train.py --config configs/quickstart.py --workdir /tmp/quickstart
  python experiments/train.py --config configs/quickstart.py:runlocal --workdir /tmp/q --config.allocator.name=grpo

The last line printed is one JSON object with the run's headline figures.
"""

import json

from absl import app, flags, logging
from ml_collections import config_flags

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "Path to a configs/*.py file (optionally file.py:arg).",
                                lock_config=True)
flags.DEFINE_string("workdir", None, "Where checkpoints, metrics and the exported model go.")
flags.DEFINE_bool("distributed", False, "Call jax.distributed.initialize() (multi-host runs).")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # orbax logs every checkpoint step at INFO
    import jax
    if FLAGS.distributed:
        jax.distributed.initialize()
    from trace_jax import train
    summary = train.train_and_evaluate(FLAGS.config, FLAGS.workdir)
    if jax.process_index() == 0:
        print(json.dumps(summary))


if __name__ == "__main__":
    app.run(main)
