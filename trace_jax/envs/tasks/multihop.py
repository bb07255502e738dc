"""Synthetic multi-hop QA: a seeded world of invented entities, documents, and 1-4 hop questions.

Entities (people, companies, cities, countries) are linked by typed relations; each entity has
one or two documents stating its facts, and some have distractors with near-identical names
and different facts. A question composes relations from a start entity ("What is the country
of the birthplace of the founder of Dorvex Labs?"); answering needs one search per hop.
Reward: exact match after normalization (token F1 reported in `info`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from trace_jax.envs.protocol import Env, Episode, Limits, Task, TaskSource
from trace_jax.envs.react import Action, format_action
from trace_jax.envs.scoring import exact_match, f1
from trace_jax.envs.splits import split_of
from trace_jax.envs.tools.search import Document, SearchIndex

# relation -> (head type, tail type, question phrase, document sentence, document part)
RELATIONS = {
    "born_in": ("person", "city", "the birthplace of {}", "{} was born in {}.", "early life"),
    "spouse": ("person", "person", "the spouse of {}", "{} is married to {}.", "early life"),
    "works_for": ("person", "company", "the employer of {}", "{} works for {}.", "career"),
    "founder": ("company", "person", "the founder of {}", "{} was founded by {}.", None),
    "headquarters": ("company", "city", "the headquarters city of {}", "{} is headquartered in {}.", None),
    "country": ("city", "country", "the country of {}", "{} is a city in {}.", None),
    "capital": ("country", "city", "the capital of {}", "The capital of {} is {}.", None),
}
# a word to add to a query when a search for the bare name missed the needed passage
QUERY_HINT = {"born_in": "born", "spouse": "married", "works_for": "works", "founder": "founded",
              "headquarters": "headquartered", "country": "city", "capital": "capital"}
_SYLLABLES = ["ka", "lo", "mi", "ran", "te", "vo", "shi", "bar", "en", "dor", "qua", "zel", "pi", "nox", "ul",
              "sa", "rin", "go", "mex", "tal", "vi", "bro", "ke", "fen"]
_SUFFIX = {"company": ["Labs", "Corp", "Works", "Systems", "Group"], "city": ["", "ford", "ton", "mere", "holm"],
           "country": ["ia", "land", "stan", "ar"]}


WORLD_SIZE = {"num_people": 120, "num_companies": 40, "num_cities": 40, "num_countries": 12}


def scaled_world(scale: int) -> dict[str, int]:
    """The `World` keyword arguments of a world with `scale` times the default's entities of every kind."""
    return {k: v * scale for k, v in WORLD_SIZE.items()}


@dataclasses.dataclass(frozen=True)
class Entity:
    name: str
    kind: str
    facts: dict[str, str]  # relation -> tail entity name


class World:
    """The seeded entity graph and its corpus."""

    def __init__(self, seed: int = 0, *, num_people: int = WORLD_SIZE["num_people"],
                 num_companies: int = WORLD_SIZE["num_companies"], num_cities: int = WORLD_SIZE["num_cities"],
                 num_countries: int = WORLD_SIZE["num_countries"], distractor_rate: float = 0.3):
        rng = np.random.default_rng(seed)
        self._used: set[str] = set()
        counts = {"person": num_people, "company": num_companies, "city": num_cities, "country": num_countries}
        names = {kind: [self._name(rng, kind) for _ in range(n)] for kind, n in counts.items()}
        facts: dict[str, dict[str, str]] = {n: {} for kind in names for n in names[kind]}
        kind_of = {n: kind for kind in names for n in names[kind]}
        for country in names["country"]:
            facts[country]["capital"] = str(rng.choice(names["city"]))
        for city in names["city"]:
            facts[city]["country"] = str(rng.choice(names["country"]))
        for company in names["company"]:
            facts[company]["founder"] = str(rng.choice(names["person"]))
            facts[company]["headquarters"] = str(rng.choice(names["city"]))
        people = list(names["person"])
        rng.shuffle(people)
        for a, b in zip(people[0::2], people[1::2]):
            facts[a]["spouse"], facts[b]["spouse"] = b, a
        for person in names["person"]:
            facts[person]["born_in"] = str(rng.choice(names["city"]))
            facts[person]["works_for"] = str(rng.choice(names["company"]))
        # Distractors: near-identical names with facts of their own.
        for kind in ("person", "company", "city"):
            for original in list(names[kind]):
                if rng.random() < distractor_rate:
                    twin = self._twin(rng, original)
                    if twin is None:
                        continue
                    kind_of[twin] = kind
                    facts[twin] = {rel: str(rng.choice(names[RELATIONS[rel][1]])) for rel in facts[original]
                                   if rel != "spouse"}
        self.entities = {n: Entity(n, kind_of[n], facts[n]) for n in facts}
        self.originals = {kind: names[kind] for kind in names}
        self.documents = self._documents()

    def _name(self, rng, kind: str) -> str:
        while True:
            word = lambda k: "".join(rng.choice(_SYLLABLES, size=k)).capitalize()  # noqa: E731
            if kind == "person":
                name = f"{word(2)} {word(int(rng.integers(2, 4)))}"
            elif kind == "company":
                name = f"{word(2)} {rng.choice(_SUFFIX['company'])}"
            else:
                name = word(2) + str(rng.choice(_SUFFIX[kind]))
            if name not in self._used:
                self._used.add(name)
                return name

    def _twin(self, rng, name: str) -> str | None:
        vowels = "aeiou"
        for _ in range(10):
            chars = list(name)
            spots = [i for i, c in enumerate(chars) if c in vowels]
            i = int(rng.choice(spots))
            chars[i] = str(rng.choice([v for v in vowels if v != chars[i]]))
            twin = "".join(chars)
            if twin not in self._used:
                self._used.add(twin)
                return twin
        return None

    def _documents(self) -> list[Document]:
        docs = []
        for entity in self.entities.values():
            parts: dict[str | None, list[str]] = {}
            for rel, tail in entity.facts.items():
                parts.setdefault(RELATIONS[rel][4], []).append(RELATIONS[rel][3].format(entity.name, tail))
            for part, sentences in sorted(parts.items(), key=lambda kv: str(kv[0])):
                title = entity.name if part is None else f"{entity.name} ({part})"
                intro = f"{entity.name} is a {entity.kind}."
                docs.append(Document(id=f"{entity.name}#{part or 'main'}", title=title,
                                     text=" ".join([intro] + sentences)))
        return docs

    def fact_sentence(self, head: str, relation: str) -> str:
        return RELATIONS[relation][3].format(head, self.entities[head].facts[relation])


def question_text(start: str, path: list[str]) -> str:
    phrase = start
    for relation in path:
        phrase = RELATIONS[relation][2].format(phrase)
    return f"What is {phrase}?"


class MultiHopQA(TaskSource):
    """Task source: the world, its search index, and questions of 1..max_hops hops in three splits."""

    name = "multihop"

    def __init__(self, seed: int = 0, *, num_questions: int = 2000, max_hops: int = 4, top_k: int = 3,
                 max_words: int = 60, f1_success: float = 0.0, **world_kwargs):
        self.seed, self.f1_success = seed, f1_success
        self.world = World(seed, **world_kwargs)
        self.index = SearchIndex(self.world.documents, top_k=top_k, max_words_per_passage=max_words)
        self._tasks = self._questions(np.random.default_rng(seed + 1), num_questions, max_hops)

    def _questions(self, rng, count: int, max_hops: int) -> list[Task]:
        w = self.world
        seen, tasks = set(), []
        for attempt in range(count * 20):
            if len(tasks) >= count:
                break
            hops = 1 + attempt % max_hops
            kind = str(rng.choice(["person", "company", "city", "country"]))
            current = start = str(rng.choice(w.originals[kind]))
            path, chain = [], [start]
            for _ in range(hops):
                options = sorted(w.entities[current].facts)
                relation = str(rng.choice(options))
                nxt = w.entities[current].facts[relation]
                if nxt in chain:  # no cycles back to an entity already named
                    break
                path.append(relation)
                chain.append(nxt)
                current = nxt
            if len(path) != hops:
                continue
            question = question_text(start, path)
            if question in seen:
                continue
            seen.add(question)
            split = split_of(question)
            tasks.append(Task(id=f"multihop/{len(tasks)}", question=question, answers=(chain[-1],),
                              difficulty=hops, split=split, data={"path": path, "chain": chain}))
        return tasks

    def make_env(self, limits: Limits | None = None) -> MultiHopEnv:
        return MultiHopEnv(self.index, limits or Limits(max_turns=10), f1_success=self.f1_success)

    def oracle(self, mistake_rate: float = 0.0):
        return MultiHopOracle(self, mistake_rate)


class MultiHopEnv(Env):
    """Question answering with a search tool. A final answer succeeds on exact match (SQuAD-normalised) or,
    when `f1_success` > 0, on token F1 with a gold answer of at least that much (the paper's HotpotQA
    criterion: 0.3); every final answer reports both `em` and `f1`."""

    name = "multihop"
    tools = ("search",)
    TOOL_DOCS = {"search": ("query", "Returns the top passages of the document collection for the query.")}

    def __init__(self, index: SearchIndex, limits: Limits | None = None, *, f1_success: float = 0.0):
        super().__init__(limits)
        self.index, self.f1_success = index, f1_success

    def system_prompt(self, task: Task) -> str:
        return ("Answer the question by searching a document collection. Each turn, write a Thought and "
                "one Action. Tools: search[query] returns the top passages for the query; finish[answer] "
                "gives the final answer (an entity name).")

    def instructions(self, task: Task) -> str:
        return "Answer the question by searching a document collection. The final answer is an entity name."

    def prefetch(self, texts: list[str]) -> None:
        if hasattr(self.index, "prefetch"):  # a retrieval server: one request for the whole turn
            parsed = [self.action_format.parse(t, self) for t in texts]
            actions = [a for p in parsed for a in (p if isinstance(p, list) else [p])]
            self.index.prefetch([a.argument for a in actions if isinstance(a, Action) and a.tool == "search"])

    def run_tool(self, task: Task, action: Action, episode: Episode) -> str:
        return self.index.search(action.argument)

    def score(self, task: Task, answer: str, episode: Episode) -> tuple[float, dict[str, Any]]:
        em, token_f1 = exact_match(answer, task.answers), f1(answer, task.answers)
        success = em >= 1.0 or (self.f1_success > 0 and token_f1 >= self.f1_success)
        return float(success), {"em": em, "f1": token_f1}


class MultiHopOracle:
    """Follows the gold chain one search per hop; with `mistake_rate` per turn it searches a wrong or
    near-identical name (then re-searches), writes a malformed action (then retries), or answers early."""

    def __init__(self, source: MultiHopQA, mistake_rate: float):
        self.source, self.mistake_rate = source, mistake_rate

    def __call__(self, task: Task, episode: Episode, observation: str | None, rng) -> str:
        chain, path = task.data["chain"], task.data["path"]
        memory = episode.memory.setdefault("oracle", {"hop": 0, "query_suffix": ""})
        hop = memory["hop"]
        if observation is not None and memory.get("pending") is not None:
            expected = memory.pop("pending")
            if expected in observation:
                memory["hop"] = hop = hop + 1
                memory["query_suffix"] = ""
            elif not memory["query_suffix"]:
                memory["query_suffix"] = " " + QUERY_HINT[path[hop]]
        if hop == len(path):
            return format_action("finish", chain[-1], f"So the answer is {chain[-1]}.")
        if rng.random() < self.mistake_rate:
            kind = rng.choice(["wrong_query", "malformed", "early_answer"], p=[0.5, 0.25, 0.25])
            if kind == "early_answer" and hop > 0:
                return format_action("finish", chain[hop], f"I think the answer is {chain[hop]}.")
            if kind == "malformed":
                return f"Thought: I should look up {chain[hop]}.\nAction: search {chain[hop]}"
            others = [n for n in self.source.world.entities if n != chain[hop]]
            wrong = str(rng.choice(others))
            return format_action("search", wrong, f"I need facts about {chain[hop]}.")
        head, relation = chain[hop], path[hop]
        memory["pending"] = self.source.world.fact_sentence(head, relation)
        query = head + memory["query_suffix"]
        thought = (f"I need {RELATIONS[relation][2].format(head)}." if hop == 0 else
                   f"The previous passage gives {head}. Next I need {RELATIONS[relation][2].format(head)}.")
        return format_action("search", query, thought)
