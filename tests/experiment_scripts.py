"""Loads a script (`experiments/<name>.py`, or a study's `studies/<study>/<name>.py`) as a module for its tests, once
per session (a script defines absl flags at import; a second import would define them again)."""

import importlib.util
import os
import sys

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def load(name: str):
    """The module of experiments/<name>.py (or of <name>.py when `name` is a path such as
    "studies/powered/primary_endpoint"), registered in sys.modules (dataclasses look their module up)."""
    path = name if "/" in name else f"experiments/{name}"
    key = "script_" + path.replace("/", "_")
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, os.path.join(REPO, f"{path}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[key]
            raise
    return sys.modules[key]
