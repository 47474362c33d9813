"""The store contract of the package's SQL stores, written once: a :class:`HeartFleet` hands
their ``execute`` the core's :class:`StoreRequest` (no JSON either way, though they also have
``execute_json``), a mapping in the request's JSON shape gets a dict, and ``execute_json``
takes and gives text. Each store brings ``_execute(request) -> StoreAnswer``: the statements
the core renders for the request, run on its connection, read back by the core."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, overload

from . import _check, _native
from ._driver import CancelledAfterCommit
from ._native import StoreAnswer, StoreRequest
from .errors import InvalidTypeError


def request_of(text: object) -> StoreRequest:
    """The request of ``execute_json``'s text; text that is not a StoreRequest is a
    ``StoreProtocolError``."""
    if not isinstance(text, str):
        raise InvalidTypeError(f"execute_json: a StoreRequest as JSON text, got {_check.describe(text)}")
    if not _check.wellformed(text):
        raise _check.ill_formed("execute_json: the request")
    return _native.parse_store_request(text)


def _request(request: StoreRequest | Mapping[str, Any]) -> StoreRequest:
    return request if type(request) is StoreRequest else request_of(json.dumps(request, separators=(",", ":")))


def _as_handed(request: object, answer: Any) -> Any:
    """The answer in the form of the request: as it is for a StoreRequest, else a dict."""
    return answer if type(request) is StoreRequest else answer.to_dict()


def typed(store: object) -> bool:
    """Whether a fleet hands ``store``'s ``execute`` the core's StoreRequest, though it has
    ``execute_json``: a SQL store's own ``execute_json`` (a subclass that overrides it, to log
    say, keeps getting text)."""
    return getattr(type(store), "execute_json", None) in (SqlStore.execute_json, AsyncSqlStore.execute_json)


class SqlStore:
    """The blocking SQL stores' ``execute`` and ``execute_json``."""

    def _execute(self, request: StoreRequest) -> StoreAnswer:
        raise NotImplementedError

    @overload
    def execute(self, request: StoreRequest) -> StoreAnswer: ...  # type: ignore[overload-overlap]
    @overload
    def execute(self, request: Mapping[str, Any]) -> dict[str, Any]: ...
    def execute(self, request: StoreRequest | Mapping[str, Any]) -> StoreAnswer | dict[str, Any]:
        """The store contract: a :class:`StoreRequest` -> its :class:`StoreAnswer`, with no
        JSON; a mapping in the request's JSON shape -> the answer's JSON shape (a dict)."""
        return _as_handed(request, self._execute(_request(request)))  # type: ignore[no-any-return]

    def execute_json(self, request: str) -> str:
        """The store contract's text form: StoreRequest JSON text -> StoreAnswer JSON text."""
        return self._execute(request_of(request)).to_json()


class AsyncSqlStore:
    """:class:`SqlStore` awaited. An answer a cancellation let through
    (:class:`CancelledAfterCommit`) is in the form of the request too."""

    async def _execute(self, request: StoreRequest) -> StoreAnswer:
        raise NotImplementedError

    @overload
    async def execute(self, request: StoreRequest) -> StoreAnswer: ...  # type: ignore[overload-overlap]
    @overload
    async def execute(self, request: Mapping[str, Any]) -> dict[str, Any]: ...
    async def execute(self, request: StoreRequest | Mapping[str, Any]) -> StoreAnswer | dict[str, Any]:
        """The store contract, awaited (:meth:`SqlStore.execute`)."""
        try:
            answer = await self._execute(_request(request))
        except CancelledAfterCommit as c:
            raise CancelledAfterCommit(_as_handed(request, c.answer)) from None
        return _as_handed(request, answer)  # type: ignore[no-any-return]

    async def execute_json(self, request: str) -> str:
        """The store contract's text form, awaited."""
        try:
            answer = await self._execute(request_of(request))
        except CancelledAfterCommit as c:
            raise CancelledAfterCommit(c.answer.to_json()) from None
        return answer.to_json()
