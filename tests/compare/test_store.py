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
