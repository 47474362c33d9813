"""The receipt sinks' loop: the core's receipt appender (``_native.NativeReceiptAppender``)
decides every statement of an append to ``heart_receipts`` (the run's head, the chained
insert, chaining again when another writer took the position); a sink only runs them on its
connection and hands the rows back."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from . import _check, _native
from .types import HeartReceipt

#: One statement (``{"sql", "params"}``, as the core renders it) -> its rows as
#: ``[[column, value], ...]`` per row.
Run = Callable[[dict[str, Any]], list[list[list[Any]]]]


def appender(dialect: str, signing_keys: Sequence[str]) -> _native.NativeReceiptAppender:
    """An appender signing with ``signing_keys`` (key file texts); a bad key raises
    :class:`InvalidInputError` here, never naming its bytes."""
    if isinstance(signing_keys, str) or not all(isinstance(k, str) for k in signing_keys):
        _check.type_error("signing_keys must be a sequence of key texts")
    return _native.NativeReceiptAppender.create(dialect, json.dumps(list(signing_keys)))


def append(app: _native.NativeReceiptAppender, receipt: HeartReceipt, run: Run) -> None:
    """Appends ``receipt``, running each statement with ``run``."""
    statement = app.begin(json.dumps(receipt.to_dict()))
    while True:
        try:
            rows = run(json.loads(statement))
        except BaseException:
            app.failed()
            raise
        following = app.answer(json.dumps(rows))
        if following is None:
            return
        statement = following


async def append_async(
    app: _native.NativeReceiptAppender, receipt: HeartReceipt, run: Callable[[dict[str, Any]], Awaitable[list[list[list[Any]]]]]
) -> None:
    """:func:`append`, with ``run`` awaited."""
    statement = app.begin(json.dumps(receipt.to_dict()))
    while True:
        try:
            rows = await run(json.loads(statement))
        except BaseException:
            app.failed()
            raise
        following = app.answer(json.dumps(rows))
        if following is None:
            return
        statement = following
