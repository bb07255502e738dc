"""Checkpoints with orbax, verified: arrays (params, optimizer, allocator/predictor arrays) plus a JSON
record (step, data-iterator position, allocator host state, RNG states), and a checksum file.

Every save writes `<step>/checksums.json` (sha256 of every file orbax wrote) once orbax has finished.
Restoring walks the steps newest first and uses the first one that (1) matches its checksums (a
step without them, written by an older version, is accepted on the next checks alone), (2) orbax
can read, and (3) holds only finite params and optimizer state. A step that fails is reported with
its path and why, moved aside to `<step>.unusable` (so a later save of that step number can happen)
and the previous one is tried; raw orbax errors become `CheckpointError` naming the step. Keeps the
last N; a killed run resumes with the same results.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp

from trace_jax.parallel.host import local_copy, replicated_global

CHECKSUMS = "checksums.json"
FINITE_ITEMS = ("params", "opt_state")  # restored arrays that must hold no NaN/Inf
_logger = logging.getLogger(__name__)


class CheckpointError(ValueError):
    """A checkpoint directory or step that cannot be used; the message names the path and why."""


def _file_digests(step_dir: str) -> dict[str, str]:
    digests = {}
    for root, _, files in os.walk(step_dir):
        for name in sorted(files):
            path = os.path.join(root, name)
            rel = os.path.relpath(path, step_dir)
            if rel in (CHECKSUMS, CHECKSUMS + ".tmp"):
                continue
            h = hashlib.sha256()
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 22), b""):
                    h.update(chunk)
            digests[rel] = h.hexdigest()
    return digests


def _all_finite(tree) -> bool:
    leaves = [x for x in jax.tree.leaves(tree) if jnp.issubdtype(jnp.asarray(x).dtype, jnp.inexact)]
    return all(bool(jnp.isfinite(x).all()) for x in leaves)


class Checkpointer:
    def __init__(self, directory: str, *, keep: int = 2):
        if keep < 1:
            raise CheckpointError(f"{directory}: keep={keep} would keep no checkpoint to resume from")
        self.directory = os.path.abspath(directory)
        if os.path.exists(self.directory) and not os.path.isdir(self.directory):
            raise CheckpointError(f"{self.directory} exists and is not a directory: checkpoints cannot be kept there "
                                  "(move that file, or use another workdir)")
        self.manager = ocp.CheckpointManager(
            self.directory, options=ocp.CheckpointManagerOptions(max_to_keep=keep, enable_async_checkpointing=False),
            # named handlers: a fresh process can read a step's array metadata (shapes) before restoring it
            item_handlers={"arrays": ocp.StandardCheckpointHandler(), "record": ocp.JsonCheckpointHandler()})

    def steps(self) -> list[int]:
        """Every step directory, usable or not, newest first."""
        return sorted(self.manager.all_steps(), reverse=True)

    def latest_step(self) -> int | None:
        """The newest step directory (not yet verified: `restore_latest` verifies)."""
        steps = self.steps()
        return steps[0] if steps else None

    def step_dir(self, step: int) -> str:
        return os.path.join(self.directory, str(step))

    def save(self, step: int, arrays: dict[str, Any], record: dict[str, Any]) -> None:
        arrays = {k: v for k, v in arrays.items() if jax.tree.leaves(v)}  # orbax refuses empty trees
        arrays = replicated_global(arrays)  # multi-host: process-local copies become global, written once
        self.manager.save(step, args=ocp.args.Composite(arrays=ocp.args.StandardSave(arrays),
                                                        record=ocp.args.JsonSave(record)), force=True)
        self.manager.wait_until_finished()
        if jax.process_index() == 0:
            digests = _file_digests(self.step_dir(step))
            path = os.path.join(self.step_dir(step), CHECKSUMS)
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                json.dump(digests, f, indent=0, sort_keys=True)
            os.replace(path + ".tmp", path)

    def verify(self, step: int) -> bool:
        """Raises CheckpointError unless every file the step's checksums list is present and unchanged.
        Returns False for a step written without checksums (nothing to compare)."""
        step_dir = self.step_dir(step)
        path = os.path.join(step_dir, CHECKSUMS)
        if not os.path.exists(path):
            return False
        try:
            with open(path, encoding="utf-8") as f:
                expected = json.load(f)
        except (OSError, ValueError) as e:
            raise CheckpointError(f"checkpoint step {step} ({step_dir}): unreadable {CHECKSUMS}: {e}") from None
        if not isinstance(expected, dict) or not all(isinstance(v, str) for v in expected.values()):
            raise CheckpointError(f"checkpoint step {step} ({step_dir}): unreadable {CHECKSUMS}: expected "
                                  f"{{file: sha256}}, got {type(expected).__name__}")
        actual = _file_digests(step_dir)
        missing = sorted(set(expected) - set(actual))
        changed = sorted(k for k in expected if k in actual and actual[k] != expected[k])
        if missing or changed:
            raise CheckpointError(f"checkpoint step {step} ({step_dir}) is damaged: "
                                  + "; ".join(filter(None, [missing and f"missing {missing[:5]}",
                                                            changed and f"checksum mismatch in {changed[:5]}"])))
        return True

    def read_record(self, step: int) -> dict[str, Any]:
        try:
            return dict(self.manager.restore(step, args=ocp.args.Composite(record=ocp.args.JsonRestore()))["record"])
        except Exception as e:  # orbax raises many types for a damaged or partial step
            raise CheckpointError(f"checkpoint step {step} ({self.step_dir(step)}): cannot read its record "
                                  f"({type(e).__name__}: {str(e)[:300]})") from None

    def restore(self, target: dict[str, Any], step: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """Restores step `step`'s arrays into the structure of `target` (pytrees with the same leaves)
        and its record; CheckpointError if it is damaged, unreadable or not finite."""
        self.verify(step)
        target = {k: v for k, v in target.items() if jax.tree.leaves(v)}
        self._require_shapes(step, target)
        local = jax.tree.map(lambda x: not isinstance(x, jax.Array) or x.is_fully_addressable, target)
        try:
            restored = self.manager.restore(step, args=ocp.args.Composite(
                arrays=ocp.args.StandardRestore(replicated_global(target)), record=ocp.args.JsonRestore()))
        except Exception as e:  # orbax raises many types for a damaged or partial step
            raise CheckpointError(f"checkpoint step {step} ({self.step_dir(step)}): orbax cannot restore it "
                                  f"({type(e).__name__}: {str(e)[:300]})") from None
        arrays = jax.tree.map(lambda x, keep_local: local_copy(x) if keep_local else x, dict(restored["arrays"]), local)
        bad = [k for k in FINITE_ITEMS if k in arrays and not _all_finite(arrays[k])]
        if bad:
            raise CheckpointError(f"checkpoint step {step} ({self.step_dir(step)}): {', '.join(bad)} hold NaN or "
                                  "Inf values")
        return arrays, dict(restored["record"])

    def _require_shapes(self, step: int, target: dict[str, Any]) -> None:
        """CheckpointMismatchError naming the first differing arrays when an intact step holds params of other
        shapes than the run's (another model): a setting to fix, not damage to set aside."""
        try:
            stored = self.manager.item_metadata(step)["arrays"]
            stored = getattr(stored, "tree", stored)
        except Exception:  # noqa: BLE001  (no readable metadata: orbax's restore reports the step)
            return
        if "params" not in target or not isinstance(stored, dict) or "params" not in stored:
            return
        want = {jax.tree_util.keystr(p): tuple(x.shape) for p, x in jax.tree_util.tree_leaves_with_path(
            target["params"])}
        have = {jax.tree_util.keystr(p): tuple(getattr(x, "shape", ())) for p, x in
                jax.tree_util.tree_leaves_with_path(stored["params"], is_leaf=lambda x: hasattr(x, "shape"))}
        differ = [f"{k}: checkpoint {have.get(k, 'absent')} vs run {want.get(k, 'absent')}"
                  for k in sorted(set(want) | set(have)) if have.get(k) != want.get(k)]
        if differ:
            raise CheckpointMismatchError(
                f"checkpoint step {step} ({self.step_dir(step)}) holds params of another model than this run's "
                f"({len(differ)} arrays differ: {'; '.join(differ[:4])}): resume it with the config that wrote it, "
                "or use another workdir")

    def restore_latest(self, make_target: Callable[[dict[str, Any]], dict[str, Any]]
                       ) -> tuple[dict[str, Any], dict[str, Any], int]:
        """(arrays, record, step) of the newest usable step. `make_target(record)` gives the structure
        to restore into (it may depend on the record). Unusable newer steps are reported and moved
        aside; CheckpointError listing every step's problem when none is usable."""
        problems = []
        for step in self.steps():
            try:
                verified = self.verify(step)
                arrays, record = self.restore(make_target(self.read_record(step)), step)
                if not verified:
                    _logger.warning("checkpoint step %d (%s) has no %s (written by an older version): "
                                    "restored unverified", step, self.step_dir(step), CHECKSUMS)
            except CheckpointMismatchError:
                raise  # intact, of another model: moving it aside would lose the run it belongs to
            except CheckpointError as e:
                problems.append(str(e))
                _logger.warning("%s; trying the previous step", e)
                self._set_aside(step)
                continue
            if problems:
                print(f"skipped {len(problems)} unusable checkpoint(s) in {self.directory}; resuming from step "
                      f"{step}: " + " | ".join(problems), flush=True)
            return arrays, record, step
        raise CheckpointError(f"no usable checkpoint in {self.directory}"
                              + (": " + " | ".join(problems) if problems else ""))

    def _set_aside(self, step: int) -> None:
        """Moves an unusable step out of orbax's view (kept for inspection as `<step>.unusable`)."""
        if jax.process_index() == 0 and os.path.isdir(self.step_dir(step)):
            target = self.step_dir(step) + ".unusable"
            n = 1
            while os.path.exists(target):
                target, n = f"{self.step_dir(step)}.unusable{n}", n + 1
            os.replace(self.step_dir(step), target)
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils
            multihost_utils.sync_global_devices(f"checkpoint-set-aside-{step}")
        self.manager.reload()


class CheckpointMismatchError(CheckpointError):
    """An intact checkpoint that does not fit this run (another model's params)."""


def require_checkpoint_dir(path: str) -> str:
    """For commands that must start from an existing checkpoint (evaluate, export)."""
    if not os.path.isdir(path):
        raise CheckpointError(f"checkpoint directory {path!r} does not exist")
    if not ocp.CheckpointManager(path, options=ocp.CheckpointManagerOptions(read_only=True)).all_steps():
        raise CheckpointError(f"checkpoint directory {path!r} holds no checkpoint")
    return path


