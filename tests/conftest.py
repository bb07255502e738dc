"""Test-session setup: 8 host CPU devices (for mesh tests) and JAX's persistent compilation cache (shared
with the subprocesses tests start).

XLA_FLAGS must be set before JAX initialises its backends, hence at import time here.
"""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import jax  # noqa: E402

CACHE = os.environ.get("TRACE_JAX_TEST_CACHE", os.path.expanduser("~/.cache/trace_jax/jax_test_cache"))
jax.config.update("jax_compilation_cache_dir", CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
# Subprocesses (command-line runs, notebook kernels) share it: they compile the same small models again.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", CACHE)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")


import gc  # noqa: E402

import pytest  # noqa: E402


MAX_MAPPINGS = 30_000  # of the kernel's default 65530 per process (vm.max_map_count)


def _mappings() -> int:
    try:
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)
    except OSError:  # no procfs: nothing to watch
        return 0


@pytest.fixture(autouse=True, scope="module")
def _drop_compiled_programs():
    """Every compiled XLA CPU program keeps ~8 memory mappings while it is cached; a whole suite in one
    process compiles thousands and once crossed the kernel's 65530 mappings per process (vm.max_map_count),
    aborting inside XLA's compiler or the cache writer. After a module that leaves more than MAX_MAPPINGS,
    the compiled programs are dropped (the persistent cache above makes compiling them again cheaper)."""
    yield
    if _mappings() > MAX_MAPPINGS:
        jax.clear_caches()
        gc.collect()


@pytest.fixture(scope="session")
def tiny_setup(tmp_path_factory):
    """A tiny random policy on the bundled tokenizer and a small multi-hop source (shared: compiles once)."""
    from trace_jax.testing import tiny_world

    return tiny_world(str(tmp_path_factory.mktemp("tokenizer")))
