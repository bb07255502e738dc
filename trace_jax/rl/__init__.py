"""Policy optimization on rollout trees: advantage estimators, losses, the jitted learner step."""
