"""The allocator comparison on function calling: `compare_multihop.py` with the funcall source
(prompts list every function's JSON schema, about 600 tokens, so demonstrations are cut at 1024
tokens, SFT runs 1600 steps and RL 30 steps instead of 60).

  python experiments/compare.py --config configs/compare_funcall.py --workdir /tmp/compare_funcall
  python experiments/compare.py --config configs/compare_funcall.py:runlocal --workdir /tmp/compare_funcall

Expected runtime on a 2-core CPU: about 75-80 min from scratch (the 1600-step SFT about 18 of them);
`:runlocal` about 13 min when the workdir already holds the SFT checkpoint. Why 1600 SFT steps and
30 RL steps, and the measurements: README, "The same comparison on function calling".
"""

from configs import compare_multihop, multihop_tiny, quickstart
from trace_jax.config.files import config_args


def get_config(arg: str | None = None):
    c = compare_multihop.get_config(arg, base=lambda: multihop_tiny.use_source(quickstart.base(), "funcall"))
    c.sft.steps = 1600
    if not config_args(arg, flags=("runlocal",), config="configs/compare_funcall.py")["runlocal"]:
        c.rl.steps, c.rl.eval_every = 30, 10
    return c
