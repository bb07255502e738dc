"""The benchmarks' bad input: flags out of range are refused before compute, and a peer that cannot run is
reported as unavailable with its reason (the benchmark still prints its JSON)."""

import os
import subprocess
import sys

import pytest

from tests import experiment_scripts

pytestmark = pytest.mark.slow  # benchmark scripts in subprocesses: `python -m pytest -m slow`

REPO = os.path.join(os.path.dirname(__file__), "..", "..")


@pytest.mark.parametrize("script,flags,message", [
    ("studies/benchmarks/bench_continuous.py", ["--chunk", "0"], "--chunk must be >= 1, got 0"),
    ("studies/benchmarks/bench_continuous.py", ["--chunk", "300"], "--chunk=300 exceeds --max_new_tokens=256"),
    ("studies/benchmarks/bench_sampler.py", ["--repeats", "0"], "--repeats must be >= 1, got 0"),
    ("studies/benchmarks/bench_sampler.py", ["--preset", "huge"], "--preset 'huge' is not one of"),
    ("studies/benchmarks/bench_sampler.py", ["--sections", "az"], "--sections 'az': letters among a, b, c, d, e, f"),
    ("studies/benchmarks/bench_paged.py", ["--repeats", "0"], "--repeats must be >= 1, got 0"),
    ("studies/benchmarks/bench_paged.py", ["--page_size", "0"], "--page_size must be >= 1, got 0"),
    ("studies/benchmarks/bench_paged.py", ["--sections", "ae"], "--sections 'ae': letters among a, b, c, d"),
    ("studies/benchmarks/bench_scheduler.py", ["--steps", "2", "--warm", "2"], "need steps >= 1 and 0 <= warm < steps"),
    ("studies/benchmarks/bench_async.py", ["--repeats", "0"], "--repeats and --steps must be >= 1, got 0, 8"),
    ("studies/benchmarks/bench_scheduler.py", ["--arms", "trace,beam"], "--arms: ['beam'] not among"),
    ("studies/run_cost/bench_run_cost.py", ["--repeats", "0"], "--repeats must be >= 1"),
    ("studies/run_cost/bench_run_cost.py", ["--subset", "0"], "--subset must be >= 1"),
])
def test_out_of_range_flags_are_refused_before_compute(script, flags, message):
    out = subprocess.run([sys.executable, os.path.join(REPO, script), *flags], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2 and message in out.stderr


def test_a_tunix_peer_that_cannot_run_is_reported_with_its_reason(tmp_path):
    from trace_jax.models import init_params
    from trace_jax.models.presets import get_preset

    bench = experiment_scripts.load("studies/benchmarks/bench_sampler")
    config = get_preset("tiny")
    params = init_params(config, 0)
    peer, reason = bench.start_tunix("", config, params, str(tmp_path))
    assert peer is None and "--tunix_python" in reason
    peer, reason = bench.start_tunix(str(tmp_path / "nope" / "python"), config, params, str(tmp_path))
    assert peer is None and "does not exist" in reason
    peer, reason = bench.start_tunix(sys.executable, config, params, str(tmp_path))  # this env has no tunix
    assert peer is None and "the Tunix peer exited" in reason and "tunix" in reason


def test_the_paged_benchmark_runs_and_its_json_holds_what_it_measured():
    """`bench_paged.py --quick --sections ab`: the paged decode's greedy tokens equal the dense decode's, and a k=8
    fork holds its prefix once (the figures docs/sampler.md quotes come from the full run)."""
    out = subprocess.run([sys.executable, os.path.join(REPO, "studies/benchmarks/bench_paged.py"), "--quick",
                          "--sections", "ab"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    import json
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["mixed_lengths"]["same_greedy_tokens"] is True
    assert summary["fork_memory"]["held_over_minimum"] <= 1.25 < summary["fork_memory"]["dense_over_minimum"]
