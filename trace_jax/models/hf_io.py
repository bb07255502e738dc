"""Hugging Face checkpoint I/O: a local `config.json` + safetensors directory <-> (ModelConfig, params).

`load` reads tensors lazily from memory-mapped safetensors and builds each param shard by
shard with `jax.make_array_from_callback`, so a sharded load touches only the slices each
device needs and a large checkpoint never has two full host copies. `save` writes a
directory that `transformers.AutoModelForCausalLM.from_pretrained` loads, one shard file at
a time. Every failure raises `CheckpointError` naming the file and tensor.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from trace_jax.models.config import ModelConfig, UnsupportedConfigError, config_from_hf, config_to_hf
from trace_jax.models.transformer import Params, param_shapes

INDEX_FILE = "model.safetensors.index.json"
FLOAT_DTYPES = ("F16", "BF16", "F32", "F64", "F8")  # safetensors dtype names of weights
# Tensors that checkpoints may carry but the model recomputes or shares.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


class CheckpointError(ValueError):
    """A checkpoint that cannot be read or written; the message names the file and tensor."""


# --- name mapping -----------------------------------------------------------------------------

def _hf_names(path: tuple[str, ...], num_layers: int) -> tuple[list[str], bool]:
    """Our param path -> (HF tensor names, one per stacked layer or a single one; transposed?)."""
    *module, leaf = path
    hf_leaf = {"kernel": "weight", "scale": "weight", "embedding": "weight", "bias": "bias"}[leaf]
    transposed = leaf == "kernel"
    if module[0] == "lm_head":
        return [f"lm_head.{hf_leaf}"], transposed
    if module[0] == "layers":
        rest = ".".join(module[1:])
        return [f"model.layers.{i}.{rest}.{hf_leaf}" for i in range(num_layers)], transposed
    return [f"model.{'.'.join(module)}.{hf_leaf}"], transposed


def _flatten(tree: Params, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _flatten(value, prefix + (key,))
        else:
            yield prefix + (key,), value


def _unflatten(items: dict[tuple[str, ...], Any]) -> Params:
    out: Params = {}
    for path, value in items.items():
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return out


# --- load -------------------------------------------------------------------------------------

def read_config(path: str, *, dtype: str = "float32", compute_dtype: str | None = None) -> ModelConfig:
    """Reads and validates `<path>/config.json`."""
    if not os.path.isdir(path):
        raise CheckpointError(f"checkpoint directory {path!r} does not exist or is not a directory")
    config_path = os.path.join(path, "config.json")
    try:
        with open(config_path, encoding="utf-8") as f:
            hf = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{config_path}: cannot read config: {e}") from e
    try:
        return config_from_hf(hf, param_dtype=dtype, dtype=compute_dtype, where=config_path)
    except UnsupportedConfigError as e:
        raise CheckpointError(str(e)) from e


def _tensor_files(path: str) -> dict[str, str]:
    """HF tensor name -> safetensors file, from the index when there is one, else by listing files."""
    index_path = os.path.join(path, INDEX_FILE)
    if os.path.exists(index_path):
        try:
            with open(index_path, encoding="utf-8") as f:
                weight_map = json.load(f)["weight_map"]
        except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
            raise CheckpointError(f"{index_path}: cannot read the weight_map: {e}") from e
        return {name: os.path.join(path, file) for name, file in weight_map.items()}
    files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
    if not files:
        raise CheckpointError(f"{path}: no *.safetensors files and no {INDEX_FILE}")
    names: dict[str, str] = {}
    for file in files:
        full = os.path.join(path, file)
        with _open(full) as handle:
            for name in handle.keys():
                names[name] = full
    return names


@contextlib.contextmanager
def _open(file: str):
    try:
        handle = safe_open(file, framework="numpy")
    except (OSError, SafetensorError) as e:
        raise CheckpointError(f"{file}: cannot open safetensors file: {e}") from e
    with handle as h:
        yield h


def load(path: str, *, dtype: str = "float32", compute_dtype: str | None = None,
         shardings: Params | None = None) -> tuple[ModelConfig, Params]:
    """Loads a local HF directory (`config.json`, `*.safetensors`, optional index) into our params.

    Args:
      path: directory holding the checkpoint.
      dtype: param dtype to cast every tensor to.
      compute_dtype: activation dtype (defaults to `dtype`).
      shardings: optional pytree of `jax.sharding.Sharding` matching the params; each param is
        then assembled shard by shard, reading only that shard's slice from disk.
    """
    config = read_config(path, dtype=dtype, compute_dtype=compute_dtype)
    files = _tensor_files(path)
    shapes = dict(_flatten(param_shapes(config)))
    sharding_of = dict(_flatten(shardings)) if shardings is not None else {}

    expected: set[str] = set()
    plan = {}
    for p in shapes:
        names, transposed = _hf_names(p, config.num_layers)
        expected.update(names)
        plan[p] = (names, transposed)
    ignorable = {n for n in files if n.endswith(_IGNORED_SUFFIXES)}
    if config.tie_word_embeddings:
        ignorable.add("lm_head.weight")  # the same tensor as the embedding; some exports duplicate it
    missing = sorted(expected - files.keys())
    if missing:
        raise CheckpointError(f"{path}: missing tensors {missing[:8]}{' ...' if len(missing) > 8 else ''} "
                              f"({len(missing)} in all) for model_type={config.model_type}")
    extra = sorted(files.keys() - expected - ignorable)
    if extra:
        raise CheckpointError(f"{path}: unexpected tensors {[(n, os.path.basename(files[n])) for n in extra[:8]]} "
                              f"({len(extra)} in all) that model_type={config.model_type} does not use")

    out = {}
    with contextlib.ExitStack() as stack:
        handles: dict[str, Any] = {}

        def tensor(name: str):
            file = files[name]
            if file not in handles:
                if not os.path.exists(file):
                    raise CheckpointError(f"{file}: listed in the index for {name!r} but missing")
                handles[file] = stack.enter_context(_open(file))
            try:
                return handles[file].get_slice(name)
            except (SafetensorError, KeyError) as e:
                raise CheckpointError(f"{file}: tensor {name!r}: {e}") from e

        for p, shape_dtype in shapes.items():
            names, transposed = plan[p]
            per_layer = shape_dtype.shape[1:] if len(names) > 1 or p[0] == "layers" else shape_dtype.shape
            for name in names:
                stored = str(tensor(name).get_dtype())
                if not stored.startswith(FLOAT_DTYPES):  # an integer or bool tensor is not weights: no silent cast
                    raise CheckpointError(f"{files[name]}: tensor {name!r} is stored as {stored}, not a float dtype")
                hf_shape = tuple(tensor(name).get_shape())
                want = tuple(reversed(per_layer)) if transposed else tuple(per_layer)
                if hf_shape != want:
                    raise CheckpointError(f"{files[name]}: tensor {name!r} has shape {hf_shape}, "
                                          f"expected {want} for config {os.path.join(path, 'config.json')}")
            read = _slice_reader(tensor, names, transposed, stacked=p[0] == "layers",
                                 dtype=config.jnp_param_dtype, files=files)
            sharding = sharding_of.get(p)
            if sharding is None:
                out[p] = jax.device_put(read(tuple(slice(None) for _ in shape_dtype.shape)))
            else:
                out[p] = jax.make_array_from_callback(shape_dtype.shape, sharding, read)
    return config, _unflatten(out)


def _slice_reader(tensor: Callable, names: list[str], transposed: bool, stacked: bool, dtype,
                  files: dict[str, str]) -> Callable[[tuple], np.ndarray]:
    """index (tuple of slices into our param) -> that block, read lazily from the safetensors slices."""

    def read_one(name: str, index: tuple) -> np.ndarray:
        hf_index = tuple(reversed(index)) if transposed else index
        try:
            block = tensor(name)[hf_index] if hf_index else tensor(name)[:]
        except (SafetensorError, ValueError, OSError) as e:
            raise CheckpointError(f"{files[name]}: cannot read tensor {name!r}: {e}") from e
        block = np.asarray(block)
        return np.ascontiguousarray(block.T if transposed else block).astype(dtype, copy=False)

    def read(index: tuple) -> np.ndarray:
        index = tuple(index)
        if not stacked:
            return read_one(names[0], index)
        layers = range(len(names))[index[0]]
        return np.stack([read_one(names[i], index[1:]) for i in layers])

    return read


# --- save -------------------------------------------------------------------------------------

def _to_host(x) -> np.ndarray:
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils
        x = multihost_utils.process_allgather(x, tiled=True)
    return np.asarray(jax.device_get(x))


def save(path: str, config: ModelConfig, params: Params, *, max_shard_bytes: int = 4 << 30) -> None:
    """Writes `config.json` and safetensors shards (+ index when more than one) loadable by transformers.

    Only process 0 writes; every process must call it (gathering sharded params is collective).
    """
    shapes = dict(_flatten(param_shapes(config)))
    flat = dict(_flatten(params))
    if flat.keys() != shapes.keys():
        raise CheckpointError(f"{path}: params do not match the config: missing "
                              f"{sorted(shapes.keys() - flat.keys())[:4]}, extra {sorted(flat.keys() - shapes.keys())[:4]}")
    for p, s in shapes.items():
        if tuple(flat[p].shape) != tuple(s.shape):
            raise CheckpointError(f"{path}: param {'/'.join(p)} has shape {flat[p].shape}, expected {s.shape}")
    writer = jax.process_index() == 0
    if writer:
        try:
            os.makedirs(path, exist_ok=True)
            with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as f:
                json.dump(config_to_hf(config), f, indent=2)
        except OSError as e:
            raise CheckpointError(f"{path}: cannot write the checkpoint: {e}") from e

    current: dict[str, np.ndarray] = {}  # the shard being filled; written and dropped when full
    files: list[str] = []
    file_of: dict[str, int] = {}

    def flush():
        file = f"model-{len(files) + 1:05d}.safetensors"
        if writer:
            try:
                save_file(current, os.path.join(path, file), metadata={"format": "pt"})
            except OSError as e:
                raise CheckpointError(f"{os.path.join(path, file)}: cannot write: {e}") from e
        files.append(file)
        current.clear()

    for p in shapes:
        host = _to_host(flat[p])
        names, transposed = _hf_names(p, config.num_layers)
        blocks = list(host) if p[0] == "layers" else [host]
        for name, block in zip(names, blocks):
            tensor = np.ascontiguousarray(block.T if transposed else block)
            if current and sum(t.nbytes for t in current.values()) + tensor.nbytes > max_shard_bytes:
                flush()
            current[name] = tensor
            file_of[name] = len(files)
    flush()
    if not writer:
        return
    if len(files) == 1:
        os.replace(os.path.join(path, files[0]), os.path.join(path, "model.safetensors"))
        return
    total = sum(int(np.prod(s.shape)) * s.dtype.itemsize for s in shapes.values())
    index = {"metadata": {"total_size": total},
             "weight_map": {name: files[i] for name, i in sorted(file_of.items())}}
    with open(os.path.join(path, INDEX_FILE), "w", encoding="utf-8") as f:
        json.dump(index, f, indent=2)
