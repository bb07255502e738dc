"""Every committed run of every study grid is still the run its study's config asks for: the config's run
directories (`grid_runs.run_dir`: variant, seed, hash of the run's identity) are exactly the stored ones, less
those stored as failed, so a fresh clone reads each of them back and retrains none (issue 54: studies moved
out of configs/ and experiments/results/ into studies/<name>/)."""

import glob
import os

import pytest

from trace_jax.compare import grid, grid_runs
from trace_jax.config.files import load_config_file

GRIDS = ["studies/decisive/config.py:screen", "studies/decisive/config.py:confirm",
         *(f"studies/powered/config.py:task={t}" for t in ("math", "multihop", "funcall"))]
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
