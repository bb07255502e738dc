"""Each arm's step size from the decisive comparison's screen, by PLAN.md's selection rule
(`trace_jax/compare/selection.py`), read from the screen's stored runs (no compute, no workdir).

  python studies/decisive/select_step_sizes.py
  python studies/decisive/select_step_sizes.py --config studies/decisive/config.py:screen \
      --output studies/decisive/results/selection.json

Prints every setting's per-seed mean-of-k and greedy area with its status (selected, eligible, failed the
audit, not run) and each arm's choice; writes --output {"screen": config, "results": dir, "provisional": bool,
"arms": {arm: {variant, settings, seeds, score, greedy_area, reason}}, "table": markdown} (provisional while
some setting has runs still to do: the phase-2 config refuses a provisional selection). The last line printed
is that JSON object without the table.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repo root

from absl import app, flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS, REPO = os.path.join(HERE, "results"), os.path.dirname(os.path.dirname(HERE))
config_flags.DEFINE_config_file("config", os.path.join(HERE, "config.py") + ":screen",
                                "The screen's config (a grid with compare.sweep and compare.results).")
flags.DEFINE_string("output", os.path.join(RESULTS, "selection.json"), "Where the selection goes (empty: printed only).")


def select(config) -> dict:
    from trace_jax.compare import grid, selection
    from trace_jax.config.schema import ConfigError

    compare, base = grid.split_config(config)
    if not compare.sweep or not compare.results:
        raise ConfigError("the screen's config needs compare.sweep and compare.results (e.g. "
                          "studies/decisive/config.py:screen)")
    if compare.unit == "tokens" and not compare.tokens:
        raise ConfigError("compare.unit='tokens' needs the fixed cap compare.tokens to find the stored runs")
    shared = os.path.join(compare.results, "shared.json")
    if not os.path.exists(shared):
        raise FileNotFoundError(f"{shared} not found: the screen has stored nothing under {compare.results}")
    with open(shared, encoding="utf-8") as f:
        after_sft = json.load(f)["after_sft"]["accuracy"]
    runs = grid.validate(grid.framed(base, compare, compare.tokens), compare)
    settings = selection.read_settings(compare.results, runs, compare, after_sft)
    choices = selection.choose(settings)
    return {"results": os.path.relpath(compare.results, REPO),
            "provisional": any(c.provisional for c in choices.values()),
            "arms": {arm: {"variant": c.variant, "settings": c.arm_settings(), "seeds": list(c.seeds),
                           "score": c.score, "greedy_area": c.greedy_area, "reason": c.reason}
                     for arm, c in choices.items()},
            "table": selection.markdown(settings, choices)}


def main(argv):
    del argv
    out = select(flags.FLAGS.config)
    print(out["table"])
    for arm, c in out["arms"].items():
        print(f"{arm}: {c['variant']} ({c['reason']})")
    if out["provisional"]:
        print("PROVISIONAL: some settings have runs still to do; finish the screen and run this again")
    if flags.FLAGS.output:
        with open(flags.FLAGS.output, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
    print(json.dumps({k: v for k, v in out.items() if k != "table"}))


if __name__ == "__main__":
    app.run(main)
