"""The learner step's time and memory under each remat policy, with the LM head in one block or in blocks;
and (`--section layouts`) the per-path against the packed tree layout on the trees of real steps.

  python studies/benchmarks/bench_learner.py                    # about 1 min on a 2-core CPU
  python studies/benchmarks/bench_learner.py --preset small --context 2048 --vocab 0
  python studies/benchmarks/bench_learner.py --section layouts  # packed vs paths, real trees (about 15 min)

The layouts section restores the SFT checkpoints the powered grids keep (`studies/powered/results/math`,
`studies/powered/results/funcall`), samples one step of each arm there (GRPO, the paper's TRACE, TRACE global; equal
rollouts, M of the grid's budget), and times `learner.train_step` on that step's sequences in each layout:
tokens computed (rows x length of each batch, and the real tokens in it), the step time (median [min, max]
of alternating repeats, and the paths/packed ratio per round), XLA's memory plan of each compiled step.

Compiles `rl/learner.py`'s train step for each variant (`learner.remat` "dots" / "layer"; the head's logits in
one block, or in blocks of `--block` positions via `models/memory.LOGITS_BYTES`), then times one step of each
in turn, `--repeats` rounds (alternating, so a slow spell of the machine hits every variant alike). Prints
per variant the median [min, max] step time, its ratio to the default ("dots", one block) measured within
each round, and XLA's memory analysis of the compiled step (arguments + outputs + temporaries - aliased).
The last line is one JSON object with those figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from trace_jax.models import memory
from trace_jax.models.presets import get_preset
from trace_jax.models.transformer import init_params
from trace_jax.rl import learner
from trace_jax.rl.losses import LossConfig


def batch_of(rng, vocab: int, num_micro: int, micro: int, context: int) -> dict[str, jax.Array]:
    shape = (num_micro, micro, context)
    return {"tokens": jnp.asarray(rng.integers(0, vocab, shape), jnp.int32), "valid": jnp.ones(shape, bool),
            "targets": jnp.asarray(rng.integers(0, vocab, shape), jnp.int32),
            "mask": jnp.asarray(rng.random(shape) < 0.7),
            "advantages": jnp.asarray(rng.normal(size=shape), jnp.float32),
            "old_logprobs": jnp.asarray(-rng.random(shape) * 3, jnp.float32)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--section", choices=("remat", "layouts"), default="remat")
    parser.add_argument("--tasks", default="math,funcall", help="layouts: the powered grids whose trees to use")
    parser.add_argument("--preset", default="mini")
    parser.add_argument("--vocab", type=int, default=32000, help="vocabulary size (0: the preset's)")
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--micro", type=int, default=2, help="sequences per micro-batch")
    parser.add_argument("--num_micro", type=int, default=2, help="micro-batches per step")
    parser.add_argument("--block", type=int, default=128, help="positions per block of the blocked head")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.section == "layouts":
        return layouts(args.tasks.split(","), args.repeats)

    base = get_preset(args.preset, **({"vocab_size": args.vocab} if args.vocab else {}))
    optimizer = learner.make_optimizer(learner.LearnerConfig())
    batch = batch_of(np.random.default_rng(0), base.vocab_size, args.num_micro, args.micro, args.context)
    one_block = memory.LOGITS_BYTES
    variants = {"dots, one block": ("dots", one_block), "layer, one block": ("layer", one_block),
                "dots, blocks": ("dots", args.micro * base.vocab_size * 4 * args.block),
                "layer, blocks": ("layer", args.micro * base.vocab_size * 4 * args.block)}
    print(f"{args.preset}: {args.num_micro} micro-batches of {args.micro} x {args.context} tokens, vocab "
          f"{base.vocab_size}; blocked head: {args.block} positions", flush=True)
    programs, states, memory_bytes = {}, {}, {}
    for name, (remat, logits_bytes) in variants.items():
        memory.LOGITS_BYTES = logits_bytes  # read while tracing: each compiled program keeps its own
        jax.clear_caches()  # else jit reuses the trace of a variant with the same static arguments
        config = base.replace(remat=remat)
        params = init_params(config, 0)
        opt_state = optimizer.init(params)
        compiled = learner.train_step.lower(config, LossConfig(), optimizer, params, opt_state, batch).compile()
        m = compiled.memory_analysis()
        memory_bytes[name] = (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
                              - m.alias_size_in_bytes)
        params, opt_state, _ = compiled(params, opt_state, batch)  # warm-up
        jax.block_until_ready(params)
        programs[name], states[name] = compiled, (params, opt_state)
    memory.LOGITS_BYTES = one_block
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, compiled in programs.items():
            params, opt_state = states[name]
            t0 = time.perf_counter()
            params, opt_state, metrics = compiled(params, opt_state, batch)
            jax.block_until_ready((params, metrics))
            times[name].append(time.perf_counter() - t0)
            states[name] = (params, opt_state)
    default = "dots, one block"
    result = {}
    for name in variants:
        ratios = [t / d for t, d in zip(times[name], times[default])]
        result[name] = {"step_s": statistics.median(times[name]), "step_s_min": min(times[name]),
                        "step_s_max": max(times[name]), "ratio_to_default": statistics.median(ratios),
                        "ratio_min": min(ratios), "ratio_max": max(ratios), "xla_bytes": memory_bytes[name]}
        r = result[name]
        print(f"{name:>18}: {r['step_s']:.3f} s [{r['step_s_min']:.3f}, {r['step_s_max']:.3f}], "
              f"x{r['ratio_to_default']:.2f} [{r['ratio_min']:.2f}, {r['ratio_max']:.2f}] of the default; "
              f"XLA plan {r['xla_bytes'] / memory.GIB:.3f} GiB", flush=True)
    print(json.dumps({"preset": args.preset, "vocab": base.vocab_size, "context": args.context, "micro": args.micro,
                      "num_micro": args.num_micro, "block": args.block, "repeats": args.repeats, "variants": result}))


def arm_start(task: str, arm: str, workdir: str):
    """(setup, params, make_allocator, pools) for steps of `arm` from the powered `task` grid's stored SFT checkpoint
    (`studies/powered/results/<task>/shared`, restored into `workdir`): `pools(i)` is step i's candidate pool."""
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path.insert(0, repo)  # configs/, studies/
    from trace_jax.compare import grid, results_store
    from trace_jax.config.files import from_config_dict, load_config_file
    from trace_jax.run import experiment, sft, train

    config = load_config_file(os.path.join(repo, "studies", "powered", "config.py") + f":task={task}")
    compare, base = grid.split_config(config)
    base["budget"].update(unit="rollouts", tokens=0)
    run = from_config_dict(grid.run_config_dict(base, grid.Variant(arm, grid.ARMS[arm]), seed=0))
    shared = os.path.join(workdir, task)
    if not results_store.restore_start(compare.results, shared) and not os.path.isdir(os.path.join(shared, "sft")):
        raise SystemExit(f"no SFT checkpoint under {compare.results}/shared: run that grid first")
    setup = experiment.build(run, shared)
    params = sft.warm_start(setup, shared, None)
    tasks = experiment.train_tasks(setup)

    def pools(step: int, size: int):
        return train._pool(tasks, step * size, size, run.seed)[0]

    return setup, params, lambda: train.make_allocator(setup), pools


def real_step(task: str, arm: str, workdir: str):
    """(setup, params, trees, sequences) of one step of `arm` from the powered `task` grid's SFT checkpoint."""
    from trace_jax.rl.advantages import estimate
    from trace_jax.rollout.agent_loop import RolloutEngine

    setup, params, make_allocator, pools = arm_start(task, arm, workdir)
    allocator = make_allocator()
    outcome = allocator.step(RolloutEngine(setup.policy(params), setup.env, seed=setup.run.seed),
                             pools(0, allocator.pool_size))
    return setup, params, outcome.trees, estimate(outcome.trees, setup.run.advantage)


def layouts(tasks: list[str], repeats: int) -> None:
    import dataclasses
    import tempfile

    from trace_jax.rl import updates

    result = {}
    with tempfile.TemporaryDirectory() as workdir:
        for task in tasks:
            for arm in ("grpo", "trace", "trace_global"):
                setup, params, trees, sequences = real_step(task, arm, workdir)
                run = setup.run
                optimizer = learner.make_optimizer(run.learner)
                compiled, batches, plan = {}, {}, {}
                for layout in ("paths", "packed"):
                    config = dataclasses.replace(run.learner, layout=layout, mini_batches=1, epochs=1)
                    batch = jax.tree.map(jnp.asarray, updates.plan(trees, sequences, config, seed=0)[0])
                    opt_state = optimizer.init(params)
                    program = learner.train_step.lower(setup.model_config, run.loss, optimizer, params, opt_state,
                                                       batch).compile()
                    m = program.memory_analysis()
                    plan[layout] = (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
                                    - m.alias_size_in_bytes)
                    fresh = jax.tree.map(jnp.copy, (params, opt_state))
                    jax.block_until_ready(program(*fresh, batch))  # warm-up
                    compiled[layout], batches[layout] = program, batch
                times = {layout: [] for layout in compiled}
                for _ in range(repeats):
                    for layout, program in compiled.items():
                        state = jax.tree.map(jnp.copy, (params, optimizer.init(params)))
                        jax.block_until_ready(state)
                        t0 = time.perf_counter()
                        jax.block_until_ready(program(*state, batches[layout]))
                        times[layout].append(time.perf_counter() - t0)
                ratios = [p / q for p, q in zip(times["paths"], times["packed"])]
                key = f"{task} {arm}"
                result[key] = {
                    "sequences": len(sequences), "trees": len(trees),
                    **{f"{layout}_{k}": v for layout in compiled for k, v in (
                        ("tokens_computed", int(np.prod(batches[layout]["tokens"].shape))),
                        ("real_tokens", int(np.asarray(batches[layout]["valid"]).sum())),
                        ("step_s", statistics.median(times[layout])), ("step_s_min", min(times[layout])),
                        ("step_s_max", max(times[layout])), ("xla_bytes", plan[layout]))},
                    "speedup": statistics.median(ratios), "speedup_min": min(ratios), "speedup_max": max(ratios)}
                r = result[key]
                print(f"{key:>22}: {r['sequences']} sequences in {r['trees']} trees; real tokens paths "
                      f"{r['paths_real_tokens']} / packed {r['packed_real_tokens']} (computed {r['paths_tokens_computed']}"
                      f" / {r['packed_tokens_computed']}); step paths {r['paths_step_s']:.3f} s [{r['paths_step_s_min']:.3f}"
                      f", {r['paths_step_s_max']:.3f}], packed {r['packed_step_s']:.3f} s [{r['packed_step_s_min']:.3f}, "
                      f"{r['packed_step_s_max']:.3f}]: packed x{r['speedup']:.2f} [{r['speedup_min']:.2f}, "
                      f"{r['speedup_max']:.2f}] faster; XLA plan paths {r['paths_xla_bytes'] / memory.GIB:.3f} GiB, packed "
                      f"{r['packed_xla_bytes'] / memory.GIB:.3f} GiB", flush=True)
                jax.clear_caches()
    print(json.dumps({"section": "layouts", "repeats": repeats, "machine": f"{os.cpu_count()} CPU cores, "
                      f"{jax.default_backend()}", "steps": result}))


if __name__ == "__main__":
    main()
