"""Argument checks shared by the package's modules: a bad value raises
InvalidArgument naming it and the limit."""

from __future__ import annotations

from typing import Any

from .errors import invalid


def uint_arg(value: Any, what: str, bits: int = 32) -> int:
    """`value` as an unsigned int of `bits` bits, or InvalidArgument."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(f"{what} must be an int, got {type(value).__name__}")
    if value < 0 or value >= 1 << bits:
        raise invalid(f"{what} {value} is out of range [0, {(1 << bits) - 1}]")
    return value
