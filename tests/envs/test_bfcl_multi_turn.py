"""BFCL v4 multi-turn on the release's own files (bfcl_eval, installed --no-deps as the README says): every
subset loads; ground-truth paths are valid and altered ones fail, with the official checker's verdicts;
calls run as data (no eval); bad files and calls are named."""

import copy
import json
import os

import pytest

from trace_jax.envs.bfcl import multi_turn as mt
from trace_jax.envs.loaders import DataError

bfcl_eval = pytest.importorskip("bfcl_eval", reason=f"BFCL multi-turn tests need bfcl_eval: {mt.INSTALL}")
DATA = os.path.join(os.path.dirname(bfcl_eval.__file__), "data")
TASKS_PER_SUBSET = 6


@pytest.fixture(scope="module")
def entries():
    return {subset: mt.load_multi_turn(DATA, subset) for subset in mt.SUBSETS}


def _as_steps(gt):
    return [[list(calls)] for calls in gt]


def test_every_subset_loads_with_its_docs_and_held_out_functions(entries):
    assert {s: len(e) for s, e in entries.items()} == {s: 200 for s in mt.SUBSETS}
    miss = entries["multi_turn_miss_func"][0]
    held_out = [d["name"] for docs in miss["missed_function"].values() for d in docs]
    assert held_out and not set(held_out) & {d["name"] for d in miss["function"]}
    assert all(len(e["ground_truth"]) == len(e["question"]) for es in entries.values() for e in es)


@pytest.mark.parametrize("subset", mt.SUBSETS)
def test_ground_truth_paths_pass_and_altered_ones_fail_as_the_official_checker_says(entries, subset):
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker
    for i, entry in enumerate(entries[subset][:TASKS_PER_SUBSET]):
        gt = entry["ground_truth"]
        last = max(t for t, calls in enumerate(gt) if calls)
        dropped = _as_steps(gt)
        dropped[last] = [gt[last][:-1]]
        for name, result, valid in (("truth", _as_steps(gt), True), ("per_step", [[[c] for c in t] for t in gt], True),
                                    ("dropped", dropped, False)):
            ours = mt.check(entry, result, gt)
            official = multi_turn_checker(result, gt, dict(entry), subset, f"test_{subset}_{i}_{name}")
            assert ours.valid == official["valid"] == valid, (entry["id"], name, ours, official)
            assert ours.valid or ours.error_type == official["error_type"]


def test_calls_are_data_not_code(entries):
    entry = entries["multi_turn_base"][0]
    backends = mt.Backends(entry["involved_classes"], entry["initial_config"], long_context=False)
    for text, error in (("__import__('os').system('echo pwned')", "expected name(arguments)"),
                        ("print('hi')", "name 'print' is not defined"),
                        ("eval('1+1')", "name 'eval' is not defined"),
                        ("ls(a=open('/etc/passwd').read())", "must be literal values"),
                        ("remove(path='x')", "Function call remove is not allowed"),
                        ("cd(folder='x' * 10)", "must be literal values"),
                        ("mean(numbers=[1e300])", "larger than"),
                        ("ls(" * 40, "nested deeper"),
                        ("cd(folder='" + "a" * mt.MAX_CALL_CHARS + "')", "longer than")):
        result = backends.execute(text)
        assert result.startswith("Error during execution:") and error in result, (text, result)
    assert backends.errors == 9
    assert backends.execute("pwd()") == '{"current_working_directory": "/workspace"}'


def test_a_forked_episode_keeps_its_own_state(entries):
    entry = entries["multi_turn_base"][0]
    a = mt.Backends(entry["involved_classes"], entry["initial_config"], long_context=False)
    b = copy.deepcopy(a)
    a.execute("mkdir(dir_name='only_in_a')")
    assert "only_in_a" in a.execute("ls()") and "only_in_a" not in b.execute("ls()")


def test_bad_files_are_named(tmp_path, entries):
    (tmp_path / "possible_answer").mkdir()
    (tmp_path / "multi_turn_func_doc").symlink_to(os.path.join(DATA, "multi_turn_func_doc"))
    row = {k: v for k, v in entries["multi_turn_base"][0].items() if k not in ("function", "missed_function",
                                                                                  "ground_truth")}
    gt = entries["multi_turn_base"][0]["ground_truth"]

    def write(row, gt):
        (tmp_path / "BFCL_v4_multi_turn_base.json").write_text(json.dumps(row) + "\n")
        (tmp_path / "possible_answer" / "BFCL_v4_multi_turn_base.json").write_text(
            json.dumps({"id": row["id"], "ground_truth": gt}) + "\n")

    write({**row, "involved_classes": ["GorillaFileSystem", "Nuclear"]}, gt)
    with pytest.raises(DataError, match=r"BFCL_v4_multi_turn_base\.json:1: multi_turn_base_0: unknown involved "
                                        r"class\(es\) \['Nuclear'\]"):
        mt.load_multi_turn(str(tmp_path), "multi_turn_base")
    write(row, [["cd(folder=os.getcwd())"]] + gt[1:])
    with pytest.raises(DataError, match=r"possible_answer/BFCL_v4_multi_turn_base\.json:1: multi_turn_base_0 turn 0: "
                                        r"ground-truth call .* literal"):
        mt.load_multi_turn(str(tmp_path), "multi_turn_base")
    write({**row, "initial_config": {**row["initial_config"], "GorillaFileSystem": {"root": {}}}}, gt)
    with pytest.raises(DataError, match=r"multi_turn_base_0: initial_config\.GorillaFileSystem\.root must hold one "
                                        r"directory"):
        mt.load_multi_turn(str(tmp_path), "multi_turn_base")
    with pytest.raises(ValueError, match=r"BFCL backend GorillaFileSystem refused its initial_config \(IndexError"):
        mt.Backends(["GorillaFileSystem"], {"GorillaFileSystem": {"root": {}}}, long_context=False)
    write(row, gt[:-1])
    with pytest.raises(DataError, match="one list of calls per turn"):
        mt.load_multi_turn(str(tmp_path), "multi_turn_base")
    with pytest.raises(DataError, match="unknown BFCL multi-turn subset"):
        mt.load_multi_turn(str(tmp_path), "multi_turn_everything")
    with pytest.raises(ImportError, match="pip install --no-deps bfcl-eval"):
        mt.bfcl_eval_module("bfcl_eval_not_there")
    with pytest.raises(ValueError, match="unknown BFCL backend class"):
        mt.Backends(["Nuclear"], {}, long_context=False)


# The RL environment over these backends (trace_jax/envs/bfcl/multi_turn_source.py).

@pytest.fixture(scope="module")
def source():
    from trace_jax.envs.bfcl.multi_turn_source import BFCLMultiTurnTasks
    return BFCLMultiTurnTasks()


@pytest.mark.parametrize("action_format", ["react", "hermes"])
def test_the_ground_truth_oracle_succeeds_on_every_subset(source, action_format):
    from trace_jax.envs.formats import FORMATS
    from trace_jax.envs.oracle import run_episode
    env = source.make_env()
    env.action_format = FORMATS[action_format]
    tasks = source.tasks("train") + source.tasks("test")
    assert len(tasks) == 800 and abs(len(source.tasks("test")) / 800 - 0.2) < 0.05
    for subset in mt.SUBSETS:
        chosen = [t for t in tasks if t.data["entry"]["id"].rsplit("_", 1)[0] == subset][:TASKS_PER_SUBSET]
        for task in chosen:
            trajectory = run_episode(env, task, source.oracle())
            assert trajectory.success, (task.id, trajectory.turns[-1])
            assert len(trajectory.user_turns) == len(task.data["entry"]["question"]) - 1


def test_requests_follow_as_user_turns_and_a_skipped_request_fails(source):
    env = source.make_env()
    task = next(t for t in source.tasks("train") if len(t.data["entry"]["question"]) > 2 and
                all(t.data["entry"]["ground_truth"]))
    episode = env.start(task)
    first = episode.step("Action: finish[done]")  # the first request answered without its calls
    assert first.user_turn and not first.done
    assert first.observation == "\n".join(m["content"] for m in task.data["entry"]["question"][1] if m["role"] == "user")
    forked = episode.fork()
    result = None
    while result is None or not result.done:
        result = episode.step("Action: finish[done]")
    assert result.done and not result.success and result.info["error_type"] == "multi_turn:empty_turn_model_response"
    assert forked.memory["bfcl"].request == 1 and not forked.done  # the fork kept its own place


def test_a_conversation_cut_by_the_turn_limit_scores_zero_and_bad_calls_are_error_observations(source):
    from trace_jax.envs.protocol import Limits
    from trace_jax.envs.bfcl.multi_turn_source import BFCLMultiTurnEnv
    env = BFCLMultiTurnEnv(Limits(max_turns=2))
    task = next(t for t in source.tasks("train") if len(t.data["entry"]["question"]) > 2)
    episode = env.start(task)
    bad = episode.step('Action: call[{"name": "__import__", "arguments": {"name": "os"}}]')
    assert bad.observation.startswith("Error: name '__import__' is not defined") and bad.info["error"] == "tool_error"
    result = episode.step("Action: finish[done]")
    assert result.done and result.reward == 0.0 and result.info["error_type"] == "multi_turn:force_terminated"


def test_user_turns_render_as_user_messages():
    from transformers import AutoTokenizer

    from trace_jax.envs.render import ChatRenderer, ReactRenderer
    from trace_jax.testing.checkpoints import write_qwen3_style_tokenizer
    import tempfile
    tokenizer = AutoTokenizer.from_pretrained(write_qwen3_style_tokenizer(tempfile.mkdtemp()))
    chat = ChatRenderer.for_format(tokenizer, "hermes")
    assert tokenizer.decode(chat.observation("next request", user_turn=True)) == \
        "<|im_start|>user\nnext request<|im_end|><|im_start|>assistant\n"
    assert "<tool_response>" in tokenizer.decode(chat.observation("result"))
    assert tokenizer.decode(ReactRenderer(tokenizer).observation("next request", user_turn=True)) == \
        "\nUser: next request\n"


@pytest.mark.parametrize("call", [
    "power(10, 100000000)", "power(base=10, exponent=100000000)", "power(base=-7, exponent=20000.5)",
    "logarithm(value=10, base=2, precision=1000000)", "square_root(number=2, precision=100000000)",
    "round_number(number=1.5, decimal_places=10000000)", "add(a=1e300, b=1)", "mean(numbers=[1, 2e20])",
    mt.BackendCall("power", (), {"base": 10, "exponent": 100000000}),  # as a model's parsed JSON/keyword call
    mt.BackendCall("add", (), {"a": 1e300, "b": 1}),
    mt.BackendCall("logarithm", (), {"value": 10, "base": 2, "precision": 10 ** 7})])
def test_calls_that_would_run_unboundedly_are_refused_before_they_run(call):
    """A call's numbers, precisions and the size of a power are bounded before the backend runs it, for
    the model's parsed calls as for text; the refusal is an execution error result, in bounded time."""
    import time

    backends = mt.Backends(["MathAPI"], {}, long_context=False)
    t0 = time.perf_counter()
    result = backends.execute(call)
    assert result.startswith("Error during execution:") and time.perf_counter() - t0 < 1.0, result
    assert backends.execute("power(base=2, exponent=10)") == '{"result": 1024}'  # ordinary calls unchanged


def test_math_calls_leave_the_process_precision_as_they_found_it():
    import decimal

    import mpmath

    backends = mt.Backends(["MathAPI"], {}, long_context=False)
    before = (decimal.getcontext().prec, mpmath.mp.dps)
    assert "1.41421" in backends.execute("square_root(number=2, precision=30)")
    assert "result" in backends.execute("logarithm(value=100, base=10, precision=50)")
    assert (decimal.getcontext().prec, mpmath.mp.dps) == before


def test_a_model_call_with_a_huge_json_integer_is_an_error_observation(source):
    from trace_jax.envs.protocol import Limits
    from trace_jax.envs.bfcl.multi_turn_source import BFCLMultiTurnEnv
    env = BFCLMultiTurnEnv(Limits(max_turns=4))
    episode = env.start(source.tasks("train")[0])
    result = episode.step('Action: call[{"name": "add", "arguments": {"a": ' + "9" * 5000 + ', "b": 1}}]')
    assert result.observation.startswith("Error: bad JSON") and result.info["error"] == "tool_error", result
