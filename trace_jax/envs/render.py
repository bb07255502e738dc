"""Renderers: an episode's messages and turns as token ids, appending only new tokens each turn.

`ReactRenderer` writes plain ReAct text (for the bundled tokenizer); `ChatRenderer` uses an HF
tokenizer's chat template. Both end an assistant turn with a stop token and give the tokens of
an observation as a delta after it, so the ids a policy saw are exactly the ids trained on.
"""

from __future__ import annotations

from trace_jax.envs.formats import FORMATS, REACT, cut_at_stop
from trace_jax.envs.oracle import Trajectory
from trace_jax.models.tokenizer import TURN_END


def _end_of_turn_id(tokenizer) -> int:
    token_id = tokenizer.convert_tokens_to_ids(TURN_END)
    if isinstance(token_id, int) and token_id != tokenizer.unk_token_id and token_id is not None:
        return token_id
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has neither <|im_end|> nor an eos token to end a turn")
    return tokenizer.eos_token_id


class ReactRenderer:
    """Plain text: 'system\\n\\nQuestion: q\\n' + 'Thought: ... Action: t[a]<|im_end|>' + '\\nObservation: o\\n'."""

    def __init__(self, tokenizer, action_format=REACT):
        self.tokenizer = tokenizer
        self.action_format = action_format
        self.end_of_turn = _end_of_turn_id(tokenizer)
        self.stop_ids = (self.end_of_turn,)

    def prompt(self, messages: list[dict[str, str]], tools: list[dict] | None = None) -> list[int]:
        if tools:
            raise ValueError("plain ReAct text has no tool schemas: native tool calling needs a chat template "
                             "(ChatRenderer)")
        text = "\n\n".join(m["content"] for m in messages) + "\n"
        return self.tokenizer.encode(text, add_special_tokens=False)

    def observation(self, text: str, user_turn: bool = False) -> list[int]:
        """A tool result (`Observation: ...`), or with `user_turn` the user's next message (`User: ...`)."""
        if user_turn:
            return self.tokenizer.encode(f"\nUser: {text}\n", add_special_tokens=False)
        inline = self.action_format.inline_observation(text)
        return self.tokenizer.encode(f"\nObservation: {text}\n" if inline is None else inline, add_special_tokens=False)

    def assistant(self, text: str) -> list[int]:
        """A turn's ids as the policy would generate them (demonstrations): the stop token included, unless the
        format ends turns at a stop string and the turn ends there (the sampler's state is cut there too)."""
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return ids if cut_at_stop(text, self.action_format.stop_strings) == len(text) else ids + [self.end_of_turn]

    def decode_turn(self, ids) -> str:
        return self.tokenizer.decode([int(i) for i in ids if int(i) not in self.stop_ids])


class ChatRenderer(ReactRenderer):
    """The tokenizer's chat template; observations go in as `observation_role` messages."""

    _PROBE = "\u2063probe\u2063"

    def __init__(self, tokenizer, observation_role: str = "user", observation_prefix: str = "Observation: ",
                 action_format=REACT, template_args: dict | None = None):
        super().__init__(tokenizer, action_format)
        self.template_args = dict(template_args or {})  # extra chat-template variables, e.g. enable_thinking
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("ChatRenderer needs a tokenizer with a chat template; use ReactRenderer")
        self.observation_role, self.observation_prefix = observation_role, observation_prefix
        self._end_text = tokenizer.decode([self.end_of_turn])

    @classmethod
    def for_format(cls, tokenizer, action_format: str, template_args: dict | None = None) -> ChatRenderer:
        """hermes: results as `tool` messages (the template wraps them, e.g. in <tool_response>); the
        template must render tools. react: observations as user messages."""
        if action_format == "hermes":
            if "tools" not in (getattr(tokenizer, "chat_template", None) or ""):
                raise ValueError("action format 'hermes' needs a chat template that renders tools (its template "
                                 "never mentions `tools`); use task.action_format='react'")
            return cls(tokenizer, observation_role="tool", observation_prefix="", action_format=FORMATS["hermes"],
                       template_args=template_args)
        return cls(tokenizer, action_format=FORMATS[action_format], template_args=template_args)

    def prompt(self, messages: list[dict[str, str]], tools: list[dict] | None = None) -> list[int]:
        text = self.tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=False,
                                                  add_generation_prompt=True, **self.template_args)
        return self.tokenizer.encode(text, add_special_tokens=False)

    def observation(self, text: str, user_turn: bool = False) -> list[int]:
        """The template's text between an assistant turn's end token and the next assistant turn (or, for a
        format that continues observations in the assistant's stream, that text); with `user_turn` the text
        is the user's next message."""
        inline = None if user_turn else self.action_format.inline_observation(text)
        if inline is not None:
            return self.tokenizer.encode(inline, add_special_tokens=False)
        message = ({"role": "user", "content": text} if user_turn else
                   {"role": self.observation_role, "content": f"{self.observation_prefix}{text}"})
        base = [{"role": "user", "content": "q"}, {"role": "assistant", "content": self._PROBE}]
        before = self.tokenizer.apply_chat_template(base, tokenize=False, **self.template_args)
        after = self.tokenizer.apply_chat_template(base + [message], tokenize=False, add_generation_prompt=True,
                                                   **self.template_args)
        cut = before.find(self._PROBE) + len(self._PROBE)
        cut = before.find(self._end_text, cut) + len(self._end_text)
        if not after.startswith(before[:cut]):
            raise ValueError("the chat template re-renders earlier turns; cannot append observations as a delta")
        return self.tokenizer.encode(after[cut:], add_special_tokens=False)


def render_trajectory(renderer: ReactRenderer, trajectory: Trajectory) -> tuple[list[int], list[bool]]:
    """(ids, trained mask) of a demonstration: assistant tokens trained, prompt and observations masked."""
    ids = renderer.prompt(trajectory.messages, trajectory.tools)
    mask = [False] * len(ids)
    for i, (text, observation) in enumerate(trajectory.turns):
        turn = renderer.assistant(text)
        ids += turn
        mask += [True] * len(turn)
        if observation is not None:
            obs = renderer.observation(observation, user_turn=i in trajectory.user_turns)
            ids += obs
            mask += [False] * len(obs)
    return ids, mask
