"""Argument checks at the package's boundary: a wrong type is an :class:`InvalidTypeError`,
a bad value an :class:`InvalidInputError`, both before any store call."""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, NoReturn, TypeVar

from . import _native
from ._contract import CONTRACT as CONTRACT
from .errors import HeartFleetError, InvalidInputError, InvalidTypeError
from .types import FencingToken

F = TypeVar("F", bound=Callable[..., Any])

U32 = 2**32 - 1
I53 = 2**53 - 1
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
    fail to bind (see :func:`binding`). On the common path it calls ``f`` with its
    parameters as they are, without packing them into a tuple and a dict (a fifth of the lease
    cycle's Python time did that)."""
    bound = binding(f)
    if bound is None:
        return _packing_checked(f)
    source = f"def checked({bound.header}):\n{bound.prologue}    return _f({bound.call})\n"
    namespace = {**bound.namespace, "_f": f, "_fb": binder(f, f.__qualname__)}
    checked: Callable[..., Any] = generated(source, "checked", namespace, f.__qualname__)
    return checked


class Binding(NamedTuple):
    """The parts of a generated function that takes a function's parameters and cannot fail
    to bind (:func:`binding`)."""

    #: The parameter list: the positional parameters positional-only, each defaulting to a
    #: marker, then ``*_extra, **_kw``.
    header: str
    #: Statements (indented for a function body) after which every parameter holds the value
    #: the call gave it or its default; a call that would not bind the function raises
    #: ``InvalidTypeError`` with Python's own message (through ``_fb``, from :func:`binder`).
    prologue: str
    #: The function's call arguments, by those names.
    call: str
    #: What the prologue refers to (``_fb`` excepted).
    namespace: dict[str, Any]


def binding(f: Callable[..., Any], skip: int = 0) -> Binding | None:
    """How a generated function takes ``f``'s parameters (after the first ``skip``, passed
    through as they are) so that its own call always binds: a call with its positional
    arguments in place and no keywords (the common case) costs one comparison per
    parameter, one that names them costs a copy of its keywords and a lookup each; anything
    else (an unknown, duplicated or missing argument, an extra positional) is bound again by
    :func:`binder`'s copy of ``f``'s signature, which gives Python's own binding and its own
    message. None when ``f`` has ``*args``/``**kwargs``, a required keyword-only parameter or
    a parameter named with a leading underscore (it could meet the generated names)."""
    params = list(inspect.signature(f).parameters.values())
    plain = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    if any(p.kind not in plain or p.name.startswith("_") for p in params):
        return None
    if any(p.kind is p.KEYWORD_ONLY and p.default is p.empty for p in params):
        return None
    passed, own = [p.name for p in params[:skip]], params[skip:]
    positional = [p for p in own if p.kind is p.POSITIONAL_OR_KEYWORD]
    defaults = {f"_d{i}": p.default for i, p in enumerate(own) if p.default is not p.empty}
    header = [*passed, *(f"{p.name}=_LEFT_OUT" for p in positional)]
    header = [*header, "/", "*_extra", "**_kw"] if header else ["*_extra", "**_kw"]
    names = "".join(f"{p.name}, " for p in own)
    given = "".join(f"{n}, " for n in [*passed, *(p.name for p in positional)])
    missing = " or ".join(f"{p.name} is _LEFT_OUT" for p in positional if p.default is p.empty) or "False"
    # How many positionals the call gave: the left-out ones are a suffix (positional-only).
    count = str(len(passed))
    for k, p in enumerate(positional, start=len(passed) + 1):
        count = f"{k} if {p.name} is not _LEFT_OUT else {count}"
    lines = [f"    if _extra or _kw or {missing}:", f"        _given = ({given})[:{count}]", "        _k = None"]
    # Keywords alone (the other common case): each taken from a copy of the keywords, so an
    # unknown or duplicated keyword, or a parameter still missing, leaves the call to _rebind.
    lines += ["        if not _extra:", "            _k = dict(_kw)"]
    for i, p in enumerate(own):
        if p.kind is p.POSITIONAL_OR_KEYWORD:
            lines.append(f"            if {p.name} is _LEFT_OUT:\n                {p.name} = _k.pop({p.name!r}, _LEFT_OUT)")
        else:
            lines.append(f"            {p.name} = _k.pop({p.name!r}, _d{i})")
    lines += [
        f"        if _k is None or _k or {missing}:",
        f"            {names + ' = ' if names else ''}_rebind(_fb, _given, _extra, _kw)",
    ]
    keyword_defaults = [f"        {p.name} = _d{i}" for i, p in enumerate(own) if p.kind is p.KEYWORD_ONLY]
    if keyword_defaults:
        lines += ["    else:", *keyword_defaults]
    lines += [
        f"    if {p.name} is _LEFT_OUT:\n        {p.name} = _d{i}"
        for i, p in enumerate(own)
        if p.kind is p.POSITIONAL_OR_KEYWORD and p.default is not p.empty
    ]
    call = ", ".join([*passed, *(p.name if p.kind is p.POSITIONAL_OR_KEYWORD else f"{p.name}={p.name}" for p in own)])
    namespace = {"_LEFT_OUT": _LEFT_OUT, "_rebind": _rebind, **defaults}
    return Binding(", ".join(header), "".join(f"{line}\n" for line in lines), call, namespace)


def binder(f: Callable[..., Any], qualname: str, skip: int = 0) -> Callable[..., tuple[Any, ...]]:
    """A function with ``f``'s parameters (names, kinds, defaults) named ``qualname`` that
    returns the values of the parameters after the first ``skip``: calling it binds a call as
    ``f`` would, with Python's message naming ``qualname`` when the call does not bind."""
    params = list(inspect.signature(f).parameters.values())
    shown = []
    star = False
    for i, p in enumerate(params):
        if p.kind is p.KEYWORD_ONLY and not star:
            shown.append("*")
            star = True
        shown.append(p.name if p.default is p.empty else f"{p.name}=_d{i}")
    returned = "".join(f"{p.name}, " for p in params[skip:])
    name = qualname.rpartition(".")[2]
    source = f"def {name}({', '.join(shown)}):\n    return ({returned})\n"
    defaults = {f"_d{i}": p.default for i, p in enumerate(params) if p.default is not p.empty}
    made: Callable[..., tuple[Any, ...]] = generated(source, name, defaults, qualname)
    made.__code__ = made.__code__.replace(co_qualname=qualname)
    made.__qualname__ = qualname
    return made


def _rebind(fb: Callable[..., tuple[Any, ...]], given: tuple[Any, ...], extra: tuple[Any, ...], kw: dict[str, Any]) -> tuple[Any, ...]:
    """Binds a call that was not the common case through ``fb`` (:func:`binder`): its values,
    or its TypeError raised coded. ``given`` holds the positional arguments the call gave."""
    try:
        return fb(*given, *extra, **kw)
    except TypeError as e:
        raise InvalidTypeError(str(e)) from None


def generated(source: str, name: str, namespace: dict[str, Any], qualname: str) -> Any:
    """The function ``name`` defined by ``source`` (built by this package from a function's
    own parameter names, see :func:`binding`) over ``namespace``; tracebacks name its file
    ``<heart_fleet: qualname>``."""
    code = compile(source, f"<heart_fleet: {qualname}>", "exec")
    exec(code, namespace)  # noqa: S102 - the source is built from a function's own parameter names
    return namespace[name]


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
    properties, static or class methods, nor to methods marked ``__coded__``: generated with
    the check built in, by ``_driver.twins``)."""
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
