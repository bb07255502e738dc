"""Loads an `experiments/*.py` script as a module for its tests, once per session (a script defines absl
flags at import; a second import would define them again)."""

import importlib.util
import os
import sys

EXPERIMENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "experiments")


def load(name: str):
    """The module of experiments/<name>.py, registered in sys.modules (dataclasses look their module up)."""
    key = f"experiments_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, os.path.join(EXPERIMENTS, f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[key]
            raise
    return sys.modules[key]
