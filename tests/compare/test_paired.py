"""Paired statistics: the bootstrap interval covers the truth at its nominal rate on simulated designs,
pairing removes the shared per-task difficulty, and the MDD is the textbook power formula."""

import numpy as np
import pytest

from trace_jax.compare import paired


def _design(rng, seeds, tasks, effect, seed_sd=0.02):
    """Two arms on the same tasks: per-task difficulty shared, per-seed offsets, Bernoulli outcomes."""
    p = rng.uniform(0.1, 0.9, tasks)
    base = np.clip(p[None] + rng.normal(0, seed_sd, (seeds, 1)), 0, 1)
    a = (rng.random((seeds, tasks)) < np.clip(base + effect, 0, 1)).astype(float)
    b = (rng.random((seeds, tasks)) < base).astype(float)
    return a, b


def test_interval_covers_the_true_difference_at_about_its_nominal_rate():
    rng = np.random.default_rng(0)
    covered = 0
    for trial in range(60):
        a, b = _design(rng, seeds=8, tasks=200, effect=0.05)
        r = paired.paired_bootstrap(a, b, samples=400, seed=trial)
        covered += r.ci95[0] <= 0.05 <= r.ci95[1]
    assert covered >= 51  # >= 85% of 60 (nominal 95%; the bootstrap percentile interval runs a little narrow)


def test_pairing_beats_ignoring_the_shared_tasks():
    rng = np.random.default_rng(1)
    p = rng.uniform(0.0, 1.0, 500)
    a = np.tile(p, (4, 1)) + 0.03 + rng.normal(0, 0.02, (4, 500))  # same tasks, tiny noise
    b = np.tile(p, (4, 1))
    r = paired.paired_bootstrap(a, b, samples=500)
    assert r.diff == pytest.approx(0.03, abs=0.005) and r.ci95[0] > 0.02
    unpaired_se = np.sqrt(a.var() / a.size + b.var() / b.size)
    assert r.standard_error < unpaired_se / 5


def test_mdd_is_the_power_formula_and_shrinks_with_the_design():
    assert paired.minimal_detectable_difference(0.01) == pytest.approx((1.959964 + 0.841621) * 0.01, rel=1e-5)
    rng = np.random.default_rng(2)
    small = paired.paired_bootstrap(*_design(rng, 3, 100, 0.0), samples=300)
    large = paired.paired_bootstrap(*_design(rng, 8, 1000, 0.0), samples=300)
    assert large.mdd < small.mdd / 2 and large.to_json()["eval_tasks"] == 1000


def test_mean_over_tasks_adds_variances():
    one = paired.PairedDifference(diff=0.02, ci95=(0, 0.04), standard_error=0.01, mdd=0.028, seeds=8, tasks=1000)
    three = paired.mean_over_arms([one, one, one])
    assert three.diff == pytest.approx(0.02) and three.standard_error == pytest.approx(0.01 / np.sqrt(3))


@pytest.mark.parametrize("a,b,match", [(np.zeros((2, 3)), np.zeros((3, 2)), "one shape"),
                                       (np.zeros(3), np.zeros(3), "seeds, tasks"),
                                       (np.full((1, 2), np.nan), np.zeros((1, 2)), "finite")])
def test_bad_outcome_arrays_are_refused(a, b, match):
    with pytest.raises(ValueError, match=match):
        paired.paired_bootstrap(a, b)


def test_the_primary_endpoint_script_pools_the_tasks_it_finds(tmp_path):
    """experiments/primary_endpoint.py: per-task paired differences -> their mean; missing tasks named."""
    import json

    from tests import experiment_scripts
    script = experiment_scripts.load("primary_endpoint")
    dirs = []
    for task, diff, se in (("math", 0.04, 0.01), ("funcall", 0.01, 0.02)):
        d = tmp_path / f"powered_{task}"
        d.mkdir()
        (d / "results_tokens.json").write_text(json.dumps({"primary_endpoint": {
            "diff": diff, "ci95": [diff - 0.02, diff + 0.02], "standard_error": se, "mdd": 2.8 * se, "seeds": 8,
            "eval_tasks": 1000, "task": task, "framing": "equal measured tokens"}}))
        dirs.append(str(d))
    dirs.append(str(tmp_path / "powered_multihop"))
    out = script.endpoint(dirs)
    assert set(out["tasks"]) == {"math", "funcall"} and len(out["missing"]) == 1
    assert out["mean"]["diff"] == pytest.approx(0.025)
    assert out["mean"]["standard_error"] == pytest.approx(np.sqrt(0.01 ** 2 + 0.02 ** 2) / 2)
    written = tmp_path / "endpoint.json"
    script.flags.FLAGS([__file__, f"--results={','.join(dirs)}", f"--output={written}"])
    try:
        script.main([])
    finally:
        script.flags.FLAGS.unparse_flags()
    assert json.loads(written.read_text()) == json.loads(json.dumps(out))


def test_the_crossed_bootstrap_matches_a_known_variance_where_tasks_share_their_effect_across_seeds():
    """d[s, t] = seed effect (var S2) + task effect shared by every seed (var T2) + noise (var E2): the mean's
    variance is S2/S + T2/T + E2/(S T). The crossed bootstrap's SE matches it (within 20%, a little low:
    a bootstrap's plug-in variance has the (n - 1)/n factors); resampling tasks independently per seed
    (the old two-level scheme) would see T2/(S T) only, far too small when task effects dominate."""
    rng = np.random.default_rng(3)
    S, T, s2, t2, e2 = 8, 400, 0.01 ** 2, 0.3 ** 2, 0.1 ** 2
    true_se = np.sqrt(s2 / S + t2 / T + e2 / (S * T))
    ses = []
    for trial in range(6):
        d = rng.normal(0, np.sqrt(s2), (S, 1)) + rng.normal(0, np.sqrt(t2), (1, T)) + rng.normal(0, np.sqrt(e2), (S, T))
        ses.append(paired.paired_bootstrap(d, np.zeros_like(d), samples=600, seed=trial).standard_error)
    assert 0.8 * true_se < np.median(ses) < 1.1 * true_se
    nested_se = np.sqrt(s2 / S + (t2 + e2) / (S * T))
    assert nested_se < 0.5 * true_se  # what the nested scheme would have reported


@pytest.mark.parametrize("ci95,mdd,want", [((0.01, 0.03), 0.02, "gain"), ((-0.03, -0.01), 0.02, "loss"),
                                           ((-0.01, 0.015), 0.02, "equivalent"), ((-0.01, 0.03), 0.02, "inconclusive")])
def test_the_decision_names_gain_loss_equivalence_inside_the_mdd_or_inconclusive(ci95, mdd, want):
    d = paired.PairedDifference(diff=sum(ci95) / 2, ci95=ci95, standard_error=mdd / 2.8, mdd=mdd, seeds=8, tasks=1000)
    assert d.decision() == want and d.to_json()["decision"] == want
    assert d.decision(margin=0.001) in (want, "inconclusive")
