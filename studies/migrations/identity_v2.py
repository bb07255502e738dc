"""Moves stored results to identity schema 2 (run once on 2026-12-07; kept to migrate a results directory or
workdir made before then, and as the record of what changed).

Schema 1 found a stored run under a hash of `settings(run)` that left out fields added after runs were stored
(while they held their old behaviour's value: `SCHEMA1_LEFT_OUT` below), listed the task section as the union of
every source's fields (`SCHEMA1_TASK_UNION`), and included three predictor flags since deleted
(`REMOVED_FIELDS`); step records lacked fields added later and copied the allocator's figures flat. Schema 2
(`trace_jax.config.schema.identity`) is every field of every section as the config classes hold them, kept
in each run directory's `identity.json`. This script, per results directory:

1. renames every run of the grids it is given (`runs/<variant>/seed<k>-<schema-1 hash>` ->
   `...-<schema-2 hash>`, the directory a current `grid_runs.run_dir` asks for) and writes its `identity.json`,
   after checking that translating the schema-1 settings (`translate`) gives the current identity exactly;
2. rewrites each `steps.jsonl` line into the current `StepRecord` layout: the allocator's figures nested under
   `allocation`; fields a run did not record are written as what they were (one device: no reshard, no
   cross-shard rows; one update per step: the last update's figures are the step's), or null where unmeasured;
3. translates the settings in every cache key (`{"key": ..., "value": ...}` JSON), `shared.json` and SFT
   checkpoint record (whose checksums.json entry is recomputed).

It is idempotent: a directory already at schema 2 is left as it is. `--check` reports without writing.

  python studies/migrations/identity_v2.py            # the committed studies (the five grids below)
  python studies/migrations/identity_v2.py --check
  python studies/migrations/identity_v2.py --grid my_config.py:mode --root /tmp/my_workdir
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import hashlib
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from trace_jax.compare import grid, grid_runs  # noqa: E402
from trace_jax.config import schema  # noqa: E402
from trace_jax.config.files import load_config_file  # noqa: E402
from trace_jax.run.records import StepRecord  # noqa: E402

GRIDS = ("studies/decisive/config.py:screen", "studies/decisive/config.py:confirm",
         *(f"studies/powered/config.py:task={t}" for t in ("math", "multihop", "funcall")))

# Schema 1, as trace_jax/config/schema.py had it until 2026-12-07.
SCHEMA1_LEFT_OUT = {"task.train_path": "", "task.test_path": "", "task.corpus_path": "", "task.categories": "",
                "task.search_url": "", "task.action_format": "react", "task.thinking": True, "task.f1_success": 0.0,
                "rl.decode_chunk": 0, "rl.decode_slots": 0, "rl.overlap_tools": False, "sft.max_difficulty": 0,
                "rl.keep_prefixes": True, "learner.remat": "dots", "learner.mini_batches": 1, "learner.epochs": 1,
                "learner.split_trees": False, "learner.layout": "paths", "advantage.baseline": "all_leaves",
                "allocator.prefix_cost": "tokens", "eval.sample_every": 0,
                "eval.intermediate_tasks": 0, "task.world_scale": 1, "eval.decode_chunk": 0}
SCHEMA1_TASK_UNION = {"source": "multihop", "seed": 0, "num_questions": 2000, "max_difficulty": 2,
                              "max_turns": 5, "max_tokens": 200, "search_top_k": 2, "search_words": 24,
                              "train_path": "", "test_path": "", "corpus_path": "", "categories": "", "search_url": "",
                              "action_format": "react", "thinking": True, "f1_success": 0.0}
REMOVED_FIELDS = {"predictor.weight_cap": 8.0, "predictor.normalize": "standardize", "predictor.loss": "bce"}
ALLOCATION_FIELDS = ("budget_spent", "groups_sampled", "calibration", "holdout_calibration", "root_counts",
                     "predictor_loss", "kappa", "rollout_budget")


def schema1_settings(run: schema.RunConfig) -> dict:
    """`settings(run)` as schema 1 listed it."""
    flat = {"seed": run.seed}
    for name in schema.section_classes():
        fields = dataclasses.asdict(getattr(run, name))
        if name == "task":
            fields = {**SCHEMA1_TASK_UNION, **fields}
        if name == "predictor":
            fields = {**fields, **{k.split(".")[1]: v for k, v in REMOVED_FIELDS.items()}}
        for field, value in fields.items():
            key = f"{name}.{field}"
            if not (key in SCHEMA1_LEFT_OUT and value == SCHEMA1_LEFT_OUT[key]):
                flat[key] = value
    return json.loads(json.dumps(flat))


def schema1_dir_name(seed: int, run: schema.RunConfig) -> str:
    identity = {k: v for k, v in schema1_settings(run).items() if k not in schema.EXECUTION_SETTINGS}
    return f"seed{seed}-{hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:8]}"


def _section_class(name: str, old: dict) -> type:
    registry = schema.registry_of(name)
    if registry is None:
        return schema.section_classes()[name]
    return registry.entry(old.get(f"{name}.{registry.key}", SCHEMA1_TASK_UNION["source"]
                                  if name == "task" else None)).config


def translate(old: dict) -> dict:
    """Schema-1 flat settings (any subset of sections, as `settings(run, sections)` gave them) -> schema 2's:
    each section present gets exactly its config class's fields (a field schema 1 left out at its old value
    gets that value); removed predictor flags and other sources' task fields go, each checked to hold the
    value that made leaving it out harmless. Raises ValueError naming a field it cannot place."""
    sections = sorted({k.split(".")[0] for k in old if "." in k})
    new = {"seed": old["seed"]} if "seed" in old else {}
    for name in sections:
        fields = [f.name for f in dataclasses.fields(_section_class(name, old))]
        for field in fields:
            key = f"{name}.{field}"
            if key in old:
                new[key] = old[key]
            elif key in SCHEMA1_LEFT_OUT:
                new[key] = SCHEMA1_LEFT_OUT[key]
            else:
                raise ValueError(f"{key} is neither in the stored settings nor a field schema 1 left out")
        for key in sorted(k for k in old if k.startswith(name + ".") and k.split(".", 1)[1] not in fields):
            dropped = REMOVED_FIELDS.get(key, SCHEMA1_TASK_UNION.get(key.split(".", 1)[1])
                                         if name == "task" else None)
            if old[key] != dropped:
                raise ValueError(f"{key}={old[key]!r} has no place in schema 2 (only the value {dropped!r} could go)")
    return json.loads(json.dumps(new))


def _is_settings(d) -> bool:
    return isinstance(d, dict) and bool(d) and all(k == "seed" or "." in k for k in d) and any("." in k for k in d)


def translate_key(value):
    """Every flat settings dict inside a cache key translated; a `predictor` section dict loses the removed flags."""
    if _is_settings(value):
        return translate(value)
    if isinstance(value, dict):
        out = {k: translate_key(v) for k, v in value.items()}
        if isinstance(out.get("predictor"), dict):
            out["predictor"] = {k: v for k, v in out["predictor"].items()
                                if f"predictor.{k}" not in REMOVED_FIELDS}
        return out
    return value


def translate_step(line: dict) -> dict:
    """A steps.jsonl line in the current StepRecord layout (unchanged when it already is)."""
    if "allocation" in line:
        return line
    out = {k: v for k, v in line.items() if k not in ALLOCATION_FIELDS}
    out["allocation"] = {k: line.get(k) for k in ALLOCATION_FIELDS}
    for key in ("prompts_mixed", "root_groups_mixed", "branch_leaf_share", "anchor_depths"):
        out["trees"] = {**out["trees"], key: out["trees"].get(key)}
    out["timings"] = {"reshard_s": 0.0, **out["timings"]}  # schema-1 runs without it ran on one device
    learner = out.get("learner")
    if learner is not None and "updates" not in learner:  # one update per step then: the last is the step's own
        out["learner"] = {**learner, "updates": 1, "clip_fraction_last": learner["clip_fraction"],
                          "approx_kl_last": learner["approx_kl"], "grad_norm_last": learner["grad_norm"]}
    for key, absent in (("tool_errors", {}), ("cross_shard_rows", 0), ("rollouts_by_process", None),
                        ("turns_by_process", None), ("slot_utilisation", None)):
        out.setdefault(key, absent)
    StepRecord.from_json(out)  # reads back, or raises naming what is missing
    return out


class Migration:
    def __init__(self, check: bool):
        self.check, self.changes = check, []

    def write_json(self, path: str, value, **dump) -> None:
        self.changes.append(path)
        if not self.check:
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                json.dump(value, f, **dump)
            os.replace(path + ".tmp", path)

    def grid(self, spec: str, root: str | None) -> None:
        compare, base = grid.split_config(load_config_file(spec))
        results = root or compare.results
        for variant, seed, run in grid.validate(grid.framed(base, compare, compare.tokens), compare):
            new = grid_runs.run_dir(results, variant.name, seed, run)
            old = os.path.join(os.path.dirname(new), schema1_dir_name(seed, run))
            identity = schema.identity(run)
            translated = translate(schema1_settings(run))
            if {k: v for k, v in translated.items() if k not in schema.EXECUTION_SETTINGS} != identity["settings"]:
                raise ValueError(f"{spec} {variant.name} seed {seed}: translating schema 1 misses the identity")
            if os.path.isdir(old) and not os.path.exists(new):
                self.changes.append(f"{old} -> {os.path.basename(new)}")
                if not self.check:
                    os.rename(old, new)
            present = os.path.isdir(new) or (self.check and os.path.isdir(old))
            if present and not os.path.exists(os.path.join(new, "identity.json")):
                self.write_json(os.path.join(new, "identity.json"), identity, indent=1, sort_keys=True)

    def steps(self, root: str) -> None:
        for path in sorted(glob.glob(os.path.join(root, "**", "steps.jsonl"), recursive=True)):
            with open(path, encoding="utf-8") as f:
                lines = [json.loads(line) for line in f if line.strip()]
            new = [translate_step(line) for line in lines]
            if new != lines:
                self.changes.append(path)
                if not self.check:
                    with open(path + ".tmp", "w", encoding="utf-8") as f:
                        f.writelines(json.dumps(line) + "\n" for line in new)
                    os.replace(path + ".tmp", path)

    def caches(self, root: str) -> None:
        for path in sorted(glob.glob(os.path.join(root, "**", "*.json"), recursive=True)):
            with open(path, encoding="utf-8") as f:
                try:
                    stored = json.load(f)
                except json.JSONDecodeError:
                    continue
            if isinstance(stored, dict) and "key" in stored and "value" in stored:
                key = translate_key(stored["key"])
                if key != stored["key"]:
                    self.write_json(path, {**stored, "key": key})
            elif os.path.basename(path) == "shared.json" and "sft_settings" in stored:
                settings = translate(stored["sft_settings"])
                if settings != stored["sft_settings"]:
                    self.write_json(path, {**stored, "sft_settings": settings}, indent=1)

    def checkpoint_records(self, root: str) -> None:
        for path in sorted(glob.glob(os.path.join(root, "**", "record", "metadata"), recursive=True)):
            with open(path, encoding="utf-8") as f:
                record = json.load(f)
            if not isinstance(record.get("settings"), dict):
                continue
            settings = translate(record["settings"])
            if settings == record["settings"]:
                continue
            self.write_json(path, {**record, "settings": settings})
            step_dir = os.path.dirname(os.path.dirname(path))
            checksums_path = os.path.join(step_dir, "checksums.json")
            if os.path.exists(checksums_path) and not self.check:
                with open(checksums_path, encoding="utf-8") as f:
                    checksums = json.load(f)
                with open(path, "rb") as f:
                    checksums[os.path.relpath(path, step_dir)] = hashlib.sha256(f.read()).hexdigest()
                self.write_json(checksums_path, checksums)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grid", action="append", help="a comparison config (file:mode); default: the committed "
                        "studies' grids")
    parser.add_argument("--root", help="the directory to migrate (default: the grid's compare.results, and studies/)")
    parser.add_argument("--check", action="store_true", help="list what would change; write nothing")
    args = parser.parse_args()
    os.chdir(REPO)
    migration = Migration(args.check)
    for spec in args.grid or GRIDS:
        migration.grid(spec, args.root)
    for root in [args.root] if args.root else ["studies"]:
        migration.steps(root)
        migration.caches(root)
        migration.checkpoint_records(root)
    for change in migration.changes:
        print(("would change " if args.check else "changed ") + change)
    print(json.dumps({"changes": len(migration.changes), "check": args.check}))


if __name__ == "__main__":
    main()
