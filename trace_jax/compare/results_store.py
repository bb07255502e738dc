"""A comparison's per-run result files, kept outside the workdir so a grid can be finished in several
sittings, on another machine, from what was committed (`compare.results`, e.g.
studies/powered/results/math).

Layout: `<results>/shared.json` (the digest of the SFT params every run started from, the SFT
settings and its held-out result), `<results>/shared/` (the SFT checkpoint's final step and the
tokenizer: a few MB for the CPU presets, so a fresh workdir starts from the very same params instead
of redoing SFT; `eval/step_0.json`, its per-task outcomes) and
`<results>/runs/<variant>/seed<k>-<identity hash>/` with each finished run's `identity.json` (what defines the
run: `schema.identity`), `summary.json`, `steps.jsonl`, `metrics.jsonl` and `eval/step_N.json`: everything the
report reads, none of the
checkpoints; a run whose ledger failed the budget audit leaves `audit_failed.json` (the audit's message)
there instead. A run found there is copied into the workdir and reported as finished, once its stored identity
is the one asked for; a stored grid made from other SFT params (a digest that differs) is refused, naming both
digests.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil

import jax
import numpy as np

from trace_jax.config.schema import ConfigError, require_same_settings

IDENTITY = "identity.json"  # {"schema": version, "settings": {...}}: what defines the run (`schema.identity`)
RUN_FILES = (IDENTITY, "summary.json", "steps.jsonl", "metrics.jsonl")
AUDIT_FAILED = "audit_failed.json"  # in place of the result files: the run's ledger failed the budget audit


def params_digest(params) -> str:
    """sha256 over every leaf's dtype, shape and bytes, in tree order."""
    h = hashlib.sha256()
    for leaf in jax.tree.leaves(params):
        a = np.asarray(jax.device_get(leaf))
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _files(run_dir: str) -> list[str]:
    """The result files present, summary.json last: a copy cut short never looks finished."""
    names = [n for n in RUN_FILES if os.path.exists(os.path.join(run_dir, n))]
    evals = sorted(os.path.relpath(p, run_dir) for p in glob.glob(os.path.join(run_dir, "eval", "step_*.json")))
    return [n for n in names if n != "summary.json"] + evals + [n for n in names if n == "summary.json"]


def _copy(names: list[str], source: str, target: str) -> None:
    for name in names:
        os.makedirs(os.path.dirname(os.path.join(target, name)), exist_ok=True)
        shutil.copyfile(os.path.join(source, name), os.path.join(target, name) + ".tmp")
        os.replace(os.path.join(target, name) + ".tmp", os.path.join(target, name))


def check_shared(results: str, workdir_shared: str, *, digest: str, sft_settings: dict, after_sft: dict) -> None:
    """Records (first time) or checks that the stored grid started from these SFT params."""
    path = os.path.join(results, "shared.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            stored = json.load(f)
        if stored["sft_digest"] != digest:
            raise ConfigError(f"the runs stored in {results} started from SFT params with digest "
                              f"{stored['sft_digest'][:16]}..., but this workdir's SFT checkpoint has digest "
                              f"{digest[:16]}... (settings {'equal' if stored['sft_settings'] == sft_settings else 'differ'}"
                              "): their results cannot be pooled; use another results directory or the same SFT")
        return
    if jax.process_index() != 0:
        return
    os.makedirs(results, exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump({"sft_digest": digest, "sft_settings": sft_settings, "after_sft": after_sft}, f, indent=1)
    os.replace(path + ".tmp", path)
    step0 = os.path.join(workdir_shared, "eval", "step_0.json")
    if os.path.exists(step0):
        _copy(["eval/step_0.json"], workdir_shared, os.path.join(results, "shared"))


def restore_start(results: str, workdir_shared: str) -> bool:
    """Copies the stored SFT checkpoint and tokenizer into a workdir that has none (before `build`)."""
    stored = os.path.join(results, "shared")
    if not os.path.isdir(os.path.join(stored, "sft")) or os.path.exists(os.path.join(workdir_shared, "sft")):
        return False
    if jax.process_index() == 0:
        os.makedirs(workdir_shared, exist_ok=True)
        for name in ("tokenizer", "sft"):
            if os.path.isdir(os.path.join(stored, name)) and not os.path.exists(os.path.join(workdir_shared, name)):
                shutil.copytree(os.path.join(stored, name), os.path.join(workdir_shared, name + ".tmp"))
                os.replace(os.path.join(workdir_shared, name + ".tmp"), os.path.join(workdir_shared, name))
    return True


def keep_start(results: str, workdir_shared: str, sft_step: int) -> None:
    """Copies the SFT checkpoint's step `sft_step` and the tokenizer into the results directory (once)."""
    target = os.path.join(results, "shared")
    if jax.process_index() != 0 or os.path.isdir(os.path.join(target, "sft")):
        return
    os.makedirs(target, exist_ok=True)
    sources = {"tokenizer": os.path.join(workdir_shared, "tokenizer"),
               os.path.join("sft", str(sft_step)): os.path.join(workdir_shared, "sft", str(sft_step))}
    for name, source in sources.items():
        if os.path.isdir(source) and not os.path.exists(os.path.join(target, name)):
            os.makedirs(os.path.dirname(os.path.join(target, name)), exist_ok=True)
            shutil.copytree(source, os.path.join(target, name) + ".tmp")
            os.replace(os.path.join(target, name) + ".tmp", os.path.join(target, name))


def write_identity(run_dir: str, identity: dict) -> None:
    """Writes `identity.json` into a run directory, or checks the one there (`require_identity`)."""
    path = os.path.join(run_dir, IDENTITY)
    if os.path.exists(path):
        require_identity(run_dir, identity)
    elif jax.process_index() == 0:
        os.makedirs(run_dir, exist_ok=True)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(identity, f, indent=1, sort_keys=True)
        os.replace(path + ".tmp", path)


def require_identity(run_dir: str, identity: dict) -> None:
    """Raises ConfigError unless the run directory's `identity.json` is `identity`, naming the schema versions
    or each field that differs (a directory found under the same hash is another run only by accident or
    by hand, and its results must not be reported as this one's)."""
    path = os.path.join(run_dir, IDENTITY)
    try:
        with open(path, encoding="utf-8") as f:
            stored = json.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{run_dir} holds a run's results but no {IDENTITY}: run studies/migrations/"
                          "identity_v2.py and staleness_v3.py on results stored before 2026-12-07") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path} is not JSON ({e})") from None
    if stored.get("schema") != identity["schema"]:
        raise ConfigError(f"{path} is identity schema {stored.get('schema')!r}; this code reads "
                          f"{identity['schema']} (studies/migrations/ moves stored runs between schemas)")
    require_same_settings(f"the run in {run_dir}", stored.get("settings", {}), identity["settings"])


def restore_run(results: str, relative: str, run_dir: str, identity: dict) -> bool:
    """Copies a run finished in the results directory into `run_dir` (unless it finished there too), once
    its stored identity is `identity`."""
    stored = os.path.join(results, relative)
    if not os.path.exists(os.path.join(stored, "summary.json")):
        return False
    require_identity(stored, identity)
    if not os.path.exists(os.path.join(run_dir, "summary.json")):
        _copy(_files(stored), stored, run_dir)
    return True


def keep_run(results: str, relative: str, run_dir: str) -> None:
    """Copies a finished run's result files into the results directory (process 0)."""
    if jax.process_index() == 0:
        _copy(_files(run_dir), run_dir, os.path.join(results, relative))


def keep_failure(results: str, relative: str, reason: str) -> None:
    """Records in the results directory that a run failed the budget audit (`selection.AUDIT_FAILED`, no
    result files), so a fresh workdir reports it as failed instead of training it again (process 0)."""
    if jax.process_index() == 0:
        target = os.path.join(results, relative)
        os.makedirs(target, exist_ok=True)
        with open(os.path.join(target, AUDIT_FAILED) + ".tmp", "w", encoding="utf-8") as f:
            json.dump({"reason": reason}, f)
        os.replace(os.path.join(target, AUDIT_FAILED) + ".tmp", os.path.join(target, AUDIT_FAILED))


def stored_failure(results: str, relative: str) -> str | None:
    """The audit's message for a run the results directory records as failed, else None."""
    path = os.path.join(results, relative, AUDIT_FAILED)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)["reason"]


def keep_report(results: str, paths: list[str]) -> None:
    """Copies the report files (results*.json/md, plots) into the results directory (process 0)."""
    if jax.process_index() == 0:
        os.makedirs(results, exist_ok=True)
        for path in paths:
            _copy([os.path.basename(path)], os.path.dirname(path), results)
