"""Paper-scale dry run: will a config's TRACE step fit its devices? Abstract params (no weights), fake CPU
devices, and XLA's own memory analysis of the programs a step runs, compiled ahead of time for the
config's mesh, budget and lengths:

  - learner: the sharded train step (`rl/learner.py`) on the config's (data, fsdp, tensor) mesh, one
    optimizer step over the step's rollouts in micro-batches of `learner.micro_batch` sequences;
  - decode: the sampler's decode loop over the rows decoding at once (`rl.decode_slots`, the slot table of
    continuous batching; without it all `budget.rollouts` rows of a step), in the sampling layout
    (`parallel/rules.py`): rows over data x fsdp, heads over tensor, params replicated over the batch axes
    ("replicated") or left FSDP-sharded for XLA to gather layer by layer ("fsdp_gathered"); both compiled;
  - prefill: one `MAX_CHUNK`-token prefill chunk (`extend`) into those rows;
  - tree_expand: the fork's row gather (`sampling/fork.py`) with a quarter of the rows from other shards.

  - roots: one prefill chunk into the prompts' state (every candidate prompt is prefilled once, for the
    predictor's features: `budget.candidates` rows at once, or waves of `rl.decode_slots` rows when
    `rl.keep_prefixes=False`).

Beside a sampler program, other sampler states stay resident on the device and are added to its total:
with `rl.keep_prefixes=True` the prompts' state and the archive of finished rollouts' rows
(`budget.rollouts` rows); with `rl.keep_prefixes=False` (no state outlives the call that made it) one wave
of prefixes prefilled again for a fork (`rl.decode_slots` rows; `rollout/agent_loop.py`).

  python experiments/dry_run.py --config configs/qwen3_14b_multihop.py --devices 16
  python experiments/dry_run.py --config configs/qwen3_8b_multihop.py --devices 8

Per program and device: argument, output, temporary and aliased (donated) bytes from
`compiled.memory_analysis()`, their sum (arguments + outputs + temporaries - aliased), FLOPs per token
from `compiled.cost_analysis()` where XLA reports them (not inside loops), and `trace_jax/models/memory.py`'s
estimate beside it. XLA:CPU's loop-invariant code motion is disabled (`CPU_HOISTING_PASSES`: on a CPU it
hoists float32 copies of every bf16 weight out of the loops; `--cpu_hoisting` keeps it). Per device type,
the sampling layout `to_sampling_layout` would pick there (replicated when a tensor shard of the params
takes at most a quarter of the memory) and whether every program fits. The last
line is one JSON object {"config", "devices", "mesh", "per_device_bytes": {"learner", "decode", "prefill",
"tree_expand", "roots"} (on the smallest device type's layout, resident states included),
"per_device_bytes_by_device", "sampling_layout", "fits": {"v5e 16GiB": bool, "v5p 95GiB": bool, "H100 80GB":
bool}, "decoding_rows", "resident_sampler_bytes", "source"}.
"""

from __future__ import annotations

import argparse
import os
import sys

_parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
_parser.add_argument("--config", required=True, help="a config file (path[:args], as experiments/train.py takes)")
_parser.add_argument("--devices", type=int, default=0, help="fake CPU devices (default: the config's mesh size)")
_parser.add_argument("--prompt_tokens", type=int, default=512, help="prompt length before the episode's tokens")
_parser.add_argument("--cpu_hoisting", action="store_true",
                     help="keep XLA:CPU's loop-invariant code motion (CPU_HOISTING_PASSES): its plan, not a TPU's")

# XLA:CPU has no bfloat16 matmul: it upcasts every bf16 dot's operands to float32, and its loop-invariant code
# motion then hoists those converts out of the layer scan and the decode loop, materialising a float32 copy
# of every weight (and of the saved layer inputs) that a bf16-native compiler (TPU, GPU) never makes: the
# 14B learner on fsdp 4 x tensor 4 plans 18.89 GiB with them, 13.47 GiB without (gradients summed in bf16;
# buffer assignment: f32[40,1280,4352] copies of each MLP weight, f32[40,4,5120,1280] of the saved layer
# inputs). The dry run
# disables those passes unless --cpu_hoisting; the converts then stay inside the loops, one layer at a time.
CPU_HOISTING_PASSES = "while-loop-invariant-code-motion,while-loop-expensive-invariant-code-motion"

if __name__ == "__main__":  # fake devices must exist before JAX starts
    _args = _parser.parse_args()
    flags = [os.environ.get("XLA_FLAGS", "")]
    if _args.devices:
        flags.append(f"--xla_force_host_platform_device_count={_args.devices}")
    if not _args.cpu_hoisting:
        flags.append(f"--xla_disable_hlo_passes={CPU_HOISTING_PASSES}")
    os.environ["XLA_FLAGS"] = " ".join(f for f in flags if f)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import functools  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import tempfile  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

from trace_jax.config.files import from_config_dict  # noqa: E402
from trace_jax.models.memory import GIB, estimate  # noqa: E402
from trace_jax.models.presets import get_preset  # noqa: E402
from trace_jax.models.transformer import num_params, param_shapes  # noqa: E402
from trace_jax.parallel.mesh import make_mesh  # noqa: E402
from trace_jax.parallel.rules import (BATCH_AXES, replicated_sampling_fits, row_shards,  # noqa: E402
                                      sampling_param_shardings)
from trace_jax.rl import learner  # noqa: E402
from trace_jax.sampling import SamplingParams  # noqa: E402
from trace_jax.sampling import engine  # noqa: E402
from trace_jax.sampling.fork import _exchange  # noqa: E402
from trace_jax.sampling.state import batch_bucket, empty_state, length_bucket, state_specs  # noqa: E402

DEVICES = {"v5e 16GiB": 16 * GIB, "v5p 95GiB": 95 * GIB, "H100 80GB": 80 * 10 ** 9}


def _abstract(tree, shardings=None):
    if shardings is None:
        return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)
    return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings)


def _analysis(compiled, tokens: int, min_flops_per_token: float) -> dict:
    m = compiled.memory_analysis()
    total = m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes - m.alias_size_in_bytes
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    flops = (cost or {}).get("flops")
    per_token = (flops or 0) / tokens
    return {"arguments": m.argument_size_in_bytes, "outputs": m.output_size_in_bytes,
            "temporaries": m.temp_size_in_bytes,
            "aliased": m.alias_size_in_bytes, "total": total,
            # XLA leaves the work inside scan/while loops out of its count: below 2 x params per token it is that
            "flops_per_token": per_token if per_token >= min_flops_per_token else None}


def learner_program(run, model_config, mesh, context: int) -> dict:
    optimizer = learner.make_optimizer(run.learner)
    params = param_shapes(model_config)
    step, (p_sh, o_sh, b_sh) = learner.sharded_program(mesh, model_config, run.loss, optimizer, params)
    micro = run.learner.micro_batch
    num_micro = max(1, batch_bucket(run.budget.rollouts) // micro)
    batch = {k: jax.ShapeDtypeStruct((num_micro, micro, context), d, sharding=b_sh) for k, d in dict(
        tokens=jnp.int32, valid=bool, targets=jnp.int32, mask=bool, advantages=jnp.float32,
        old_logprobs=jnp.float32).items()}
    opt_state = jax.eval_shape(optimizer.init, params)
    compiled = step.lower(_abstract(params, p_sh), _abstract(opt_state, o_sh), batch).compile()
    return _analysis(compiled, num_micro * micro * context, 2 * num_params(model_config))


def decoding_rows(run, mesh) -> int:
    """Rows of the state the decode loop runs on: the slot table, or every rollout of the step."""
    return batch_bucket(run.rl.decode_slots or run.budget.rollouts, row_shards(mesh))


def state_bytes_per_device(model_config, mesh, rows: int, capacity: int) -> int:
    """One device's share of a sampler state of `rows` rows and `capacity` tokens in the sampling layout."""
    state = _state(model_config, mesh, batch_bucket(rows, row_shards(mesh)), capacity)
    return sum(math.prod(x.sharding.shard_shape(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves(state))


def prompt_rows(run) -> int:
    """Rows of a prompts' state: every candidate at once, or (keep_prefixes=False) a wave of decode_slots."""
    prompts = run.budget.candidates or run.budget.prompts
    return prompts if run.rl.keep_prefixes or not run.rl.decode_slots else min(prompts, run.rl.decode_slots)


def resident_states(run, model_config, mesh, context: int, prompt_tokens: int) -> dict[str, int]:
    """The sampler states that stay on each device beside the one a program runs on (bytes per device)."""
    if run.rl.keep_prefixes:
        prompts = state_bytes_per_device(model_config, mesh, prompt_rows(run),
                                         length_bucket(prompt_tokens + run.rl.max_new_tokens))
        return {"prompts": prompts, "archive": state_bytes_per_device(model_config, mesh, run.budget.rollouts, context)}
    return {"prefix_wave": state_bytes_per_device(model_config, mesh, decoding_rows(run, mesh), context)}


def _state(model_config, mesh, rows: int, capacity: int):
    shapes = jax.eval_shape(functools.partial(empty_state, model_config, rows, capacity))
    return _abstract(shapes, jax.tree.map(lambda spec: NamedSharding(mesh, spec), state_specs(shapes, mesh)))


def sampler_programs(run, model_config, mesh, context: int, prompt_tokens: int, *, gather_fsdp: bool) -> dict:
    """The decode loop and one prefill chunk in the sampling layout (`parallel/rules.py`): rows over
    data x fsdp, heads over tensor, params replicated over the batch axes or (`gather_fsdp`) FSDP-sharded."""
    rows = decoding_rows(run, mesh)
    params = param_shapes(model_config)
    params = _abstract(params, sampling_param_shardings(params, mesh, gather_fsdp=gather_fsdp))
    state = _state(model_config, mesh, rows, context)
    sampling = SamplingParams(temperature=run.rl.temperature, top_p=run.rl.top_p, max_new_tokens=run.rl.max_new_tokens)
    replicated = NamedSharding(mesh, P())

    def per_row(*shape, dtype, rows=rows):
        return jax.ShapeDtypeStruct((rows, *shape), dtype, sharding=NamedSharding(mesh, P(BATCH_AXES)))

    decode = engine._decode.lower(model_config, sampling, sampling.max_new_tokens, mesh, params, state,
                                  jax.ShapeDtypeStruct((), jnp.uint32, sharding=replicated),
                                  per_row(dtype=jnp.uint32), per_row(dtype=bool), per_row(dtype=jnp.int32)).compile()
    chunk = engine.MAX_CHUNK
    prefill = engine._append.lower(model_config, mesh, params, state, per_row(chunk, dtype=jnp.int32),
                                   per_row(chunk, dtype=bool)).compile()
    # tree_expand's fork: a quarter of every shard's rows from other shards
    shards = row_shards(mesh)
    width = batch_bucket(max(1, rows // shards // 4)) if shards > 1 else 0
    send = jax.ShapeDtypeStruct((shards * max(width, 1),), jnp.int32, sharding=NamedSharding(mesh, P(BATCH_AXES)))
    fork = _exchange.lower(state, per_row(dtype=jnp.int32), send, mesh, width).compile()
    prompts = batch_bucket(prompt_rows(run), row_shards(mesh))
    roots = engine._append.lower(model_config, mesh, params, _state(model_config, mesh, prompts, length_bucket(
        prompt_tokens + run.rl.max_new_tokens)), per_row(chunk, dtype=jnp.int32, rows=prompts),
                                 per_row(chunk, dtype=bool, rows=prompts)).compile()
    least = 2 * num_params(model_config)
    return {"decode": _analysis(decode, rows * run.rl.max_new_tokens, least),
            "prefill": _analysis(prefill, rows * chunk, least), "tree_expand": _analysis(fork, rows, least),
            "roots": _analysis(roots, prompts * chunk, least), "rows": rows}


def main():
    args = _parser.parse_args()
    path, _, arg = args.config.partition(":")
    spec = importlib.util.spec_from_file_location("dry_run_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config(arg or None)
    config.model.checkpoint = tempfile.mkdtemp()  # validated as a path only: shapes come from the preset, no weights
    run = from_config_dict(config)
    model_config = get_preset(run.model.preset, param_dtype=run.model.param_dtype, dtype=run.model.dtype,
                              remat=run.learner.remat)
    mesh = make_mesh(run.mesh.data, run.mesh.fsdp, run.mesh.tensor)
    context = length_bucket(args.prompt_tokens + run.task.max_tokens)
    print(f"{path}: {run.model.preset} ({run.model.param_dtype}), mesh {dict(mesh.shape)} on {len(jax.devices())} "
          f"fake CPU devices, {run.budget.rollouts} rollouts per step, {decoding_rows(run, mesh)} decoding at once "
          f"(rl.decode_slots={run.rl.decode_slots}, rl.keep_prefixes={run.rl.keep_prefixes}), context {context} "
          f"tokens, learner micro-batches of {run.learner.micro_batch} (remat {run.learner.remat}); XLA:CPU loop "
          f"hoisting {'kept' if args.cpu_hoisting else 'disabled'}", flush=True)
    resident = resident_states(run, model_config, mesh, context, args.prompt_tokens)
    print("resident sampler states per device (added to each sampler program): " + ", ".join(
        f"{k} {v / GIB:.2f} GiB" for k, v in resident.items()), flush=True)
    learner_bytes = learner_program(run, model_config, mesh, context)
    layouts = {layout: sampler_programs(run, model_config, mesh, context, args.prompt_tokens,
                                        gather_fsdp=layout == "fsdp_gathered")
               for layout in ("replicated", "fsdp_gathered")}
    shards = run.mesh.fsdp * run.mesh.tensor
    estimated = {
        "learner": estimate(model_config, rollout_rows=1, context=context, micro_batch=max(
            1, run.learner.micro_batch // (run.mesh.data * run.mesh.fsdp)), shards=shards),
        "decode": estimate(model_config, rollout_rows=layouts["replicated"]["rows"], context=context, micro_batch=1)}
    for layout, sampler in [(None, {"learner": learner_bytes})] + list(layouts.items()):
        for name in ("learner", "decode", "prefill", "tree_expand", "roots"):
            if name not in sampler:
                continue
            p = sampler[name]
            flops = ("" if p["flops_per_token"] is None else f", {p['flops_per_token'] / 1e9:.1f} GFLOP per token")
            note = ""
            if name in estimated:
                e = estimated[name]
                part = e.train_state + e.learner_activations if name == "learner" else e.rollout_cache / (
                    run.mesh.data * run.mesh.fsdp * min(run.mesh.tensor, model_config.num_kv_heads))
                what = "train state + activations" if name == "learner" else "KV cache share"
                note = f"; estimate (models/memory.py, {what}) {part / GIB:.1f} GiB"
            label = name if layout is None else f"{name} ({layout})"
            print(f"{label:>28}: {p['total'] / GIB:8.2f} GiB per device (arguments {p['arguments'] / GIB:.2f}, outputs "
                  f"{p['outputs'] / GIB:.2f}, temporaries {p['temporaries'] / GIB:.2f}, aliased "
                  f"{p['aliased'] / GIB:.2f}){flops}{note}", flush=True)
    param_bytes = num_params(model_config) * jnp.dtype(model_config.param_dtype).itemsize
    fits, layout_for, per_device = {}, {}, {}
    for device, limit in DEVICES.items():  # the layout `parallel/rules.to_sampling_layout` would pick there
        layout = "replicated" if replicated_sampling_fits(param_bytes, mesh, limit) else "fsdp_gathered"
        programs = {"learner": learner_bytes["total"], **{k: layouts[layout][k]["total"] + sum(resident.values())
                                                          for k in ("decode", "prefill", "tree_expand", "roots")}}
        layout_for[device], fits[device] = layout, max(programs.values()) <= limit
        per_device[device] = programs
        worst = max(programs, key=programs.get)
        print(f"{device}: sampling layout {layout}, the largest program {worst} {programs[worst] / GIB:.2f} GiB: "
              f"{'fits' if fits[device] else 'does not fit'}")
    smallest = min(DEVICES, key=DEVICES.get)
    print(json.dumps({"config": args.config, "devices": len(jax.devices()), "mesh": dict(mesh.shape),
                      "per_device_bytes": per_device[smallest], "per_device_bytes_by_device": per_device,
                      "sampling_layout": layout_for, "fits": fits, "decoding_rows": decoding_rows(run, mesh),
                      "resident_sampler_bytes": resident,
                      "source": "compiled.memory_analysis() on fake CPU devices (sampler programs plus the resident "
                                "sampler states); sampler in the sampling layout; XLA:CPU's loop-invariant code "
                                + ("motion kept" if args.cpu_hoisting else "motion disabled (CPU_HOISTING_PASSES)")}))

if __name__ == "__main__":
    main()
