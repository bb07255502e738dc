"""One metrics writer: TensorBoard event files and JSONL logs under the workdir. RL steps arrive as
typed `StepRecord`s (`steps.jsonl`, read back with `records.read_steps`); everything else (SFT
loss, evaluations) as named scalars (`metrics.jsonl`)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping

import numpy as np

from trace_jax.run.records import STEPS_FILE, StepRecord, append_step


class MetricWriter:
    """`write(step, {name: scalar})` appends to `<workdir>/metrics.jsonl`, `write_step(record)` to
    `<workdir>/steps.jsonl`; both to TensorBoard (process 0 only)."""

    def __init__(self, workdir: str, *, enabled: bool = True):
        self.enabled, self.workdir = enabled, workdir
        self.path = os.path.join(workdir, "metrics.jsonl")
        self._tb = None
        if enabled:
            os.makedirs(workdir, exist_ok=True)
            try:
                from tensorboardX import SummaryWriter
                self._tb = SummaryWriter(os.path.join(workdir, "tensorboard"))
            except ImportError:
                self._tb = None

    def write(self, step: int, scalars: Mapping[str, float], *, prefix: str = "") -> None:
        if not self.enabled:
            return
        clean = {}
        for key, value in scalars.items():
            value = float(np.asarray(value))
            clean[f"{prefix}{key}"] = value if np.isfinite(value) else None
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"step": int(step), "time": time.time(), **clean}) + "\n")
        self._tensorboard(step, clean)

    def write_step(self, record: StepRecord) -> None:
        """One RL step's record: a `steps.jsonl` line, and its scalars under `train/` in TensorBoard."""
        if not self.enabled:
            return
        append_step(self.workdir, record)
        self._tensorboard(record.step, {f"train/{k}": v for k, v in record.scalars().items()})

    def rewind(self, step: int, *, prefix: str = "eval/", keep_step: bool = True) -> None:
        """Forgets what was logged after `step` (scalars under `prefix`; with the RL prefix "eval/",
        the step records too): a run resumed from a checkpoint at `step` logs those steps again, and
        each step must appear once. `keep_step=False` forgets the scalars under `prefix` at `step` itself too
        (the final evaluation, logged after the last checkpoint: a run stopped during the export logs it again)."""
        if not self.enabled:
            return
        if prefix == "eval/":
            _rewrite(os.path.join(self.workdir, STEPS_FILE), lambda row: row["step"] <= step)
        _rewrite(self.path, lambda row: (row["step"] < step or (keep_step and row["step"] == step)
                                         or not any(k.startswith(prefix) for k in row)))

    def _tensorboard(self, step: int, scalars: Mapping[str, float | None]) -> None:
        if self._tb is not None:
            for key, value in scalars.items():
                if value is not None:
                    self._tb.add_scalar(key, value, int(step))
            self._tb.flush()

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def _rewrite(path: str, keep) -> None:
    """Rewrites a JSONL file with the rows `keep(row)` accepts (atomically; a torn last line is dropped)."""
    if not os.path.exists(path):
        return
    kept = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:  # a line cut short by a kill
                continue
            if keep(row):
                kept.append(line if line.endswith("\n") else line + "\n")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.writelines(kept)
    os.replace(path + ".tmp", path)


def read_metrics(workdir: str) -> list[dict]:
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # blank, or the last line cut short by a kill
                continue
    return rows
