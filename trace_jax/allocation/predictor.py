"""The shared success predictor V_psi(H) ~ P(success | H, current policy) (docs/design.md section 3).

Features (`FEATURIZERS`, chosen by `predictor.features`): blocks of one `featurize` row, all free
by-products of sampling, never differentiated: the policy's final-normed hidden state at the prefix
end, its residual stream there after half the layers (RMS-normalised; "layers" featurizers), the
mean-pooled final hidden state over the prompt's tokens (one per tree), and scalars (turn
index, tool calls so far, prefix length),
standardised by the replay buffer's mean and standard deviation per column (so a scalar such as
prefix length is not drowned by the hidden dimensions; a per-row LayerNorm scored AUC 0.1 lower on the
test's toy task) into a small NNX MLP with a zero-initialised output layer, so an untrained
predictor says 0.5 everywhere. Trained by weighted BCE toward tree back-up values V(y) (the paper reads a
squared-error regression; BCE is the one tried here) with weights n_y capped at WEIGHT_CAP, over a replay
buffer of recent steps; a root's
target counts only rollouts sampled at the root. Calibration is measured on outcomes predicted
before they were seen (`calibration.py`).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from trace_jax import ranges
from trace_jax.ranges import AT_LEAST_1, POSITIVE, ranged
from trace_jax.rollout.tree import Node, RolloutTree

NUM_SCALARS = 3
BLOCKS = ("hidden", "middle", "prompt_mean", "scalars")  # the column blocks of a `featurize` row, in order
# The featurizer registry: name -> the blocks the predictor's MLP sees.
FEATURIZERS: dict[str, tuple[str, ...]] = {
    "hidden+scalars": ("hidden", "scalars"),
    "hidden": ("hidden",),
    "scalars": ("scalars",),
    "layers+scalars": ("hidden", "middle", "scalars"),
    "prompt_mean+scalars": ("prompt_mean", "scalars"),
    "prompt_mean+hidden+scalars": ("prompt_mean", "hidden", "scalars"),
}


WEIGHT_CAP = 8.0  # a target's leaf-count weight n_y is capped here: one deep subtree does not outweigh the rest


def feature_width(hidden_size: int) -> int:
    """Columns of a `featurize` row for a policy of this hidden size."""
    return 3 * hidden_size + NUM_SCALARS
_BATCH = 256  # training/prediction rows are padded to multiples of this (one compiled shape)


def scalar_features(node: Node) -> np.ndarray:
    length = node.prefix_length or 0
    return np.array([node.depth / 8.0, node.tool_calls / 8.0, np.log1p(length) / 8.0], np.float32)


def featurize(tree: RolloutTree, node: Node) -> np.ndarray:
    """[3D + 3] features of the prefix ending at this node's boundary: its final and middle-layer states
    (the node's [2D] `hidden`), the tree's mean-pooled prompt state, then the scalars (`BLOCKS`)."""
    if node.hidden is None:
        raise ValueError(f"node {node.id} of task {tree.task.id} has no hidden state (not an anchor)")
    hidden = np.asarray(node.hidden, np.float32)
    prompt = tree.root.prompt_mean
    if prompt is None:
        raise ValueError(f"task {tree.task.id}: the root has no mean-pooled prompt state (not prefilled by "
                         "RolloutEngine.roots)")
    return np.concatenate([hidden, np.asarray(prompt, np.float32), scalar_features(node)])


class MLP(nnx.Module):
    def __init__(self, features: int, width: int, *, rngs: nnx.Rngs):
        self.hidden = nnx.Linear(features, width, rngs=rngs)
        self.out = nnx.Linear(width, 1, kernel_init=nnx.initializers.zeros, rngs=rngs)

    def __call__(self, x):
        return self.out(jax.nn.gelu(self.hidden(x)))[..., 0]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PredictorConfig:
    """Attributes:
      width: MLP hidden width.
      learning_rate: Adam step size.
      epochs: passes over the replay buffer per update.
      replay_steps: how many recent steps' targets to keep.
      features: the featurizer (a key of FEATURIZERS): which blocks of `featurize` the MLP sees:
        "hidden+scalars" (default), "hidden" (the boundary hidden state alone), "scalars" (turn index,
        tool calls, prefix length alone), "layers+scalars" (the final and the middle layer's states at the
        boundary, with the scalars), "prompt_mean+scalars" (the mean-pooled prompt state: one
        vector per prompt, blind to the prefix's turns) or "prompt_mean+hidden+scalars".
    """

    width: int = ranged(128, AT_LEAST_1)
    learning_rate: float = ranged(3e-3, POSITIVE)
    epochs: int = ranged(4, AT_LEAST_1)
    replay_steps: int = ranged(4, AT_LEAST_1)
    features: str = ranged("hidden+scalars", tuple(FEATURIZERS))

    def __post_init__(self):
        ranges.check(self, "predictor")


def feature_columns(features: str, num_features: int) -> np.ndarray:
    """Indices into a `featurize` row [hidden (D), middle (D), prompt_mean (D), scalars] of the featurizer's
    blocks."""
    d = (num_features - NUM_SCALARS) // 3
    if 3 * d + NUM_SCALARS != num_features:
        raise ValueError(f"{num_features} features is not a featurize row width (3 x hidden size + {NUM_SCALARS})")
    spans = {"hidden": np.arange(d), "middle": np.arange(d, 2 * d), "prompt_mean": np.arange(2 * d, 3 * d),
             "scalars": np.arange(3 * d, num_features)}
    return np.concatenate([spans[b] for b in FEATURIZERS[features]])


def _pad(x: np.ndarray, rows: int) -> np.ndarray:
    out = np.zeros((rows,) + x.shape[1:], x.dtype)
    out[: len(x)] = x
    return out


class SuccessPredictor:
    """Host wrapper: `predict(features)`, `update(trees)`, checkpointable `state()`. `features` rows
    are full `featurize` rows (`num_features = feature_width(D)`); the configured featurizer picks the
    columns the MLP sees (and the replay buffer keeps)."""

    def __init__(self, num_features: int, config: PredictorConfig = PredictorConfig(), seed: int = 0):
        self.config = config
        self.columns = feature_columns(config.features, num_features)
        model = MLP(len(self.columns), config.width, rngs=nnx.Rngs(seed))
        self.mean = np.zeros(len(self.columns), np.float32)  # input standardisation (identity until fitted)
        self.scale = np.ones(len(self.columns), np.float32)
        self.graphdef, self.params = nnx.split(model, nnx.Param)
        self.params = nnx.to_pure_dict(self.params)
        self.optimizer = optax.adam(config.learning_rate)
        self.opt_state = self.optimizer.init(self.params)
        self.buffer: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.rng = np.random.default_rng(seed)

    # pure pieces, jitted
    @functools.partial(jax.jit, static_argnums=0)
    def _logits(self, params, x):
        return nnx.merge(self.graphdef, params)(x)

    @functools.partial(jax.jit, static_argnums=0)
    def _train_step(self, params, opt_state, x, y, w):
        def loss_fn(p):
            logits = nnx.merge(self.graphdef, p)(x)
            per_row = optax.sigmoid_binary_cross_entropy(logits, y)
            return jnp.sum(w * per_row) / jnp.maximum(jnp.sum(w), 1e-6)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = self.optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def predict(self, features: np.ndarray) -> np.ndarray:
        """[N, F] -> [N] success probabilities."""
        features = np.asarray(features, np.float32)
        if len(features) == 0:
            return np.zeros((0,), np.float32)
        features = self._standardize(features[:, self.columns])
        rows = -(-len(features) // _BATCH) * _BATCH
        logits = self._logits(self.params, jax.device_put(_pad(features, rows)))
        return np.asarray(jax.nn.sigmoid(logits))[: len(features)]

    def targets(self, trees: list[RolloutTree]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(features, V(y), capped n_y) for every node of every tree that is an anchor with leaves."""
        xs, ys, ws = [], [], []
        for tree in trees:
            values, counts = tree.values()
            values[0], counts[0] = tree.root_rollout_value()
            for node in tree.nodes:
                if node.hidden is not None and counts[node.id] > 0:
                    xs.append(featurize(tree, node))
                    ys.append(values[node.id])
                    ws.append(min(counts[node.id], WEIGHT_CAP))
        if not xs:
            return np.zeros((0, 0), np.float32), np.zeros(0, np.float32), np.zeros(0, np.float32)
        return np.stack(xs), np.asarray(ys, np.float32), np.asarray(ws, np.float32)

    def fit(self, x: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
        """Adds one step's targets to the replay buffer and trains `epochs` passes over it."""
        if len(x):
            # C order, as a restored buffer is: column sums (the standardisation) then round alike after a resume
            self.buffer.append((np.ascontiguousarray(np.asarray(x, np.float32)[:, self.columns]), y, w))
            self.buffer = self.buffer[-self.config.replay_steps:]
        if not self.buffer:
            return float("nan")
        X = np.concatenate([b[0] for b in self.buffer])
        Y = np.concatenate([b[1] for b in self.buffer])
        W = np.concatenate([b[2] for b in self.buffer])
        self._fit_standardization(X)
        X = self._standardize(X)
        losses = []
        for _ in range(self.config.epochs):
            order = self.rng.permutation(len(X))
            for begin in range(0, len(X), _BATCH):
                idx = order[begin:begin + _BATCH]
                self.params, self.opt_state, loss = self._train_step(
                    self.params, self.opt_state, *jax.device_put((_pad(X[idx], _BATCH), _pad(Y[idx], _BATCH),
                                                                  _pad(W[idx], _BATCH))))
                losses.append(float(loss))
        return float(np.mean(losses))

    def _fit_standardization(self, x: np.ndarray) -> None:
        """Column mean and std of the replay buffer (recomputed from the restored buffer on resume)."""
        if len(x):
            self.mean = x.mean(axis=0).astype(np.float32)
            self.scale = (x.std(axis=0) + 1e-6).astype(np.float32)

    def _standardize(self, x: np.ndarray) -> np.ndarray:
        return ((x - self.mean) / self.scale).astype(np.float32)

    def update(self, trees: list[RolloutTree]) -> float:
        return self.fit(*self.targets(trees))

    def state(self) -> dict:
        """Checkpointable arrays: params, optimizer state, input standardisation and the replay buffer
        (when not empty)."""
        out = {"params": self.params, "opt_state": self.opt_state, "mean": self.mean, "scale": self.scale}
        if self.buffer:
            out["buffer"] = {k: np.concatenate([b[i] for b in self.buffer]) for i, k in enumerate("xyw")}
        return out

    def host_state(self) -> dict:
        return {"rng": self.rng.bit_generator.state, "buffer_sizes": [len(b[0]) for b in self.buffer],
                "num_features": int(self.buffer[0][0].shape[1]) if self.buffer else 0}

    def state_template(self, host: dict) -> dict:
        """The array structure a checkpoint written with this host state holds."""
        out = {"params": self.params, "opt_state": self.opt_state, "mean": self.mean, "scale": self.scale}
        total = sum(host["buffer_sizes"])
        if total:
            out["buffer"] = {"x": np.zeros((total, host["num_features"]), np.float32),
                             "y": np.zeros(total, np.float32), "w": np.zeros(total, np.float32)}
        return out

    def load_state(self, state: dict, host: dict | None = None) -> None:
        self.params, self.opt_state = state["params"], state["opt_state"]
        self.mean, self.scale = np.asarray(state["mean"], np.float32), np.asarray(state["scale"], np.float32)
        if host is not None:
            self.rng.bit_generator.state = host["rng"]
            self.buffer, begin = [], 0
            for size in host["buffer_sizes"]:
                buf = state["buffer"]
                self.buffer.append(tuple(np.asarray(buf[k][begin:begin + size]) for k in "xyw"))
                begin += size
