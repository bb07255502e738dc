"""The agent loop grows well-formed trees, forks live rows without re-prefilling, and balances its ledger."""

import jax
import numpy as np
import pytest

from trace_jax.models import forward
from trace_jax.rollout.agent_loop import RolloutEngine
from trace_jax.rollout.tree import step_statistics


def test_trees_are_well_formed_and_forks_continue_the_right_prefix(tiny_setup):
    policy, env, source = tiny_setup.policy, tiny_setup.env, tiny_setup.source
    engine = RolloutEngine(policy, env, seed=3)
    trees = engine.roots(source.tasks("train")[:3])
    engine.expand(trees, [(0, 0, 2), (1, 0, 1), (2, 0, 2)])
    anchors = [(i, n.id, 2) for i, t in enumerate(trees) for n in t.nodes[1:] if not n.terminal]
    engine.expand(trees, anchors)
    ledger = engine.ledger
    assert ledger.rollouts_started == ledger.rollouts_finished == 5 + 2 * len(anchors)
    generated = sum(len(n.tokens) for t in trees for n in t.nodes[1:])
    assert ledger.tokens_generated == generated
    observations = sum(len(n.observation) for t in trees for n in t.nodes[1:])
    prompts = sum(len(t.root.tokens) for t in trees)
    assert ledger.tokens_prefilled == prompts + observations + ledger.rollouts_started  # +1 re-fed token per fork
    for tree in trees:
        assert tree.open_nodes() == [] and len(tree.leaves()) >= 1
        for leaf in tree.leaves():
            assert len(tree.path(leaf.id)) - 1 <= env.limits.max_turns
    # a continuation from a forked boundary is scored under exactly that boundary's context
    for tree_index, node_id, _ in anchors[:2]:
        tree = trees[tree_index]
        child = tree.nodes[tree.nodes[node_id].children[-1]]
        context = tree.context(node_id)
        seq = np.asarray(context + child.tokens)[None]
        logits = forward(policy.config, policy.params, seq, np.arange(seq.shape[1])[None]).logits
        log_p = np.asarray(jax.nn.log_softmax(logits[0], -1))
        steps = np.arange(len(child.tokens)) + len(context) - 1
        np.testing.assert_allclose(child.logprobs, log_p[steps, child.tokens], atol=1e-4)
    stats = step_statistics(trees)
    assert 0.0 <= stats["effective_ratio"] <= 1.0


def test_branch_episodes_are_independent(tiny_setup):
    """Each boundary keeps a forked episode that has taken exactly the turns on its own path: branches
    sharing one episode object would have counted each other's turns."""
    engine = RolloutEngine(tiny_setup.policy, tiny_setup.env, seed=4)
    trees = engine.roots(tiny_setup.source.tasks("train")[:1])
    engine.expand(trees, [(0, 0, 3)])
    tree = trees[0]
    engine.expand(trees, [(0, n.id, 2) for n in tree.nodes[1:] if not n.terminal])
    assert engine.episode_at(tree, 0).turns == 0
    boundaries = [n for n in tree.nodes[1:] if not n.terminal]
    assert boundaries
    for node in boundaries:
        episode = engine.episode_at(tree, node.id)
        assert episode.turns == node.depth == len(tree.path(node.id)) - 1
        assert [text for text, _ in episode.history] == \
            [tiny_setup.policy.renderer.decode_turn(n.tokens) for n in tree.path(node.id)[1:]]


def test_anchors_hold_data_and_the_engine_knows_where_their_prefixes_live(tiny_setup):
    """A tree node records its prefix length and hidden state only; the engine's PrefixRef for it
    has the same length, and that length is the token count of the node's context."""
    engine = RolloutEngine(tiny_setup.policy, tiny_setup.env, seed=5)
    trees = engine.roots(tiny_setup.source.tasks("train")[:2])
    engine.expand(trees, [(0, 0, 2), (1, 0, 2)])
    anchors = [(t, n) for t in trees for n in t.nodes if t.is_anchor(n.id)]
    assert len(anchors) > 2  # the roots and at least one turn boundary
    for tree, node in anchors:
        ref = engine.prefix_of(tree, node.id)
        assert node.prefix_length == ref.length == len(tree.context(node.id))
        assert node.hidden.shape == (2 * tiny_setup.config.hidden_size,)  # final and middle layer
    for tree in trees:
        assert all(not tree.is_anchor(leaf.id) for leaf in tree.leaves())


def test_an_episode_limit_beyond_the_engines_turn_range_is_refused(tiny_setup):
    from trace_jax.envs import Limits
    from trace_jax.rollout.agent_loop import MAX_TURNS

    env = tiny_setup.source.make_env(Limits(max_turns=MAX_TURNS + 1))
    with pytest.raises(ValueError, match=f"max_turns={MAX_TURNS + 1} exceeds the engine's {MAX_TURNS}"):
        RolloutEngine(tiny_setup.policy, env, seed=0)


def test_tool_calls_accumulate_across_expand_calls_on_different_trees(tiny_setup, monkeypatch):
    """DAPO rolls groups in several calls on different trees: the ledger counts every call's tools
    (it once kept only the last call's trees). Every turn here counts as one tool call."""
    from trace_jax.envs import protocol
    step = protocol.Episode.step

    def counting_step(self, text, num_tokens=0):
        result = step(self, text, num_tokens)
        self.tool_calls += 1
        return result

    monkeypatch.setattr(protocol.Episode, "step", counting_step)
    engine = RolloutEngine(tiny_setup.policy, tiny_setup.env, seed=6)
    tasks = tiny_setup.source.tasks("train")
    first, second = engine.roots(tasks[:2]), engine.roots(tasks[2:4])
    engine.expand(first, [(0, 0, 3), (1, 0, 3)])
    engine.expand(second, [(0, 0, 3), (1, 0, 3)])
    assert engine.ledger.tool_calls == sum(t.tool_calls() for t in first + second)
    assert sum(t.tool_calls() for t in first) > 0 and sum(t.tool_calls() for t in second) > 0


def test_a_request_answered_mid_conversation_continues_with_the_users_next_message(tiny_setup):
    """Multi-turn tasks (BFCL multi-turn): a final answer to one request is followed by the user's next
    message, prefilled in the user's role; the rollout ends after the last request; its boundary forks."""
    from trace_jax.envs.formats import FORMATS
    from trace_jax.envs.react import Action

    class AnswerEveryTurn(type(FORMATS["react"])):  # random text: every turn is an answer
        def parse(self, text, env):
            return Action("finish", text)

    class TwoRequests(type(tiny_setup.env)):
        def next_user_turn(self, task, episode):
            if episode.memory.get("asked"):
                return None
            episode.memory["asked"] = True
            return "And the second request?"

    env = TwoRequests(tiny_setup.source.index, tiny_setup.env.limits)
    env.action_format = AnswerEveryTurn()
    engine = RolloutEngine(tiny_setup.policy, env, seed=5)
    trees = engine.roots(tiny_setup.source.tasks("train")[:2])
    engine.expand(trees, [(0, 0, 2), (1, 0, 2)])
    user_turn = tiny_setup.policy.renderer.observation("And the second request?", user_turn=True)
    assert tiny_setup.tokenizer.decode(user_turn) == "\nUser: And the second request?\n"
    boundaries = [(i, n) for i, t in enumerate(trees) for n in t.nodes[1:] if list(n.observation) == user_turn]
    assert len(boundaries) == 4  # every rollout's first turn answered and the second request followed
    for i, node in boundaries:
        assert not node.terminal and all(trees[i].nodes[c].terminal for c in node.children)
    engine.expand(trees, [(i, node.id, 1) for i, node in boundaries[:2]])  # forks at the user's turn
    assert engine.ledger.rollouts_started == engine.ledger.rollouts_finished == 6
