"""Shared flags and start-up of the launchers (`train.py`, `sft.py`, `evaluate.py`, `compare.py`): parse the config,
optionally join a multi-host run, call one `trace_jax.train` entry point, print its JSON summary."""

import json
import os
import sys

from absl import app, flags, logging

# configs/*.py may build on each other (`from configs import quickstart`): make the repo root importable.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from ml_collections import config_flags

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "Path to a configs/*.py file (optionally file.py:arg).",
                                lock_config=True)
flags.DEFINE_string("workdir", None, "Where checkpoints, metrics and the exported model go.")
flags.DEFINE_bool("distributed", False, "Call jax.distributed.initialize() (multi-host runs).")
flags.mark_flags_as_required(["config", "workdir"])


def run(entry_point) -> None:
    """entry_point: the name of a `trace_jax.train` function, or a callable (config, workdir) -> dict."""
    def main(argv):
        del argv
        logging.set_verbosity(logging.WARNING)  # orbax logs every checkpoint step at INFO
        import jax
        if FLAGS.distributed:
            jax.distributed.initialize()
        from trace_jax import train
        call = getattr(train, entry_point) if isinstance(entry_point, str) else entry_point
        summary = call(FLAGS.config, FLAGS.workdir)
        if jax.process_index() == 0:
            print(json.dumps(summary))

    app.run(main)
