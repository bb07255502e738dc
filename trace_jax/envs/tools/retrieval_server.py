"""A Search-R1-compatible retrieval server over the in-process BM25 `SearchIndex` (`POST /retrieve` with
{"queries": [...], "topk": k, "return_scores": bool}): run BM25 in its own process next to training, and
the local peer of the server backend's tests and benchmark.

  server, url = serve(SearchIndex(load_corpus("wiki.jsonl")), port=8000)
"""

from __future__ import annotations

import http.server
import json
import threading

from trace_jax.envs.tools.search import SearchIndex

MAX_REQUEST_BYTES = 1 << 20


def response(index: SearchIndex, body: dict) -> dict:
    """{"result": [[{"document": {"id", "contents"}, "score"}, ...] per query]} (hits as documents alone
    without `return_scores`)."""
    queries, k = body.get("queries"), int(body.get("topk") or index.top_k)
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise ValueError("'queries' must be a list of strings")
    result = []
    for query in queries:
        hits = []
        for d, score in index.retrieve(query, k):
            doc = index.documents[d]
            document = {"id": doc.id, "contents": f'"{doc.title}"\n{doc.text}'}
            hits.append({"document": document, "score": score} if body.get("return_scores") else document)
        result.append(hits)
    return {"result": result}


def serve(index: SearchIndex, host: str = "127.0.0.1", port: int = 0) -> tuple[http.server.ThreadingHTTPServer, str]:
    """Starts the server in a daemon thread; returns it (call `.shutdown()`) and its retrieve URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            length = int(self.headers.get("Content-Length") or 0)
            try:
                if self.path.rstrip("/") != "/retrieve" or length > MAX_REQUEST_BYTES:
                    raise ValueError("POST /retrieve with a JSON body under 1 MB")
                payload, status = json.dumps(response(index, json.loads(self.rfile.read(length)))).encode(), 200
            except (ValueError, TypeError) as e:
                payload, status = json.dumps({"error": str(e)}).encode(), 400
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://{host}:{server.server_address[1]}/retrieve"
