"""Dataset sources from tiny files in every real format: they load, split, run their oracle to success in
their environment, are named before compute when a file is missing, and train end to end."""

import concurrent.futures
import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from configs import quickstart
from trace_jax.config.files import from_config_dict
from trace_jax.config.schema import ConfigError
from trace_jax.envs.oracle import run_episode
from trace_jax.envs.protocol import Task
from trace_jax.envs.sources import build
from trace_jax.run import train
from trace_jax.run.records import read_steps

FILE_SOURCES = ("bfcl", "bfcl_multi_turn", "deepscaler", "gsm8k", "hotpotqa", "search_r1")  # task sources reading files

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAMES = ["Ada", "Bo", "Cyra", "Dev", "Esme", "Finn", "Gia", "Hugo", "Iris", "Jonas", "Kai", "Lena"]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _files(tmp_path):
    """{source: task fields} over tiny files in the formats the sources read."""
    out = {}
    gsm = [{"question": f"{n} has {i + 2} apples and buys {i + 3} more. How many apples does {n} have?",
            "answer": f"{n} has {i + 2} + {i + 3} = <<{i + 2}+{i + 3}={2 * i + 5}>>{2 * i + 5} apples.\n#### {2 * i + 5}"}
           for i, n in enumerate(NAMES)]
    verl = [{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": r["question"] + " Let's think."}],
             "reward_model": {"style": "rule", "ground_truth": r["answer"].rsplit("#### ", 1)[1]},
             "extra_info": {"question": r["question"], "answer": r["answer"]}} for r in gsm[:4]]
    pq.write_table(pa.Table.from_pylist(verl), tmp_path / "gsm8k_test.parquet")
    out["gsm8k"] = {"train_path": _jsonl(tmp_path / "gsm8k_train.jsonl", gsm[4:]),
                    "test_path": str(tmp_path / "gsm8k_test.parquet")}
    hotpot = [{"_id": f"h{i}", "question": f"Which city was {n}'s mentor born in?", "answer": f"City{i}",
               "type": "bridge", "level": "medium", "supporting_facts": [[f"{n}", 0], [f"Mentor{i}", 0]],
               "context": [[f"{n}", [f"{n} was trained by Mentor{i}."]], [f"Mentor{i}", [f"Mentor{i} was born in City{i}."]]]}
              for i, n in enumerate(NAMES)]
    (tmp_path / "hotpot_train.json").write_text(json.dumps(hotpot))
    out["hotpotqa"] = {"train_path": str(tmp_path / "hotpot_train.json")}
    corpus = _jsonl(tmp_path / "wiki.jsonl", [{"id": str(i), "contents": f'"{n}"\n{n} founded Company{i} in {1900 + i}.'}
                                              for i, n in enumerate(NAMES)])
    flash = [{"id": f"train_{i}", "question": f"which company did {n} found?", "golden_answers": [f"Company{i}"]}
             for i, n in enumerate(NAMES[:8])]
    search_verl = [{"data_source": "nq", "prompt": [{"role": "user", "content": f"Answer the given question. Question: "
                                                    f"which company did {n} found?\n"}],
                    "reward_model": {"style": "rule", "ground_truth": {"target": [f"Company{i + 8}"]}},
                    "extra_info": {"split": "test", "index": i}} for i, n in enumerate(NAMES[8:])]
    pq.write_table(pa.Table.from_pylist(search_verl), tmp_path / "nq_test.parquet")
    out["search_r1"] = {"train_path": _jsonl(tmp_path / "nq_train.jsonl", flash), "corpus_path": corpus,
                        "test_path": str(tmp_path / "nq_test.parquet")}
    bfcl = tmp_path / "bfcl"
    (bfcl / "possible_answer").mkdir(parents=True)
    doc = {"name": "calculate_area", "description": "Area of a rectangle.", "parameters": {"type": "dict", "properties": {
        "width": {"type": "integer"}, "height": {"type": "integer"}, "unit": {"type": "string"}},
        "required": ["width", "height"]}}
    _jsonl(bfcl / "BFCL_v4_simple_python.json", [
        {"id": f"simple_python_{i}", "question": [[{"role": "user", "content": f"Area of a {i + 1} by {i + 2} room?"}]],
         "function": [doc]} for i in range(10)])
    _jsonl(bfcl / "possible_answer" / "BFCL_v4_simple_python.json", [
        {"id": f"simple_python_{i}", "ground_truth": [{"calculate_area": {"width": [i + 1], "height": [i + 2],
                                                                           "unit": ["", "m"]}}]} for i in range(10)])
    _jsonl(bfcl / "BFCL_v4_irrelevance.json", [
        {"id": f"irrelevance_{i}", "question": [[{"role": "user", "content": f"Who won the {1990 + i} cup?"}]],
         "function": [doc]} for i in range(4)])
    out["bfcl"] = {"train_path": str(bfcl), "categories": "simple_python,irrelevance"}
    out["bfcl_multi_turn"] = {"categories": "multi_turn_miss_param"}  # the installed bfcl_eval's own files
    problems = [{"problem": f"What is ${i + 1}/{i + 3}$ plus $1/2$?", "answer": f"\\frac{{{3 * i + 5}}}{{{2 * i + 6}}}",
                 "solution": "Add the fractions."} for i in range(8)]
    (tmp_path / "deepscaler.json").write_text(json.dumps(problems))  # DeepScaleR ships one JSON list
    out["deepscaler"] = {"train_path": str(tmp_path / "deepscaler.json"),
                         "test_path": _jsonl(tmp_path / "aime.jsonl", [{"problem": f"Find ${n}^2$.", "answer": n * n}
                                                                        for n in (11, 12, 13, 14)])}
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return _files(tmp_path_factory.mktemp("data"))


@pytest.mark.parametrize("name", FILE_SOURCES)
def test_sources_load_split_and_their_oracles_succeed(files, name):
    if name == "bfcl_multi_turn":
        pytest.importorskip("bfcl_eval", reason="pip install --no-deps bfcl-eval==2026.3.23")
    source = build(name, **files[name])
    every = [t for split in ("train", "validation", "test") for t in source.tasks(split)]
    assert len({t.id for t in every}) == len(every) > 0
    if "test_path" in files[name]:
        assert len(source.tasks("test")) == 4 and all(t.id.startswith("test:") for t in source.tasks("test"))
    env = source.make_env()
    for task in every[:6]:
        trajectory = run_episode(env, task, source.oracle(0.0))
        assert trajectory.success, (task.id, trajectory.turns)


@pytest.mark.parametrize("answer,gold,same", [
    ("0.5", "\\frac{1}{2}", True), ("\\sqrt{12}", "2\\sqrt{3}", True), ("1+x^2", "x^2+1", True),
    ("\\boxed{\\frac{\\pi}{2}}", "\\frac{\\pi}{2}", True), ("\\{2,1\\}", "\\{1,2\\}", True),
    ("3.0", "3", True), ("The answer is 12", "12", True), ("\\text{(A)}", "\\text{(A)}", True),
    ("(4,3)", "(3,4)", False), ("13", "12", False), ("\\frac{1}{3}", "0.34", False), ("x^2-1", "x^2+1", False),
    ("", "7", False), ("\\frac{", "\\frac{1}{2}", False)])
def test_deepscaler_answers_are_judged_by_math_verify(answer, gold, same):
    from trace_jax.envs.tasks.datasets import MathVerifyEnv
    task = Task(id="t", question="q", answers=(gold,))
    reward, _ = MathVerifyEnv().score(task, answer, None)
    assert reward == float(same)
    # the same verdict in a worker thread (`rl.overlap_tools` scores there; math-verify's signal alarm cannot)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        assert pool.submit(MathVerifyEnv().score, task, answer, None).result()[0] == float(same)


def test_an_overlong_answer_is_wrong_without_parsing_in_bounded_time():
    import time

    from trace_jax.envs.tasks.datasets import MAX_VERIFIED_CHARS, math_verified
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        assert not pool.submit(math_verified, "9^{" * MAX_VERIFIED_CHARS + "9" + "}" * MAX_VERIFIED_CHARS, "9").result()
    assert time.perf_counter() - t0 < 5


def test_2wikimultihopqa_rows_load_as_hotpotqa_and_their_oracle_succeeds(tmp_path):
    """2WikiMultiHopQA ships HotpotQA's shape plus `evidences` triples and its own question types, no level."""
    rows = [{"_id": f"w{i}", "type": "compositional", "question": f"Who is the mother of the director of Film{i}?",
             "answer": f"Mother{i}", "evidences": [[f"Film{i}", "director", f"Director{i}"],
                                                   [f"Director{i}", "mother", f"Mother{i}"]],
             "supporting_facts": [[f"Film{i}", 0], [f"Director{i}", 0]],
             "context": [[f"Film{i}", [f"Film{i} is directed by Director{i}."]],
                         [f"Director{i}", [f"Director{i} is the child of Mother{i}."]]]} for i in range(6)]
    (tmp_path / "2wiki_dev.json").write_text(json.dumps(rows))
    source = build("hotpotqa", train_path=str(tmp_path / "2wiki_dev.json"))
    tasks = [t for split in ("train", "validation", "test") for t in source.tasks(split)]
    assert len(tasks) == 6 and {t.data["type"] for t in tasks} == {"compositional"}
    env = source.make_env()
    for task in tasks:
        assert run_episode(env, task, source.oracle(0.0)).success


def test_hotpotqa_scores_exact_match_or_token_f1_at_the_configured_threshold(files, tmp_path):
    from trace_jax.run import experiment
    task = Task(id="t", question="q", answers=("the Eiffel Tower",))
    c = _config("hotpotqa", files["hotpotqa"])
    _, em_only = experiment._world(from_config_dict(c).task)
    c.task.f1_success = 0.3
    _, lenient = experiment._world(from_config_dict(c).task)
    for answer, em, f1, passes_at_0_3 in (("Eiffel Tower", 1.0, 1.0, True), ("the tower in Paris", 0.0, 0.4, True),
                                          ("Paris", 0.0, 0.0, False)):
        reward, info = em_only.score(task, answer, None)
        assert reward == em and info["em"] == em and abs(info["f1"] - f1) < 1e-9
        reward, info = lenient.score(task, answer, None)
        assert reward == float(passes_at_0_3) and info["em"] == em
    with pytest.raises(ConfigError, match=r"'task.f1_success'=0.3 applies to \['hotpotqa', 'multihop', 'search_r1'\], "
                                          "not to task source 'gsm8k'"):
        from_config_dict(_config("gsm8k", files["gsm8k"], **{"task.f1_success": 0.3}))
    with pytest.raises(ConfigError, match="f1_success"):
        from_config_dict(_config("hotpotqa", files["hotpotqa"], **{"task.f1_success": 1.5}))


def test_bfcl_irrelevance_succeeds_only_without_calls(files):
    source = build("bfcl", **files["bfcl"])
    task = next(t for t in source.tasks("train") + source.tasks("test") + source.tasks("validation")
                if not t.data["ground_truth"])
    episode = source.make_env().start(task)
    episode.step('Action: call[{"name": "calculate_area", "arguments": {"width": 1, "height": 2}}]')
    assert not episode.step("Action: finish[done]").success


def _config(name, fields, **overrides):
    c = quickstart.get_config("runlocal")
    c.task.source = name
    for key, value in fields.items():
        c.task[key] = value
    c.sft.steps, c.sft.num_demos, c.sft.batch_size = 4, 8, 4
    c.rl.steps, c.rl.eval_every, c.rl.max_new_tokens = 2, 0, 24
    c.budget.update(rollouts=8, prompts=2, candidates=4)
    c.eval.num_tasks = 4
    c.checkpoint.every = 2
    for dotted, value in overrides.items():
        section, key = dotted.split(".")
        c[section][key] = value
    return c


def test_missing_files_and_misplaced_fields_are_named_before_compute(files, tmp_path):
    with pytest.raises(ConfigError, match=r"'task\.train_path': path '/nope\.jsonl' does not exist"):
        from_config_dict(_config("gsm8k", {"train_path": "/nope.jsonl"}))
    with pytest.raises(ConfigError, match=r"'task\.corpus_path' must name the corpus"):
        from_config_dict(_config("search_r1", {"train_path": files["search_r1"]["train_path"]}))
    with pytest.raises(ConfigError, match=r"'task\.train_path' must name the training file"):
        from_config_dict(_config("hotpotqa", {}))
    with pytest.raises(ConfigError, match=r"'task\.train_path'=.* applies to \['bfcl', .*\], not to task source 'math'"):
        from_config_dict(_config("math", {"train_path": files["gsm8k"]["train_path"]}))
    with pytest.raises(ConfigError, match=r"'task\.categories'='simple_python' applies to \['bfcl', 'bfcl_multi_turn'\]"):
        from_config_dict(_config("gsm8k", {**files["gsm8k"], "categories": "simple_python"}))
    with pytest.raises(ConfigError, match=r"'task\.num_questions'=300 applies to .*not to task source 'gsm8k'"):
        from_config_dict(_config("gsm8k", {**files["gsm8k"], "num_questions": 300}))
    with pytest.raises(ConfigError, match=r"needs a synthetic generator"):
        from_config_dict(_config("gsm8k", files["gsm8k"], **{"eval.split": "separate", "eval.num_tasks": 10}))
    with pytest.raises(ConfigError, match=r"'task\.search_url'='ftp://x': an http\(s\) URL"):
        from_config_dict(_config("hotpotqa", {**files["hotpotqa"], "search_url": "ftp://x"}))
    assert from_config_dict(_config("search_r1", {"train_path": files["search_r1"]["train_path"],
                                                  "search_url": "http://127.0.0.1:8000/retrieve"}))
    with pytest.raises(ConfigError, match=r"known .*'gsm8k'"):
        from_config_dict(_config("gsm8k8k", {}))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hotpotqa", "search_r1", "bfcl"])
def test_two_rl_steps_on_each_dataset(files, name, tmp_path):
    summary = train.train_and_evaluate(_config(name, files[name]), str(tmp_path))
    assert summary["steps"] == 2 and 0.0 <= summary["acc_after_rl"] <= 1.0


@pytest.mark.slow
def test_paper_configs_runlocal_end_to_end(files, tmp_path):
    """DeepScaleR's runlocal trains (math-verify scoring); HotpotQA's runlocal validates with its F1 criterion
    (its path is the hotpotqa two-step run above)."""
    from configs import qwen3_8b_deepscaler, qwen3_14b_hotpotqa
    fields = files["deepscaler"]
    c = qwen3_8b_deepscaler.get_config(f"runlocal,train={fields['train_path']},test={fields['test_path']}")
    c.sft.steps, c.rl.steps, c.eval.num_tasks = 10, 2, 4
    summary = train.train_and_evaluate(c, str(tmp_path))
    assert summary["steps"] == 2 and 0.0 <= summary["acc_after_rl"] <= 1.0
    # the paper configs decode in waves: every fork's prefix was prefilled again, the prompts' at least
    assert all(r.ledger.tokens_reprefilled > 0 for r in read_steps(str(tmp_path)))
    run = from_config_dict(qwen3_14b_hotpotqa.get_config(f"runlocal,train={files['hotpotqa']['train_path']}"))
    assert run.task.f1_success == 0.3 and run.model.preset == "mini" and run.mesh.fsdp == 1
    from configs import qwen3_8b_bfcl_multiturn  # its end-to-end run: test_bfcl_multi_turn_runlocal (slow)
    run = from_config_dict(qwen3_8b_bfcl_multiturn.get_config("runlocal"))
    assert (run.model.preset, run.task.categories, run.task.action_format) == ("mini", "multi_turn_base", "react")
    assert run.sft.max_len >= 19255  # the subset's longest prompt with the bundled tokenizer


@pytest.mark.slow
def test_bfcl_multi_turn_runlocal(tmp_path):
    """BFCL multi-turn's runlocal on this CPU: 8.6k-19k-token prompts through SFT, rollouts on the official
    backends and the learner (query-blocked attention); ~15 min on 2 cores."""
    pytest.importorskip("bfcl_eval")
    from configs import qwen3_8b_bfcl_multiturn
    summary = train.train_and_evaluate(qwen3_8b_bfcl_multiturn.get_config("runlocal"), str(tmp_path))
    assert summary["steps"] == 2 and 0.0 <= summary["acc_after_rl"] <= 1.0
    records = read_steps(str(tmp_path))
    assert all(r.ledger.tokens_prefilled > 8000 for r in records)  # the long prompts were prefilled


@pytest.mark.slow
def test_two_rl_steps_from_the_command_line(files, tmp_path):
    """experiments/train.py on GSM8K files (JSONL train, verl Parquet test), as a user types it."""
    fields = files["gsm8k"]
    command = [sys.executable, os.path.join(REPO, "experiments", "train.py"), "--config",
               os.path.join(REPO, "configs", "quickstart.py") + ":runlocal", "--workdir", str(tmp_path),
               "--config.task.source=gsm8k", f"--config.task.train_path={fields['train_path']}",
               f"--config.task.test_path={fields['test_path']}", "--config.sft.steps=4", "--config.sft.num_demos=8",
               "--config.rl.steps=2", "--config.rl.eval_every=0", "--config.eval.num_tasks=4",
               "--config.budget.rollouts=8", "--config.budget.prompts=2", "--config.budget.candidates=4"]
    out = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["steps"] == 2
