"""Argument checks at the package's boundary: a wrong type is an :class:`InvalidTypeError`,
a bad value an :class:`InvalidInputError`, both before any store call."""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, TypeVar

from . import _native
from .errors import HeartFleetError, InvalidInputError, InvalidTypeError
from .types import FencingToken

F = TypeVar("F", bound=Callable[..., Any])

U32 = 2**32 - 1
I53 = 2**53 - 1
#: The contract's constants, from the core (``bridge::contract_json``): the package keeps no copy.
CONTRACT: dict[str, Any] = json.loads(_native.contract())
MAX_TTL_SECONDS: int = CONTRACT["maxTtlSeconds"]
#: What an option left out becomes (the core's ``ops::DEFAULT_*``).
DEFAULT_MAX_RETRIES: int = CONTRACT["defaults"]["maxRetries"]
DEFAULT_SWEEP_LIMIT: int = CONTRACT["defaults"]["sweepLimit"]
DEFAULT_LIVENESS_TTL_MS: int = CONTRACT["defaults"]["livenessTtlMs"]
DEFAULT_LIVENESS_LIMIT: int = CONTRACT["defaults"]["livenessLimit"]
DEFAULT_RECONCILE_MAX_ATTEMPTS: int = CONTRACT["defaults"]["reconcileMaxAttempts"]
DEFAULT_RECONCILE_LIMIT: int = CONTRACT["defaults"]["reconcileLimit"]
DEFAULT_STORE_TIMEOUT_MS: int = CONTRACT["defaults"]["storeTimeoutMs"]
RUN_STATUSES: tuple[str, ...] = tuple(CONTRACT["runStatuses"])
#: What a release may leave a run in.
NEXT_STATUSES: tuple[str, ...] = tuple(CONTRACT["nextStatuses"])
CHANNELS: tuple[str, ...] = tuple(CONTRACT["channels"])
#: The statuses of a held lease.
HELD_STATUSES: tuple[str, ...] = tuple(CONTRACT["heldStatuses"])
#: The deepest nesting of lists and dicts the core takes in a JSON value (``[[...]]`` 512
#: levels deep is accepted, 513 is not).
MAX_JSON_DEPTH: int = CONTRACT["maxJsonDepth"]


def describe(v: object) -> str:
    """A short description of a value for an error message."""
    text = repr(v)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(v).__name__} {text}"


def type_error(message: str) -> NoReturn:
    raise InvalidTypeError(message)


def wellformed(v: str) -> bool:
    """Whether ``v`` has a UTF-8 form: no lone surrogate (``"\\ud800"``), which no store,
    digest or other runtime could see as the same string."""
    if v.isascii():
        return True
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def ill_formed(name: str) -> InvalidInputError:
    return InvalidInputError(f"{name} must be a well-formed string, got one with a lone surrogate (no UTF-8 form)")


def text(name: str, v: object) -> str:
    """A non-empty, well-formed ``str``."""
    if not isinstance(v, str):
        type_error(f"{name} must be a str, got {describe(v)}")
    if v == "":
        raise InvalidInputError(f"{name} must be a non-empty string")
    if not wellformed(v):
        raise ill_formed(name)
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
        v = v.to_dict()  # its fields are whatever it was made with: checked as a mapping's
    if not isinstance(v, Mapping):
        type_error(f"{name} must be a FencingToken, got {describe(v)}")
    out: dict[str, Any] = {}
    for camel, snake in (("runId", "run_id"), ("owner", "owner"), ("leaseExpiresAt", "lease_expires_at")):
        x = v.get(camel, v.get(snake))
        if not isinstance(x, str):
            type_error(f"{name}.{camel} must be a str, got {describe(x)}")
        if not wellformed(x):
            raise ill_formed(f"{name}.{camel}")
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


def nesting(value: object, limit: int = MAX_JSON_DEPTH) -> str | None:
    """``"deep"`` when ``value`` nests lists/tuples/dicts more than ``limit`` levels,
    ``"circular"`` when it contains itself, else ``None``. Iterative: a value nested 10,000
    deep costs no more than one ``limit + 1`` deep and never hits the recursion limit."""
    containers = (dict, list, tuple)
    if not isinstance(value, containers):
        return None
    if limit < 1:
        return "deep"

    def items(x: Any) -> Any:
        return iter(x.values()) if isinstance(x, dict) else iter(x)

    path = {id(value)}
    stack: list[tuple[Any, Any, int]] = [(value, items(value), 1)]
    while stack:
        node, it, depth = stack[-1]
        for child in it:
            if isinstance(child, containers):
                if id(child) in path:
                    return "circular"
                if depth + 1 > limit:
                    return "deep"
                path.add(id(child))
                stack.append((child, items(child), depth + 1))
                break
        else:
            stack.pop()
            path.discard(id(node))
    return None


def deeper_than(value: object, limit: int) -> bool:
    """Whether ``value`` nests lists/tuples/dicts more than ``limit`` levels."""
    return nesting(value, limit) == "deep"


def too_deep(what: str, limit: int = MAX_JSON_DEPTH) -> InvalidInputError:
    return InvalidInputError(f"{what}: nesting deeper than {limit} levels (the core's limit for a JSON value)")


def _bad_call(e: TypeError) -> bool:
    """Whether a TypeError caught around a call was raised by the call's argument binding (an
    unknown keyword, a missing argument): it then has no frame of the callee."""
    tb = e.__traceback__
    return not isinstance(e, HeartFleetError) and tb is not None and tb.tb_next is None


def coded_call(f: F) -> F:
    """``f`` with an unknown keyword argument (a misspelt option) or a missing argument raised
    as :class:`InvalidTypeError` (code ``invalid-input``, still a ``TypeError``) instead of
    Python's uncoded one. Coroutine functions stay coroutine functions."""
    if inspect.iscoroutinefunction(f):

        @functools.wraps(f)
        async def coded_async(*args: Any, **kwargs: Any) -> Any:
            try:
                coro = f(*args, **kwargs)
            except TypeError as e:
                if not _bad_call(e):
                    raise
                raise InvalidTypeError(str(e)) from None
            return await coro

        return coded_async  # type: ignore[return-value]

    return functools.wraps(f)(_binding_checked(f))  # type: ignore[return-value]


#: An argument the caller left out.
_LEFT_OUT: Any = object()


def _binding_checked(f: Callable[..., Any]) -> Callable[..., Any]:
    """A wrapper of ``f`` (no ``*args``/``**kwargs`` of its own) whose own parameters cannot
    fail to bind: each of ``f``'s parameters defaults to ``f``'s default or to a marker, and
    extra ones are gathered. On the common path it calls ``f`` with its parameters as they
    are, without packing them into a tuple and a dict (a fifth of the lease cycle's Python
    time did that); a call that would not bind is made again as given, for Python's own
    message, raised as :class:`InvalidTypeError`."""
    bound = binding(f)
    if bound is None:
        return _packing_checked(f)
    header, check, call, namespace = bound
    source = f"def checked({header}):\n{check}    return _f({call})\n"
    checked: Callable[..., Any] = generated(source, "checked", {**namespace, "_f": f})
    return checked


def binding(f: Callable[..., Any], skip: int = 0) -> tuple[str, str, str, dict[str, Any]] | None:
    """The parts of a generated function that takes ``f``'s parameters (after the first
    ``skip``, which it passes through as they are) without failing to bind: its parameter list,
    the check that refuses a call that would not have bound ``f`` (through :func:`_refuse`,
    indented for a function body), ``f``'s call arguments, and the names they refer to. None
    when ``f`` has ``*args``/``**kwargs`` or a parameter named with a leading underscore."""
    params = list(inspect.signature(f).parameters.values())
    if any(p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) or p.name.startswith("_") for p in params):
        return None  # (a leading underscore could meet the generated names)
    passed, params = [p.name for p in params[:skip]], params[skip:]
    defaults = {f"_d{i}": (_LEFT_OUT if p.default is p.empty else p.default) for i, p in enumerate(params)}
    positional = [f"{p.name}=_d{i}" for i, p in enumerate(params) if p.kind is p.POSITIONAL_OR_KEYWORD]
    keyword = [f"{p.name}=_d{i}" for i, p in enumerate(params) if p.kind is p.KEYWORD_ONLY]
    call = ", ".join([*passed, *(p.name if p.kind is p.POSITIONAL_OR_KEYWORD else f"{p.name}={p.name}" for p in params)])
    left_out = " or ".join(f"{p.name} is _LEFT_OUT" for p in params if p.default is p.empty) or "False"
    given = "".join(f"({p.name!r}, {p.name}, {p.kind is p.KEYWORD_ONLY}), " for p in params)
    header = ", ".join([*passed, *positional, "*_extra", *keyword, "**_unknown"])
    through = "".join(f"{n}, " for n in passed)
    check = f"    if _extra or _unknown or {left_out}:\n        _refuse(_f, ({given}), _extra, _unknown, ({through}))\n"
    return header, check, call, {"_LEFT_OUT": _LEFT_OUT, "_refuse": _refuse, **defaults}


def generated(source: str, name: str, namespace: dict[str, Any]) -> Any:
    """The function ``name`` defined by ``source`` (built by this package from a function's
    own parameter names, see :func:`binding`) over ``namespace``."""
    exec(source, namespace)  # noqa: S102 - the source is built from a function's own parameter names
    return namespace[name]


def _refuse(
    f: Callable[..., Any], given: tuple[tuple[str, Any, bool], ...], extra: tuple[Any, ...], unknown: dict[str, Any], passed: tuple[Any, ...] = ()
) -> NoReturn:
    """Makes the call that did not bind as the caller made it, and raises its TypeError coded."""
    args = [*passed, *(v for _, v, kw in given if not kw and v is not _LEFT_OUT)]
    kwargs = {n: v for n, v, kw in given if kw and v is not _LEFT_OUT}
    try:
        f(*args, *extra, **kwargs, **unknown)
    except TypeError as e:
        if _bad_call(e):
            raise InvalidTypeError(str(e)) from None
        raise
    raise InvalidTypeError(f"{f.__qualname__}() was called with arguments it does not take")


def _packing_checked(f: Callable[..., Any]) -> Callable[..., Any]:
    """:func:`_binding_checked` for a function with ``*args`` or ``**kwargs`` of its own."""

    def coded(*args: Any, **kwargs: Any) -> Any:
        try:
            return f(*args, **kwargs)
        except TypeError as e:
            if not _bad_call(e):
                raise
            raise InvalidTypeError(str(e)) from None

    return coded


def coded_methods(cls: type) -> type:
    """Applies :func:`coded_call` to ``cls.__init__`` and every public method (not to
    properties, static or class methods)."""
    for name, member in list(vars(cls).items()):
        coded = getattr(member, "__coded__", False)  # generated with its own check (_driver.twins)
        if (name == "__init__" or not name.startswith("_")) and inspect.isfunction(member) and not coded:
            setattr(cls, name, coded_call(member))
    return cls


def to_json(value: object, what: str) -> str:
    """JSON text of a JSON-able value (finite numbers, str keys); anything else is invalid input."""
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except ValueError as e:
        raise InvalidInputError(f"{what} is not JSON: {e}") from None
    except RecursionError:
        raise too_deep(what) from None
    except TypeError as e:
        raise InvalidTypeError(f"{what} is not JSON: {e}") from None
