"""What the quickstart's figures mean on another machine (issue 57, class 8).

  python studies/quickstart_spread/spread.py --section chaos      # is the SFT warm start chaotic? (~20 min, 2 cores)
  python studies/quickstart_spread/spread.py --section seeds      # the quickstart over RL/SFT seeds (~5 min each)

`chaos`: the quickstart's SFT twice per learning rate, once from its own initial params and once from them times
(1 + 1e-6 x standard normal), the size of the float-level differences another CPU's kernels introduce; then the
held-out greedy accuracy of both. A learning rate at which the 1e-6 grows into a different policy (loss curves
apart, accuracies apart by more than the eval set's noise) makes the quickstart's after-SFT figure one
machine's. `seeds`: the whole quickstart (`experiments/train.py --config configs/quickstart.py`) with
`--config.seed=s` (demonstrations, initial params, SFT batches and RL all follow it): the spread of after-SFT,
after-RL and the gain over seeds is what the README can state for any machine.

Writes results/<section>.json beside this file; the last line printed is that JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, REPO)

PERTURBATION = 1e-6  # relative, per parameter: the size of another machine's float-level differences
LEARNING_RATES = (3e-3, 1e-3)  # the library's SFT learning rate, and a third of it


def sft_once(learning_rate: float, perturbation: float, workdir: str, runlocal: bool = False) -> dict:
    """The quickstart's SFT at `learning_rate` from its initial params times (1 + perturbation x N(0, 1)), then
    greedy accuracy on its held-out tasks: {"loss": {step: loss}, "accuracy", "wall_s"}."""
    import jax
    import numpy as np

    from configs import quickstart
    from trace_jax.config.files import from_config_dict
    from trace_jax.run import evaluation, experiment, sft
    from trace_jax.run.metrics import MetricWriter, read_metrics

    t0 = time.time()
    config = quickstart.get_config("runlocal" if runlocal else None)
    config.sft.learning_rate = learning_rate
    config.eval.sample_k = 0
    setup = experiment.build(from_config_dict(config), workdir)
    if perturbation:
        rng = np.random.default_rng(12345)
        params = jax.tree.map(lambda p: p * (1 + perturbation * rng.standard_normal(p.shape)).astype(p.dtype),
                              setup.params)
        setup = dataclasses.replace(setup, params=params)
    params = sft.warm_start(setup, workdir, MetricWriter(workdir))
    result = evaluation.held_out(setup, params, sampled=False)
    loss = {row["step"]: row["sft/loss"] for row in read_metrics(workdir) if "sft/loss" in row}
    jax.clear_caches()
    return {"loss": loss, "accuracy": result["accuracy"], "wall_s": time.time() - t0}


def chaos(runlocal: bool = False) -> dict:
    out = {}
    for lr in LEARNING_RATES:
        runs = {}
        for name, eps in (("own", 0.0), ("perturbed", PERTURBATION)):
            with tempfile.TemporaryDirectory(prefix="spread_") as workdir:
                runs[name] = sft_once(lr, eps, workdir, runlocal)
            print(f"lr {lr:g} {name}: accuracy {runs[name]['accuracy']:.3f} ({runs[name]['wall_s']:.0f} s)", flush=True)
        a, b = runs["own"]["loss"], runs["perturbed"]["loss"]
        steps = sorted(set(a) & set(b))
        gaps = {s: abs(a[s] - b[s]) for s in steps}
        apart = [s for s in steps if gaps[s] > 1e-3]
        out[f"{lr:g}"] = {"accuracy": {k: r["accuracy"] for k, r in runs.items()},
                          "accuracy_gap": abs(runs["own"]["accuracy"] - runs["perturbed"]["accuracy"]),
                          "first_step_losses_apart_1e-3": apart[0] if apart else None,
                          "loss_gap_by_step": {str(s): round(gaps[s], 6) for s in steps},
                          "final_loss": {k: r["loss"][max(r["loss"])] for k, r in runs.items()}}
        print(f"lr {lr:g}: losses apart (>1e-3) from step {out[f'{lr:g}']['first_step_losses_apart_1e-3']}, "
              f"accuracy gap {out[f'{lr:g}']['accuracy_gap']:.3f}", flush=True)
    return {"section": "chaos", "perturbation": PERTURBATION, "learning_rates": out}


def seeds(values: list[int], sft_learning_rate: float | None = None) -> dict:
    """The whole quickstart per seed (`--config.seed`); `sft_learning_rate` replaces its SFT step size."""
    rows = {}
    extra = [] if sft_learning_rate is None else [f"--config.sft.learning_rate={sft_learning_rate}"]
    for seed in values:
        with tempfile.TemporaryDirectory(prefix="spread_") as workdir:
            t0 = time.time()
            done = subprocess.run([sys.executable, os.path.join(REPO, "experiments", "train.py"), "--config",
                                   os.path.join(REPO, "configs", "quickstart.py"), "--workdir", workdir,
                                   *extra, f"--config.seed={seed}"], capture_output=True, text=True, cwd=REPO)
            if done.returncode:
                raise RuntimeError(f"seed {seed}: the quickstart failed:\n{done.stderr[-3000:]}")
            last = json.loads(done.stdout.strip().splitlines()[-1])
        rows[seed] = {"acc_after_sft": last["acc_after_sft"], "acc_after_rl": last["acc_after_rl"],
                      "gain": last["acc_after_rl"] - last["acc_after_sft"], "wall_s": round(time.time() - t0, 1)}
        print(f"seed {seed}: {rows[seed]}", flush=True)
    gains = sorted(r["gain"] for r in rows.values())
    return {"section": "seeds", "sft_learning_rate": sft_learning_rate, "seeds": rows, "gain_min": gains[0],
            "gain_max": gains[-1],
            "gain_median": gains[len(gains) // 2], "all_positive": gains[0] > 0}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--section", choices=("chaos", "seeds"), required=True)
    parser.add_argument("--seeds", default="0,1,2,3", help="seeds: the quickstart seeds to run")
    parser.add_argument("--out", default=os.path.join(HERE, "results"), help="where <section>.json is written")
    parser.add_argument("--runlocal", action="store_true", help="chaos: the quickstart's smoke sizes (a first look)")
    parser.add_argument("--sft_learning_rate", type=float, default=None,
                        help="seeds: the SFT step size instead of the quickstart's (results/seeds_sft_lr_<x>.json)")
    args = parser.parse_args(argv)
    out = (chaos(args.runlocal) if args.section == "chaos" else
           seeds([int(s) for s in args.seeds.split(",")], args.sft_learning_rate))
    name = args.section if args.sft_learning_rate is None else f"{args.section}_sft_lr_{args.sft_learning_rate:g}"
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"{name}.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    print(json.dumps({k: v for k, v in out.items() if k != "learning_rates"} if args.section == "seeds" else
                     {"section": "chaos", **{lr: {k: v[k] for k in ("accuracy", "accuracy_gap",
                                                                   "first_step_losses_apart_1e-3")}
                                             for lr, v in out["learning_rates"].items()}}))
    return out


if __name__ == "__main__":
    main()
