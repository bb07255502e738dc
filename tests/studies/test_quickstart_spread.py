"""The quickstart spread study (studies/quickstart_spread/spread.py): how the chaos section reads two SFT runs (the
first logged step whose losses differ by more than 1e-3, the accuracy gap) and how the seeds section summarizes
the quickstart's gain, on stand-ins for the runs."""

import importlib
import json
import types

import pytest

spread = importlib.import_module("studies.quickstart_spread.spread")


def test_chaos_names_where_the_perturbed_run_leaves_its_twin_and_the_accuracy_gap(monkeypatch, tmp_path):
    def sft_once(lr, eps, workdir, runlocal=False):
        drift = 0.0 if not eps else (0.01 if lr > 2e-3 else 1e-5)  # the larger step amplifies the perturbation
        return {"loss": {0: 2.0, 25: 1.0 + drift / 5, 50: 0.5 + drift}, "accuracy": 0.5 + 10 * drift, "wall_s": 1.0}

    monkeypatch.setattr(spread, "sft_once", sft_once)
    out = spread.main(["--section", "chaos", "--out", str(tmp_path)])
    chaotic, calm = out["learning_rates"]["0.003"], out["learning_rates"]["0.001"]
    assert chaotic["first_step_losses_apart_1e-3"] == 25 and chaotic["accuracy_gap"] == pytest.approx(0.1)
    assert calm["first_step_losses_apart_1e-3"] is None and calm["accuracy_gap"] == pytest.approx(1e-4)
    assert json.loads((tmp_path / "chaos.json").read_text())["perturbation"] == 1e-6


def test_seeds_summarizes_the_gain_and_names_a_failed_seed(monkeypatch, tmp_path):
    results = {"0": (0.5, 0.6), "1": (0.4, 0.55)}

    seen = []

    def run(cmd, **kwargs):
        seen.append(cmd)
        seed = cmd[-1].split("=")[1]
        if seed == "9":
            return types.SimpleNamespace(returncode=1, stdout="", stderr="boom")
        sft, rl = results[seed]
        return types.SimpleNamespace(returncode=0, stderr="", stdout=f"log\n{json.dumps({'acc_after_sft': sft, 'acc_after_rl': rl})}\n")

    monkeypatch.setattr(spread.subprocess, "run", run)
    out = spread.main(["--section", "seeds", "--seeds", "0,1", "--out", str(tmp_path)])
    assert out["gain_min"] == pytest.approx(0.1) and out["gain_max"] == pytest.approx(0.15) and out["all_positive"]
    spread.main(["--section", "seeds", "--seeds", "0", "--sft_learning_rate", "0.001", "--out", str(tmp_path)])
    assert "--config.sft.learning_rate=0.001" in seen[-1]
    assert json.loads((tmp_path / "seeds_sft_lr_0.001.json").read_text())["sft_learning_rate"] == 0.001
    with pytest.raises(RuntimeError, match="seed 9: the quickstart failed"):
        spread.main(["--section", "seeds", "--seeds", "9", "--out", str(tmp_path)])
