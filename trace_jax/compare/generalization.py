"""Predictor generalization study: does one shared predictor V_psi(H) say more about prompts and
prefixes it never trained on than a per-prompt Beta posterior (MoPPS) can?

With the policy frozen (the shared SFT checkpoint, so success rates do not drift), the predictor
and the per-prompt posteriors learn from the same `steps` x budget rollouts: uniform roots plus
random prefix branches (`treepo`, an allocation that does not select on either model). Then
both predict, before seeing them, the outcomes of fresh continuations from roots and from turn
prefixes, of prompts seen in training and of prompts never seen (the validation split). A prefix's
Beta prediction is its prompt's posterior mean: a per-prompt table cannot tell prefixes apart.
The featurizer ablation rides along: one predictor per registered featurizer (`FEATURIZERS`), each
trained on the same rollouts and scored on the same fresh outcomes as the configured one.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from trace_jax.allocation import make
from trace_jax.allocation.base import leaf_success, task_key
from trace_jax.allocation.calibration import calibration
from trace_jax.allocation.predictor import FEATURIZERS, SuccessPredictor, feature_width, featurize
from trace_jax.allocation.trace import new_success
from trace_jax.allocation.anchors import branch_points
from trace_jax.rollout.agent_loop import RolloutEngine
from trace_jax.run.experiment import derive_seed

ROOT_CONTINUATIONS = 4  # fresh rollouts per scored prompt (the root outcome is their mean success)
PREFIX_CONTINUATIONS = 2  # fresh continuations per scored prefix


def _score(engine, tasks, predictors, posterior, rng, max_prefixes):
    """({name: predictions}, beta, outcome) triples for roots and for prefixes of `tasks`."""
    trees = engine.roots(tasks)
    roots_x = np.stack([featurize(t, t.root) for t in trees])
    root_pred = {name: p.predict(roots_x) for name, p in predictors.items()}
    beta = np.array([np.divide(*posterior.get(task_key(t.task), (1.0, 2.0))) for t in trees])
    new = engine.expand(trees, [(i, 0, ROOT_CONTINUATIONS) for i in range(len(trees))])
    root_out = np.array([new_success(t, 0, [leaf for ti, leaf in new if ti == i]) for i, t in enumerate(trees)])
    points = branch_points(trees)
    points = [points[i] for i in sorted(rng.permutation(len(points))[:max_prefixes])]
    if not points:
        return (root_pred, beta, root_out), ({name: np.zeros(0) for name in predictors}, np.zeros(0), np.zeros(0))
    prefixes_x = np.stack([featurize(trees[i], trees[i].nodes[j]) for i, j in points])
    prefix_pred = {name: p.predict(prefixes_x) for name, p in predictors.items()}
    prefix_beta = beta[[i for i, _ in points]]
    new = engine.expand(trees, [(i, j, PREFIX_CONTINUATIONS) for i, j in points])
    prefix_out = np.array([new_success(trees[i], j, [leaf for ti, leaf in new if ti == i]) for i, j in points])
    return (root_pred, beta, root_out), (prefix_pred, prefix_beta, prefix_out)


def study(setup, params, *, steps: int, prompts: int, seed: int) -> dict:
    """Returns {"table": {group: {level: {"predictor": calib, "beta": calib}}}, "pairs": raw triples,
    "featurizers": {featurizer: {group: {level: calib}}}} ("predictor": the configured featurizer's)."""
    run = setup.run
    budget = run.budget
    policy = setup.policy(params)
    train_tasks = setup.source.tasks("train")
    rng = np.random.default_rng(derive_seed(seed, "generalization"))
    order = rng.permutation(len(train_tasks))
    seen = [train_tasks[i] for i in order[: steps * budget.prompts]]
    unseen = setup.source.tasks("validation")
    unseen = [unseen[i] for i in rng.permutation(len(unseen))[:prompts]]
    width = feature_width(setup.model_config.hidden_size)
    # one predictor per featurizer; the configured one is the entry of its own featurizer
    predictors = {name: SuccessPredictor(width, dataclasses.replace(run.predictor, features=name), seed=seed)
                  for name in FEATURIZERS}
    configured = run.predictor.features
    collector = make("treepo", budget, seed=seed)
    posterior: dict[int, tuple[float, float]] = {}  # key -> (successes + 1, leaves + 2): Beta(1, 1) prior
    for step in range(steps):
        engine = RolloutEngine(policy, setup.env, seed=derive_seed(seed, "generalization", step))
        trees = collector.step(engine, seen[step * budget.prompts:(step + 1) * budget.prompts]).trees
        for predictor in predictors.values():
            predictor.update(trees)
        for tree in trees:
            s, n = leaf_success(tree)
            a, total = posterior.get(task_key(tree.task), (1.0, 2.0))
            posterior[task_key(tree.task)] = (a + s, total + n)
    groups = {"seen prompts": [seen[i] for i in rng.permutation(len(seen))[:prompts]], "unseen prompts": unseen}
    table, pairs, ablation = {}, {}, {name: {} for name in FEATURIZERS}
    for g, (name, tasks) in enumerate(groups.items()):
        engine = RolloutEngine(policy, setup.env, seed=derive_seed(seed, "generalization", "score", g))
        roots, prefixes = _score(engine, tasks, predictors, posterior, rng, max_prefixes=2 * prompts)
        table[name], pairs[name] = {}, {}
        for featurizer in FEATURIZERS:
            ablation[featurizer][name] = {}
        for level, (pred, beta, out) in (("roots", roots), ("prefixes", prefixes)):
            table[name][level] = {"predictor": dataclasses.asdict(calibration(pred[configured], out)),
                                  "beta": dataclasses.asdict(calibration(beta, out))}
            pairs[name][level] = {"predictor": pred[configured].tolist(), "beta": beta.tolist(),
                                  "outcome": out.tolist()}
            for featurizer in FEATURIZERS:
                ablation[featurizer][name][level] = dataclasses.asdict(calibration(pred[featurizer], out))
    return {"table": table, "pairs": pairs, "featurizers": ablation, "train_steps": steps,
            "train_prompts": len(seen), "configured_features": configured}
