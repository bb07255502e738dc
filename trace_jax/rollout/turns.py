"""The host side of a turn: the sampling a turn decodes with (`turn_sampling`), where a sampled turn ends for
its action format (`tokens_to_stop`), and stepping a batch of turns' episodes once across processes
(`run_turns`: the process whose devices decoded a branch runs its parsing, tool and scoring; the others
receive the result and the episode's state, `parallel/exchange.py`)."""

from __future__ import annotations

import dataclasses

import jax

from trace_jax.envs.formats import cut_at_stop
from trace_jax.envs.protocol import Env, StepResult
from trace_jax.envs.render import ReactRenderer
from trace_jax.parallel import exchange
from trace_jax.sampling import SamplingParams


def turn_sampling(sampling: SamplingParams, renderer: ReactRenderer) -> SamplingParams:
    """Per-turn sampling that stops on the renderer's end-of-turn ids and reports entropy."""
    stops = tuple(dict.fromkeys(tuple(sampling.stop_ids) + tuple(renderer.stop_ids)))
    return dataclasses.replace(sampling, stop_ids=stops, return_entropy=True)


def tokens_to_stop(tokens: list[int], decode_turn, stop_strings: tuple[str, ...]) -> int:
    """How many of a turn's tokens a format keeps: up to the first token whose text completes a stop string
    (search_r1's `</search>`), all of them when there is none."""
    if not stop_strings or cut_at_stop(decode_turn(tokens), stop_strings) is None:
        return len(tokens)
    return next(k for k in range(1, len(tokens) + 1) if cut_at_stop(decode_turn(tokens[:k]), stop_strings) is not None)


def run_turns(env: Env, branches, texts: dict[int, str], sampled: dict[int, int], owners,
              turns_by_process: list[int]) -> dict[int, StepResult]:
    """Each branch's StepResult for its turn `texts[i]` (`sampled[i]` tokens). This process runs the turns
    of the branches it owns (`owners[i]`; the env's `prefetch` sees only those) and receives the others'
    results and episode states, replacing those branches' episodes, so every process holds the same
    episodes afterwards and no tool is called twice. Adds each process's count to `turns_by_process`."""
    me = jax.process_index()
    own = [i for i in texts if int(owners[i]) == me]
    env.prefetch([texts[i] for i in own])  # lets a retrieval server answer the whole turn in one request
    results = {i: branches[i].episode.step(texts[i], num_tokens=sampled[i]) for i in own}
    many = jax.process_count() > 1
    parts = exchange.all_gather({i: (results[i], branches[i].episode.state() if many else None) for i in own})
    for process, part in enumerate(parts):
        turns_by_process[process] += len(part)
        if process != me:
            for i, (result, state) in part.items():
                branches[i].episode = dataclasses.replace(branches[i].episode, **state)
                results[i] = result
    return results
