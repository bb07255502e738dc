"""Every committed run of every study grid is still the run its study's config asks for: the config's run
directories (`grid_runs.run_dir`: variant, seed, hash of the run's identity) are exactly the stored ones, less
those stored as failed, each carries that identity (`identity.json`) and every step record reads back, so a
fresh clone reads each of them back and retrains none (issue 54: studies moved out of configs/ and
experiments/results/ into studies/<name>/; stored runs migrated to identity schema 2 by
studies/migrations/identity_v2.py, then to schema 3 by staleness_v3.py, which finds nothing left to change)."""

import glob
import json
import os
import subprocess
import sys

import pytest

from trace_jax.compare import grid, grid_runs, results_store
from trace_jax.config import schema
from trace_jax.config.files import load_config_file
from trace_jax.run.checkpointing import Checkpointer
from trace_jax.run.records import read_steps

GRIDS = ["studies/decisive/config.py:screen", "studies/decisive/config.py:confirm",
         *(f"studies/powered/config.py:task={t}" for t in ("math", "multihop", "funcall")), "studies/staleness/config.py"]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("spec", GRIDS)
def test_every_committed_run_is_one_its_config_asks_for_and_every_asked_run_is_committed(spec, monkeypatch):
    monkeypatch.chdir(REPO)
    compare, base = grid.split_config(load_config_file(spec))
    asked = {os.path.relpath(grid_runs.run_dir(compare.results, v.name, s, run), compare.results)
             for v, s, run in grid.validate(grid.framed(base, compare, compare.tokens), compare)}
    runs = os.path.join(compare.results, "runs")
    stored = {os.path.relpath(os.path.dirname(p), compare.results) for p in glob.glob(f"{runs}/*/*/summary.json")}
    failed = {os.path.relpath(os.path.dirname(p), compare.results) for p in glob.glob(f"{runs}/*/*/audit_failed.json")}
    assert stored, f"no committed runs under {runs}"
    assert stored - asked == set(), f"{spec}: committed runs no config run maps to"
    assert asked - stored - failed == set(), f"{spec}: runs the config asks for that are not committed"


@pytest.mark.parametrize("spec", GRIDS)
def test_every_committed_run_carries_its_identity_and_its_step_records_read_back(spec, monkeypatch):
    monkeypatch.chdir(REPO)
    compare, base = grid.split_config(load_config_file(spec))
    for variant, seed, run in grid.validate(grid.framed(base, compare, compare.tokens), compare):
        directory = grid_runs.run_dir(compare.results, variant.name, seed, run)
        results_store.require_identity(directory, schema.identity(run))
        if os.path.exists(os.path.join(directory, "summary.json")):
            with open(os.path.join(directory, "summary.json"), encoding="utf-8") as f:
                assert len(read_steps(directory)) == json.load(f)["steps"] == run.rl.steps


def test_the_identity_migration_has_nothing_left_to_change_and_stored_sft_records_match_their_settings():
    out = subprocess.run([sys.executable, os.path.join(REPO, "studies/migrations/staleness_v3.py"), "--check"],
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.splitlines()[-1]) == {"changes": 0, "check": True}, out.stdout
    for spec in GRIDS:
        compare, base = grid.split_config(load_config_file(os.path.join(REPO, spec)))
        sft = Checkpointer(os.path.join(REPO, compare.results, "shared", "sft"))
        step = sft.latest_step()
        sft.verify(step)  # the migrated record still matches its checksums, where the step has them
        run = grid.validate(grid.framed(base, compare, compare.tokens), compare)[0][2]
        assert sft.read_record(step)["settings"] == schema.settings(run, schema.SFT_SETTINGS), spec
