"""The frozen-policy mechanism studies and the predictor generalization study (docs/results.md, "Mechanism"): with
no training, does an allocator's step buy a policy-gradient direction closer to the true one at the same cost, and
does the shared predictor rank prompts and prefixes it has not seen?

  python experiments/compare.py --config studies/mechanism/config.py:task=math --workdir /tmp/mech/math --study=mechanism --unit=tokens
  python experiments/compare.py --config studies/mechanism/config.py:task=multihop,mixed --workdir /tmp/mech/multihop_mixed --study=mechanism --unit=tokens
  python experiments/compare.py --config studies/mechanism/config.py:task=funcall --workdir /tmp/mech/funcall --study=generalization

`task=`: the comparison config's pool (multihop, math or funcall), as it is; `mixed`: its mixed-difficulty version
(`mixed_pool`). The reports are kept in results/<task>[_mixed]/ and the featurizer ablations in results/featurizers/.
"""

import ml_collections

from configs import compare_funcall, compare_math, compare_multihop
from trace_jax.config.files import config_args
from trace_jax.config.schema import ConfigError

COMPARISONS = {"multihop": compare_multihop, "math": compare_math, "funcall": compare_funcall}
# (the pool's hardest level, the warm start's hardest level) per source
MIXED_POOLS = {"multihop": (4, 2), "math": (5, 3)}


def mixed_pool(c: ml_collections.ConfigDict) -> None:
    """The mixed-difficulty regime: a pool of harder prompts than the warm start saw (multi-hop: 1-4 hops after SFT on
    1-2; arithmetic: 2-5 steps after SFT on 2-3), so the easy part is mixed and the rest mostly out of reach, as for
    a policy meeting harder prompts than it was warm-started on (the paper's regime: GRPO's groups mixed about 0.3
    of the time). Measured: docs/results.md, "Mechanism". With SFT on all four hop levels instead, GRPO's groups
    were mixed 0.682 of the time (greedy 0.72 / 0.64 / 0.33 / 0.46 by hops), no closer to that regime."""
    if c.task.source not in MIXED_POOLS:
        raise ConfigError(f"the mixed pool is defined for the sources {sorted(MIXED_POOLS)}, not {c.task.source!r}")
    c.task.max_difficulty, c.sft.max_difficulty = MIXED_POOLS[c.task.source]


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    args = config_args(arg, flags=("mixed",), values={"task": ""}, config="studies/mechanism/config.py")
    if args["task"] not in COMPARISONS:
        raise ConfigError(f"studies/mechanism/config.py needs task= one of {sorted(COMPARISONS)}, got {args['task']!r}")
    c = COMPARISONS[args["task"]].get_config()
    if args["mixed"]:
        mixed_pool(c)
    return c
