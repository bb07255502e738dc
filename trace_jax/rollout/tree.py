"""Rollout trees: one per prompt. Nodes are turns with their token spans, leaves carry rewards.

The root holds the prompt; every other node is one assistant turn (generated tokens, their
sampler log-probs) followed by the observation the environment returned (masked in training),
or it is terminal with a reward. Back-up values V(y) = mean success of the leaves below y;
the trainable segments are the generated turns, each trained once; per-step statistics report
how much of the bought contrast is usable.
"""

from __future__ import annotations

import collections
import dataclasses

import jax
import numpy as np


@dataclasses.dataclass
class Node:
    """A turn (or the root, id 0): data only. Token fields are host lists. A non-terminal node whose
    observation has been prefilled is an anchor: its prefix H_t has `prefix_length` tokens and the
    policy's `hidden` state at its end (where the prefix lives in a sampler is the engine's business)."""

    id: int
    parent: int | None
    depth: int  # 0 for the root, t for the t-th turn
    tokens: list[int] = dataclasses.field(default_factory=list)  # generated (root: the prompt)
    logprobs: list[float] = dataclasses.field(default_factory=list)
    entropy: list[float] = dataclasses.field(default_factory=list)
    observation: list[int] = dataclasses.field(default_factory=list)  # appended after the turn
    children: list[int] = dataclasses.field(default_factory=list)
    terminal: bool = False
    reward: float = 0.0
    success: bool = False
    tool_calls: int = 0  # tool calls made up to and including this turn
    prefix_length: int | None = None  # tokens of the prefix ending after this node's observation
    hidden: np.ndarray | None = None  # [2D] final and middle-layer states at the boundary (predictor features)
    expanded: int = 0  # continuations sampled from this node as an anchor (beyond its first path)
    origin: int = 0  # the anchor the branch this turn belongs to was sampled from (0: a root rollout)
    prompt_mean: np.ndarray | None = None  # the root only: mean final hidden state over the prompt's tokens


class RolloutTree:
    def __init__(self, task, prompt: list[int]):
        self.task = task
        self.nodes = [Node(id=0, parent=None, depth=0, tokens=list(prompt))]

    @property
    def root(self) -> Node:
        return self.nodes[0]

    def add(self, parent: int, **fields) -> Node:
        node = Node(id=len(self.nodes), parent=parent, depth=self.nodes[parent].depth + 1, **fields)
        self.nodes.append(node)
        self.nodes[parent].children.append(node.id)
        return node

    def mark_anchor(self, node_id: int, *, prefix_length: int, hidden: np.ndarray) -> None:
        """Records that the prefix after `node_id` was prefilled: its length and hidden states (as `SamplerState`'s)."""
        node = self.nodes[node_id]
        node.prefix_length, node.hidden = prefix_length, hidden

    def is_anchor(self, node_id: int) -> bool:
        """Continuations can be sampled from this node: not terminal, its prefix prefilled."""
        node = self.nodes[node_id]
        return not node.terminal and node.prefix_length is not None

    def tool_calls(self) -> int:
        """Tool calls made in the whole tree (each turn's own, not the running count)."""
        return sum(max(0, n.tool_calls - self.nodes[n.parent].tool_calls) for n in self.nodes[1:])

    def path(self, node_id: int) -> list[Node]:
        """Root ... node."""
        out = []
        while node_id is not None:
            out.append(self.nodes[node_id])
            node_id = self.nodes[node_id].parent
        return out[::-1]

    def context(self, node_id: int) -> list[int]:
        """Token ids of the prefix after `node_id`'s observation (the anchor H_t)."""
        ids: list[int] = []
        for node in self.path(node_id):
            ids += node.tokens + node.observation
        return ids

    def leaves(self) -> list[Node]:
        return [n for n in self.nodes if n.terminal]

    def open_nodes(self) -> list[Node]:
        """Non-root nodes that are neither terminal nor expanded into children yet (should be none)."""
        return [n for n in self.nodes[1:] if not n.terminal and not n.children]

    def values(self) -> tuple[np.ndarray, np.ndarray]:
        """(V, n) per node: mean success of the leaves below each node and their count."""
        successes = np.zeros(len(self.nodes))
        counts = np.zeros(len(self.nodes))
        for node in reversed(self.nodes):  # children are created after their parents
            if node.terminal:
                successes[node.id] += float(node.success)
                counts[node.id] += 1
            if node.parent is not None:
                successes[node.parent] += successes[node.id]
                counts[node.parent] += counts[node.id]
        return np.divide(successes, counts, out=np.full(len(self.nodes), np.nan), where=counts > 0), counts

    def root_rollout_value(self) -> tuple[float, int]:
        """(mean success, count) of the leaves of rollouts sampled at the root. Leaves of branches from
        turn prefixes are left out: those prefixes were chosen for their chance to flip the outcome,
        so they would bias the root's success estimate (the predictor's root target) toward 0.5."""
        leaves = [n for n in self.leaves() if n.origin == 0]
        return (float(np.mean([n.success for n in leaves])) if leaves else float("nan")), len(leaves)

    def is_mixed(self, node_id: int = 0) -> bool:
        v, n = self.values()
        return bool(n[node_id] > 0 and 0.0 < v[node_id] < 1.0)

    def anchor_of(self, node_id: int) -> int:
        """The node this turn was sampled from: its parent (root or a turn boundary)."""
        return self.nodes[node_id].parent


@dataclasses.dataclass
class Ledger:
    """The budget ledger every allocator fills the same way."""

    rollouts_started: int = 0
    rollouts_finished: int = 0
    rollouts_discarded: int = 0  # finished but not trained on (DAPO's filtered groups)
    tokens_generated: int = 0
    tokens_prefilled: int = 0
    tokens_reprefilled: int = 0  # of tokens_prefilled: prefixes prefilled again (`Batching.keep_prefixes`)
    tool_calls: int = 0

    def __add__(self, other: Ledger) -> Ledger:
        return Ledger(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in dataclasses.fields(self)})


@dataclasses.dataclass
class RolloutCounters:
    """What a `RolloutEngine` counts besides the budget: how the work was scheduled and split. It depends on
    the schedule and the mesh, so, unlike the `Ledger`, it is not compared between schedules or audited."""

    tool_errors: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # by kind
    cross_shard_rows: int = 0  # forked rows copied from another shard (on a mesh)
    rollouts_by_process: list[int] = dataclasses.field(default_factory=lambda: [0] * jax.process_count())
    turns_by_process: list[int] = dataclasses.field(default_factory=lambda: [0] * jax.process_count())
    decode_slot_steps: int = 0  # rows x decode steps computed (padding and finished rows included)
    decode_tokens: int = 0  # of which sampled a token of a live turn

    @property
    def slot_utilisation(self) -> float:
        return self.decode_tokens / max(self.decode_slot_steps, 1)


def step_statistics(trees: list[RolloutTree]) -> dict[str, float]:
    """Effective ratio (trees with both outcomes), mixed share of expanded prefixes, leaves per tree."""
    if not trees:
        return {"effective_ratio": 0.0, "expanded_mixed_share": 0.0, "leaves_per_tree": 0.0}
    mixed = [t.is_mixed(0) for t in trees]
    expanded_mixed = []
    for t in trees:
        v, n = t.values()
        expanded_mixed += [0.0 < v[node.id] < 1.0 for node in t.nodes[1:] if len(node.children) > 1]
    return {"effective_ratio": float(np.mean(mixed)),
            "expanded_mixed_share": float(np.mean(expanded_mixed)) if expanded_mixed else 0.0,
            "leaves_per_tree": float(np.mean([len(t.leaves()) for t in trees]))}


def contrast_statistics(trees: list[RolloutTree]) -> dict[str, object]:
    """What the contrast a step bought is: prompts (trees) whose leaves are mixed; prompts whose bare
    rollouts (sampled at the root) alone are mixed, the contrast GRPO would have seen there; the share of
    leaves that are branches from turn prefixes; and the branches' leaves per anchor depth (index 0: the
    first turn boundary), which says whether stage 2 branches early (plans) or late (final answers)."""
    depths: list[int] = []
    for t in trees:
        depths += [t.nodes[leaf.origin].depth for leaf in t.leaves() if leaf.origin]
    root_mixed = 0
    for t in trees:
        bare = [leaf.success for leaf in t.leaves() if leaf.origin == 0]
        root_mixed += int(any(bare) and not all(bare))
    leaves = sum(len(t.leaves()) for t in trees)
    return {"prompts_mixed": sum(t.is_mixed(0) for t in trees), "root_groups_mixed": root_mixed,
            "branch_leaf_share": len(depths) / max(leaves, 1),
            "anchor_depths": tuple(int(c) for c in np.bincount(np.asarray(depths, int) - 1)) if depths else ()}
