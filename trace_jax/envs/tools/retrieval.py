"""Search through a Search-R1-compatible retrieval server (`POST <url>` with {"queries": [...], "topk": k,
"return_scores": true} -> {"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}), a drop-in
for the in-process BM25 `SearchIndex` (`task.search_backend="server"`).

The queries of one decode turn go out as one request (`prefetch`, called by the rollout engine through
`Env.prefetch`); `search` then answers from that batch. A request has a timeout and bounded retries
with backoff; a failed, oversized or malformed response (a broken status line or chunked body, too many
headers, JSON nested too deep, any error while reading) becomes an error observation for its queries
(counted by the episode as a tool error): nothing raises. Each attempt, headers and body together, has a
wall-clock deadline of `timeout_s` (a server trickling bytes cannot stretch it: the socket timeout alone bounds
each read, not the request), so nothing waits longer than timeout x (retries + 1) plus the backoff. The
response is parsed as JSON data only; passages are cleaned of what is not valid UTF-8 (lone surrogates).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from collections import Counter

from trace_jax.envs.tools.search import passage_line

MAX_RESPONSE_BYTES = 16 << 20
MAX_QUERY_CHARS = 500


class RetrievalClient:
    """Attributes:
      url: the server's retrieve endpoint (http or https).
      top_k, max_words: passages per query and words per passage (as `SearchIndex`).
      timeout_s, retries: per attempt, and extra attempts after a failure.
      requests, failures: requests sent, and failed requests by reason (for metrics and tests).
    """

    def __init__(self, url: str, *, top_k: int = 3, max_words_per_passage: int = 60, timeout_s: float = 10.0,
                 retries: int = 2, backoff_s: float = 0.5):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"retrieval server url must start with http:// or https://, got {url!r}")
        self.url, self.top_k, self.max_words = url, top_k, max_words_per_passage
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        self.requests, self.failures = 0, Counter()
        self._batch: dict[str, str] = {}

    def prefetch(self, queries: list[str]) -> None:
        """One request for every distinct query of a turn; `search` then reads the answers."""
        wanted = list(dict.fromkeys(q.strip()[:MAX_QUERY_CHARS] for q in queries if q and q.strip()))
        self._batch = dict(zip(wanted, self._retrieve(wanted))) if wanted else {}

    def search(self, query: str) -> str:
        """The search tool's observation (numbered passages), or an error text."""
        query = (query or "").strip()[:MAX_QUERY_CHARS]
        if not query:
            return "Error: empty search query"
        if query not in self._batch:
            self._batch.update(zip([query], self._retrieve([query])))
        return self._batch.pop(query)

    def _retrieve(self, queries: list[str]) -> list[str]:
        body = json.dumps({"queries": queries, "topk": self.top_k, "return_scores": True}).encode()
        reason = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            self.requests += 1
            try:
                raw = _with_deadline(lambda: self._post(body), self.timeout_s)
                if len(raw) > MAX_RESPONSE_BYTES:
                    reason = "response too large"
                    break  # retrying would return the same
                return [self._format(q, hits) for q, hits in zip(queries, _results(raw, len(queries)), strict=True)]
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError, http.client.HTTPException) as e:
                reason = f"unreachable ({getattr(e, 'reason', e) or type(e).__name__})"
            except (ValueError, RecursionError) as e:  # malformed JSON or shape: the server's answer will not change
                reason = f"malformed response ({type(e).__name__}: {e})"
                break
            except Exception as e:  # noqa: BLE001  (whatever else a broken server causes is its failure, not ours)
                reason = f"failed ({type(e).__name__}: {e})"
        self.failures[reason.split(" (")[0]] += 1
        return [f"Error: the retrieval server failed: {reason}"[:300] for _ in queries]

    def _post(self, body: bytes) -> bytes:
        """One attempt: the response body, at most MAX_RESPONSE_BYTES + 1 bytes (more means too large)."""
        request = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            return response.read(MAX_RESPONSE_BYTES + 1)

    def _format(self, query: str, hits: list) -> str:
        if not hits:
            return f"No results for {query[:80]!r}."
        lines = []
        for rank, hit in enumerate(hits[: self.top_k], 1):
            document = hit.get("document", hit) if isinstance(hit, dict) else hit
            contents = document.get("contents", "") if isinstance(document, dict) else str(document)
            title, _, text = str(contents).partition("\n")
            lines.append(passage_line(rank, title, text, self.max_words))
        return "\n".join(lines).encode("utf-8", "replace").decode("utf-8")  # lone surrogates -> "?"


def _with_deadline(fn, seconds: float):
    """fn() run in a daemon thread: its result, its exception, or TimeoutError after `seconds` (the thread is
    left to its socket timeout; it holds nothing of the caller's)."""
    out: dict = {}

    def target():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001  (handed to the caller)
            out["error"] = e

    worker = threading.Thread(target=target, daemon=True, name="retrieval-request")
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise TimeoutError(f"no complete response within {seconds:g} s")
    if "error" in out:
        raise out["error"]
    return out["value"]


def _results(raw: bytes, count: int) -> list[list]:
    """The per-query hit lists of a response, checked for shape (ValueError otherwise)."""
    data = json.loads(raw.decode("utf-8"))
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(result, list) or len(result) != count or not all(isinstance(r, list) for r in result):
        raise ValueError(f"expected {{'result': [{count} lists of hits]}}")
    return result
