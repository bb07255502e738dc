"""A stored run carries its identity (`identity.json`, `results_store.write_identity`) and is read back only under
it: another run's settings, another identity schema, no identity file or a broken one are refused by name."""

import json

import pytest

from trace_jax.compare import results_store
from trace_jax.config.schema import ConfigError

IDENTITY = {"schema": 2, "settings": {"rl.steps": 4, "task.source": "math"}}


def _stored(tmp_path, identity=IDENTITY):
    run = tmp_path / "results" / "runs" / "grpo" / "seed0-abcd1234"
    results_store.write_identity(str(run), identity)
    (run / "summary.json").write_text("{}")
    return run


def test_a_run_is_read_back_under_the_identity_it_carries(tmp_path):
    run = _stored(tmp_path)
    assert json.loads((run / "identity.json").read_text()) == IDENTITY
    target = tmp_path / "work" / "run"
    assert results_store.restore_run(str(tmp_path / "results"), "runs/grpo/seed0-abcd1234", str(target), IDENTITY)
    assert json.loads((target / "identity.json").read_text()) == IDENTITY
    results_store.write_identity(str(target), IDENTITY)  # the same identity again: nothing to refuse


def test_another_runs_identity_is_refused_naming_each_field(tmp_path):
    run = _stored(tmp_path)
    asked = {"schema": 2, "settings": {"rl.steps": 8, "task.source": "math"}}
    with pytest.raises(ConfigError, match=r"rl\.steps: 4 there, 8 now"):
        results_store.restore_run(str(tmp_path / "results"), "runs/grpo/seed0-abcd1234", str(tmp_path / "w"), asked)
    with pytest.raises(ConfigError, match=r"rl\.steps: 4 there, 8 now"):
        results_store.write_identity(str(run), asked)
    with pytest.raises(ConfigError, match="identity schema 1; this code reads 2"):
        results_store.require_identity(str(_stored(tmp_path / "old", {**IDENTITY, "schema": 1})), IDENTITY)


def test_a_run_without_a_readable_identity_is_refused_with_what_to_do(tmp_path):
    run = _stored(tmp_path)
    (run / "identity.json").unlink()
    with pytest.raises(ConfigError, match="no identity.json: run studies/migrations/identity_v2.py"):
        results_store.require_identity(str(run), IDENTITY)
    (run / "identity.json").write_text("{not json")
    with pytest.raises(ConfigError, match="is not JSON"):
        results_store.require_identity(str(run), IDENTITY)
