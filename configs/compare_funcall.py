"""The allocator comparison on function calling: `compare_multihop.py` with the funcall source
(prompts list every function's JSON schema, so demonstrations are cut at 1024 tokens and steps
are slower: 40 RL steps instead of 60).

  python experiments/compare.py --config configs/compare_funcall.py --workdir /tmp/compare_funcall

See compare_multihop.py for `:runlocal` and the ablation flags. Not yet measured on the 2-core CPU
(neither `:runlocal` nor the full comparison).
"""

from configs import compare_multihop, multihop_tiny, quickstart


def get_config(arg: str | None = None):
    c = compare_multihop.get_config(arg, base=lambda: multihop_tiny.use_source(quickstart.get_config(), "funcall"))
    if not (arg and "runlocal" in arg.split(",")):
        c.rl.steps, c.rl.eval_every = 40, 10
    return c
