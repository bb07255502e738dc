"""The allocator comparison on function calling: `compare_multihop.py` with the funcall source
(prompts list every function's JSON schema, about 600 tokens, so demonstrations are cut at 1024
tokens, SFT runs 1600 steps and RL 30 steps instead of 60).

  python experiments/compare.py --config configs/compare_funcall.py --workdir /tmp/compare_funcall
  python experiments/compare.py --config configs/compare_funcall.py:runlocal --workdir /tmp/compare_funcall

Measured on the 2-core CPU (one run each). SFT: with the other sources' 800 steps the `mini` policy
solved 1 of 93 test tasks (every RL group all-failure); after 1600 steps 0.333, in 21.6 min while an
8-minute test run shared the CPU (about 18 min alone). The full comparison: 57.4 min with that SFT
checkpoint in place (runs summed 3346 s), so about 75-79 min from scratch; at 40 RL steps a run took
238 s, which would have made it about 100 min. `:runlocal` (5 RL steps, 60 test tasks) reuses the
SFT checkpoint when given the same workdir: 12.9 min (runs summed 716 s). From scratch it also pays
the SFT, which alone exceeds the ~15 min the other sources' `:runlocal` take.
"""

from configs import compare_multihop, multihop_tiny, quickstart


def get_config(arg: str | None = None):
    c = compare_multihop.get_config(arg, base=lambda: multihop_tiny.use_source(quickstart.get_config(), "funcall"))
    c.sft.steps = 1600
    if not (arg and "runlocal" in arg.split(",")):
        c.rl.steps, c.rl.eval_every = 30, 10
    return c
