"""The host loop that grows rollout trees: all live branches of all trees decode one turn together.

Per turn: one batched `decode` (or `tree_expand` for the first turn from the anchors), the
whole batch's parsing and tool calls on the host, one `extend` with the observations; repeat
until every branch is terminal. Branching from a turn boundary forks that rollout's cache row
(`tree_expand` with `fork_lengths`): no history is ever re-prefilled. Every token generated or
prefilled and every tool call goes into the step's `Ledger`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import numpy as np

from trace_jax.envs.protocol import Env, Task
from trace_jax.envs.render import ReactRenderer
from trace_jax.models.config import ModelConfig
from trace_jax.models.transformer import Params
from trace_jax.rollout.tree import Ledger, RolloutTree
from trace_jax.sampling import SamplingParams, decode, extend, start, tree_expand
from trace_jax.sampling.state import SamplerState, concat_states

TURN_STRIDE = 256  # row id = branch uid * TURN_STRIDE + turn: every turn of every branch has its own keys


@dataclasses.dataclass(frozen=True)
class Policy:
    """What the loop samples with: model config and params, per-turn sampling, the renderer."""

    config: ModelConfig
    params: Params
    sampling: SamplingParams
    renderer: ReactRenderer


def turn_sampling(sampling: SamplingParams, renderer: ReactRenderer) -> SamplingParams:
    """Per-turn sampling that stops on the renderer's end-of-turn ids and reports entropy."""
    stops = tuple(dict.fromkeys(tuple(sampling.stop_ids) + tuple(renderer.stop_ids)))
    return dataclasses.replace(sampling, stop_ids=stops, return_entropy=True)


@dataclasses.dataclass
class _Branch:
    tree: int
    node: int  # the last node on this branch's path
    episode: object
    uid: int


class RolloutEngine:
    """Sampler states and trees of one RL step; `roots` then any number of `expand` rounds."""

    def __init__(self, policy: Policy, env: Env, seed: int):
        self.policy = dataclasses.replace(policy, sampling=turn_sampling(policy.sampling, policy.renderer))
        self.env, self.seed = env, seed
        self.states: list[SamplerState] = []
        self.ledger = Ledger()
        self._uid = 0

    def roots(self, tasks: Sequence[Task]) -> list[RolloutTree]:
        """Prefills every prompt once; each tree's root is an anchor with its hidden state."""
        p = self.policy
        prompts = [p.renderer.prompt(self.env.messages(task)) for task in tasks]
        state = start(p.config, p.params, prompts, reserve=p.sampling.max_new_tokens)
        hidden = np.asarray(jax.device_get(state.hidden))
        sid = len(self.states)
        self.states.append(state)
        self.ledger.tokens_prefilled += sum(map(len, prompts))
        trees = []
        for row, (task, prompt) in enumerate(zip(tasks, prompts)):
            tree = RolloutTree(task, prompt)
            tree.root.boundary = (sid, row, len(prompt))
            tree.root.hidden = hidden[row]
            tree.root.episode = self.env.start(task)
            trees.append(tree)
        return trees

    def expand(self, trees: list[RolloutTree], anchors: Sequence[tuple[int, int, int]]) -> list[tuple[int, int]]:
        """Samples k continuations from each anchor (tree index, node id, k), each run to a terminal
        state. Returns the (tree, leaf) pairs created."""
        p = self.policy
        branches, sources = [], []
        for tree_index, node_id, k in anchors:
            node = trees[tree_index].nodes[node_id]
            if node.terminal or node.boundary is None:
                raise ValueError(f"tree {tree_index} node {node_id} is not an anchor (terminal or never decoded)")
            node.expanded += k
            for _ in range(k):
                branches.append(_Branch(tree_index, node_id, node.episode.fork(), self._uid))
                sources.append(node.boundary)
                self._uid += 1
        if not branches:
            return []
        self.ledger.rollouts_started += len(branches)
        used = sorted({sid for sid, _, _ in sources})
        offsets, total = {}, 0
        for sid in used:
            offsets[sid] = total
            total += self.states[sid].batch_size
        merged = concat_states([self.states[sid] for sid in used])
        parents = [offsets[sid] + row for sid, row, _ in sources]
        lengths = [length for _, _, length in sources]
        self.ledger.tokens_prefilled += len(branches)  # each fork re-feeds its boundary's last token
        gen, state = tree_expand(p.config, p.params, merged, parents, p.sampling, seed=self.seed,
                                 row_ids=self._row_ids(branches, trees), fork_lengths=lengths)
        sid = len(self.states)
        self.states.append(state)  # placeholder; replaced by the final state below
        live = [True] * len(branches)
        row_length = list(lengths)
        leaves = []
        while True:
            observations: list[list[int]] = [[] for _ in branches]
            new_nodes = {}
            for i, branch in enumerate(branches):
                if not live[i]:
                    continue
                n = int(gen.lengths[i])
                tokens = gen.tokens[i, :n].tolist()
                tree = trees[branch.tree]
                result = branch.episode.step(p.renderer.decode_turn(tokens), num_tokens=n)
                self.ledger.tokens_generated += n
                node = tree.add(branch.node, tokens=tokens, logprobs=gen.logprobs[i, :n].tolist(),
                                entropy=gen.entropy[i, :n].tolist(), tool_calls=branch.episode.tool_calls)
                branch.node = node.id
                row_length[i] += n
                if result.done:
                    node.terminal, node.reward, node.success = True, result.reward, result.success
                    live[i] = False
                    self.ledger.rollouts_finished += 1
                    leaves.append((branch.tree, node.id))
                    continue
                obs = p.renderer.observation(result.observation)
                node.observation = obs
                observations[i] = obs
                row_length[i] += len(obs)
                node.boundary = (sid, i, row_length[i])
                node.episode = branch.episode.fork()
                new_nodes[i] = node
                self.ledger.tokens_prefilled += len(obs)
            self.ledger.tool_calls = sum(self._tool_calls(t) for t in trees)
            if not any(live):
                break
            state = extend(p.config, p.params, state, observations)
            hidden = np.asarray(jax.device_get(state.hidden))
            for i, node in new_nodes.items():
                node.hidden = hidden[i]
            gen, state = decode(p.config, p.params, state, p.sampling, seed=self.seed,
                                row_ids=self._row_ids(branches, trees), active=live)
        self.states[sid] = state
        return leaves

    @staticmethod
    def _tool_calls(tree: RolloutTree) -> int:
        return sum(max(0, n.tool_calls - tree.nodes[n.parent].tool_calls) for n in tree.nodes[1:])

    @staticmethod
    def _row_ids(branches, trees) -> list[int]:
        return [b.uid * TURN_STRIDE + trees[b.tree].nodes[b.node].depth for b in branches]
