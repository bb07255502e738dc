"""BM25 retrieval at corpus scale: index build time and memory over a synthetic corpus (1M passages by
default), then search throughput in-process (`SearchIndex`) and through the retrieval-server backend
(`RetrievalClient` against a local Search-R1-compatible server wrapping the same index), side by side.

  python studies/benchmarks/bench_retrieval.py                      # 1M passages
  python studies/benchmarks/bench_retrieval.py --passages=100000 --repeats=5

Queries/s: medians of alternating repeats (min/max shown); the server path sends each decode turn's
queries (`--batch`) in one request, as the rollout engine does. The last line is one JSON object.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from trace_jax.envs.tools.retrieval import RetrievalClient  # noqa: E402
from trace_jax.envs.tools.retrieval_server import serve  # noqa: E402
from trace_jax.envs.tools.search import Document, SearchIndex  # noqa: E402

flags.DEFINE_integer("passages", 1_000_000, "Synthetic passages in the corpus.")
flags.DEFINE_integer("queries", 256, "Queries per repeat.")
flags.DEFINE_integer("batch", 32, "Queries per server request (one decode turn's searches).")
flags.DEFINE_integer("repeats", 3, "Alternating repeats of each path.")


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def corpus(n: int, seed: int = 0) -> list[Document]:
    """Passages of 40 words from a Zipf-like 50k-word vocabulary, with a unique title word each."""
    rng = np.random.default_rng(seed)
    vocab = np.array([f"w{i}" for i in range(50_000)])
    words = vocab[np.minimum(rng.zipf(1.3, size=(n, 40)) - 1, len(vocab) - 1)]
    return [Document(id=str(i), title=f"T{i}", text=" ".join(row)) for i, row in enumerate(words)]


def main(argv):
    del argv
    f = flags.FLAGS
    t = time.perf_counter()
    docs = corpus(f.passages)
    generate_s = time.perf_counter() - t
    before = _rss_mb()
    t = time.perf_counter()
    index = SearchIndex(docs, top_k=3)
    build_s = time.perf_counter() - t
    index_mb = _rss_mb() - before
    rng = np.random.default_rng(1)
    queries = [" ".join(docs[int(i)].text.split()[:4]) for i in rng.integers(0, len(docs), f.queries)]
    httpd, url = serve(index)
    client = RetrievalClient(url, top_k=3, timeout_s=60)
    rates = {"in_process": [], "server": []}
    for _ in range(f.repeats):
        t = time.perf_counter()
        for q in queries:
            index.search(q)
        rates["in_process"].append(len(queries) / (time.perf_counter() - t))
        t = time.perf_counter()
        for b in range(0, len(queries), f.batch):
            chunk = queries[b:b + f.batch]
            client.prefetch(chunk)
            for q in chunk:
                client.search(q)
        rates["server"].append(len(queries) / (time.perf_counter() - t))
    httpd.shutdown()
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"corpus: {f.passages} passages of 40 words (generated in {generate_s:.1f} s)")
    print(f"BM25 index build: {build_s:.1f} s, resident memory +{index_mb:.0f} MB (peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB)")
    for k, v in rates.items():
        print(f"{k:>10}: {med[k]:.1f} queries/s (median of {f.repeats}; min {min(v):.1f}, max {max(v):.1f})")
    print(f"server / in-process: {med['server'] / med['in_process']:.2f}x ({f.batch} queries per request)")
    print(json.dumps({"passages": f.passages, "build_s": round(build_s, 1), "index_mb": round(index_mb),
                      "queries_per_s": {k: round(v, 1) for k, v in med.items()},
                      "server_over_in_process": round(med["server"] / med["in_process"], 3)}))


if __name__ == "__main__":
    app.run(main)
