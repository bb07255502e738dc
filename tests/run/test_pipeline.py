"""The rollout pipeline's bookkeeping (`run/pipeline.py`): which params version samples each step, what a
checkpoint keeps, steps run in order by one worker, a failure named with its step, NaN params never sent."""

import threading

import jax.numpy as jnp
import numpy as np
import pytest

from trace_jax.allocation.base import AllocatorState
from trace_jax.rl.learner import NonFiniteError
from trace_jax.run.pipeline import Pipeline, SamplerError, sampling_version, snapshot_state


def test_each_step_is_sampled_by_the_params_s_learner_steps_before_its_update():
    assert [sampling_version(u, 0) for u in range(1, 6)] == [0, 1, 2, 3, 4]
    assert [sampling_version(u, 1) for u in range(1, 6)] == [0, 0, 1, 2, 3]
    assert [sampling_version(u, 2) for u in range(1, 6)] == [0, 0, 0, 1, 2]


def _recording_pipeline(staleness, fail_at=None):
    calls, threads = [], set()

    def roll_out(step, pool, params, version):
        threads.add(threading.get_ident())
        if step == fail_at:
            raise KeyError("a tool's own error")
        calls.append((step, pool, float(params["w"]), version))
        return step

    return Pipeline(roll_out, staleness), calls, threads


def test_steps_run_in_order_on_one_worker_with_copies_of_their_params_versions():
    pipeline, calls, threads = _recording_pipeline(1)
    params = {"w": jnp.float32(0.0)}
    pipeline.keep(0, params)
    pipeline.submit(1, "pool1")
    for step in range(1, 5):  # the loop of `train.Steps`: keep the learner's params, submit step + s, train step
        pipeline.keep(step - 1, params)
        pipeline.submit(step + 1, f"pool{step + 1}")
        assert pipeline.result(step) == step
        pipeline.prune(sampling_version(step + 1, 1))
        params = {"w": params["w"] + 1.0}  # the learner's update (a new array: the kept copy is unchanged)
        assert set(pipeline.versions_after(step)) == {step - 1}
    assert pipeline.result(5) == 5
    pipeline.close()
    assert [(c[0], c[3]) for c in calls] == [(1, 0), (2, 0), (3, 1), (4, 2), (5, 3)]
    assert [c[2] for c in calls] == [0.0, 0.0, 1.0, 2.0, 3.0]  # version v's params are the learner's after step v
    assert [c[1] for c in calls] == ["pool1", "pool2", "pool3", "pool4", "pool5"]
    assert len(threads) == 1


def test_a_failed_step_is_raised_on_the_main_thread_naming_the_step():
    pipeline, _, _ = _recording_pipeline(1, fail_at=2)
    pipeline.keep(0, {"w": jnp.float32(0.0)})
    pipeline.submit(1, None)
    pipeline.submit(2, None)
    assert pipeline.result(1) == 1
    with pytest.raises(SamplerError, match=r"RL step 2 failed in the sampler worker: KeyError: .a tool's own error"):
        pipeline.result(2)
    pipeline.close()


def test_params_that_are_not_finite_are_never_sent_to_the_sampler():
    pipeline, _, _ = _recording_pipeline(1)
    with pytest.raises(NonFiniteError, match=r"learner step 3, to be sent to the sampler: NaN/Inf in \[\"\['b'\]\"\]"):
        pipeline.keep(3, {"a": jnp.ones(2), "b": jnp.array([1.0, jnp.nan])})
    assert pipeline.versions == {}
    pipeline.close()


def test_a_checkpoint_keeps_the_versions_the_next_s_steps_sample_with():
    pipeline, _, _ = _recording_pipeline(2)
    for v in range(6):
        pipeline.keep(v, {"w": jnp.float32(v)})
    assert list(pipeline.versions_after(5)) == [3, 4]  # steps 6, 7 sample with the params of learner steps 3, 4
    assert list(pipeline.versions_after(1)) == [0]  # steps 2, 3: both the start's params
    pipeline.prune(3)
    assert sorted(pipeline.versions) == [3, 4, 5]
    pipeline.close()


def test_an_allocator_snapshot_does_not_follow_later_steps():
    host = {"rng": {"state": [1, 2]}, "posteriors": [[0.5]]}
    arrays = {"predictor": {"w": np.zeros(2)}}
    snap = snapshot_state(AllocatorState(arrays=arrays, host=host))
    host["posteriors"][0][0] = 0.9
    arrays["predictor"]["w"][0] = 7.0
    assert snap.host["posteriors"] == [[0.5]] and snap.arrays["predictor"]["w"][0] == 0.0
