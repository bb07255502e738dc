"""Answer checking: the numbers the tools print are read back exactly; text matching is SQuAD-style."""

import pytest
from hypothesis import given, settings, strategies as st

from trace_jax.envs.scoring import exact_match, f1, numeric_match, parse_number
from trace_jax.envs.tools.calculator import format_number


@pytest.mark.parametrize("text,value", [
    ("2.5e-07", 2.5e-07), ("1e+16", 1e16), ("1E5", 1e5), (".5", 0.5), ("-.5", -0.5), ("The answer is 42.", 42.0),
    ("$1,234.50", 1234.5), ("1,234,567", 1234567.0), ("12 km", 12.0), ("12km", 12.0), ("-3", -3.0),
    ("about 3 or 4", 4.0), ("+7", 7.0), ("50%", 50.0), ("1.5e3 meters", 1500.0), ("x = 6.0221e23", 6.0221e23),
    ("no number", None), ("", None),
])
def test_parse_number_reads_what_people_and_tools_write(text, value):
    assert parse_number(text) == value


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.integers(-10**15, 10**15), st.floats(allow_nan=False, allow_infinity=False, min_value=-1e60,
                                                          max_value=1e60)))
def test_every_number_the_calculator_prints_reads_back(value):
    printed = format_number(value)
    assert parse_number(printed) == pytest.approx(float(printed), rel=1e-12, abs=0)
    assert numeric_match(printed, [printed]) == 1.0


def test_text_matching():
    assert exact_match("The Eiffel Tower!", ["eiffel tower"]) == 1.0
    assert f1("Paris France", ["Paris"]) == pytest.approx(2 / 3)
    assert numeric_match("2.5e-07", ["0.00000025"]) == 1.0
    assert numeric_match("1,000", ["1000"]) == 1.0 and numeric_match("999", ["1000"]) == 0.0
