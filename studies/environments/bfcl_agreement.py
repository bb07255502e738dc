"""Our BFCL checker against the official one on the real release: every single-turn category's ground
truth, written as a model would write it, must pass, and perturbed versions must fail, in both.

  pip download --no-deps bfcl-eval -d /tmp/bfcl && cd /tmp/bfcl && unzip -q bfcl_eval-*.whl -d pkg
  python studies/environments/bfcl_agreement.py --package /tmp/bfcl/pkg

Per task: the canonical output (each ground-truth call with the first allowed value of every argument
that has one; optional arguments left out) and four perturbations (a required argument dropped, one
argument's value changed to one that is not allowed, a wrong function name, one extra call). Each is
judged by `trace_jax.envs.bfcl.bfcl_check` and by the official `ast_checker` (imported from the
package without its model-SDK dependencies). Irrelevance categories: no call passes, any call fails
(the official rule; no AST checker involved). Prints a table per category and one JSON line.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import sys
import types
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from absl import app, flags  # noqa: E402

from trace_jax.envs.bfcl.single_turn import BFCL_SINGLE_TURN, bfcl_canonical, bfcl_check, load_bfcl  # noqa: E402
from trace_jax.envs.tools.functions import Call  # noqa: E402

flags.DEFINE_string("package", "/tmp/bfcl/pkg", "Directory holding the unpacked bfcl_eval package.")
PERTURBATIONS = ("canonical", "drop_required", "wrong_value", "wrong_name", "extra_call")


def official_checker(package: str):
    """(ast_checker, Language) from the package's own files; its model registry is stubbed (only used to
    rename dotted functions for some API models, which we are not)."""
    root = os.path.join(package, "bfcl_eval")
    for name, path in (("bfcl_eval", root), ("bfcl_eval.constants", os.path.join(root, "constants")),
                       ("bfcl_eval.eval_checker", os.path.join(root, "eval_checker")),
                       ("bfcl_eval.eval_checker.ast_eval", os.path.join(root, "eval_checker", "ast_eval")),
                       ("bfcl_eval.eval_checker.ast_eval.type_convertor",
                        os.path.join(root, "eval_checker", "ast_eval", "type_convertor"))):
        module = types.ModuleType(name)
        module.__path__ = [path]
        sys.modules[name] = module
    config = types.ModuleType("bfcl_eval.constants.model_config")
    config.MODEL_CONFIG_MAPPING = defaultdict(lambda: types.SimpleNamespace(underscore_to_dot=False))
    sys.modules[config.__name__] = config

    def load(name, *parts):
        spec = importlib.util.spec_from_file_location(name, os.path.join(root, *parts))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    enums = load("bfcl_eval.constants.enums", "constants", "enums.py")
    load("bfcl_eval.constants.type_mappings", "constants", "type_mappings.py")
    checker = load("bfcl_eval.eval_checker.ast_eval.ast_checker", "eval_checker", "ast_eval", "ast_checker.py")
    return checker.ast_checker, enums.Language


def _perturbed(output: list[dict], kind: str, functions: list[dict]) -> list[dict] | None:
    out = copy.deepcopy(output)
    if kind == "canonical":
        return out
    (name, arguments), = out[0].items()
    if kind == "drop_required":
        doc = next((f for f in functions if f["name"] == name), {})
        required = [r for r in doc.get("parameters", {}).get("required", []) if r in arguments]
        if not required:
            return None
        del arguments[required[0]]
    elif kind == "wrong_value":
        if not arguments:
            return None
        key = sorted(arguments)[0]
        value = arguments[key]
        arguments[key] = (value + "_x" if isinstance(value, str) else not value if isinstance(value, bool)
                          else value + 7919 if isinstance(value, (int, float)) else [value, "x"] if isinstance(value, list)
                          else "x")
    elif kind == "wrong_name":
        out[0] = {name + "_x": arguments}
    elif kind == "extra_call":
        out.append(copy.deepcopy(out[0]))
    return out


def _ours(output: list[dict], ground_truth: list[dict], functions: list[dict]) -> bool:
    return bfcl_check([Call(name, args) for call in output for name, args in call.items()], ground_truth, functions)


def agreement(package: str) -> dict:
    ast_checker, Language = official_checker(package)
    data = os.path.join(package, "bfcl_eval", "data")
    table = {}
    for category in BFCL_SINGLE_TURN:
        language = "java" if category.endswith("java") else "javascript" if category.endswith("javascript") else "python"
        counts = {k: {"n": 0, "ours_pass": 0, "official_pass": 0, "agree": 0} for k in PERTURBATIONS}
        for task in load_bfcl(data, category):
            gt, functions = task.data["ground_truth"], task.data["functions"]
            if "irrelevance" in category:
                name = functions[0]["name"] if functions else "any_function"
                verdicts = [([], True, True), ([{name: {}}], False, False)]
                for kind, (output, official, _) in zip(("canonical", "extra_call"), verdicts):
                    c = counts[kind]
                    c["n"] += 1
                    ours = _ours(output, gt, functions)
                    c["ours_pass"] += ours
                    c["official_pass"] += official
                    c["agree"] += ours == official
                continue
            canonical = bfcl_canonical(gt, language)
            for kind in PERTURBATIONS:
                output = _perturbed(canonical, kind, functions)
                if output is None:
                    continue
                try:
                    official = bool(ast_checker(functions, output, gt, Language(language), category,
                                                "gorilla-openfunctions-v2")["valid"])
                except Exception:  # the official checker raises on some malformed outputs: a failure
                    official = False
                ours = _ours(output, gt, functions)
                c = counts[kind]
                c["n"] += 1
                c["ours_pass"] += ours
                c["official_pass"] += official
                c["agree"] += ours == official
        table[category] = {k: v for k, v in counts.items() if v["n"]}
    return table


def main(argv):
    del argv
    table = agreement(flags.FLAGS.package)
    print("| category | output | n | ours pass | official pass | agreement |")
    print("|---|---|---|---|---|---|")
    total = agree = 0
    for category, kinds in table.items():
        for kind, c in kinds.items():
            total, agree = total + c["n"], agree + c["agree"]
            print(f"| {category} | {kind} | {c['n']} | {c['ours_pass'] / c['n']:.3f} | "
                  f"{c['official_pass'] / c['n']:.3f} | {c['agree'] / c['n']:.3f} |")
    print(f"overall agreement {agree}/{total} = {agree / total:.4f}")
    print(json.dumps({"agreement": agree / total, "judged": total, "table": table}))


if __name__ == "__main__":
    app.run(main)
