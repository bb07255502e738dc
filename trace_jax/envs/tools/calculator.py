"""A safe calculator: arithmetic parsed with `ast` against a whitelist, with bounded sizes.

Nothing is evaluated by Python: the tree is walked by hand over numbers and + - * / // % **
and unary signs. Names, calls, attributes, subscripts, comprehensions, strings, huge literals,
huge powers, deep nesting and long inputs are refused with a message that says why.
"""

from __future__ import annotations

import ast
import math
import operator

MAX_CHARS = 200
MAX_DEPTH = 24
MAX_NODES = 120
MAX_LITERAL_DIGITS = 30
MAX_MAGNITUDE = 1e60
MAX_EXPONENT = 200

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


class CalculatorError(ValueError):
    pass


def _check_size(value):
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("result is not a finite number")
    if abs(value) > MAX_MAGNITUDE:
        raise CalculatorError(f"result magnitude exceeds {MAX_MAGNITUDE:g}")
    return value


def _power(base, exponent):
    """base ** exponent, refused when |result| would exceed MAX_MAGNITUDE: the check is in log space,
    log10|result| = exponent * log10|base|, so it respects the exponent's sign (2**-200 is tiny and
    allowed; 0.001**-200 is 1e600 and refused)."""
    if abs(exponent) > MAX_EXPONENT:
        raise CalculatorError(f"exponent {exponent} is larger than {MAX_EXPONENT}")
    if base == 0 and exponent < 0:
        raise CalculatorError("zero to a negative power")
    if base < 0 and isinstance(exponent, float) and not exponent.is_integer():
        raise CalculatorError("fractional power of a negative number")
    if base != 0 and exponent * math.log10(abs(base)) > math.log10(MAX_MAGNITUDE):
        raise CalculatorError(f"power too large (magnitude over {MAX_MAGNITUDE:g})")
    return base ** exponent


def _eval(node: ast.AST, depth: int = 0):
    if depth > MAX_DEPTH:
        raise CalculatorError(f"expression nested deeper than {MAX_DEPTH}")
    if isinstance(node, ast.Expression):
        return _eval(node.body, depth + 1)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise CalculatorError(f"only numbers are allowed, not {type(node.value).__name__}")
        return _check_size(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand, depth + 1))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left, depth + 1), _eval(node.right, depth + 1)
        if isinstance(node.op, ast.Pow):
            return _check_size(_power(left, right))
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
            raise CalculatorError("division by zero")
        return _check_size(_BINARY[type(node.op)](left, right))
    raise CalculatorError(f"{type(node).__name__} is not allowed: use numbers, + - * / // % ** and parentheses")


def evaluate(expression: str) -> int | float:
    """The value of an arithmetic expression, or CalculatorError saying why it was refused."""
    if not isinstance(expression, str):
        raise CalculatorError("expression must be text")
    text = expression.strip().replace("^", "**").replace("×", "*").replace("÷", "/").replace(",", "")
    if not text:
        raise CalculatorError("empty expression")
    if len(text) > MAX_CHARS:
        raise CalculatorError(f"expression longer than {MAX_CHARS} characters")
    depth = running = 0
    for ch in text:  # bound nesting before the parser sees it
        running += (ch == "(") - (ch == ")")
        depth = max(depth, running)
    if depth > MAX_DEPTH:
        raise CalculatorError(f"expression nested deeper than {MAX_DEPTH}")
    for literal in "".join(c if c.isdigit() else " " for c in text).split():
        if len(literal) > MAX_LITERAL_DIGITS:
            raise CalculatorError(f"number with more than {MAX_LITERAL_DIGITS} digits")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as e:
        raise CalculatorError(f"cannot parse {text[:60]!r}: {getattr(e, 'msg', e)}") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise CalculatorError(f"expression has more than {MAX_NODES} parts")
    try:
        return _eval(tree)
    except ArithmeticError as e:  # a last resort: the checks above should leave nothing to overflow
        raise CalculatorError(f"arithmetic error: {e}") from None


def format_number(value: int | float) -> str:
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.10g}"
    return str(value)


def calculate(expression: str) -> str:
    """The calculator tool: the result as text, or 'Error: ...' (never raises)."""
    try:
        return format_number(evaluate(expression))
    except CalculatorError as e:
        return f"Error: {e}"
