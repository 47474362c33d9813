"""Argument checks at the package's boundary: a wrong type is an :class:`InvalidTypeError`,
a bad value an :class:`InvalidInputError`, both before any store call."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NoReturn

from .errors import InvalidInputError, InvalidTypeError
from .types import FencingToken

U32 = 2**32 - 1
I53 = 2**53 - 1
MAX_TTL_SECONDS = 31_536_000
RUN_STATUSES = (
    "created",
    "ready",
    "leased",
    "running",
    "waiting_approval",
    "blocked",
    "verifying",
    "recovering",
    "completed",
    "failed",
    "cancelled",
    "quarantined",
)
NEXT_STATUSES = ("completed", "failed", "cancelled", "ready")
CHANNELS = ("telegram", "farcaster", "mail", "onchain", "internal")


def describe(v: object) -> str:
    """A short description of a value for an error message."""
    text = repr(v)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(v).__name__} {text}"


def type_error(message: str) -> NoReturn:
    raise InvalidTypeError(message)


def text(name: str, v: object) -> str:
    """A non-empty ``str``."""
    if not isinstance(v, str):
        type_error(f"{name} must be a str, got {describe(v)}")
    if v == "":
        raise InvalidInputError(f"{name} must be a non-empty string")
    return v


def opt_text(name: str, v: object) -> str | None:
    return None if v is None else text(name, v)


def is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def integer(name: str, v: object, lo: int, hi: int) -> int:
    """An ``int`` (not a bool, not a float) in ``lo..=hi``."""
    if not is_int(v):
        type_error(f"{name} must be an int, got {describe(v)}")
    assert isinstance(v, int)
    if v < lo or v > hi:
        raise InvalidInputError(f"{name} must be an integer in {lo}..={hi}, got {v}")
    return v


def opt_integer(name: str, v: object, lo: int, hi: int, default: int | None) -> int | None:
    return default if v is None else integer(name, v, lo, hi)


def flag(name: str, v: object) -> bool:
    if not isinstance(v, bool):
        type_error(f"{name} must be a bool, got {describe(v)}")
    return v


def callable_(name: str, v: object) -> Any:
    if not callable(v):
        type_error(f"{name} must be callable, got {describe(v)}")
    return v


def fence(name: str, v: object) -> dict[str, Any]:
    """A fencing token (a :class:`FencingToken`, or a mapping with the reference's camelCase
    keys or snake_case keys) as the core's JSON object."""
    if isinstance(v, FencingToken):
        return v.to_dict()
    if not isinstance(v, Mapping):
        type_error(f"{name} must be a FencingToken, got {describe(v)}")
    out: dict[str, Any] = {}
    for camel, snake in (("runId", "run_id"), ("owner", "owner"), ("leaseExpiresAt", "lease_expires_at")):
        x = v.get(camel, v.get(snake))
        if not isinstance(x, str):
            type_error(f"{name}.{camel} must be a str, got {describe(x)}")
        out[camel] = x
    epoch = v.get("epoch")
    if epoch is not None:
        out["epoch"] = integer(f"{name}.epoch", epoch, -(2**63), 2**63 - 1)
    return out


def status(name: str, v: object, allowed: tuple[str, ...]) -> str:
    if not isinstance(v, str):
        type_error(f"{name} must be a str, got {describe(v)}")
    if v not in allowed:
        raise InvalidInputError(f"{name} must be one of {', '.join(allowed)}, got {v!r}")
    return v


def to_json(value: object, what: str) -> str:
    """JSON text of a JSON-able value (finite numbers, str keys); anything else is invalid input."""
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except ValueError as e:
        raise InvalidInputError(f"{what} is not JSON: {e}") from None
    except (TypeError, RecursionError) as e:
        raise InvalidTypeError(f"{what} is not JSON: {e}") from None
