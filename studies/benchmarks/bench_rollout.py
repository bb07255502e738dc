"""Benchmark: rollout throughput's headline in one run and one JSON line: continuous batching
(`bench_continuous.py`) and the sampler against Tunix and the hardware limit (`bench_sampler.py` sections d
and e), each in its own process, one after the other, on the same machine.

  python studies/benchmarks/bench_rollout.py --tunix_python /tmp/tunix_venv/bin/python    # ~8 min on 2 cores
  python studies/benchmarks/bench_rollout.py --quick                                     # smoke run, no peer

Both benchmarks print their own tables; this one ends with their two JSON lines merged under "continuous"
and "sampler", and the five headline figures on top: `slot_utilisation`, `continuous_vs_turn_sync`,
`host_overhead_share` (continuous batching with its tools between chunks, the default, and overlapping
decode, `rl.overlap_tools`), `vs_tunix` (or the reason it is unavailable) and
`decode_bandwidth_fraction` (batch 64). A benchmark that fails is reported with its exit status and the
tail of its output, and the line still prints, with that part marked unavailable.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run(script: str, args: list[str]) -> tuple[dict | None, str]:
    """Runs studies/benchmarks/`script` (its output streamed), returns its last line's JSON or None and why."""
    command = [sys.executable, os.path.join(HERE, script), *args]
    print(f"$ {' '.join(command)}", flush=True)
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        print(line, end="", flush=True)
        lines.append(line.rstrip("\n"))
    if proc.wait() != 0:
        return None, f"{script} exited with status {proc.returncode}: {' | '.join(lines[-3:])}"
    try:
        return json.loads(lines[-1]), ""
    except (IndexError, json.JSONDecodeError):
        return None, f"{script} did not end with a JSON line"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="both benchmarks' --quick")
    parser.add_argument("--tool_ms", type=float, default=0.0, help="bench_continuous's tool latency")
    parser.add_argument("--chunk", type=int, default=8, help="bench_continuous's decode chunk")
    parser.add_argument("--tunix_python", default=os.environ.get("TRACE_JAX_TUNIX_PYTHON", ""),
                        help="the Tunix virtualenv's python (bench_sampler's peer)")
    args = parser.parse_args()
    quick = ["--quick"] if args.quick else []
    continuous, why_continuous = run("bench_continuous.py", [*quick, "--chunk", str(args.chunk),
                                                             "--tool_ms", str(args.tool_ms)])
    sampler, why_sampler = run("bench_sampler.py", [*quick, "--sections", "de",
                                                    *(["--tunix_python", args.tunix_python] if args.tunix_python
                                                      else [])])
    c, s = continuous or {}, sampler or {}
    summary = {
        "slot_utilisation": c.get("slot_utilisation", why_continuous),
        "continuous_vs_turn_sync": {"overlap": c.get("overlap_vs_turn_sync"),
                                    "between_chunks": c.get("continuous_vs_turn_sync")} if c else why_continuous,
        "host_overhead_share": c.get("host_overhead_share", why_continuous),
        "vs_tunix": s.get("vs_tunix", why_sampler),
        "decode_bandwidth_fraction": s.get("decode_bandwidth_fraction", why_sampler),
        "continuous": continuous or why_continuous,
        "sampler": sampler or why_sampler,
    }
    print(json.dumps(summary))
    return 0 if continuous and sampler else 1


if __name__ == "__main__":
    sys.exit(main())
