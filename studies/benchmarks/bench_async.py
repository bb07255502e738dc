"""Wall time per RL step with rollouts overlapping the learner (`rl.max_staleness` = 1) against the synchronous loop
(0), on a 2-device CPU host, one core per device (XLA flags set below), sampler and learner on separate devices
(`mesh.sampler_devices` = 1), both with `loss.name="decoupled_ppo"`: the quickstart's task and model, and the same
with every retrieval a 20 ms round trip (the host thread sleeps, as a retrieval server's call would).

  python studies/benchmarks/bench_async.py                       # 3 alternating pairs per workload, 8 steps each
  python studies/benchmarks/bench_async.py --quick               # one pair, 3 steps, tiny model (a smoke run)

One SFT warm start per workload, shared by its runs; each run then takes `--steps` RL steps. One run of each s
first, not timed, compiles the programs the timed runs use (the runs share one process). A step's wall time is its
record's `step_s` (for s = 1: the wait for its rollouts plus its learner updates); the figure per run is the median
over its steps after the first two. Ratio per pair: s = 0's / s = 1's, reported as median
[min, max] over the pairs. The timeline of the last pair (each step's rollout and learner spans) is written beside
the JSON (`--out`). Ends with one JSON line.
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), "--xla_force_host_platform_device_count=2",
                                    "--xla_cpu_multi_thread_eigen=false", "intra_op_parallelism_threads=1"]).strip()

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from configs import quickstart  # noqa: E402
from trace_jax.envs.tasks.multihop import MultiHopEnv  # noqa: E402
from trace_jax.run import train  # noqa: E402
from trace_jax.run.records import read_steps  # noqa: E402

WARMUP_STEPS = 2


def config(args, staleness: int):
    c = quickstart.get_config("runlocal" if args.quick else None)
    c.rl.steps, c.rl.eval_every, c.checkpoint.every = args.steps, 0, args.steps
    c.rl.max_staleness, c.loss.name, c.mesh.sampler_devices = staleness, "decoupled_ppo", 1
    c.eval.num_tasks, c.eval.sample_k = args.eval_tasks, 0
    c.sft.steps = args.sft_steps
    if args.quick:
        c.model.preset = "tiny"
    return c


class Spans:
    """Each step's rollout span (from its `Rollouts`) and learner span, recorded around `train.roll_out` and
    `train.learn_step`."""

    def __init__(self):
        self.rollouts, self.learner = {}, {}
        self._roll_out, self._learn_step = train.roll_out, train.learn_step

    def __enter__(self):
        def roll_out(*args, **kwargs):
            out = self._roll_out(*args, **kwargs)
            self.rollouts[out.step] = out.span
            return out

        def learn_step(setup, fns, params, opt_state, rollouts, **kwargs):
            start = time.time()
            out = self._learn_step(setup, fns, params, opt_state, rollouts, **kwargs)
            jax.block_until_ready(out[0])
            self.learner[rollouts.step] = (start, time.time())
            return out

        train.roll_out, train.learn_step = roll_out, learn_step
        return self

    def __exit__(self, *exc):
        train.roll_out, train.learn_step = self._roll_out, self._learn_step

    def relative(self) -> dict:
        t0 = min(s for s, _ in self.rollouts.values())
        return {kind: {step: (round(a - t0, 3), round(b - t0, 3)) for step, (a, b) in spans.items()}
                for kind, spans in (("rollouts", self.rollouts), ("learner", self.learner))}


def one_run(args, staleness: int, workdir: str, sft_from: str | None) -> tuple[float, float, dict]:
    """(median step seconds after the warm-up steps, RL loop seconds, spans) of one run."""
    if sft_from is not None:
        os.makedirs(workdir, exist_ok=True)
        for name in ("sft", "tokenizer"):
            if os.path.exists(os.path.join(sft_from, name)):
                os.symlink(os.path.join(sft_from, name), os.path.join(workdir, name))
    with Spans() as spans:
        train.train_and_evaluate(config(args, staleness), workdir)
    steps = read_steps(workdir)
    timed = [r.timings.step_s for r in steps[WARMUP_STEPS:]] or [r.timings.step_s for r in steps]
    return statistics.median(timed), sum(r.timings.step_s for r in steps), spans.relative()


def workload(args, tool_ms: float, root: str) -> dict:
    original = MultiHopEnv.run_tool

    def slow_tool(self, task, action, episode):
        time.sleep(tool_ms / 1000)
        return original(self, task, action, episode)

    MultiHopEnv.run_tool = slow_tool if tool_ms else original
    try:
        sft_from, pairs, spans = None, [], {}
        for staleness in (0, 1):  # warm-up: compiles every program (a first run's steps also wait for compiles)
            workdir = os.path.join(root, f"tool{tool_ms:g}_s{staleness}_warmup")
            one_run(args, staleness, workdir, sft_from)
            sft_from = sft_from or workdir
        for repeat in range(args.repeats):
            order = (0, 1) if repeat % 2 == 0 else (1, 0)
            got = {}
            for staleness in order:
                workdir = os.path.join(root, f"tool{tool_ms:g}_s{staleness}_r{repeat}")
                got[staleness] = one_run(args, staleness, workdir, sft_from)
                print(f"  tool {tool_ms:g} ms, s={staleness}, pair {repeat}: median step {got[staleness][0]:.2f} s, "
                      f"RL loop {got[staleness][1]:.1f} s", flush=True)
            pairs.append(got)
            spans = {f"s{s}": got[s][2] for s in (0, 1)}
    finally:
        MultiHopEnv.run_tool = original
    ratios = [p[0][0] / p[1][0] for p in pairs]
    return {"tool_ms": tool_ms, "step_s": {f"s{s}": round(statistics.median(p[s][0] for p in pairs), 3) for s in (0, 1)},
            "ratio": {"median": round(statistics.median(ratios), 3), "range": [round(min(ratios), 3),
                                                                              round(max(ratios), 3)]},
            "timeline": spans}


def plot(results: list[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results) * 2, 1, figsize=(10, 2.2 * len(results) * 2), squeeze=False)
    row = 0
    for result in results:
        for name, spans in result["timeline"].items():
            ax = axes[row][0]
            for lane, (kind, color) in enumerate((("rollouts", "tab:blue"), ("learner", "tab:orange"))):
                for step, (a, b) in spans[kind].items():
                    ax.broken_barh([(a, b - a)], (lane * 10, 8), color=color)
                    ax.text(a, lane * 10 + 4, str(step), fontsize=7, va="center")
            ax.set_yticks([4, 14], ["rollouts", "learner"])
            ax.set_title(f"tool {result['tool_ms']:g} ms, rl.max_staleness={name[1:]}", fontsize=9)
            row += 1
    axes[-1][0].set_xlabel("seconds since the first step's rollouts began")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="alternating pairs (s=0, s=1) per workload")
    parser.add_argument("--steps", type=int, default=8, help="RL steps per run")
    parser.add_argument("--sft_steps", type=int, default=200, help="SFT steps of each workload's shared warm start")
    parser.add_argument("--eval_tasks", type=int, default=8, help="held-out tasks evaluated after SFT and RL")
    parser.add_argument("--tool_ms", type=float, nargs="+", default=[0.0, 20.0], help="retrieval latency per call")
    parser.add_argument("--out", default="/tmp/bench_async", help="where the timeline plot and JSON go")
    parser.add_argument("--quick", action="store_true", help="one pair, 3 steps, tiny model (a smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.steps, args.sft_steps = 1, 3, 10
    if args.repeats < 1 or args.steps < 1:
        parser.error(f"--repeats and --steps must be >= 1, got {args.repeats}, {args.steps}")
    if jax.local_device_count() < 2:
        parser.error(f"needs 2 CPU devices (XLA_FLAGS={os.environ['XLA_FLAGS']!r}), got {jax.local_device_count()}")
    os.makedirs(args.out, exist_ok=True)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, jax {jax.__version__}, "
          f"{jax.local_device_count()} CPU devices of one core each; sampler on device 1, learner on device 0; "
          f"{args.repeats} alternating pairs x {args.steps} steps per workload", flush=True)
    root = tempfile.mkdtemp(prefix="bench_async_")
    try:
        results = [workload(args, tool_ms, root) for tool_ms in args.tool_ms]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for r in results:
        print(f"tool {r['tool_ms']:g} ms: step {r['step_s']['s0']:.2f} s synchronous, {r['step_s']['s1']:.2f} s "
              f"overlapped: {r['ratio']['median']:.2f}x [{r['ratio']['range'][0]:.2f}, {r['ratio']['range'][1]:.2f}]")
    plot(results, os.path.join(args.out, "timeline.png"))
    line = {"bench": "async", "quick": args.quick, "steps": args.steps, "pairs": args.repeats,
            **{f"tool{r['tool_ms']:g}ms": {"step_s": r["step_s"], "ratio": r["ratio"]} for r in results},
            "timeline": os.path.join(args.out, "timeline.png")}
    with open(os.path.join(args.out, "bench_async.json"), "w", encoding="utf-8") as f:
        json.dump({**line, "timelines": {f"tool{r['tool_ms']:g}ms": r["timeline"] for r in results}}, f, indent=1)
    print(json.dumps(line))


if __name__ == "__main__":
    main()
