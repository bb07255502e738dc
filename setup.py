"""trace_jax: Tree Rollout Allocation for Contrastive Exploration, in JAX/Flax."""

from setuptools import find_packages, setup

setup(
    name="trace_jax",
    version="0.1.0",
    description="TRACE: tree rollout allocation for efficient agentic RL of language models, in JAX/Flax NNX",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["trace_jax", "trace_jax.*"]),
    install_requires=[
        "jax>=0.7,<0.11",
        "flax>=0.12,<0.13",
        "optax>=0.2.5,<0.3",
        "orbax-checkpoint>=0.11,<0.13",
        "numpy>=1.26",
        "ml_dtypes>=0.5",
        "transformers>=5.0,<6",
        "tokenizers>=0.22,<0.24",
        "safetensors>=0.6",
        "ml_collections>=1.0",
        "bm25s>=0.2,<0.4",
        "pyarrow>=14",
        "absl-py>=2",
        "tensorboardX>=2.6",
        "tqdm>=4.60",
        "matplotlib>=3.7",
        "math-verify==0.9.0",  # the deepscaler source's answer checker
        "mpmath>=1.3",  # BFCL multi-turn: MathAPI precision restored after each call
    ],
    extras_require={
        # torch is pinned: 2.13.0 is the CPU build this project's machines carry; an unpinned
        # torch pulls a multi-GB CUDA build. The parity tests need nothing newer.
        "test": ["pytest>=8", "chex>=0.1.90", "hypothesis>=6", "torch==2.13.0", "nbclient>=0.9", "nbformat>=5.9",
                 "ipykernel>=6"],
    },
)
