"""The rollout engine of one RL step: prompts prefilled once, trees grown from anchors, every cost counted.

`roots` prefills the prompts (each tree's root is an anchor: its cache row, hidden state and episode);
`expand` samples k continuations from each anchor, each run to a terminal state by the continuous scheduler
(`continuous.py`): forks from the anchors' cache rows cut back to their turn boundaries (no history is ever
re-prefilled), decode, step the environments (parsing and tool calls on the host, new turn nodes in the trees),
prefill the observations, per slot. This file owns the pieces the scheduler runs per slot (`step_envs`,
`row_ids`, `count_*`) and the `PrefixTable` that says where each anchor's prefix lives; trees hold data only.
Every token generated or prefilled and every tool call goes into the step's `Ledger`; every error observation
(malformed action, tool error), the split over processes and the slot use into its `RolloutCounters`. The
turn-synchronous loop this replaced survives as the test reference the scheduler must match token for token
(`tests/rollout/sync_reference.py`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from trace_jax.envs.protocol import Env, Episode, Task
from trace_jax.envs.render import ReactRenderer
from trace_jax.models.config import ModelConfig
from trace_jax.models.transformer import Params
from trace_jax.parallel.host import to_host
from trace_jax.rollout.continuous import Batching, run_continuous
from trace_jax.rollout.prefixes import PrefixRef, PrefixTable
from trace_jax.rollout.tree import Ledger, Node, RolloutCounters, RolloutTree
from trace_jax.rollout.turns import run_turns, tokens_to_stop, turn_sampling
from trace_jax.sampling import SamplingParams, start
from trace_jax.sampling.paged import PagePool
from trace_jax.sampling.state import row_processes

# Row id of a branch's turn = branch uid * TURN_STRIDE + turn: every turn of every branch draws its own
# sampling keys. So an episode has at most MAX_TURNS turns (run_config checks task.max_turns).
TURN_STRIDE = 256
MAX_TURNS = TURN_STRIDE - 1


@dataclasses.dataclass(frozen=True)
class Policy:
    """What the loop samples with: model config and params, per-turn sampling, the renderer, how decoding
    is scheduled (`continuous.Batching`) and where the KV cache lives."""

    config: ModelConfig
    params: Params
    sampling: SamplingParams
    renderer: ReactRenderer
    batching: Batching = Batching()
    pages: PagePool | None = None  # the KV page pool rollouts decode in (`sampling/paged.py`); None: dense rows


@dataclasses.dataclass
class _Branch:
    tree: int
    node: int  # the last node on this branch's path
    episode: Episode
    uid: int
    origin: int  # the anchor it was sampled from


class RolloutEngine:
    """Sampler states and trees of one RL step; `roots` then any number of `expand` rounds."""

    def __init__(self, policy: Policy, env: Env, seed: int):
        if env.limits.max_turns > MAX_TURNS:
            raise ValueError(f"episode limit max_turns={env.limits.max_turns} exceeds the engine's {MAX_TURNS}")
        self.policy = dataclasses.replace(policy, sampling=turn_sampling(policy.sampling, policy.renderer))
        self.env, self.seed = env, seed
        self.ledger = Ledger()
        self.counters = RolloutCounters()  # error observations, the split over processes, slot use
        self.prefixes = PrefixTable()
        self._uid = 0

    def roots(self, tasks: Sequence[Task]) -> list[RolloutTree]:
        """Prefills every prompt once; each tree's root is an anchor with its hidden state. With
        keep_prefixes=False the prompts are prefilled in waves of `slots` and no state is kept: a root is
        prefilled again when it is forked from."""
        p = self.policy
        prompts = [p.renderer.prompt(self.env.messages(task), self.env.action_format.tools(self.env, task))
                   for task in tasks]
        wave = len(prompts) if p.batching.keep_prefixes or not p.batching.slots else p.batching.slots
        hidden, pooled, lengths = [], [], []
        for begin in range(0, len(prompts), wave):
            chunk = prompts[begin:begin + wave]
            state = start(p.config, p.params, chunk, reserve=p.sampling.max_new_tokens, pool=p.pages)
            for out, got in zip((hidden, pooled, lengths), to_host((state.hidden, state.pooled, state.cache.lengths))):
                out.extend(np.asarray(got)[:len(chunk)])
        sid = self.prefixes.store(state) if p.batching.keep_prefixes else self.prefixes.reserve()  # kept: the one wave
        self.ledger.tokens_prefilled += sum(map(len, prompts))
        trees = []
        for row, (task, prompt) in enumerate(zip(tasks, prompts)):
            tree = RolloutTree(task, prompt)
            tree.mark_anchor(0, prefix_length=int(lengths[row]), hidden=np.asarray(hidden[row]))
            tree.root.prompt_mean = np.asarray(pooled[row] / max(int(lengths[row]), 1), np.float32)
            self.prefixes.add_root(tree, sid, row, int(lengths[row]), self.env.start(task))
            trees.append(tree)
        return trees

    def expand(self, trees: list[RolloutTree], anchors: Sequence[tuple[int, int, int]]) -> list[tuple[int, int]]:
        """Samples k continuations from each anchor (tree index, node id, k), each run to a terminal
        state. Returns the (tree, leaf) pairs created. Anchors whose cache rows were not kept
        (`Batching.keep_prefixes=False`) are prefilled again, in waves of at most `slots` of them."""
        if self.policy.batching.keep_prefixes:
            return self._expand(trees, anchors)
        leaves = []
        for wave in self._waves(trees, anchors):
            sid = self._reprefill(trees, wave)
            leaves += self._expand(trees, wave)
            self.prefixes.states.pop(sid, None)
        return leaves

    def _expand(self, trees, anchors) -> list[tuple[int, int]]:
        branches, sources = self._branches(trees, anchors)
        if not branches:
            return []
        self.ledger.rollouts_started += len(branches)
        self.ledger.tokens_prefilled += len(branches)  # each fork re-feeds its boundary's last token
        leaves: list[tuple[int, int]] = []
        run_continuous(self, trees, branches, sources, leaves)
        return leaves

    def episode_at(self, tree: RolloutTree, node_id: int) -> Episode:
        """The env episode kept at an anchor (read-only use: continuations fork it)."""
        return self.prefixes.handle(tree, node_id).episode

    def prefix_of(self, tree: RolloutTree, node_id: int) -> PrefixRef:
        """Where an anchor's prefix lives in this engine's sampler states."""
        return self.prefixes.handle(tree, node_id).prefix

    # --- phases of `expand` ---------------------------------------------------------------------

    def _waves(self, trees, anchors):
        """`anchors` in order, cut where a wave would hold more than `slots` anchors to prefill again."""
        limit, wave, dropped = self.policy.batching.slots, [], set()
        for anchor in anchors:
            key = (anchor[0], anchor[1])
            if self.prefixes.dropped(trees[anchor[0]], anchor[1]) and key not in dropped:
                if limit and len(dropped) == limit:
                    yield wave
                    wave, dropped = [], set()
                dropped.add(key)
            wave.append(anchor)
        if wave:
            yield wave

    def _reprefill(self, trees, anchors) -> int | None:
        """Prefills the prefixes of `anchors` whose rows were dropped into one new state (their handles
        re-pointed there); returns its id (None when none was dropped). Counted as prefill and re-prefill."""
        dropped = list(dict.fromkeys((trees[t], n) for t, n, _ in anchors if self.prefixes.dropped(trees[t], n)))
        if not dropped:
            return None
        p = self.policy
        contexts = [tree.context(n) for tree, n in dropped]
        state = start(p.config, p.params, contexts, reserve=p.sampling.max_new_tokens, pool=p.pages)
        sid = self.prefixes.store(state)
        for row, ((tree, n), context) in enumerate(zip(dropped, contexts)):
            if len(context) != self.prefix_of(tree, n).length:
                raise AssertionError(f"anchor {n}: its context has {len(context)} tokens, its prefix "
                                     f"{self.prefix_of(tree, n).length}")
            self.prefixes.repoint(tree, n, sid, row)
        self.ledger.tokens_prefilled += sum(map(len, contexts))
        self.ledger.tokens_reprefilled += sum(map(len, contexts))
        return sid

    def _branches(self, trees, anchors) -> tuple[list[_Branch], list[PrefixRef]]:
        branches, sources = [], []
        for tree_index, node_id, k in anchors:
            tree = trees[tree_index]
            handle = self.prefixes.handle(tree, node_id)
            if handle is None or not tree.is_anchor(node_id):
                raise ValueError(f"tree {tree_index} node {node_id} is not an anchor (terminal or never decoded)")
            tree.nodes[node_id].expanded += k
            for _ in range(k):
                branches.append(_Branch(tree_index, node_id, handle.episode.fork(), self._uid, node_id))
                sources.append(handle.prefix)
                self._uid += 1
        return branches, sources

    # --- the pieces the scheduler runs per slot (`continuous.py`) ----------------------------------

    def step_envs(self, trees, branches, gen, live, leaves, owners):
        """Parses every live branch's new turn, runs its tool, adds its node; returns the observation
        ids per branch ([] when none) and the nodes that became turn boundaries. `owners[i]`: the process
        whose devices decoded branch i; only it runs the turn (`turns.run_turns`)."""
        p = self.policy
        observations: list[list[int]] = [[] for _ in branches]
        boundaries: dict[int, Node] = {}
        kept = {i: self._kept(gen.tokens[i, :int(gen.lengths[i])].tolist()) for i in range(len(branches)) if live[i]}
        texts = {i: p.renderer.decode_turn(gen.tokens[i, :k].tolist()) for i, k in kept.items()}
        results = run_turns(self.env, branches, texts, {i: int(gen.lengths[i]) for i in kept}, owners,
                            self.counters.turns_by_process)
        dropped: dict[int, int] = {}
        for i, branch in enumerate(branches):
            if not live[i]:
                continue
            n, sampled = kept[i], int(gen.lengths[i])
            tokens = gen.tokens[i, :n].tolist()
            tree = trees[branch.tree]
            result = results[i]
            self.ledger.tokens_generated += sampled  # the cut tokens were generated: they count
            if "error" in result.info:
                self.counters.tool_errors[result.info["error"]] += 1
            node = tree.add(branch.node, tokens=tokens, logprobs=gen.logprobs[i, :n].tolist(),
                            entropy=gen.entropy[i, :n].tolist(), tool_calls=branch.episode.tool_calls,
                            origin=branch.origin)
            self.ledger.tool_calls += node.tool_calls - tree.nodes[node.parent].tool_calls  # this turn's own calls
            branch.node = node.id
            if result.done:
                node.terminal, node.reward, node.success = True, result.reward, result.success
                live[i] = False
                self.ledger.rollouts_finished += 1
                leaves.append((branch.tree, node.id))
                continue
            node.observation = observations[i] = p.renderer.observation(result.observation,
                                                                        user_turn=result.user_turn)
            boundaries[i] = node
            self.ledger.tokens_prefilled += len(node.observation)
            if n < sampled:
                dropped[i] = sampled - n
        return observations, boundaries, dropped

    def _kept(self, tokens: list[int]) -> int:
        return tokens_to_stop(tokens, self.policy.renderer.decode_turn, self.policy.renderer.action_format.stop_strings)

    def count_placed(self, rows, batch: int, mesh, *, cross_shard: int) -> None:
        """Branches forked into rows `rows` of a state of `batch` rows: who decodes them, what crossed shards."""
        self.counters.cross_shard_rows += cross_shard
        for process in row_processes(batch, mesh)[np.asarray(rows, np.int64)]:
            self.counters.rollouts_by_process[process] += 1

    def count_decode(self, gen, batch: int) -> None:
        self.counters.decode_slot_steps += batch * int(gen.lengths.max(initial=0))
        self.counters.decode_tokens += int(gen.lengths.sum())

    @staticmethod
    def row_ids(branches, trees) -> list[int]:
        """The sampling-key row of each branch's current turn (`TURN_STRIDE`)."""
        return [b.uid * TURN_STRIDE + trees[b.tree].nodes[b.node].depth for b in branches]
