"""Benchmark: continuous batching (tools between chunks, and tools overlapping decode) vs the
turn-synchronous schedule (whole-turn decode calls, `rl.decode_chunk=0`) on a workload of mixed turn lengths.

  python studies/benchmarks/bench_continuous.py                 # ~8 min on a 2-core CPU
  python studies/benchmarks/bench_continuous.py --tool_ms 20    # each tool call a 20 ms round trip
  python studies/benchmarks/bench_continuous.py --quick         # 1 round, fewer episodes: a smoke run

The workload: `--episodes` episodes of 1..6 turns (seeded), each turn decoded until a stop token (a random
`small` model's chance of drawing one of the stop ids is ~1/`--mean_turn` per token) or
`--max_new_tokens`, so turns range from a few tokens to the cap; each observation is 24 tokens and each
tool call takes `--tool_ms` (a sleep: a retrieval server's or sandbox's latency, the CPU stays free). All
modes hold `--slots` rows in the KV cache at once (equal memory): the turn-synchronous schedule rolls the
episodes out in waves of `--slots` (each turn of a wave decodes until its longest turn stops; the tools of
all its rows run after it), continuous batching keeps `--slots` rows busy, refilling a slot as soon as its
episode ends, `--chunk` decode steps per call, with the tools of the rows whose turn ended run either
between chunks (`continuous`) or in a worker thread during the next chunk (`overlap`, `rl.overlap_tools`).
All draw the same tokens (same per-row random numbers); the benchmark checks it.

Reported side by side, in one process, timed in alternating rounds (median [min, max] of `--repeats`):
slot utilisation (sampled tokens / row-steps computed), rollout tokens/s of each mode and their ratios, and
the host overhead share: the part of a rollout's wall time spent outside the sampler's device calls (each
call timed until its result is ready, so asynchronous dispatch is given up while measuring).
The last line printed is one JSON object with the headline figures.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import tempfile
import time

import jax
import numpy as np

from trace_jax.envs.protocol import Env, Episode, StepResult, Task
from trace_jax.envs.render import ReactRenderer
from trace_jax.models import init_params, num_params
from trace_jax.models.presets import get_preset
from trace_jax.models.tokenizer import build_tokenizer, load_tokenizer
from trace_jax.rollout import continuous, agent_loop
from trace_jax.rollout.agent_loop import Policy, RolloutEngine
from trace_jax.rollout.continuous import Batching
from trace_jax.sampling import SamplingParams

OBSERVATION = "the tool answered with a short record of twelve words about the item you asked for"


class ScriptedEpisode(Episode):
    """Ignores what the model wrote: the episode ends after its task's number of turns; each tool call takes
    the env's `tool_seconds` (a retrieval server's round trip: the host thread sleeps, the CPU is free)."""

    def step(self, text: str, num_tokens: int = 0) -> StepResult:
        self.turns += 1
        self.tokens += int(num_tokens)
        if self.turns >= self.task.data["turns"]:
            return self._end(text, float(self.task.data["turns"] % 2), {})
        time.sleep(self.env.tool_seconds)
        self.history.append((text, OBSERVATION))
        return StepResult(observation=OBSERVATION, done=False, info={})


class ScriptedEnv(Env):
    name = "scripted"

    def __init__(self, tool_seconds: float = 0.0):
        super().__init__()
        self.tool_seconds = tool_seconds

    def system_prompt(self, task: Task) -> str:
        return "Answer the question in several steps."

    def run_tool(self, task, action, episode) -> str:
        return OBSERVATION

    def score(self, task, answer, episode):
        return 0.0, {}

    def start(self, task: Task) -> Episode:
        return ScriptedEpisode(env=self, task=task)


def workload(episodes: int, seed: int = 0) -> list[Task]:
    rng = np.random.RandomState(seed)
    return [Task(id=f"scripted/{i}", question=f"question number {i} " * int(rng.randint(2, 6)), answers=("x",),
                 data={"turns": int(rng.randint(1, 7))}) for i in range(episodes)]


@dataclasses.dataclass
class Rollout:
    seconds: float
    tokens: int
    utilisation: float
    device_s: float
    leaves: list  # per episode: the turns' tokens (for the equality check)


class DeviceTimer:
    """Times the sampler's device calls used by the agent loops, each until its result is ready."""

    CALLS = ((agent_loop, ("start", "decode", "extend", "truncate", "tree_expand")),
             (continuous, ("decode", "extend_rows", "place_rows", "fork_rows", "copy_rows")))

    def __init__(self):
        self.seconds = 0.0

    @contextlib.contextmanager
    def active(self):
        saved = []
        for module, names in self.CALLS:
            for name in names:
                fn = getattr(module, name)
                saved.append((module, name, fn))
                setattr(module, name, self._timed(fn))
        try:
            yield self
        finally:
            for module, name, fn in saved:
                setattr(module, name, fn)

    def _timed(self, fn):
        def run(*args, **kwargs):
            t0 = time.perf_counter()
            out = jax.block_until_ready(fn(*args, **kwargs))
            self.seconds += time.perf_counter() - t0
            return out
        return run


def roll_out(policy: Policy, env: Env, tasks: list[Task], slots: int, *, timer: DeviceTimer | None = None
             ) -> Rollout:
    """Every task rolled out once: in waves of `slots` with whole-turn decode calls (`Batching()`: the
    turn-synchronous schedule) or through `slots` slots, `chunk` decode steps a call (continuous)."""
    engine = RolloutEngine(policy, env, seed=0)
    t0 = time.perf_counter()
    with timer.active() if timer else contextlib.nullcontext():
        trees = engine.roots(tasks)
        waves = [range(len(tasks))] if policy.batching.chunk else \
            [range(b, min(b + slots, len(tasks))) for b in range(0, len(tasks), slots)]
        for wave in waves:
            engine.expand(trees, [(i, 0, 1) for i in wave])
    seconds = time.perf_counter() - t0
    leaves = [[tuple(n.tokens) for n in t.path(t.leaves()[0].id)[1:]] for t in trees]
    return Rollout(seconds=seconds, tokens=engine.ledger.tokens_generated,
                   utilisation=engine.counters.decode_tokens / max(engine.counters.decode_slot_steps, 1),
                   device_s=timer.seconds if timer else 0.0, leaves=leaves)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="alternating rounds (>= 1; quote >= 5)")
    parser.add_argument("--quick", action="store_true", help="1 round, 24 episodes")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--slots", type=int, default=16)
    parser.add_argument("--chunk", type=int, default=16)
    parser.add_argument("--max_new_tokens", type=int, default=256)
    parser.add_argument("--mean_turn", type=int, default=48, help="1 / per-token chance of a stop id")
    parser.add_argument("--tool_ms", type=float, default=0.0, help="each tool call's latency (a sleep)")
    args = parser.parse_args()
    for name in ("repeats", "episodes", "slots", "chunk", "max_new_tokens", "mean_turn"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.tool_ms < 0:
        parser.error(f"--tool_ms must be >= 0, got {args.tool_ms}")
    if args.chunk > args.max_new_tokens:
        parser.error(f"--chunk={args.chunk} exceeds --max_new_tokens={args.max_new_tokens}")
    repeats, episodes = (1, 24) if args.quick else (args.repeats, args.episodes)

    config = get_preset(args.preset)
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = load_tokenizer(build_tokenizer(tmp))
    renderer = ReactRenderer(tokenizer)
    stops = tuple(range(300, 300 + max(1, config.vocab_size // args.mean_turn)))
    sampling = SamplingParams(max_new_tokens=args.max_new_tokens, stop_ids=stops)
    base = Policy(config, init_params(config, 0), sampling, renderer)
    modes = {"turn_sync": base,
             "continuous": dataclasses.replace(base, batching=Batching(args.chunk, args.slots, overlap_tools=False)),
             "overlap": dataclasses.replace(base, batching=Batching(args.chunk, args.slots, overlap_tools=True))}
    env, tasks = ScriptedEnv(args.tool_ms / 1000), workload(episodes)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, jax {jax.__version__} on "
          f"{jax.devices()[0].platform}; model {args.preset} ({num_params(config) / 1e6:.2f}M params); "
          f"{episodes} episodes of 1-6 turns, turns <= {args.max_new_tokens} tokens, tool calls of "
          f"{args.tool_ms} ms, {args.slots} slots, chunk {args.chunk}; {repeats} alternating rounds", flush=True)

    warm = {name: roll_out(policy, env, tasks, args.slots) for name, policy in modes.items()}
    same = all(w.leaves == warm["turn_sync"].leaves for w in warm.values())
    lengths = [len(turn) for episode in warm["turn_sync"].leaves for turn in episode]
    print(f"  turns: {len(lengths)}, tokens per turn median {int(np.median(lengths))} [min {min(lengths)}, "
          f"max {max(lengths)}]; all modes sampled the same tokens: {same}", flush=True)
    rounds = []
    for r in range(repeats):
        rounds.append({name: roll_out(policy, env, tasks, args.slots) for name, policy in modes.items()})
        print(f"  round {r + 1}: " + ", ".join(f"{name} {x.tokens / x.seconds:7.1f} tok/s"
                                                for name, x in rounds[-1].items()), flush=True)

    def ratio(fast, slow):
        values = [x[slow].seconds / x[fast].seconds for x in rounds]
        return {"median": round(float(np.median(values)), 3), "range": [round(min(values), 3), round(max(values), 3)]}

    share = {}
    for name, policy in modes.items():
        timer = DeviceTimer()
        timed = roll_out(policy, env, tasks, args.slots, timer=timer)
        share[name] = round(1 - timed.device_s / timed.seconds, 3)
    summary = {
        "rounds": repeats,
        "tool_ms": args.tool_ms,
        "same_tokens": same,
        "slot_utilisation": {name: round(w.utilisation, 3) for name, w in warm.items()},
        "tokens_per_s": {name: round(float(np.median([x[name].tokens / x[name].seconds for x in rounds])), 1)
                         for name in modes},
        "continuous_vs_turn_sync": ratio("continuous", "turn_sync"),
        "overlap_vs_continuous": ratio("overlap", "continuous"),
        "overlap_vs_turn_sync": ratio("overlap", "turn_sync"),
        "host_overhead_share": share,
    }
    print("slot utilisation: " + ", ".join(f"{k} {v:.3f}" for k, v in summary["slot_utilisation"].items()))
    for key in ("continuous_vs_turn_sync", "overlap_vs_continuous", "overlap_vs_turn_sync"):
        r = summary[key]
        print(f"{key.replace('_vs_', ' / ')} tokens/s: {r['median']:.2f}x [{r['range'][0]:.2f}, {r['range'][1]:.2f}]")
    print("host overhead share (outside device calls): " + ", ".join(f"{k} {v:.3f}" for k, v in share.items()))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
