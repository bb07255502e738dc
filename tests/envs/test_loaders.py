"""Real-format loaders on small files written here in the real formats; bad rows name file and line."""

import json

import pytest

from trace_jax.envs.bfcl.single_turn import bfcl_check, load_bfcl
from trace_jax.envs.loaders import (DataError, load_corpus, load_gsm8k, load_hotpotqa, load_math_problems,
                                    load_search_r1)
from trace_jax.envs.tools.functions import Call, parse_call
from trace_jax.envs.tools.search import SearchIndex

HOTPOT = [{
    "_id": "5a8b57f25542995d1e6f1371", "question": "Were Scott Derrickson and Ed Wood of the same nationality?",
    "answer": "yes", "type": "comparison", "level": "hard",
    "supporting_facts": [["Scott Derrickson", 0], ["Ed Wood", 0]],
    "context": [["Scott Derrickson", ["Scott Derrickson (born July 16, 1966) is an American director."]],
                ["Ed Wood", ["Edward Davis Wood Jr. was an American filmmaker."]]],
}]


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_hotpotqa(tmp_path):
    path = tmp_path / "hotpot_dev_distractor_v1.json"
    path.write_text(json.dumps(HOTPOT))
    tasks, docs = load_hotpotqa(str(path))
    assert tasks[0].answers == ("yes",) and tasks[0].difficulty == 3
    assert {d.title for d in docs} == {"Scott Derrickson", "Ed Wood"}
    assert SearchIndex(docs).retrieve("Ed Wood filmmaker")[0][0] == 1


def test_hotpotqa_bad_record_is_named(tmp_path):
    path = tmp_path / "hotpot.json"
    path.write_text(json.dumps([HOTPOT[0], {k: v for k, v in HOTPOT[0].items() if k != "answer"}]))
    with pytest.raises(DataError, match=r"hotpot\.json: record 2: missing field 'answer'"):
        load_hotpotqa(str(path))


def test_search_r1_jsonl_parquet_and_corpus(tmp_path):
    rows = [{"id": "train_0", "question": "who wrote hamlet?", "golden_answers": ["William Shakespeare",
                                                                                  "Shakespeare"],
             "data_source": "nq"}]
    tasks = load_search_r1(_write_jsonl(tmp_path / "train.jsonl", rows))
    assert tasks[0].answers == ("William Shakespeare", "Shakespeare") and tasks[0].id == "search_r1/train_0"
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    assert load_search_r1(str(tmp_path / "train.parquet"))[0].answers == tasks[0].answers
    corpus = load_corpus(_write_jsonl(tmp_path / "wiki.jsonl", [
        {"id": "0", "contents": '"Hamlet"\nHamlet is a tragedy written by William Shakespeare.'},
        {"id": "1", "contents": '"Macbeth"\nMacbeth is a tragedy.'}]))
    assert corpus[0].title == "Hamlet" and "tragedy" in corpus[0].text


@pytest.mark.parametrize("row,message", [
    ({"golden_answers": ["x"]}, r"train\.jsonl:2: missing field 'question'"),
    ({"question": "q", "golden_answers": "x"}, r"train\.jsonl:2: field 'golden_answers'"),
    ({"question": 7, "golden_answers": ["x"]}, r"train\.jsonl:2: field 'question' should be str"),
])
def test_search_r1_bad_rows_are_named(tmp_path, row, message):
    path = _write_jsonl(tmp_path / "train.jsonl", [{"question": "ok?", "golden_answers": ["y"]}, row])
    with pytest.raises(DataError, match=message):
        load_search_r1(path)


def test_invalid_json_line_and_missing_file_are_named(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"id": "0", "contents": "a"}\n{not json\n')
    with pytest.raises(DataError, match=r"corpus\.jsonl:2: invalid JSON"):
        load_corpus(str(path))
    with pytest.raises(DataError, match="nope.jsonl: no such file"):
        load_gsm8k(str(tmp_path / "nope.jsonl"))


def test_gsm8k(tmp_path):
    path = _write_jsonl(tmp_path / "test.jsonl", [
        {"question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in "
                     "May. How many clips did Natalia sell altogether in April and May?",
         "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips "
                   "altogether in April and May.\n#### 72"},
        {"question": "q2", "answer": "x\n#### 1,234"}])
    tasks = load_gsm8k(path)
    assert tasks[0].answers == ("72",) and tasks[0].difficulty == 2 and tasks[1].answers == ("1234",)


def test_gsm8k_answer_without_final_line_is_named(tmp_path):
    path = _write_jsonl(tmp_path / "test.jsonl", [{"question": "q", "answer": "42"}])
    with pytest.raises(DataError, match=r"test\.jsonl:1: field 'answer' has no '####"):
        load_gsm8k(path)


def _bfcl(tmp_path, truth_id="simple_0"):  # the v3 names of the earlier release
    (tmp_path / "possible_answer").mkdir()
    _write_jsonl(tmp_path / "BFCL_v3_simple.json", [{
        "id": "simple_0",
        "question": [[{"role": "user", "content": "Find the area of a triangle with base 10 and height 5."}]],
        "function": [{"name": "calculate_triangle_area", "description": "Area of a triangle.",
                      "parameters": {"type": "dict", "properties": {
                          "base": {"type": "integer"}, "height": {"type": "integer"},
                          "unit": {"type": "string"}}, "required": ["base", "height"]}}]}])
    _write_jsonl(tmp_path / "possible_answer" / "BFCL_v3_simple.json", [{
        "id": truth_id, "ground_truth": [{"calculate_triangle_area": {"base": [10], "height": [5],
                                                                       "unit": ["units", ""]}}]}])
    return str(tmp_path)


def test_bfcl_load_and_check(tmp_path):
    task = load_bfcl(_bfcl(tmp_path), "simple")[0]
    assert task.question.startswith("Find the area") and task.data["functions"][0]["name"] == \
        "calculate_triangle_area"
    gt = task.data["ground_truth"]
    assert bfcl_check([parse_call("calculate_triangle_area(base=10, height=5)")], gt)
    assert bfcl_check([parse_call('{"name": "calculate_triangle_area", "arguments": '
                                  '{"base": 10, "height": 5, "unit": "units"}}')], gt)
    assert not bfcl_check([Call("calculate_triangle_area", {"base": 10, "height": 6})], gt)
    assert not bfcl_check([], gt)


def test_bfcl_id_without_ground_truth_is_named(tmp_path):
    with pytest.raises(DataError, match=r"BFCL_v3_simple\.json:1: id 'simple_0' has no entry"):
        load_bfcl(_bfcl(tmp_path, truth_id="simple_9"), "simple")


# --- every bad row is named (issue 21): encodings, empty files, mistyped fields, unusable corpora ---


def test_invalid_utf8_is_named_with_its_line(tmp_path):
    path = tmp_path / "test.jsonl"
    path.write_bytes(b'{"question": "q", "answer": "#### 1"}\n{"question": "caf\xe9", "answer": "#### 2"}\n')
    with pytest.raises(DataError, match=r"test\.jsonl:2: not UTF-8 \(byte 0xe9"):
        load_gsm8k(str(path))
    listing = tmp_path / "hotpot.json"
    listing.write_bytes(json.dumps(HOTPOT, indent=1).encode()[:40] + b"\xff" + json.dumps(HOTPOT).encode()[40:])
    with pytest.raises(DataError, match=r"hotpot\.json:\d+: not UTF-8 \(byte 0xff"):
        load_hotpotqa(str(listing))


def test_empty_files_are_refused(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n  \n")
    with pytest.raises(DataError, match=r"empty\.jsonl: the file has no rows"):
        load_search_r1(str(tmp_path / "empty.jsonl"))
    (tmp_path / "empty.json").write_text("[]")
    with pytest.raises(DataError, match=r"empty\.json: the file has no rows"):
        load_hotpotqa(str(tmp_path / "empty.json"))
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"question": pa.array([], pa.string())}), tmp_path / "empty.parquet")
    with pytest.raises(DataError, match=r"empty\.parquet: the file has no rows"):
        load_search_r1(str(tmp_path / "empty.parquet"))


@pytest.mark.parametrize("level", [[], {"a": 1}, "impossible", 3])
def test_hotpotqa_bad_level_is_named(tmp_path, level):
    path = tmp_path / "hotpot.json"
    path.write_text(json.dumps([HOTPOT[0], dict(HOTPOT[0], level=level)]))
    with pytest.raises(DataError, match=r"hotpot\.json: record 2: field 'level' should be one of"):
        load_hotpotqa(str(path))


def _rewrite(path, **fields):
    row = json.loads(path.read_text())
    path.write_text(json.dumps(dict(row, **fields)) + "\n")


@pytest.mark.parametrize("question", [
    [[{"role": "user", "content": ["not", "a", "string"]}]],
    [[{"role": "user", "content": None}]],
    [["just a string"]],
])
def test_bfcl_non_string_content_is_named(tmp_path, question):
    directory = _bfcl(tmp_path)
    _rewrite(tmp_path / "BFCL_v3_simple.json", question=question)
    with pytest.raises(DataError, match=r"BFCL_v3_simple\.json:1: 'question' must be a list of turns"):
        load_bfcl(directory, "simple")


@pytest.mark.parametrize("ground_truth,message", [
    ([{"calculate_triangle_area": {"base": 10, "height": [5]}}], r"ground truth calculate_triangle_area\.base should be a "
                                                                 r"list of allowed values"),
    ([{"calculate_triangle_area": [10, 5]}], r"ground truth of .* should map arguments to lists"),
    ([{"a": {}, "b": {}}], r"ground_truth entries must be"),
    ([{"area_of_circle": {"radius": [1]}}], r"ground truth of 'simple_0' calls \['area_of_circle'\], which .*BFCL_v3_simple\.json:1 does "
                                            r"not document"),
])
def test_bfcl_ground_truth_is_validated_up_front(tmp_path, ground_truth, message):
    directory = _bfcl(tmp_path)
    _rewrite(tmp_path / "possible_answer" / "BFCL_v3_simple.json", ground_truth=ground_truth)
    with pytest.raises(DataError, match=r"possible_answer/BFCL_v3_simple\.json:1: " + message):
        load_bfcl(directory, "simple")


@pytest.mark.parametrize("function,message", [
    ([{"description": "no name"}], r"needs a string 'name'"),
    ([{"name": "calculate_triangle_area", "parameters": {"properties": []}}], r"'properties' object"),
    ([{"name": "calculate_triangle_area", "parameters": {"properties": {}, "required": "base"}}],
     r"'required' should be a list"),
])
def test_bfcl_function_docs_are_validated_up_front(tmp_path, function, message):
    directory = _bfcl(tmp_path)
    _rewrite(tmp_path / "BFCL_v3_simple.json", function=function)
    with pytest.raises(DataError, match=r"BFCL_v3_simple\.json:1: .*" + message):
        load_bfcl(directory, "simple")


def test_a_corpus_of_stopwords_is_a_data_error(tmp_path):
    docs = load_corpus(_write_jsonl(tmp_path / "wiki.jsonl", [{"id": "0", "contents": '"The"\nand of the a'},
                                                             {"id": "1", "contents": "it is"}]))
    with pytest.raises(DataError, match="none of its 2 documents has a word outside the English stopwords"):
        SearchIndex(docs)


def test_deeply_nested_json_row_is_named(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"question": "q", "golden_answers": ["Paris"]}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(DataError, match=r"train\.jsonl:2: invalid JSON"):
        load_search_r1(str(path))


# --- the current BFCL release: v4 file names, irrelevance, the official checker's value rules ---


def test_bfcl_v4_names_and_irrelevance_without_ground_truth(tmp_path):
    row = {"id": "irrelevance_0", "question": [[{"role": "user", "content": "Area of a triangle, base 10?"}]],
           "function": [{"name": "determine_body_mass_index", "parameters": {"type": "dict", "properties": {
               "weight": {"type": "float"}}, "required": ["weight"]}}]}
    _write_jsonl(tmp_path / "BFCL_v4_irrelevance.json", [row])
    task, = load_bfcl(str(tmp_path), "irrelevance")
    assert task.data["ground_truth"] == [] and bfcl_check([], task.data["ground_truth"])
    assert not bfcl_check([Call("determine_body_mass_index", {"weight": 1.0})], task.data["ground_truth"])
    with pytest.raises(DataError, match=r"no BFCL_v4_simple_python\.json or BFCL_v3_simple_python\.json; "
                                        r"categories there: \['irrelevance'\]"):
        load_bfcl(str(tmp_path), "simple_python")


def test_bfcl_values_follow_the_official_rules():
    """Strings standardised (spaces and ,./-_*^ dropped, case), ints for floats, nested dict ground truth
    ({key: [allowed]}), lists of such dicts, documented and required arguments when docs are given."""
    gt = [{"book": {"city": ["New York", ""], "when": ["April 1, 2024"], "price": [5.0],
                    "guest": [{"name": ["Ann"], "age": [30, ""]}], "rooms": [[{"kind": ["double"]}]]}}]
    call = Call("book", {"city": "new-york", "when": "April 1,2024", "price": 5,
                         "guest": {"name": "ann"}, "rooms": [{"kind": "DOUBLE"}]})
    assert bfcl_check([call], gt)
    assert not bfcl_check([Call("book", {**call.arguments, "guest": {"name": "Ann", "pet": "cat"}})], gt)
    assert not bfcl_check([Call("book", {**call.arguments, "guest": {"age": 30}})], gt)  # name is not optional
    assert not bfcl_check([Call("book", {**call.arguments, "rooms": [{"kind": "double"}, {"kind": "double"}]})], gt)
    docs = [{"name": "book", "parameters": {"properties": {k: {} for k in ("city", "when", "price", "guest")},
                                            "required": ["when"]}}]
    assert not bfcl_check([call], gt, docs)  # 'rooms' is not documented: the official checker refuses it too


@pytest.mark.parametrize("final", ["nan", "inf", "-inf", "NaN", "1_000", "\u0661\u0662", "1e400"])
def test_gsm8k_gold_that_is_not_a_finite_number_is_named(tmp_path, final):
    path = _write_jsonl(tmp_path / "test.jsonl", [{"question": "q", "answer": "1\n#### 2"},
                                                  {"question": "q2", "answer": f"x\n#### {final}"}])
    with pytest.raises(DataError, match=r"test\.jsonl:2: final answer .* not a finite number"):
        load_gsm8k(path)


@pytest.mark.parametrize("gold", ["", "The", " a ", "."])
def test_gold_answers_empty_after_normalisation_are_named(tmp_path, gold):
    rows = [{"question": "q1", "golden_answers": ["Paris"]}, {"question": "q2", "golden_answers": ["Rome", gold]}]
    with pytest.raises(DataError, match=r"test\.jsonl:2: field 'golden_answers' holds the answer"):
        load_search_r1(_write_jsonl(tmp_path / "test.jsonl", rows))
    hotpot = [dict(HOTPOT[0], answer=gold)]
    (tmp_path / "hotpot.json").write_text(json.dumps(hotpot))
    with pytest.raises(DataError, match="record 1: field 'answer' holds the answer"):
        load_hotpotqa(str(tmp_path / "hotpot.json"))


@pytest.mark.parametrize("kind", ["jsonl question", "jsonl nested", "json list", "corpus"])
def test_a_lone_surrogate_is_named_with_its_file_and_line(tmp_path, kind):
    bad = '"bad \\ud800 text"'  # a JSON escape that decodes to a lone surrogate
    if kind == "json list":
        (tmp_path / "rows.json").write_text('[{"question": "q", "golden_answers": [' + bad + ']}]')
        path, load, where = str(tmp_path / "rows.json"), load_search_r1, r"rows\.json: record 1"
    elif kind == "corpus":
        (tmp_path / "corpus.jsonl").write_text('{"id": "1", "contents": "ok"}\n{"id": "2", "contents": ' + bad + '}\n')
        path, load, where = str(tmp_path / "corpus.jsonl"), load_corpus, r"corpus\.jsonl:2"
    else:
        field = '"question": ' + bad if kind == "jsonl question" else '"question": "q", "meta": {"x": [' + bad + ']}'
        (tmp_path / "t.jsonl").write_text('{"question": "fine", "answer": "1\\n#### 1"}\n{' + field
                                         + ', "answer": "1\\n#### 1"}\n')
        path, load, where = str(tmp_path / "t.jsonl"), load_gsm8k, r"t\.jsonl:2"
    with pytest.raises(DataError, match=where + ".*lone surrogate"):
        load(path)


@pytest.mark.parametrize("which", ["questions", "answers"])
def test_bfcl_repeated_ids_are_named(tmp_path, which):
    directory = _bfcl(tmp_path)
    path = tmp_path / ("BFCL_v3_simple.json" if which == "questions" else "possible_answer/BFCL_v3_simple.json")
    first = path.read_text().splitlines()[0]
    path.write_text(first + "\n" + first + "\n")
    with pytest.raises(DataError, match=r"BFCL_v3_simple\.json:2: id 'simple_0' repeats the"):
        load_bfcl(directory, "simple")


def test_a_test_file_that_is_the_training_file_is_named(tmp_path):
    from trace_jax.envs.tasks.datasets import GSM8KTasks
    path = _write_jsonl(tmp_path / "g.jsonl", [{"question": f"q{i}", "answer": f"x\n#### {i}"} for i in range(5)])
    with pytest.raises(DataError, match="train_path = task.test_path"):
        GSM8KTasks(train_path=path, test_path=path)


@pytest.mark.parametrize("ids", [("a1", "a1"), (7, "7"), (" x", "x ")])
def test_repeated_ids_are_named_for_hotpotqa(tmp_path, ids):
    """An int id and its string form (or the same id padded) are one id: two questions would share a per-prompt
    history in mopps and knapsack."""
    rows = [dict(HOTPOT[0], _id=ids[0]), dict(HOTPOT[0], _id=ids[1], question="Another question?")]
    path = tmp_path / "hotpot.json"
    path.write_text(json.dumps(rows))
    with pytest.raises(DataError, match=r"hotpot\.json: record 2: id .* is also the id of .*record 1"):
        load_hotpotqa(str(path))


def test_repeated_ids_are_named_for_search_r1(tmp_path):
    rows = [{"id": "q1", "question": "a?", "golden_answers": ["x"]}, {"id": "q1", "question": "b?", "golden_answers": ["y"]}]
    with pytest.raises(DataError, match=r"train\.jsonl:2: id 'q1' is also the id of .*train\.jsonl:1"):
        load_search_r1(_write_jsonl(tmp_path / "train.jsonl", rows))
    rows = [{"id": 1, "question": "a?", "golden_answers": ["x"]}, {"question": "b?", "golden_answers": ["y"]}]
    with pytest.raises(DataError, match="is also the id"):  # an explicit id 1 and the second row's position 1
        load_search_r1(_write_jsonl(tmp_path / "train2.jsonl", rows))


@pytest.mark.parametrize("row,message", [({"problem": "p", "answer": float("nan")}, "not an answer"),
                                         ({"problem": "p", "answer": "NaN"}, "'NaN'"),
                                         ({"problem": "p", "answer": "7", "level": float("inf")}, "not a finite difficulty")])
def test_math_rows_with_non_finite_gold_or_level_are_named(tmp_path, row, message):
    path = tmp_path / "math.json"
    path.write_text(json.dumps([{"problem": "q", "answer": "1"}, row]))  # json writes NaN / Infinity
    with pytest.raises(DataError, match=rf"math\.json: record 2: .*{message}"):
        load_math_problems(str(path))

