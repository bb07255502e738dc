"""The allocator comparison on function calling: `compare_multihop.py` with the funcall source
(prompts list every function's JSON schema, so demonstrations are cut at 1024 tokens and steps
are slower: 40 RL steps instead of 60).

  python experiments/compare.py --config configs/compare_funcall.py --workdir /tmp/compare_funcall

See compare_multihop.py for `:runlocal` and the ablation flags. SFT runs 1600 steps, twice the
other sources': on the 2-core CPU the `mini` policy solved 1 of 93 test tasks after 800 steps
(every RL group all-failure) and 0.333 after 1600 (0.71 / 0.89 / 0.32 / 0.00 on 1 / 2 / 3 / 4
calls; about 18 min of SFT at 1.5 steps/s, one run each). Not sized yet: neither `:runlocal`
(whose SFT alone exceeds its ~15 min) nor the full comparison has been timed.
"""

from configs import compare_multihop, multihop_tiny, quickstart


def get_config(arg: str | None = None):
    c = compare_multihop.get_config(arg, base=lambda: multihop_tiny.use_source(quickstart.get_config(), "funcall"))
    c.sft.steps = 1600
    if not (arg and "runlocal" in arg.split(",")):
        c.rl.steps, c.rl.eval_every = 40, 10
    return c
