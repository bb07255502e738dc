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
  /tmp/tpu/bin/python experiments/dry_run.py --config configs/qwen3_14b_multihop.py --target v5e:4x4

With `--target TOPOLOGY` (v5e:4x4, v5e:2x4, v5p:2x2x1, v4:2x2x1, v6e:4x4, ...) the same programs are compiled
ahead of time by the real TPU compiler (libtpu, `jax.experimental.topologies.get_topology_desc`) for that
topology's chips, on this CPU host, and judged against that chip's HBM (`TPU_CHIPS`); the compiler's cost
analysis gives each program's FLOPs and bytes accessed, and from them a roofline time at the chip's peak
FLOP/s and HBM bandwidth and the learner's MFU (compiler estimates, not measurements). libtpu lives in its
own environment so the CPU install and its tests never start a TPU runtime: `experiments/install_libtpu.sh`
makes one (`/tmp/tpu`, a venv over this one's packages plus libtpu). Without libtpu, `--target` falls back to
XLA:CPU on as many fake devices as the topology has chips, and the JSON line says so (`compiler`).

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
import importlib.util
import math
import os
import sys

_parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
_parser.add_argument("--config", required=True, help="a config file (path[:args], as experiments/train.py takes)")
_parser.add_argument("--devices", type=int, default=0, help="fake CPU devices (default: the config's mesh size)")
_parser.add_argument("--prompt_tokens", type=int, default=512, help="prompt length before the episode's tokens")
_parser.add_argument("--target", default="",
                     help="a TPU topology to compile for with libtpu (v5e:4x4, v5p:2x2x1, ...); XLA:CPU when absent")
_parser.add_argument("--mesh", default="", help="data,fsdp,tensor overriding the config's mesh (e.g. 1,4,4 for a slice)")
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



def _chips(target: str) -> int:
    """Chips of a topology name: the product of its shape (`v5e:4x4` -> 16)."""
    kind, _, shape = target.partition(":")
    try:
        return math.prod(int(n) for n in shape.split("x"))
    except ValueError:
        raise SystemExit(f"--target={target!r}: expected <chip>:<shape>, e.g. v5e:4x4 or v5p:2x2x1") from None


def _libtpu() -> str | None:
    """libtpu's version when it is importable here (then --target compiles with the TPU compiler), else None."""
    if importlib.util.find_spec("libtpu") is None:
        return None
    from importlib import metadata
    try:
        return metadata.version("libtpu")
    except metadata.PackageNotFoundError:
        return "unknown version"


if __name__ == "__main__":  # fake devices must exist before JAX starts
    _args = _parser.parse_args()
    flags = [os.environ.get("XLA_FLAGS", "")]
    if _args.target and _libtpu():
        os.environ["JAX_PLATFORMS"] = "cpu"  # the host runs on CPU; the TPU topology is only compiled for
        # compiling touches no TPU, so two dry runs may hold libtpu at once (its lockfile would refuse the second)
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
        # as many host devices as the topology could have (v4: two per chip), so the config's mesh check passes
        flags.append(f"--xla_force_host_platform_device_count={2 * _chips(_args.target)}")
    else:
        devices = _args.devices or (_chips(_args.target) if _args.target else 0)
        if devices:
            flags.append(f"--xla_force_host_platform_device_count={devices}")
        if not _args.cpu_hoisting:
            flags.append(f"--xla_disable_hlo_passes={CPU_HOISTING_PASSES}")
    os.environ["XLA_FLAGS"] = " ".join(f for f in flags if f)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import functools  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402
from typing import NamedTuple  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

from trace_jax.config.files import from_config_dict, load_config_file  # noqa: E402
from trace_jax.models.memory import GIB, estimate  # noqa: E402
from trace_jax.models.presets import get_preset  # noqa: E402
from trace_jax.models.transformer import num_params, param_shapes  # noqa: E402
from trace_jax.parallel.mesh import make_mesh  # noqa: E402
from trace_jax.parallel.rules import (BATCH_AXES, replicated_sampling_fits, row_shards,  # noqa: E402
                                      sampling_param_shardings)
from trace_jax.rl import learner  # noqa: E402
from trace_jax.sampling import SamplingParams  # noqa: E402
from trace_jax.sampling import decoding  # noqa: E402
from trace_jax.sampling import prefill as prefill_programs  # noqa: E402
from trace_jax.sampling.fork import _exchange  # noqa: E402
from trace_jax.sampling.state import batch_bucket, empty_state, length_bucket, state_specs  # noqa: E402

DEVICES = {"v5e 16GiB": 16 * GIB, "v5p 95GiB": 95 * GIB, "H100 80GB": 80 * 10 ** 9}

# Per chip: HBM (the whole capacity is assumed usable: libtpu's own reserve is inside its memory analysis),
# HBM bandwidth (bytes/s) and peak bf16 FLOP/s, from Google Cloud's TPU system-architecture pages
# (cloud.google.com/tpu/docs/v4, /v5e, /v5p, /v6e).
TPU_CHIPS = {"v4": (32 * GIB, 1228e9, 275e12), "v5e": (16 * GIB, 819e9, 197e12),
             "v5p": (95 * GIB, 2765e9, 459e12), "v6e": (32 * GIB, 1640e9, 918e12)}


class Target(NamedTuple):  # a NamedTuple: tests load this file as a module outside sys.modules
    """What the programs are compiled for: a TPU topology's devices with libtpu, else fake CPU devices."""

    name: str  # the topology, "" without --target
    devices: list | None  # the topology's devices (libtpu), or None: jax.devices()
    compiler: str
    hbm_per_device: int = 0
    bandwidth: float = 0.0  # HBM bytes/s per device
    peak_flops: float = 0.0  # bf16 FLOP/s per device


def target_of(name: str) -> Target:
    if not name:
        return Target("", None, "XLA:CPU (fake CPU devices)")
    kind = name.partition(":")[0]
    if kind not in TPU_CHIPS:
        raise SystemExit(f"--target={name!r}: unknown chip {kind!r}; known: {sorted(TPU_CHIPS)}")
    hbm, bandwidth, peak = TPU_CHIPS[kind]
    version = _libtpu()
    if version is None:
        return Target(name, None, "XLA:CPU (fallback: libtpu is not importable here; run "
                      "experiments/install_libtpu.sh and use its python)", hbm, bandwidth, peak)
    from jax.experimental import topologies
    devices = list(topologies.get_topology_desc(platform="tpu", topology_name=name).devices)
    per_chip = len(devices) / _chips(name)  # v4 exposes both TensorCores of a chip as devices
    return Target(name, devices, f"libtpu {version} ({devices[0].device_kind})", int(hbm / per_chip),
                  bandwidth / per_chip, peak / per_chip)


def _abstract(tree, shardings=None):
    if shardings is None:
        return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)
    return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings)


def _analysis(compiled, tokens: int, min_flops_per_token: float) -> dict:
    m = compiled.memory_analysis()
    total = m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes - m.alias_size_in_bytes
    cost = compiled.cost_analysis()
    cost = (cost[0] if isinstance(cost, (list, tuple)) else cost) or {}
    flops = cost.get("flops")
    per_token = (flops or 0) / tokens
    return {"arguments": m.argument_size_in_bytes, "outputs": m.output_size_in_bytes,
            "temporaries": m.temp_size_in_bytes,
            "aliased": m.alias_size_in_bytes, "total": total,
            # XLA leaves the work inside scan/while loops out of its count: below 2 x params per token it is that
            "flops_per_token": per_token if per_token >= min_flops_per_token else None,
            # the compiler's per-device cost of one call (loop bodies as it counts them)
            "flops": flops, "bytes_accessed": cost.get("bytes accessed"), "tokens": tokens}


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

    decode = decoding._decode.lower(model_config, sampling, sampling.max_new_tokens, mesh, params, state,
                                  jax.ShapeDtypeStruct((), jnp.uint32, sharding=replicated),
                                  per_row(dtype=jnp.uint32), per_row(dtype=bool), per_row(dtype=jnp.int32)).compile()
    chunk = prefill_programs.MAX_CHUNK
    prefill = prefill_programs._append.lower(model_config, mesh, params, state, per_row(chunk, dtype=jnp.int32),
                                             per_row(chunk, dtype=bool)).compile()
    # tree_expand's fork: a quarter of every shard's rows from other shards
    shards = row_shards(mesh)
    width = batch_bucket(max(1, rows // shards // 4)) if shards > 1 else 0
    send = jax.ShapeDtypeStruct((shards * max(width, 1),), jnp.int32, sharding=NamedSharding(mesh, P(BATCH_AXES)))
    fork = _exchange.lower(state, per_row(dtype=jnp.int32), send, mesh, width).compile()
    prompts = batch_bucket(prompt_rows(run), row_shards(mesh))
    roots = prefill_programs._append.lower(
        model_config, mesh, params, _state(model_config, mesh, prompts, length_bucket(prompt_tokens + run.rl.max_new_tokens)),
        per_row(chunk, dtype=jnp.int32, rows=prompts), per_row(chunk, dtype=bool, rows=prompts)).compile()
    least = 2 * num_params(model_config)
    # the KV cache's sharding as the compiled decode program takes it, beside the one the layout declares
    compiled_state = decode.input_shardings[0][1]
    kv_sharding = {"compiled": str(compiled_state.cache.k[0].spec), "layout": str(state.cache.k[0].sharding.spec)}
    return {"kv_cache_sharding": kv_sharding, "decode": _analysis(decode, rows * run.rl.max_new_tokens, least),
            "prefill": _analysis(prefill, rows * chunk, least), "tree_expand": _analysis(fork, rows, least),
            "roots": _analysis(roots, prompts * chunk, least), "rows": rows}


def main():
    args = _parser.parse_args()
    path = args.config.partition(":")[0]
    config = load_config_file(args.config)
    config.model.checkpoint = tempfile.mkdtemp()  # validated as a path only: shapes come from the preset, no weights
    if args.mesh:
        try:
            config.mesh.data, config.mesh.fsdp, config.mesh.tensor = (int(n) for n in args.mesh.split(","))
        except ValueError:
            raise SystemExit(f"--mesh={args.mesh!r}: expected data,fsdp,tensor, e.g. 1,4,4") from None
    run = from_config_dict(config)
    model_config = get_preset(run.model.preset, param_dtype=run.model.param_dtype, dtype=run.model.dtype,
                              remat=run.learner.remat)
    target = target_of(args.target)
    available = len(target.devices or jax.devices())
    if target.name and run.mesh.data * run.mesh.fsdp * run.mesh.tensor != available:
        raise SystemExit(f"--target={target.name} has {available} devices but the config's mesh (data x fsdp x tensor "
                         f"= {run.mesh.data} x {run.mesh.fsdp} x {run.mesh.tensor}) uses "
                         f"{run.mesh.data * run.mesh.fsdp * run.mesh.tensor}: set --config.mesh.* to fill the slice")
    mesh = make_mesh(run.mesh.data, run.mesh.fsdp, run.mesh.tensor, devices=target.devices)
    context = length_bucket(args.prompt_tokens + run.task.max_tokens)
    on = (f"{target.name} ({available} devices) compiled by {target.compiler}" if target.name else
          f"{available} fake CPU devices; XLA:CPU loop hoisting {'kept' if args.cpu_hoisting else 'disabled'}")
    print(f"{path}: {run.model.preset} ({run.model.param_dtype}), mesh {dict(mesh.shape)} on {on}, "
          f"{run.budget.rollouts} rollouts per step, {decoding_rows(run, mesh)} decoding at once "
          f"(rl.decode_slots={run.rl.decode_slots}, rl.keep_prefixes={run.rl.keep_prefixes}), context {context} "
          f"tokens, learner micro-batches of {run.learner.micro_batch} (remat {run.learner.remat})", flush=True)
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
    devices = ({f"{target.name} {target.hbm_per_device / GIB:g}GiB": target.hbm_per_device} if target.name
               else DEVICES)
    for device, limit in devices.items():  # the layout `parallel/rules.to_sampling_layout` would pick there
        layout = "replicated" if replicated_sampling_fits(param_bytes, mesh, limit) else "fsdp_gathered"
        programs = {"learner": learner_bytes["total"], **{k: layouts[layout][k]["total"] + sum(resident.values())
                                                          for k in ("decode", "prefill", "tree_expand", "roots")}}
        layout_for[device], fits[device] = layout, max(programs.values()) <= limit
        per_device[device] = programs
        worst = max(programs, key=programs.get)
        print(f"{device}: sampling layout {layout}, the largest program {worst} {programs[worst] / GIB:.2f} GiB: "
              f"{'fits' if fits[device] else 'does not fit'}")
    smallest = min(devices, key=devices.get)
    line = {"config": args.config, "devices": available, "mesh": dict(mesh.shape),
            "per_device_bytes": per_device[smallest], "per_device_bytes_by_device": per_device,
            "sampling_layout": layout_for, "fits": fits, "decoding_rows": decoding_rows(run, mesh),
            "resident_sampler_bytes": resident, "target": target.name, "compiler": target.compiler,
            "kv_cache_sharding": layouts[layout_for[smallest]]["kv_cache_sharding"],
            "source": "compiled.memory_analysis() (sampler programs plus the resident sampler states); sampler in the "
                      "sampling layout" + ("" if target.devices else "; XLA:CPU's loop-invariant code motion " + (
                          "kept" if args.cpu_hoisting else "disabled (CPU_HOISTING_PASSES)"))}
    if target.name:
        layout = layout_for[smallest]
        line["fits"] = fits[smallest]
        line["hbm_per_device_bytes"] = target.hbm_per_device
        line["roofline"] = roofline(target, run, model_config, mesh, learner_bytes, layouts[layout],
                                    layouts["replicated"]["decode"])
        for name, r in line["roofline"].items():
            print(f"{name:>12} roofline (compiler estimate): " + ", ".join(
                f"{k} {v:.4g}" for k, v in r.items() if isinstance(v, (int, float))), flush=True)
    print(json.dumps(line))


def roofline(target: Target, run, model_config, mesh, learner_cost: dict, sampler: dict, replicated_decode: dict
             ) -> dict:
    """Per program, from the TPU compiler's cost analysis (per device, one call): FLOPs, bytes accessed and the
    roofline time max(FLOPs / peak, bytes / bandwidth). Decode also against its physical minimum per step (the
    params' shard on a device plus the live KV rows there, read once per token), with the tokens/s per chip that
    minimum allows; the learner's MFU is the model's 6 x params FLOPs per token over the roofline time at peak.
    All of it is the compiler's estimate, not a measurement."""
    devices = mesh.size

    def timed(cost: dict) -> dict:
        flops, moved = cost.get("flops") or 0.0, cost.get("bytes_accessed") or 0.0
        seconds = max(flops / target.peak_flops, moved / target.bandwidth)
        return {"flops": flops, "bytes_accessed": moved, "roofline_s": seconds,
                "bound": "compute" if flops / target.peak_flops >= moved / target.bandwidth else "memory"}

    out = {"learner": timed(learner_cost)}
    model_flops = 6 * num_params(model_config) * learner_cost["tokens"] / devices
    seconds = out["learner"]["roofline_s"]
    # below the model's own FLOPs the compiler left loop bodies out of its count: no MFU from it
    out["learner"]["mfu"] = (model_flops / (seconds * target.peak_flops)
                             if seconds and out["learner"]["flops"] >= model_flops else None)
    rows = sampler["rows"]
    # read once per token step: the replicated layout's decode inputs, i.e. the params' tensor shard and the live
    # KV rows (the FSDP-gathered layout's inputs hold only a 1/fsdp share of that shard: not the minimum read)
    minimum = replicated_decode["arguments"]
    step_s = minimum / target.bandwidth
    out["decode"] = {**timed(sampler["decode"]), "min_bytes_per_step": minimum, "min_step_s": step_s,
                     "tokens_per_s_per_chip_at_min": rows / devices / step_s, "rows": rows}
    for name in ("prefill", "tree_expand", "roots"):
        out[name] = timed(sampler[name])
    return out

if __name__ == "__main__":
    main()
