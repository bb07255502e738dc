"""Real-format loaders on small files written here in the real formats; bad rows name file and line."""

import json

import pytest

from trace_jax.envs.loaders import (DataError, bfcl_check, load_bfcl, load_corpus, load_gsm8k, load_hotpotqa,
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


def _bfcl(tmp_path, truth_id="simple_0"):
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
    task = load_bfcl(_bfcl(tmp_path))[0]
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
        load_bfcl(_bfcl(tmp_path, truth_id="simple_9"))
