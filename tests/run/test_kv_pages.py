"""A run's rollouts on KV pages (`rl.kv_layout="paged"`, the default on one device) against the same run on the
dense cache: the same step records' rollouts and tokens and the same held-out accuracy, and every page the run
took is free once it has finished (no step or evaluation leaves rows behind)."""

import gc

import pytest

from tests.run.test_updates_and_sampled_curves import _config
from trace_jax.run import experiment, train
from trace_jax.run.records import read_steps
from trace_jax.sampling.paged import PagePool


@pytest.mark.slow
def test_a_run_on_pages_is_the_run_on_the_dense_cache_and_gives_every_page_back(tmp_path, monkeypatch):
    pools = []

    class Recorded(PagePool):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            pools.append(self)

    monkeypatch.setattr(experiment, "PagePool", Recorded)
    changes = {"eval.sample_every": 0, "learner.mini_batches": 1, "learner.epochs": 1}
    paged = train.train_and_evaluate(_config(**changes), str(tmp_path / "paged"))
    dense = train.train_and_evaluate(_config(**changes, **{"rl.kv_layout": "dense"}), str(tmp_path / "dense"))
    assert len(pools) == 1, "the dense run built no pool; the paged run one, kept for all its steps"
    gc.collect()
    assert pools[0].book.held == 0 and (pools[0].book.refs == 0).all() and pools[0].book.num_pages >= 256
    assert paged["acc_after_rl"] == dense["acc_after_rl"] and paged["acc_after_sft"] == dense["acc_after_sft"]
    for got, want in zip(read_steps(str(tmp_path / "paged")), read_steps(str(tmp_path / "dense")), strict=True):
        assert got.ledger == want.ledger
