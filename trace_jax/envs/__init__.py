"""Agentic environments with verifiable rewards: the contract, tools, task sources, loaders, renderers."""

from trace_jax.envs.protocol import Env, Episode, Limits, StepResult, Task
from trace_jax.envs.tasks.funcall import FunctionCallingTasks
from trace_jax.envs.tasks.math import ArithmeticWordProblems
from trace_jax.envs.tasks.multihop import MultiHopQA

SOURCES = {"multihop": MultiHopQA, "math": ArithmeticWordProblems, "funcall": FunctionCallingTasks}

__all__ = ["SOURCES", "ArithmeticWordProblems", "Env", "Episode", "FunctionCallingTasks", "Limits", "MultiHopQA",
           "StepResult", "Task"]
