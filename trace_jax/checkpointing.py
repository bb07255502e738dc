"""Checkpoints with orbax: arrays (params, optimizer, allocator/predictor arrays) plus a JSON record
(step, data-iterator position, allocator host state, RNG states). Keeps the last N; the latest is
restored automatically, so a killed run resumes with the same results."""

from __future__ import annotations

import os
from typing import Any

import jax
import orbax.checkpoint as ocp


class CheckpointError(ValueError):
    pass


class Checkpointer:
    def __init__(self, directory: str, *, keep: int = 2):
        self.directory = os.path.abspath(directory)
        self.manager = ocp.CheckpointManager(
            self.directory, options=ocp.CheckpointManagerOptions(max_to_keep=keep, enable_async_checkpointing=False))

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, arrays: dict[str, Any], record: dict[str, Any]) -> None:
        arrays = {k: v for k, v in arrays.items() if jax.tree.leaves(v)}  # orbax refuses empty trees
        self.manager.save(step, args=ocp.args.Composite(arrays=ocp.args.StandardSave(arrays),
                                                        record=ocp.args.JsonSave(record)), force=True)
        self.manager.wait_until_finished()

    def read_record(self, step: int | None = None) -> dict[str, Any]:
        step = self.latest_step() if step is None else step
        if step is None:
            raise CheckpointError(f"no checkpoint in {self.directory}")
        return dict(self.manager.restore(step, args=ocp.args.Composite(record=ocp.args.JsonRestore()))["record"])

    def restore(self, target: dict[str, Any], step: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """Restores arrays into the structure of `target` (pytrees with the same leaves) and the record."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise CheckpointError(f"no checkpoint in {self.directory}")
        target = {k: v for k, v in target.items() if jax.tree.leaves(v)}
        restored = self.manager.restore(step, args=ocp.args.Composite(
            arrays=ocp.args.StandardRestore(target), record=ocp.args.JsonRestore()))
        return dict(restored["arrays"]), dict(restored["record"])


def require_checkpoint_dir(path: str) -> str:
    """For commands that must start from an existing checkpoint (evaluate, export)."""
    if not os.path.isdir(path):
        raise CheckpointError(f"checkpoint directory {path!r} does not exist")
    if ocp.CheckpointManager(path, options=ocp.CheckpointManagerOptions(read_only=True)).latest_step() is None:
        raise CheckpointError(f"checkpoint directory {path!r} holds no checkpoint")
    return path
