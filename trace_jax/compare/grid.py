"""What a comparison runs: the `compare` section of a config, the variants (allocators, or one
ablation's TRACE variants) and each (variant, seed) run's config. Everything is validated before
any compute."""

from __future__ import annotations

import copy
import dataclasses

from trace_jax import run_config
from trace_jax.allocation import ALLOCATORS

ALL_ALLOCATORS = ("grpo", "dapo", "mopps", "knapsack", "tree_random", "entropy_branch", "trace")

# Each ablation: variant name -> config overrides ("section.field": value). Every variant spends the
# same budget; the baselines in the stages table are the uniform cells of the paper's uniform/active table.
ABLATIONS: dict[str, dict[str, dict[str, object]]] = {
    "stages": {
        "grpo (uniform roots, no prefixes)": {"allocator.name": "grpo"},
        "trace stage 1 only (active roots, no prefixes)": {"allocator.prefixes": "none"},
        "tree_random (uniform roots, uniform prefixes)": {"allocator.name": "tree_random"},
        "trace stage 2 only (uniform roots, active prefixes)": {"allocator.roots": "uniform"},
        "trace (active roots, active prefixes)": {},
    },
    "unit": {"trace unit=rollouts": {"budget.unit": "rollouts"}, "trace unit=tokens": {"budget.unit": "tokens"}},
    "lambda_local": {"trace lambda_local=default": {}, "trace lambda_local=0": {"advantage.lambda_local": 0.0}},
    "featurizer": {"trace features=hidden+scalars": {"predictor.features": "hidden+scalars"},
                   "trace features=hidden": {"predictor.features": "hidden"},
                   "trace features=scalars": {"predictor.features": "scalars"}},
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class CompareSection:
    """Attributes:
      allocators: the allocators of the main comparison.
      seeds: RL seeds; every (variant, seed) starts from the same SFT checkpoint.
      ablation: "" for the main comparison, else a key of ABLATIONS (TRACE variants).
      generalization_steps: training steps of the predictor generalization study (0 skips it).
      generalization_prompts: held-out prompts (and as many seen ones) scored by that study.
    """

    allocators: tuple[str, ...] = ALL_ALLOCATORS
    seeds: tuple[int, ...] = (0, 1, 2)
    ablation: str = ""
    generalization_steps: int = 8
    generalization_prompts: int = 32

    def __post_init__(self):
        unknown = [a for a in self.allocators if a not in ALLOCATORS]
        if unknown or not self.allocators:
            raise ValueError(f"allocators {unknown or '()'} unknown/empty; registered {ALLOCATORS.names()}")
        if self.ablation and self.ablation not in ABLATIONS:
            raise ValueError(f"ablation {self.ablation!r} unknown; known {sorted(ABLATIONS)}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be distinct and non-empty, got {self.seeds}")


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    overrides: dict[str, object]


def split_config(config) -> tuple[CompareSection, dict]:
    """(compare section, the run config dict without it); a bad compare field names itself."""
    raw = copy.deepcopy(config.to_dict() if hasattr(config, "to_dict") else dict(config))
    given = dict(raw.pop("compare", {}) or {})
    fields = {f.name for f in dataclasses.fields(CompareSection)}
    for key in given:
        if key not in fields:
            raise run_config.ConfigError(f"config field 'compare.{key}' does not exist; compare has {sorted(fields)}")
    for key in ("allocators", "seeds"):
        if key in given:
            given[key] = tuple(given[key])
    try:
        return CompareSection(**given), raw
    except (ValueError, TypeError) as e:
        raise run_config.ConfigError(f"config section 'compare': {e}") from None


def variants(compare: CompareSection) -> list[Variant]:
    if compare.ablation:
        return [Variant(name, {"allocator.name": "trace", **o}) for name, o in ABLATIONS[compare.ablation].items()]
    return [Variant(name, {"allocator.name": name}) for name in compare.allocators]


def run_config_dict(base: dict, variant: Variant, seed: int) -> dict:
    """The run's config: the base config, the variant's overrides, the seed."""
    out = copy.deepcopy(base)
    out["seed"] = seed
    for key, value in variant.overrides.items():
        section, field = key.split(".")
        out.setdefault(section, {})[field] = value
    return out


def validate(base: dict, compare: CompareSection) -> list[tuple[Variant, int, run_config.RunConfig]]:
    """Every run of the grid as a validated RunConfig (fails before compute, naming the variant)."""
    runs = []
    for variant in variants(compare):
        for seed in compare.seeds:
            try:
                runs.append((variant, seed, run_config.from_config_dict(run_config_dict(base, variant, seed))))
            except run_config.ConfigError as e:
                raise run_config.ConfigError(f"comparison variant {variant.name!r}, seed {seed}: {e}") from None
    return runs
