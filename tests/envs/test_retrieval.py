"""The retrieval-server backend against a small Search-R1-compatible server started here: the same passages
as in-process BM25, one request per decode turn, and timeouts, server errors and bad answers turned into
error observations without hanging."""

import http.server
import json
import tempfile
import threading
import time

import pytest

from trace_jax.envs.protocol import Limits, Task
from trace_jax.envs.tasks.multihop import MultiHopEnv
from trace_jax.envs.tools.retrieval import RetrievalClient
from trace_jax.envs.tools.retrieval_server import response, serve
from trace_jax.envs.tools.search import Document, SearchIndex

DOCS = [Document(id=str(i), title=f"Person{i}", text=f"Person{i} was born in City{i} and founded Company{i}.")
        for i in range(30)]
INDEX = SearchIndex(DOCS, top_k=2, max_words_per_passage=8)


class _Handler(http.server.BaseHTTPRequestHandler):
    mode = "ok"
    requests: list = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        if self.mode == "slow":
            time.sleep(1.0)
        if self.mode == "error":
            self.send_response(500)
            self.end_headers()
            return
        payload = b"<html>not json</html>" if self.mode == "garbage" else json.dumps(response(INDEX, body)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture()
def server():
    _Handler.mode, _Handler.requests = "ok", []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/retrieve"
    httpd.shutdown()


def test_the_server_backend_gives_the_in_process_passages(server):
    client = RetrievalClient(server, top_k=2, max_words_per_passage=8)
    for query in ("Person3 born", "Company17 founder", "City5"):
        assert client.search(query) == INDEX.search(query)
    assert client.search("  ") == "Error: empty search query"


def test_one_request_per_decode_turn(server):
    client = RetrievalClient(server, top_k=2)
    env = MultiHopEnv(client, Limits(max_turns=4))
    task = Task(id="t", question="Where was Person3 born?", answers=("City3",))
    episodes = [env.start(task) for _ in range(4)]
    texts = [f"Thought: look.\nAction: search[Person{i} born]" for i in range(3)] + ["Action: finish[City3]"]
    env.prefetch(texts)
    results = [e.step(t) for e, t in zip(episodes, texts)]
    assert len(_Handler.requests) == 1 and len(_Handler.requests[0]["queries"]) == 3
    assert "City1" in results[1].observation and results[3].success


def test_the_rollout_engine_prefetches_each_turn_once(tiny_setup, monkeypatch):
    from trace_jax.rollout.agent_loop import RolloutEngine
    calls = []
    monkeypatch.setattr(type(tiny_setup.env), "prefetch", lambda self, texts: calls.append(list(texts)), raising=False)
    engine = RolloutEngine(tiny_setup.policy, tiny_setup.env, seed=0)
    trees = engine.roots(tiny_setup.source.tasks("train")[:3])
    engine.expand(trees, [(i, 0, 2) for i in range(3)])
    assert calls and len(calls[0]) == 6 and all(isinstance(t, str) for t in calls[0])


@pytest.mark.parametrize("mode,reason,attempts", [("slow", "unreachable", 2), ("error", "unreachable", 2),
                                                  ("garbage", "malformed response", 1)])
def test_failures_become_error_observations_without_hanging(server, mode, reason, attempts):
    _Handler.mode = mode
    client = RetrievalClient(server, timeout_s=0.3, retries=1, backoff_s=0.05)
    env = MultiHopEnv(client, Limits(max_turns=4))
    episode = env.start(Task(id="t", question="q", answers=("a",)))
    start = time.time()
    result = episode.step("Action: search[Person1]")
    assert time.time() - start < 3.0
    assert result.observation.startswith(f"Error: the retrieval server failed: {reason}")
    assert result.info["error"] == "tool_error" and client.failures[reason] == 1
    assert len(_Handler.requests) == attempts


def test_an_unreachable_server_and_a_bad_url():
    client = RetrievalClient("http://127.0.0.1:9/retrieve", timeout_s=0.3, retries=0)
    assert client.search("x").startswith("Error: the retrieval server failed: unreachable")
    with pytest.raises(ValueError, match="http:// or https://"):
        RetrievalClient("file:///etc/passwd")


def test_the_bundled_server_answers_bad_requests_with_400():
    server, url = serve(INDEX)
    try:
        assert RetrievalClient(url, top_k=2, max_words_per_passage=8).search("Person3 born") == INDEX.search("Person3 born")
        import urllib.error
        import urllib.request
        with pytest.raises(urllib.error.HTTPError, match="400"):
            urllib.request.urlopen(urllib.request.Request(url, data=b'{"queries": "x"}'), timeout=5)
    finally:
        server.shutdown()


def _raw_server(reply):
    """A TCP server that reads a request and answers with `reply(socket)` (raw bytes: broken HTTP too)."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    def serve_forever():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    _read_request(conn)  # all of it: closing on unread bytes resets the connection
                    reply(conn)
                    conn.shutdown(socket.SHUT_WR)
                except OSError:
                    pass

    threading.Thread(target=serve_forever, daemon=True).start()
    return listener, f"http://127.0.0.1:{listener.getsockname()[1]}/retrieve"


def _read_request(conn) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return
        body += chunk


def _ok_headers(extra=b""):
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + extra


def _trickle(conn):
    conn.sendall(_ok_headers(b"Content-Length: 1000\r\n\r\n"))
    for _ in range(100):
        conn.sendall(b" ")
        time.sleep(0.1)


def _json(payload: str):
    body = payload.encode("utf-8", "surrogatepass")
    return lambda conn: conn.sendall(_ok_headers(b"Content-Length: %d\r\n\r\n" % len(body)) + body)


BROKEN = {
    "status line": (lambda c: c.sendall(b"garbage\r\n\r\n"), "unreachable"),
    "broken chunked body": (lambda c: c.sendall(_ok_headers(b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc")),
                            "unreachable"),
    "150 headers": (lambda c: c.sendall(_ok_headers(b"".join(b"X-%d: y\r\n" % i for i in range(150)) + b"\r\n")),
                    "unreachable"),
    "incomplete body": (lambda c: c.sendall(_ok_headers(b"Content-Length: 500\r\n\r\n{\"result\"")),
                        "malformed response"),  # read(n) returns what came before the close
    "body trickled past the deadline": (_trickle, "unreachable"),
    "deeply nested JSON": (_json("[" * 100_000 + "]" * 100_000), "malformed response"),
    "not UTF-8": (lambda c: c.sendall(_ok_headers(b"Content-Length: 2\r\n\r\n\xff\xfe")), "malformed response"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_server_becomes_error_observations_in_bounded_time_through_prefetch_too(case):
    reply, reason = BROKEN[case]
    listener, url = _raw_server(reply)
    try:
        client = RetrievalClient(url, timeout_s=1.0, retries=0)
        env = MultiHopEnv(client, Limits(max_turns=4))
        episode = env.start(Task(id="t", question="q", answers=("a",)))
        start = time.time()
        env.prefetch(["Action: search[Person1]"])  # the engine's batched path, outside Episode.step's catch
        result = episode.step("Action: search[Person1]")
        assert time.time() - start < 3.0, case
        assert result.observation.startswith(f"Error: the retrieval server failed: {reason}"), result.observation
        assert result.info["error"] == "tool_error"
    finally:
        listener.close()


def test_a_passage_with_a_lone_surrogate_is_cleaned_before_it_reaches_the_renderer():
    hits = {"result": [[{"document": {"id": "1", "contents": "Title\nbad \ud800 text"}, "score": 1.0}]]}
    listener, url = _raw_server(_json(json.dumps(hits)))
    try:
        observation = RetrievalClient(url, timeout_s=1.0, retries=0).search("q")
        observation.encode("utf-8")  # would raise UnicodeEncodeError on a lone surrogate
        assert "bad ? text" in observation
    finally:
        listener.close()


@pytest.mark.parametrize("contents", ["word " * 500, "title " * 100 + "\n" + "text " * 300, "\n" + "text " * 300,
                                      "title only", "\"quoted title\"\n" + "x " * 9])
def test_the_word_cap_holds_for_every_passage_shape(contents):
    """A passage without a title line is shown as its text under the cap (it was printed whole as the "title"),
    a long title is cut too: by the retrieval client and by the in-process BM25 on a corpus loaded the same way."""
    from trace_jax.envs.loaders import load_corpus
    from trace_jax.envs.tools.search import MAX_TITLE_WORDS, SearchIndex

    cap = 8
    hits = {"result": [[{"document": {"id": "1", "contents": contents}, "score": 1.0}]]}
    listener, url = _raw_server(_json(json.dumps(hits)))
    try:
        remote = RetrievalClient(url, timeout_s=1.0, retries=0, max_words_per_passage=cap).search("q")
    finally:
        listener.close()
    path = tempfile.mktemp(suffix=".jsonl")
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps({"id": "1", "contents": contents}) + "\n")
        f.write(json.dumps({"id": "2", "contents": "Other\nunrelated passage"}) + "\n")
    query = contents.split()[0]
    local = SearchIndex(load_corpus(path), top_k=1, max_words_per_passage=cap).search(query)
    for observation in (remote, local):
        (line,) = observation.splitlines()
        assert len(line.split()) <= 1 + MAX_TITLE_WORDS + 1 + cap + 1, line  # [rank] title ...: text ...
        for word in ("word", "text", "x"):
            assert line.split().count(word) <= cap, line
        assert line.split().count("title") <= MAX_TITLE_WORDS, line
