"""The task-source registry: `task.source` picks an entry, whose config dataclass is the `task` section.

Each source owns its fields (as allocators do): the synthetic generators take `num_questions` and a
difficulty cap, the dataset sources the files they read, the search sources their retrieval settings. A
config file lists every source's fields (so `--config.task.corpus_path=...` is a valid flag); a field of
another source is dropped while it holds its default and refused by name once it is set
(`registry.Registry.config`). `TASK_SOURCES.make(run.task)` builds the source from its config alone.

A new source registers here the same way (`examples/reverse_env.py`):

    @TASK_SOURCES.register("reverse", config=SyntheticTaskConfig)
    def _reverse(c):
        return ReverseTasks(c.seed, num_questions=c.num_questions)
"""

from __future__ import annotations

import dataclasses

from trace_jax.envs.bfcl.multi_turn_source import BFCLMultiTurnTasks
from trace_jax.envs.protocol import TaskSource
from trace_jax.envs.tasks.datasets import BFCLTasks, DeepScaleRTasks, GSM8KTasks, SearchTasks
from trace_jax.envs.tasks.funcall import FunctionCallingTasks
from trace_jax.envs.tasks.math import ArithmeticWordProblems
from trace_jax.envs.tasks.multihop import MultiHopQA, scaled_world
from trace_jax import ranges
from trace_jax.ranges import AT_LEAST_0, AT_LEAST_1, PROBABILITY, SEED, Range, ranged
from trace_jax.registry import Registry

TASK_SOURCES: Registry[TaskSource] = Registry("task source", "task", key="source")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TaskConfig:
    """What every source has. Attributes:
      source: the registered source ("multihop", "math", "funcall" generate tasks; "gsm8k", "deepscaler",
        "hotpotqa", "search_r1", "bfcl", "bfcl_multi_turn" read local files: `envs/tasks/datasets.py`).
      seed: world/task generation seed (the separate eval generator's seeds derive from it).
      max_turns, max_tokens: episode limits.
      action_format: how the policy writes tool calls: "react" (`Action: tool[arg]`), "hermes" (native
        `<tool_call>` JSON of Qwen3/Hermes chat templates; needs a tokenizer whose template renders tools) or
        "search_r1" (`<search>`/`<answer>` with `<information>` results; search sources only).
      thinking: False renders chat-template prompts and observations with `enable_thinking=False` (Qwen3's
        hybrid templates then open each assistant turn with an empty think block: short turns, the notebook's
        choice); True leaves the template's default. Templates without the variable ignore it.
    """

    source: str = "multihop"
    seed: int = ranged(0, SEED)
    max_turns: int = 5
    max_tokens: int = ranged(200, AT_LEAST_1)
    action_format: str = "react"
    thinking: bool = True


@dataclasses.dataclass(frozen=True, kw_only=True)
class SyntheticTaskConfig(TaskConfig):
    """A generated source. Attributes:
      num_questions: questions generated (across splits).
      max_difficulty: the cap on hops (multihop), operations (math) or calls (funcall); 0 = the source's own.
    """

    num_questions: int = ranged(2000, AT_LEAST_1)
    max_difficulty: int = ranged(2, AT_LEAST_0)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchSettings:
    """Question answering by search. Attributes:
      search_top_k, search_words: passages per search and words per passage.
      f1_success: 0 scores by exact match; > 0 also counts a final answer whose token F1 with a gold answer
        reaches it (the paper's HotpotQA success: 0.3). Both EM and F1 are reported either way.
    """

    search_top_k: int = ranged(2, AT_LEAST_1)
    search_words: int = ranged(24, AT_LEAST_1)
    f1_success: float = ranged(0.0, PROBABILITY)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MultiHopTaskConfig(SyntheticTaskConfig, SearchSettings):
    """Synthetic multi-hop QA over a generated world (`envs/tasks/multihop.py`). Attributes:
      world_scale: the world's entities (people, companies, cities, countries) times this. The default world
        holds about 4270 distinct 1-4 hop questions (about 430 in its test split); scale 5 holds enough for
        a test split of >= 2000 (`num_questions` must ask for them).
    """

    world_scale: int = ranged(1, Range(1, 50))

    def __post_init__(self):
        ranges.check(self, "task")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DatasetTaskConfig(TaskConfig):
    """A source read from local files. Attributes:
      train_path: the training file (bfcl, bfcl_multi_turn: the release's data directory; "" for
        bfcl_multi_turn: the installed bfcl_eval package's).
      test_path: its test file ("" = split the training file by question hash).
    """

    train_path: str = ""
    test_path: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchDatasetConfig(DatasetTaskConfig, SearchSettings):
    """HotpotQA or Search-R1 rows. Attributes:
      corpus_path: the retrieval corpus JSONL ({id, contents}; required for search_r1 unless `search_url`,
        optional for hotpotqa, whose contexts make one).
      search_url: "" searches in-process with BM25; an http(s) URL sends the searches to a
        Search-R1-compatible retrieval server there (`envs/tools/retrieval.py`).
    """

    corpus_path: str = ""
    search_url: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class BFCLTaskConfig(TaskConfig):
    """BFCL from the release's data directory. Attributes:
      train_path: that directory ("" for bfcl_multi_turn: the installed bfcl_eval package's).
      categories: bfcl's single-turn categories, comma-separated ("" = simple_python); bfcl_multi_turn's
        subsets ("" = all four).
    """

    train_path: str = ""
    categories: str = ""


def build(source: str, **fields) -> TaskSource:
    """A source from the fields a config's task section would give it, checked by its config class (e.g.
    `build("hotpotqa", train_path=...)`; a field of another source is refused by name)."""
    return TASK_SOURCES.make(TASK_SOURCES.config({"source": source, **fields}, default_name=source))


@TASK_SOURCES.register("multihop", config=MultiHopTaskConfig)
def _multihop(c: MultiHopTaskConfig) -> MultiHopQA:
    return MultiHopQA(c.seed, num_questions=c.num_questions, **({"max_hops": c.max_difficulty} if c.max_difficulty else {}),
                      top_k=c.search_top_k, max_words=c.search_words, f1_success=c.f1_success,
                      **({} if c.world_scale == 1 else scaled_world(c.world_scale)))


@TASK_SOURCES.register("math", config=SyntheticTaskConfig)
def _math(c: SyntheticTaskConfig) -> ArithmeticWordProblems:
    return ArithmeticWordProblems(c.seed, num_questions=c.num_questions,
                                  **({"max_steps": c.max_difficulty} if c.max_difficulty else {}))


@TASK_SOURCES.register("funcall", config=SyntheticTaskConfig)
def _funcall(c: SyntheticTaskConfig) -> FunctionCallingTasks:
    return FunctionCallingTasks(c.seed, num_questions=c.num_questions, max_calls=c.max_difficulty)


def _reads(cls, *fields: str):
    """A file source's builder: its class called with those config fields."""
    return lambda c: cls(**{f: getattr(c, f) for f in fields})


TASK_SOURCES.register("gsm8k", config=DatasetTaskConfig)(_reads(GSM8KTasks, "train_path", "test_path"))
TASK_SOURCES.register("deepscaler", config=DatasetTaskConfig)(_reads(DeepScaleRTasks, "train_path", "test_path"))
TASK_SOURCES.register("bfcl", config=BFCLTaskConfig)(_reads(BFCLTasks, "train_path", "categories"))
TASK_SOURCES.register("bfcl_multi_turn", config=BFCLTaskConfig)(_reads(BFCLMultiTurnTasks, "train_path", "categories"))


def _search(c: SearchDatasetConfig) -> SearchTasks:
    return SearchTasks(c.source, train_path=c.train_path, test_path=c.test_path, corpus_path=c.corpus_path,
                       search_url=c.search_url, top_k=c.search_top_k, max_words=c.search_words,
                       f1_success=c.f1_success)


TASK_SOURCES.register("hotpotqa", config=SearchDatasetConfig)(_search)
TASK_SOURCES.register("search_r1", config=SearchDatasetConfig)(_search)
