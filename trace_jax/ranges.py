"""What a config field may hold, declared on the field itself: `steps: int = ranged(800, AT_LEAST_0)` puts the
allowed interval (`Range`) or set of names (a tuple) in the field's metadata, where its owner defines it, and
`config/checks.py` reads every section's fields and checks them in one walk (`allowed(field)`), naming the field.
The bottom layer, beside `registry.py`: it imports nothing of trace_jax, so any config dataclass can use it."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Range:
    """An interval a numeric config field must lie in."""

    low: float = float("-inf")
    high: float = float("inf")
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, value) -> bool:
        return ((value > self.low if self.low_open else value >= self.low)
                and (value < self.high if self.high_open else value <= self.high))

    def __str__(self) -> str:
        return f"{'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"


AT_LEAST_0, AT_LEAST_1 = Range(0), Range(1)
POSITIVE = Range(0, low_open=True)  # also nonzero in float32, where such values are used (`checks.py`)
PROBABILITY = Range(0, 1)
SEED = Range(0, 2 ** 32 - 1)  # numpy and JAX seeds are 32-bit
DTYPES = ("float32", "bfloat16", "float16")


def ranged(default, allowed: Range | tuple[str, ...]):
    """A dataclass field with this default whose values must lie in `allowed`."""
    return dataclasses.field(default=default, metadata={"allowed": allowed})


def allowed(field: dataclasses.Field) -> Range | tuple[str, ...] | None:
    """The field's declared range or names; None: any value of its type."""
    return field.metadata.get("allowed")


def violation(name: str, value, allowed_values) -> str | None:
    """Why `value` may not be the field `name`'s, or None. A value of another type is left to the type check
    (`config/checks.py`), which names the type."""
    if allowed_values is None:
        return None
    if isinstance(allowed_values, Range):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
    elif not isinstance(value, str):
        return None
    if value in allowed_values:
        return None
    return f"config field '{name}'={value!r} is out of range: allowed {allowed_values}"


def check(config, section: str) -> None:
    """Every ranged field of the dataclass instance `config` (the `section` of a run config) holds an allowed value:
    owners call it in `__post_init__`, so a config built in code is refused as one parsed from a file is."""
    for field in dataclasses.fields(config):
        problem = violation(f"{section}.{field.name}", getattr(config, field.name), allowed(field))
        if problem:
            raise ValueError(problem)
