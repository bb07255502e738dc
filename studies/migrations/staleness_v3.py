"""Moves stored results from identity schema 2 to 3 (run once on 2026-12-07; kept to migrate a results directory or
workdir made before then, and as the record of what changed).

Schema 3 adds the config field `rl.max_staleness` (issue 56, `run/pipeline.py`); every run stored before it ran
the synchronous loop, `rl.max_staleness` = 0. Step records gained `policy_lag` (0 for the same reason) and the
learner's `is_weight_mean` / `is_truncated_share` (null: no stored run trained with the decoupled loss). This
script, under each root it is given:

1. every run directory's `identity.json` of schema 2 gets `rl.max_staleness: 0` and schema 3, and the directory
   is renamed to the hash of its new identity (`seed<k>-<hash>`, what `grid_runs.run_dir` asks for now);
2. every `steps.jsonl` line gets the new fields (and must read back as a current `StepRecord`);
3. every flat settings dict with `rl.*` fields (cache keys `{"key": ..., "value": ...}`, checkpoint records, whose
   `checksums.json` entry is recomputed) gets `rl.max_staleness: 0`;
4. every other text file of the repository naming a renamed directory (docs, scripts) names the new one.

Idempotent: a tree already at schema 3 is left as it is. `--check` lists what would change and writes nothing.

  python studies/migrations/staleness_v3.py --check    # the committed tree: {"changes": 0, ...}
  python studies/migrations/staleness_v3.py            # everything under studies/ (and the repository's mentions)
  python studies/migrations/staleness_v3.py --root /tmp/my_workdir
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from trace_jax.run.records import StepRecord  # noqa: E402

ADDED = {"rl.max_staleness": 0}
STEP_FIELDS = {"policy_lag": 0}
LEARNER_FIELDS = {"is_weight_mean": None, "is_truncated_share": None}


def add_fields(settings: dict) -> dict:
    """A flat settings dict with the added fields (only where it has the section: the SFT's settings have no rl)."""
    sections = {k.split(".")[0] for k in settings if "." in k}
    return {**settings, **{k: v for k, v in ADDED.items() if k.split(".")[0] in sections and k not in settings}}


def digest(identity: dict) -> str:
    """`grid_runs.run_dir`'s hash of an identity."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:8]


def translate_step(line: dict) -> dict:
    out = {**line, **{k: v for k, v in STEP_FIELDS.items() if k not in line}}
    if out.get("learner") is not None:
        out["learner"] = {**out["learner"], **{k: v for k, v in LEARNER_FIELDS.items() if k not in out["learner"]}}
    StepRecord.from_json(out)  # reads back, or raises naming what is missing
    return out


def translate_key(value):
    if isinstance(value, dict):
        flat = value and all(k == "seed" or "." in k for k in value) and any("." in k for k in value)
        return add_fields(value) if flat else {k: translate_key(v) for k, v in value.items()}
    return value


class Migration:
    def __init__(self, check: bool):
        self.check, self.changes, self.renamed = check, [], {}

    def write_json(self, path: str, value, **dump) -> None:
        self.changes.append(path)
        if not self.check:
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                json.dump(value, f, **dump)
            os.replace(path + ".tmp", path)

    def identities(self, root: str) -> None:
        for path in sorted(glob.glob(os.path.join(root, "**", "identity.json"), recursive=True)):
            with open(path, encoding="utf-8") as f:
                identity = json.load(f)
            if identity.get("schema") != 2:
                continue
            new = {"schema": 3, "settings": add_fields(identity["settings"])}
            directory = os.path.dirname(path)
            name = os.path.basename(directory)
            prefix, old_hash = name.rsplit("-", 1)
            if old_hash != digest(identity):
                raise ValueError(f"{directory}: its name's hash is not its identity's ({digest(identity)})")
            target = os.path.join(os.path.dirname(directory), f"{prefix}-{digest(new)}")
            self.write_json(path, new, indent=1, sort_keys=True)
            self.changes.append(f"{directory} -> {os.path.basename(target)}")
            self.renamed[name] = os.path.basename(target)
            if not self.check:
                os.rename(directory, target)

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
                except (json.JSONDecodeError, UnicodeDecodeError):
                    continue
            if isinstance(stored, dict) and "key" in stored and "value" in stored:
                key = translate_key(stored["key"])
                if key != stored["key"]:
                    self.write_json(path, {**stored, "key": key})

    def checkpoint_records(self, root: str) -> None:
        for path in sorted(glob.glob(os.path.join(root, "**", "record", "metadata"), recursive=True)):
            with open(path, encoding="utf-8") as f:
                record = json.load(f)
            if not isinstance(record.get("settings"), dict):
                continue
            settings = add_fields(record["settings"])
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

    def mentions(self) -> None:
        """The repository's tracked text files outside run directories that name a renamed directory."""
        if not self.renamed:
            return
        files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
        for rel in files:
            if "/runs/" in rel or not rel.endswith((".md", ".py", ".json", ".txt")):
                continue
            path = os.path.join(REPO, rel)
            if not os.path.exists(path):
                continue
            with open(path, encoding="utf-8") as f:
                text = f.read()
            new = text
            for old, renamed in self.renamed.items():
                new = new.replace(old, renamed)
            if new != text:
                self.changes.append(path)
                if not self.check:
                    with open(path, "w", encoding="utf-8") as f:
                        f.write(new)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", action="append", help="a directory to migrate (default: studies/)")
    parser.add_argument("--check", action="store_true", help="list what would change; write nothing")
    args = parser.parse_args()
    os.chdir(REPO)
    migration = Migration(args.check)
    for root in args.root or ["studies"]:
        migration.identities(root)
        migration.steps(root)
        migration.caches(root)
        migration.checkpoint_records(root)
    if not args.root:
        migration.mentions()
    for change in migration.changes:
        print(("would change " if args.check else "changed ") + change)
    print(json.dumps({"changes": len(migration.changes), "check": args.check}))


if __name__ == "__main__":
    main()
