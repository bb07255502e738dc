"""Each study grid's committed report is re-made byte for byte from its committed runs: every run read back
through the results store (its identity checked), audited, and reported as `compare.py --report_only` reports
it, from the SFT start's held-out result stored in `shared.json` (the report-only launcher evaluates the SFT
start again, minutes per grid; on this machine it gave the stored figures exactly, 2026-12-07). Only the
report's wall time of this invocation and the results directory's absolute path are set aside. About 4 s a
grid on a 2-core CPU (building the tokenizer and source, reading the step records)."""

import dataclasses
import json
import os
import re
import shutil
import time

import pytest

from trace_jax.compare import grid, grid_runs, report_files
from trace_jax.compare.shared_start import SharedStart
from trace_jax.config.files import from_config_dict, load_config_file
from trace_jax.run import experiment

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPORTED = ["studies/decisive/config.py:confirm",
            *(f"studies/powered/config.py:task={t}" for t in ("math", "multihop", "funcall")), "studies/staleness/config.py"]


def _normalized(path: str) -> str:
    """The file's text with the invocation's wall time and (in the JSON) the results directory set aside."""
    with open(path, encoding="utf-8") as f:
        text = re.sub(r"this invocation: \d+ s", "this invocation: N s", f.read())
    if path.endswith(".json"):
        report = json.loads(text)
        report["compare"]["results"] = "<results>"
        return json.dumps(report, indent=1)
    return text


@pytest.mark.parametrize("spec", REPORTED)
def test_the_committed_report_is_remade_byte_for_byte_from_the_committed_runs(spec, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    compare, base = grid.split_config(load_config_file(spec))
    committed = os.path.join(REPO, compare.results)
    copy = str(tmp_path / "results")  # the report is kept in compare.results: a copy, so the committed files stay
    shutil.copytree(committed, copy, ignore=shutil.ignore_patterns("*.png"))
    compare = dataclasses.replace(compare, results=copy)
    runs = grid.validate(grid.framed(base, compare, compare.tokens), compare)
    base_run = from_config_dict(base)
    with open(os.path.join(copy, "shared.json"), encoding="utf-8") as f:
        after_sft = json.load(f)["after_sft"]
    workdir = str(tmp_path / "work")
    shutil.copytree(os.path.join(copy, "shared"), os.path.join(workdir, "shared"))
    results = grid_runs.run_grid(runs, workdir, compare, after_sft, report_only=True)
    assert not results.failed and len(results.records) == len(runs)
    setup = experiment.build(base_run, os.path.join(workdir, "shared"))
    report_files.write(workdir, compare, base_run, SharedStart(setup, None, after_sft, None), results, runs,
                       time.time())
    suffix = grid.suffix(compare)
    for name in (f"results{suffix}.json", f"results{suffix}.md"):
        assert _normalized(os.path.join(workdir, name)) == _normalized(os.path.join(committed, name)), \
            f"{spec}: {name} differs from the committed one"
