"""A stored result is read back only under the settings it was computed under."""

from trace_jax.compare.store import cached


def test_a_stored_result_is_reused_only_under_the_settings_it_ran_under(tmp_path):
    path, calls = str(tmp_path / "after_sft.json"), []

    def compute(value):
        return lambda: calls.append(value) or {"accuracy": value}

    assert cached(path, {"num_tasks": 60}, compute(0.5)) == {"accuracy": 0.5}
    assert cached(path, {"num_tasks": 60}, compute(0.9)) == {"accuracy": 0.5}  # read back
    assert cached(path, {"num_tasks": 123}, compute(0.4)) == {"accuracy": 0.4}  # other settings: redone
    assert cached(path, {"num_tasks": 123, "seeds": (0, 1)}, compute(0.3)) == {"accuracy": 0.3}
    assert cached(path, {"num_tasks": 123, "seeds": (0, 1)}, compute(0.2)) == {"accuracy": 0.3}  # tuple key
    assert calls == [0.5, 0.4, 0.3]


def test_settings_the_value_does_not_depend_on_are_ignored_when_comparing(tmp_path):
    """A frozen-policy study stored before an evaluation field was added is still read back."""
    from trace_jax.compare.mechanism import _study_settings

    path = str(tmp_path / "grpo.json")
    old = {"steps": 50, "run": {"allocator.name": "grpo", "eval.num_tasks": 200}}
    new = {"steps": 50, "run": {"allocator.name": "grpo", "eval.num_tasks": 200, "eval.sample_k": 0}}
    assert cached(path, old, lambda: 1, relevant=_study_settings) == 1
    assert cached(path, new, lambda: 2, relevant=_study_settings) == 1
    other = {"steps": 50, "run": {"allocator.name": "trace", "eval.num_tasks": 200}}
    assert cached(path, other, lambda: 3, relevant=_study_settings) == 3
