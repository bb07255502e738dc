"""The allocator comparison on function calling: `compare_multihop.py` with the funcall source
(prompts list every function's JSON schema, so demonstrations are cut at 1024 tokens and steps
are slower: 40 RL steps instead of 60).

  python experiments/compare.py --config configs/compare_funcall.py --workdir /tmp/compare_funcall

See compare_multihop.py for `:runlocal` and the ablation flags. Not sized yet: on the 2-core CPU the
800-step SFT of the `mini` policy took about 16 min (sharing the CPU with another job) and solved 1
of the 93 test tasks, so every RL group is all-failure and no allocator has anything to train on;
the comparison needs a stronger warm start before its runtime and results mean anything.
"""

from configs import compare_multihop, multihop_tiny, quickstart


def get_config(arg: str | None = None):
    c = compare_multihop.get_config(arg, base=lambda: multihop_tiny.use_source(quickstart.get_config(), "funcall"))
    if not (arg and "runlocal" in arg.split(",")):
        c.rl.steps, c.rl.eval_every = 40, 10
    return c
