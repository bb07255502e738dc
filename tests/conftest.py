"""Test-session setup: 8 host CPU devices (for mesh tests) and JAX's persistent compilation cache.

XLA_FLAGS must be set before JAX initialises its backends, hence at import time here.
"""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import jax  # noqa: E402

jax.config.update("jax_compilation_cache_dir",
                  os.environ.get("TRACE_JAX_TEST_CACHE", os.path.expanduser("~/.cache/trace_jax/jax_test_cache")))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_setup(tmp_path_factory):
    """A tiny random policy on the bundled tokenizer and a small multi-hop source (shared: compiles once)."""
    from trace_jax.envs import Limits, MultiHopQA
    from trace_jax.envs.render import ReactRenderer
    from trace_jax.models import init_params
    from trace_jax.models.presets import get_preset
    from trace_jax.models.tokenizer import build_tokenizer, load_tokenizer
    from trace_jax.rollout.agent_loop import Policy
    from trace_jax.sampling import SamplingParams

    tokenizer = load_tokenizer(build_tokenizer(str(tmp_path_factory.mktemp("tokenizer"))))
    config = get_preset("tiny")
    source = MultiHopQA(0, num_questions=120)
    env = source.make_env(Limits(max_turns=3, max_tokens=120))
    policy = Policy(config, init_params(config, 0), SamplingParams(max_new_tokens=12), ReactRenderer(tokenizer))
    return {"tokenizer": tokenizer, "config": config, "source": source, "env": env, "policy": policy}
