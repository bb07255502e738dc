"""What a comparison runs: the `compare` section of a config, the variants (allocators, or one
ablation's TRACE variants) and each (variant, seed) run's config. Everything is validated before
any compute."""

from __future__ import annotations

import copy
import dataclasses
import itertools

from trace_jax.allocation import ALLOCATORS, default_advantage
from trace_jax.allocation.predictor import FEATURIZERS
from trace_jax.config import schema
from trace_jax.config.files import from_config_dict

ALL_ALLOCATORS = ("grpo", "dapo", "mopps", "knapsack", "pcl", "treepo", "entropy_branch", "trace")
# Random anchors per step the paper-mode arm holds out of its choice (one continuation each), so its
# predictor is scored without selection bias in steps.jsonl (`holdout_calibration`); 2 of M = 32 rollouts.
TRACE_HOLDOUT = 2

# The comparison's arms: name -> config overrides. Each allocator (registered ones too) is an arm under its own
# name; "trace" is the paper's TRACE (stage 2 spends m_i x N continuations on prompt i's own prefixes, one
# round) with holdout anchors; "trace_global" is our extension (one pool of M - M1 over all trees,
# budget.rounds rounds), the mode of every grid before 2026-12-05.
ARMS: dict[str, dict[str, object]] = {
    **{name: {"allocator.name": name} for name in ALL_ALLOCATORS},
    "trace": {"allocator.name": "trace", "allocator.prefix_budget": "local", "allocator.holdout": TRACE_HOLDOUT},
    "trace_global": {"allocator.name": "trace", "allocator.prefix_budget": "global"},
}

# Each ablation: variant name -> config overrides ("section.field": value). Every variant spends the
# same budget; the baselines in the stages table are the uniform cells of the paper's uniform/active table.
ABLATIONS: dict[str, dict[str, dict[str, object]]] = {
    "stages": {
        # trace_tree like every cell of the table, so the cells differ by allocation alone
        "grpo (uniform roots, no prefixes)": {"allocator.name": "grpo", "advantage.name": "trace_tree"},
        "trace stage 1 only (active roots, no prefixes)": {"allocator.prefixes": "none"},
        "uniform roots, uniform prefixes": {"allocator.roots": "uniform", "allocator.prefixes": "uniform"},
        "active roots, uniform prefixes": {"allocator.prefixes": "uniform"},
        "uniform roots, active prefixes": {"allocator.roots": "uniform"},
        "trace (active roots, active prefixes)": {},
    },
    "stage2": {  # the paper's local per-prompt budgets vs our global pool, its formula vs the noise-aware one
        "global, agreement (1 - q^k)": {},
        "global, posterior": {"allocator.prefixes": "posterior"},
        "local m_i N, agreement (paper)": {"allocator.prefix_budget": "local"},
        "local m_i N, posterior": {"allocator.prefix_budget": "local", "allocator.prefixes": "posterior"},
    },
    "lambda_local": {"trace lambda_local=default": {}, "trace lambda_local=0": {"advantage.lambda_local": 0.0}},
    "featurizer": {f"trace features={name}": {"predictor.features": name} for name in FEATURIZERS},
}


# Each baseline trained with its own advantage estimator (the default) and with TRACE's trace_tree.
ABLATIONS["advantage"] = {
    name: overrides for a in ALL_ALLOCATORS if default_advantage(a) != "trace_tree"
    for name, overrides in ((f"{a} (own estimator: {default_advantage(a)})", {"allocator.name": a}),
                            (f"{a} with trace_tree", {"allocator.name": a, "advantage.name": "trace_tree"}))}

# The mechanism study (`study="mechanism"`) measures TRACE's stage-2 modes beside the allocators.
MECHANISM_EXTRA: dict[str, dict[str, object]] = {
    "trace posterior": {"allocator.name": "trace", "allocator.prefixes": "posterior"},
    "trace global": {"allocator.name": "trace", "allocator.prefix_budget": "global"},
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class CompareSection:
    """Attributes:
      allocators: the arms of the main comparison (ARMS: each allocator by name, "trace" in the paper's
        local mode, "trace_global").
      sweep: {section: {field: values}}: every arm runs at every combination (a step-size screen); the
        variant is named "<arm> field=value ...".
      arm_settings: {arm: {section: {field: value}}}: an arm's own settings (each arm at its tuned step size).
      arms: {name: {section: {field: value}}}: arms a study defines itself (e.g. TRACE with its prefixes off),
        usable in `allocators` beside ARMS and the registered allocators (a name here replaces ARMS's). A study
        that defines its arms gets exactly them in the mechanism study too (no MECHANISM_EXTRA).
      seeds: RL seeds; every (variant, seed) starts from the same SFT checkpoint.
      primary: the primary endpoint's two arms (a, b): the difference a - b (TRACE - GRPO by default).
      primary_seeds: the seeds of the primary endpoint's arms (`primary`) when they
        run more than the others (() = `seeds`).
      results: a directory (say studies/powered/results/math) that keeps every finished run's result
        files, the shared evaluation of the SFT start and its params digest; a grid resumes from it on
        another machine (`compare/results_store.py`). "" = the workdir only.
      ablation: "" for the main comparison, else a key of ABLATIONS (TRACE variants).
      generalization_steps: training steps of the predictor generalization study (0 skips it).
      generalization_prompts: held-out prompts (and as many seen ones) scored by that study.
      study: "" (train every variant and compare held-out accuracy), "mechanism" (no training: the
        frozen SFT policy's gradient cosine per allocation step, `compare/mechanism.py`) or
        "generalization" (the predictor generalization study and its featurizer ablation alone).
      mechanism_steps: allocation steps per variant in the mechanism study.
      mechanism_reference: uniform rollouts behind its reference gradient.
      mechanism_group: rollouts per prompt of that reference.
      mechanism_holdout: random anchors per step held out from TRACE's choice to score its predictor.
      mechanism_rl_steps: 0 freezes the shared SFT policy for the mechanism study; N > 0 first trains
        GRPO for N steps from it (first seed, equal rollouts; stored and resumed like any run) and
        freezes that mid-RL policy (reports mechanism*_rlN.*; at equal tokens the cap is still the one
        measured on the SFT policy).
      mechanism_advantage: the estimator every mechanism variant's gradient is computed with (unless the
        variant sets its own), so the cosines differ by allocation alone; "" = each allocator's own.
      mechanism_learner_window: 0, or also each variant's held-out gain after training that many
        consecutive steps' batches from the frozen policy with its own learner (`compare/held_out_gain.py`;
        mechanism_steps // window paired figures per variant).
      unit: the framing of equal cost. "rollouts": every run spends budget.rollouts rollouts per step;
        "tokens": every run spends, per step, the measured cost (generated tokens + budget.prefill_weight x
        prefilled) that GRPO's M rollouts cost on the SFT policy (or `tokens` when set), audited against
        the engine's ledger (budget.unit="tokens").
      endpoint: the primary endpoint's outcome, TRACE - GRPO paired by seed and task after the last step:
        "greedy" (held-out success of greedy decoding) or "sampled" (the mean-of-k, eval.sample_k).
      equivalence_margin: the margin (a success fraction, 0.0063 = 0.63 points) inside which a paired
        difference's 95% interval is called "equivalent", fixed in the study's plan before its runs (e.g. the
        design's MDD); 0 never calls equivalence (gain, loss or inconclusive only). Never the realized MDD.
      tokens: the per-step cost cap of the tokens framing; 0 measures it (`token_calibration` rollouts).
      token_calibration: uniform rollouts (GRPO's groups of M / B) on the SFT policy that measure the cap.
    """

    allocators: tuple[str, ...] = ALL_ALLOCATORS
    sweep: dict = dataclasses.field(default_factory=dict)
    arm_settings: dict = dataclasses.field(default_factory=dict)
    arms: dict = dataclasses.field(default_factory=dict)
    seeds: tuple[int, ...] = (0, 1, 2)
    primary: tuple[str, str] = ("trace", "grpo")
    primary_seeds: tuple[int, ...] = ()
    results: str = ""
    ablation: str = ""
    generalization_steps: int = 8
    generalization_prompts: int = 32
    study: str = ""
    mechanism_steps: int = 50
    mechanism_reference: int = 2048
    mechanism_group: int = 8
    mechanism_holdout: int = 4
    mechanism_advantage: str = "trace_tree"
    mechanism_rl_steps: int = 0
    mechanism_learner_window: int = 0
    unit: str = "rollouts"
    endpoint: str = "greedy"
    equivalence_margin: float = 0.0
    tokens: int = 0
    token_calibration: int = 256

    def __post_init__(self):
        unknown = [a for a in self.allocators if a not in ARMS and a not in ALLOCATORS and a not in self.arms]
        if unknown or not self.allocators:
            raise ValueError(f"allocators {unknown or '()'} unknown/empty; arms {sorted({*ARMS, *self.arms})} and every "
                             f"registered allocator {ALLOCATORS.names()}")
        stray = sorted(set(self.arm_settings) - set(self.allocators))
        if stray:
            raise ValueError(f"arm_settings for {stray}, which are not among the allocators {list(self.allocators)}")
        for where, table in ([("sweep", self.sweep)] + [(f"arm_settings.{a}", t) for a, t in self.arm_settings.items()]
                             + [(f"arms.{a}", t) for a, t in self.arms.items()]):
            if not isinstance(table, dict) or not all(isinstance(f, dict) for f in table.values()):
                raise ValueError(f"{where} must map sections to {{field: value}}, got {table!r}")
        if any(not isinstance(v, (tuple, list)) or not v for f in self.sweep.values() for v in f.values()):
            raise ValueError(f"every sweep field needs a non-empty tuple of values, got {self.sweep!r}")
        if self.ablation and self.ablation not in ABLATIONS:
            raise ValueError(f"ablation {self.ablation!r} unknown; known {sorted(ABLATIONS)}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be distinct and non-empty, got {self.seeds}")
        if len(self.primary) != 2 or len(set(self.primary)) != 2:
            raise ValueError(f"primary must name two different arms (a, b) of the endpoint a - b, got {self.primary}")
        if len(set(self.primary_seeds)) != len(self.primary_seeds):
            raise ValueError(f"primary_seeds must be distinct, got {self.primary_seeds}")
        if self.study not in ("", "mechanism", "generalization"):
            raise ValueError(f"study must be '', 'mechanism' or 'generalization', got {self.study!r}")
        if self.study == "generalization" and self.generalization_steps < 1:
            raise ValueError("study='generalization' needs generalization_steps >= 1")
        if self.unit not in ("rollouts", "tokens"):
            raise ValueError(f"unit must be 'rollouts' or 'tokens', got {self.unit!r}")
        if self.endpoint not in ("greedy", "sampled"):
            raise ValueError(f"endpoint must be 'greedy' or 'sampled', got {self.endpoint!r}")
        if not (isinstance(self.equivalence_margin, (int, float)) and 0 <= self.equivalence_margin < 1):
            raise ValueError(f"equivalence_margin must be a success fraction in [0, 1) fixed in the plan (0: no "
                             f"equivalence claim), got {self.equivalence_margin!r}")
        if self.tokens < 0 or self.token_calibration < 1:
            raise ValueError(f"need tokens >= 0 and token_calibration >= 1, got {self.tokens}, {self.token_calibration}")
        if self.mechanism_rl_steps < 0:
            raise ValueError(f"mechanism_rl_steps must be >= 0, got {self.mechanism_rl_steps}")
        if not 0 <= self.mechanism_learner_window <= self.mechanism_steps:
            raise ValueError(f"mechanism_learner_window must be in [0, mechanism_steps={self.mechanism_steps}], "
                             f"got {self.mechanism_learner_window}")
        if min(self.mechanism_steps, self.mechanism_reference, self.mechanism_group) < 1 or self.mechanism_holdout < 0:
            raise ValueError("mechanism_steps, mechanism_reference and mechanism_group must be >= 1, "
                             "mechanism_holdout >= 0")


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
            raise schema.ConfigError(f"config field 'compare.{key}' does not exist; compare has {sorted(fields)}")
    for key in ("allocators", "seeds", "primary", "primary_seeds"):
        if key in given:
            given[key] = tuple(given[key])
    for key in ("sweep", "arm_settings", "arms"):
        if key in given:
            given[key] = _plain(given[key])
    try:
        return CompareSection(**given), raw
    except (ValueError, TypeError) as e:
        raise schema.ConfigError(f"config section 'compare': {e}") from None


def dotted(sections: dict) -> dict[str, object]:
    """{section: {field: value}} -> {"section.field": value}."""
    return {f"{section}.{field}": value for section, fields in sections.items() for field, value in fields.items()}


def value_label(value) -> str:
    """How a swept value reads in a variant's name and the screen's tables (floats in %g)."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def _plain(value):
    """Nested dicts (from a ConfigDict) with lists as tuples, so the section compares and hashes as JSON."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return tuple(value) if isinstance(value, list) else value


def variants(compare: CompareSection) -> list[Variant]:
    if compare.ablation:
        return [Variant(name, {"allocator.name": "trace", **o}) for name, o in ABLATIONS[compare.ablation].items()]
    known = {**ARMS, **{name: dotted(table) for name, table in compare.arms.items()}}
    arms = [Variant(name, {**known.get(name, {"allocator.name": name}), **dotted(compare.arm_settings.get(name, {}))})
            for name in compare.allocators]
    sweep = dotted(compare.sweep)
    if not sweep:
        return arms
    # setting by setting, every arm at each: a screen stopped part way has screened every arm alike
    return [Variant(f"{arm.name} " + " ".join(f"{k.split('.')[1]}={value_label(v)}" for k, v in zip(sweep, values)),
                    {**arm.overrides, **dict(zip(sweep, values))})
            for values in itertools.product(*sweep.values()) for arm in arms]


def arm_of(variant: str) -> str:
    """The arm a variant belongs to (a sweep's variants are named "<arm> field=value ...")."""
    return variant.split(" ")[0]


def suffix(compare: CompareSection) -> str:
    """What the report files of a framing are called after: "" (equal rollouts) or "_tokens"."""
    return "" if compare.unit == "rollouts" else "_tokens"


def framed(base: dict, compare: CompareSection, tokens: int) -> dict:
    """The base config under the comparison's framing: unchanged at equal rollouts; at equal tokens,
    budget.unit="tokens" with the per-step cap `tokens`."""
    if compare.unit == "rollouts":
        return base
    out = copy.deepcopy(base)
    out.setdefault("budget", {}).update(unit="tokens", tokens=int(tokens))
    return out


def run_config_dict(base: dict, variant: Variant, seed: int) -> dict:
    """The run's config: the base config, the variant's overrides, the seed."""
    out = copy.deepcopy(base)
    out["seed"] = seed
    for key, value in variant.overrides.items():
        section, field = key.split(".")
        out.setdefault(section, {})[field] = value
    return out


def mechanism_variants(base: dict, compare: CompareSection) -> list[tuple[str, schema.RunConfig]]:
    """The mechanism study's (name, run config): the comparison's variants (plus TRACE's stage-2 modes in
    the main comparison), every TRACE variant holding out `mechanism_holdout` anchors, first seed."""
    extra = [] if compare.ablation or compare.arms else [Variant(n, o) for n, o in MECHANISM_EXTRA.items()]
    chosen = variants(compare) + extra
    out = []
    for variant in chosen:
        config = run_config_dict(base, variant, compare.seeds[0])
        if config["allocator"].get("name") == "trace":
            config["allocator"]["holdout"] = compare.mechanism_holdout
        if compare.mechanism_advantage and "advantage.name" not in variant.overrides:
            config.setdefault("advantage", {})["name"] = compare.mechanism_advantage
        try:
            out.append((variant.name, from_config_dict(config)))
        except schema.ConfigError as e:
            raise schema.ConfigError(f"mechanism variant {variant.name!r}: {e}") from None
    return out


def seeds_of(variant: Variant, compare: CompareSection) -> tuple[int, ...]:
    """A variant's seeds: `primary_seeds` for the primary endpoint's arms when set, else `seeds`."""
    if compare.primary_seeds and not compare.ablation and arm_of(variant.name) in compare.primary:
        return compare.primary_seeds
    return compare.seeds


def validate(base: dict, compare: CompareSection) -> list[tuple[Variant, int, schema.RunConfig]]:
    """Every run of the grid as a validated RunConfig (fails before compute, naming the variant), seed by
    seed: a grid stopped part way has every variant on its first seeds."""
    runs = []
    chosen = variants(compare)
    for seed in sorted({s for v in chosen for s in seeds_of(v, compare)}):
        for variant in chosen:
            if seed not in seeds_of(variant, compare):
                continue
            try:
                runs.append((variant, seed, from_config_dict(run_config_dict(base, variant, seed))))
            except schema.ConfigError as e:
                raise schema.ConfigError(f"comparison variant {variant.name!r}, seed {seed}: {e}") from None
    return runs
