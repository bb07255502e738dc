"""The turn-synchronous loop, kept as the reference the continuous scheduler must match token for token.

All live branches of all trees decode one turn together: fork (the first turn: `tree_expand` from the
anchors' cache rows, cut back to their turn boundaries), step every environment, prefill every observation
in one chunked `extend` over the whole batch; until every branch is terminal. A row whose turn ended early
computes padding until the longest turn of the batch stops. It was the engine until the scheduler
(`trace_jax/rollout/continuous.py`) replaced it; the same row ids and per-turn token positions mean the same
random numbers, so both grow the same trees (tests/rollout/test_continuous.py).
"""

import numpy as np

from trace_jax.parallel.host import to_host
from trace_jax.rollout.agent_loop import RolloutEngine
from trace_jax.sampling import decode, extend, tree_expand, truncate
from trace_jax.sampling.fork import concat_states, merged_row, plan_fork
from trace_jax.sampling.state import mesh_of, row_processes


class TurnSynchronousEngine(RolloutEngine):
    """`RolloutEngine` with `expand` run turn-synchronously (what the scheduler must reproduce)."""

    def _expand(self, trees, anchors):
        branches, sources = self._branches(trees, anchors)
        if not branches:
            return []
        self.ledger.rollouts_started += len(branches)
        self.ledger.tokens_prefilled += len(branches)  # each fork re-feeds its boundary's last token
        leaves = []
        sid = self.prefixes.reserve()  # where these branches' state is stored once they all finished
        gen, state, rows = self._fork(trees, branches, sources)  # branch i lives in state row rows[i]
        owners = row_processes(state.batch_size, mesh_of(state))[np.asarray(rows, np.int64)]
        live = [True] * len(branches)
        while True:
            observations, boundaries, dropped = self.step_envs(trees, branches, gen, live, leaves, owners)
            if not any(live):
                break
            if dropped:  # turns cut at a stop string: the state forgets the tokens sampled after it
                lengths = np.array(to_host(state.cache.lengths))
                for i, n in dropped.items():
                    lengths[rows[i]] -= n
                state = truncate(self.policy.config, self.policy.params, state, lengths.tolist())
            state = self._extend(trees, branches, rows, state, observations, boundaries, sid)
            row_ids, active = np.zeros(state.batch_size, np.int64), np.zeros(state.batch_size, bool)
            row_ids[rows], active[rows] = self.row_ids(branches, trees), live
            gen, state = decode(self.policy.config, self.policy.params, state, self.policy.sampling, seed=self.seed,
                                row_ids=row_ids.tolist(), active=active)
            self.count_decode(gen, state.batch_size)
            gen = gen.take(rows)
        if self.policy.batching.keep_prefixes:
            self.prefixes.states[sid] = state
        return leaves

    def _fork(self, trees, branches, sources):
        """The first turn of every branch: one gather of the anchors' rows, cut to their boundaries. Returns
        the generation (branch order), the state and each branch's row in it."""
        p = self.policy
        used = sorted({ref.state for ref in sources})
        merged, offsets = concat_states([self.prefixes.states[s] for s in used])
        offset, mesh = dict(zip(used, offsets)), mesh_of(merged)
        parents = [merged_row(offset[r.state], r.row, self.prefixes.states[r.state].batch_size, merged.batch_size,
                              mesh) for r in sources]
        plan = plan_fork(parents, merged.batch_size, mesh)
        self.count_placed(plan.rows, len(plan.source), mesh, cross_shard=plan.cross_shard)
        gen, state = tree_expand(p.config, p.params, merged, parents, p.sampling, seed=self.seed,
                                 row_ids=self.row_ids(branches, trees), fork_lengths=[r.length for r in sources],
                                 plan=plan)
        self.count_decode(gen, state.batch_size)
        return gen, state, plan.rows

    def _extend(self, trees, branches, rows, state, observations, boundaries, sid):
        """Prefills the observations (branch i's into row rows[i]); each new boundary becomes an anchor."""
        p = self.policy
        per_row = [[] for _ in range(state.batch_size)]
        for i, tokens in enumerate(observations):
            per_row[rows[i]] = tokens
        state = extend(p.config, p.params, state, per_row)
        hidden, lengths = to_host((state.hidden, state.cache.lengths))
        for i, node in boundaries.items():
            row = int(rows[i])
            self.prefixes.anchor(trees[branches[i].tree], node.id, sid, row, int(lengths[row]),
                                 np.asarray(hidden[row]), branches[i].episode)
        return state
