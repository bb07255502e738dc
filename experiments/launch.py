"""Shared flags and start-up of the launchers (`train.py`, `sft.py`, `evaluate.py`, `compare.py`): parse the config,
optionally join a multi-host run, call one `trace_jax.run.train` entry point, print its JSON summary."""

import importlib
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
flags.DEFINE_bool("distributed", False, "Join a multi-host run (jax.distributed.initialize): with the three flags "
                  "below, or from the cluster environment (TPU pods, SLURM) without them.")
flags.DEFINE_string("coordinator_address", None, "host:port of process 0 (with --distributed).")
flags.DEFINE_integer("num_processes", None, "Processes in the run (with --distributed).")
flags.DEFINE_integer("process_id", None, "This process's index in [0, num_processes) (with --distributed).")
flags.DEFINE_integer("initialization_timeout", 300, "Seconds to wait for every process to join before failing.")
flags.DEFINE_integer("heartbeat_timeout", 100, "Seconds without a heartbeat after which a process counts as dead and "
                     "the others stop with an error (instead of waiting in a collective forever).")
flags.mark_flags_as_required(["config", "workdir"])
for _name in ("initialization_timeout", "heartbeat_timeout"):
    flags.register_validator(_name, lambda seconds: seconds > 0, message=f"--{_name} must be > 0 seconds")


def run(entry_point) -> None:
    """entry_point: `"module.function"` of a `trace_jax.run` entry point (e.g. "train.train_and_evaluate"),
    or a callable (config, workdir) -> dict."""
    def main(argv):
        del argv
        logging.set_verbosity(logging.WARNING)  # orbax logs every checkpoint step at INFO
        import jax

        from trace_jax.parallel.mesh import check_distributed, initialize_distributed
        explicit = (FLAGS.coordinator_address, FLAGS.num_processes, FLAGS.process_id)
        if FLAGS.distributed:
            initialize_distributed(*explicit, timeout_s=FLAGS.initialization_timeout,
                                   heartbeat_s=FLAGS.heartbeat_timeout)
        elif any(v is not None for v in explicit):
            check_distributed(*explicit)  # named first when malformed
            raise app.UsageError("--coordinator_address/--num_processes/--process_id need --distributed")
        if isinstance(entry_point, str):
            module, _, function = entry_point.partition(".")
            call = getattr(importlib.import_module(f"trace_jax.run.{module}"), function)
        else:
            call = entry_point
        summary = call(FLAGS.config, FLAGS.workdir)
        if jax.process_index() == 0:
            print(json.dumps(summary))

    app.run(main, flags_parser=_parse_flags)


def _parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing, except that a `--config.<section>.<field>=` flag naming a field the config does not
    have exits with a line naming it (ml_collections raises a bare `AttributeError: "'foo'"` there)."""
    try:
        return FLAGS(argv)
    except flags.Error as e:
        sys.exit(f"FATAL Flags parsing error: {e}\nPass --helpshort or --helpfull to see help on flags.")
    except AttributeError as e:
        config = _config_of(argv)
        bad = [a.split("=")[0] for a in argv[1:] if a.startswith("--config.")
               and not _has_path(config, a.split("=")[0][len("--config."):])]
        sys.exit(f"unknown config field(s) {bad or e}: `python -c \"from trace_jax.config.files import default_config; "
                 f"print(default_config())\"` lists every field")


def _config_of(argv: list[str]):
    """The config the `--config` flag in argv names, loaded without its overrides (None if absent)."""
    for i, arg in enumerate(argv):
        if arg.startswith("--config="):
            return FLAGS["config"].parser.parse(arg.split("=", 1)[1])
        if arg == "--config" and i + 1 < len(argv):
            return FLAGS["config"].parser.parse(argv[i + 1])
    return None


def _has_path(config, dotted: str) -> bool:
    node = config
    for part in dotted.split("."):
        try:
            node = node[part]
        except (KeyError, TypeError, AttributeError):
            return False
    return True
