"""The receipt sinks: the core's receipt appender (``_native.NativeReceiptAppender``) decides
every statement of an append to ``heart_receipts`` (the run's head, the chained insert,
chaining again when another writer took the position); a sink only runs them on its
connection and hands the rows back.

**Receipts commit with their writes.** A :class:`ReceiptSink` given to a ``HeartFleet`` over
the store that made it holds each operation's writes in one transaction
(:class:`HeldTransaction`): the operation's first request opens it on the store's connection,
which the transaction keeps to itself until it settles; the receipts the core emits are
inserted inside it before the next request; and the driving loop (``_driver.steps``) settles
it when the operation ends and before the caller's turn (an effect, a probe, the ledger), so
no effect runs inside a transaction. Settling commits, or rolls everything back when a receipt
could not be inserted, a request failed inside the transaction or the commit failed: the
operation then fails with ``StoreUnavailableError`` and the counters it bumped are taken back.
A process killed before the commit leaves neither the writes nor their receipts. Used
anywhere else (a fleet over another store, a call of your own), the sink appends right after
the write, in a statement of its own, and a failure goes to ``on_error``.

The transaction is written once, as generators that yield each call on the store's
connection (a :class:`Session`, blocking or asyncio) to the driving loop's runner
(``_driver.run_sync`` / ``run_async``), as the operations themselves are.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Generator, Sequence
from typing import Any, Protocol

from . import _check, _driver, _native
from .errors import StoreUnavailableError
from .types import HeartReceipt

#: Rows as the core reads them: ``[[column, value], ...]`` per row.
Rows = list[list[list[Any]]]
#: A generator of calls for the driving loop's runners (``_driver.Steps``).
Calls = Generator[_driver.Call, _driver.Sent, Any]


def appender(dialect: str, signing_keys: Sequence[str]) -> _native.NativeReceiptAppender:
    """An appender signing with ``signing_keys`` (key file texts); a bad key raises
    :class:`InvalidInputError` here, never naming its bytes."""
    if isinstance(signing_keys, str) or not all(isinstance(k, str) for k in signing_keys):
        _check.type_error("signing_keys must be a sequence of key texts")
    return _native.NativeReceiptAppender.create(dialect, json.dumps(list(signing_keys)))


def _call(fn: Callable[..., Any], *args: Any) -> Calls:
    """One call for the runner: its value, or its exception raised here."""
    ok, value = yield (fn, *args)
    if not ok:
        raise value
    return value


def appending(app: _native.NativeReceiptAppender, receipt: str, rows: Callable[[dict[str, Any]], Any]) -> Calls:
    """Appends ``receipt`` (its JSON text), each statement run by ``rows`` (statement -> its
    rows, or an awaitable of them)."""
    statement = app.begin(receipt)
    while True:
        try:
            found = yield from _call(rows, json.loads(statement))
        except BaseException:
            app.failed()
            raise
        following = app.answer(json.dumps(found))
        if following is None:
            return
        statement = following


class Session(Protocol):
    """A store's connection, kept by one held transaction from ``begin`` to ``release``. Each
    method but ``release`` may return an awaitable (an asyncio store). ``release`` gives back
    only what ``begin`` took, once (a ``begin`` that failed gave it back itself)."""

    def begin(self) -> Any: ...
    def answer(self, request: _native.StoreRequest) -> Any: ...
    def rows(self, statement: dict[str, Any]) -> Any: ...
    def commit(self) -> Any: ...
    def rollback(self) -> Any: ...
    def release(self) -> None: ...


def _message(e: BaseException) -> str:
    return str(e) or type(e).__name__


class HeldTransaction:
    """One operation's requests and the receipts of its writes in one transaction (see the
    module docs). ``execute`` and ``settle`` are generators for the driving loop's runner.

    Each transaction has an appender of its own (``new_appender``: the receipt chain's heads
    are read from the table inside it), so no two share an append in progress. A receipt that
    records no write of the operation (guard's effect receipts, which follow the caller's
    ledger) is inserted at the settle in a transaction of its own; its failure goes to
    ``report`` (the sink's ``on_error``), as it cannot undo the effect."""

    def __init__(
        self,
        open_session: Callable[[], Session],
        new_appender: Callable[[], _native.NativeReceiptAppender],
        report: Callable[[BaseException, str], None],
    ) -> None:
        self._open_session = open_session
        self._session: Session | None = None
        self._new_appender = new_appender
        self._app: _native.NativeReceiptAppender | None = None
        self._report = report
        #: Receipts of the open transaction, inserted before its next request or its settle.
        self._queued: list[str] = []
        #: Receipts that record no write of the operation (see above).
        self._alone: list[str] = []
        #: Why the open transaction must roll back (a receipt insert failed).
        self._doomed: str | None = None
        #: Why a transaction was rolled back since the last settle.
        self._rolled_back: str | None = None

    @property
    def is_open(self) -> bool:
        return self._session is not None

    def execute(self, request: _native.StoreRequest, timeout: float | None) -> Calls:
        """One store request inside the transaction, which it opens if none is;
        each awaited call waits at most ``timeout`` seconds."""
        yield from self._append_queued()
        if self._doomed is not None:
            yield from self._roll_back(f"a receipt could not be written: {self._doomed}")
            self._outcome()
        if self._session is None:
            yield from self._begin()
        assert self._session is not None
        try:
            return (yield from _call(_driver.StoreCall(self._session.answer, timeout), request))
        except Exception as e:
            yield from self._roll_back(f"a request of the operation failed: {_message(e)}")
            raise

    def _begin(self) -> Calls:
        # Kept before it begins: an operation cancelled while it waits to begin is rolled back
        # and its connection given back (abandon).
        self._session = session = self._open_session()
        if self._app is None:
            self._app = self._new_appender()
        try:
            yield from _call(session.begin)  # gives back what it took when it fails
        except Exception:
            self._session = None
            raise

    def receipt(self, receipt: str) -> None:
        """A receipt (JSON text) of the operation: queued for the open transaction, else
        inserted at the settle (see the class docs)."""
        (self._alone if self._session is None else self._queued).append(receipt)

    def settle(self) -> Calls:
        """Commits the open transaction (or rolls it back); raises ``StoreUnavailableError``
        when anything was rolled back since the last settle."""
        yield from self._append_queued()
        session = self._session
        if session is not None:
            if self._doomed is not None:
                yield from self._roll_back(f"a receipt could not be written: {self._doomed}")
            else:
                try:
                    yield from _call(session.commit)
                except Exception as e:
                    yield from self._roll_back(f"the commit failed: {_message(e)}")
                else:
                    self._session = None
                    session.release()
        self._outcome()
        if self._alone:
            yield from self._insert_alone()

    def _insert_alone(self) -> Calls:
        """Inserts the receipts that record no write, in a transaction of their own."""
        receipts, self._alone = self._alone, []
        try:
            yield from self._begin()
            self._queued = receipts
            yield from self._append_queued()
            if self._doomed is not None:
                raise StoreUnavailableError(self._doomed)
            assert self._session is not None
            yield from _call(self._session.commit)
            session, self._session = self._session, None
            session.release()
        except Exception as e:
            yield from self._roll_back("")
            self._rolled_back = None
            for r in receipts:
                self._report(e, r)

    def abandon(self) -> None:
        """Rolls back what is open: the operation was left by an exception or a cancellation
        (on an asyncio store in the background; the connection stays the transaction's until
        then)."""
        session, self._session = self._session, None
        self._queued, self._alone = [], []
        if session is None:
            return
        if inspect.iscoroutinefunction(session.rollback):

            async def roll_back() -> None:
                try:
                    await session.rollback()
                finally:
                    session.release()

            in_background(roll_back())
        else:
            try:
                session.rollback()
            finally:
                session.release()
        if self._app is not None:
            self._app.forget_heads()

    def _append_queued(self) -> Calls:
        session, app = self._session, self._app
        queued, self._queued = self._queued, []
        if session is None or app is None or self._doomed is not None:
            return
        for receipt in queued:
            try:
                yield from appending(app, receipt, session.rows)
            except Exception as e:  # noqa: BLE001 - the settle rolls back and reports it
                self._doomed = _message(e)
                return

    def _roll_back(self, reason: str) -> Calls:
        session, self._session = self._session, None
        if session is None:
            return
        try:
            yield from _call(session.rollback)
        finally:
            session.release()
            self._doomed = None
            self._rolled_back = self._rolled_back or reason
            # The rolled-back receipts may have been heads: read them from the table again.
            if self._app is not None:
                self._app.forget_heads()

    def _outcome(self) -> None:
        reason, self._rolled_back = self._rolled_back, None
        if reason is not None:
            raise StoreUnavailableError(f"the operation's writes were rolled back with their receipts: {reason}")


#: Work running in the background, kept referenced until it finishes.
_background: set[asyncio.Future[Any]] = set()


def in_background(awaitable: Any) -> None:
    """Runs ``awaitable`` in the background when a loop is running (else drops it); its
    failure is swallowed (an async sink's, as in the reference)."""
    try:
        fut = asyncio.ensure_future(awaitable)
    except (RuntimeError, TypeError):
        if inspect.iscoroutine(awaitable):
            awaitable.close()
        return
    _background.add(fut)

    def done(f: asyncio.Future[Any]) -> None:
        _background.discard(f)
        if not f.cancelled():
            f.exception()  # retrieved

    fut.add_done_callback(done)


class ReceiptSink:
    """An ``on_receipt`` sink appending to ``heart_receipts`` (a store's ``receipt_sink()``).
    Called, it appends right after the write (``append_now``, which takes the receipt's JSON
    text); given to a fleet over ``store``, the fleet holds each operation's writes and their
    receipts in one transaction on a :class:`Session` from ``open_session``, with an appender
    of its own (``new_appender``); ``report`` hears a receipt that could not be inserted
    alone."""

    __slots__ = ("store", "append_now", "open_session", "new_appender", "report")

    def __init__(
        self,
        store: Any,
        append_now: Callable[[str], Any],
        open_session: Callable[[], Session],
        new_appender: Callable[[], _native.NativeReceiptAppender],
        report: Callable[[BaseException, str], None],
    ) -> None:
        self.store = store
        self.append_now = append_now
        self.open_session = open_session
        self.new_appender = new_appender
        self.report = report

    def __call__(self, receipt: HeartReceipt) -> Any:
        return self.append_now(json.dumps(receipt.to_dict()))

    def hold(self) -> HeldTransaction:
        """A held transaction for one operation."""
        return HeldTransaction(self.open_session, self.new_appender, self.report)


def reporter(on_error: Callable[[BaseException, HeartReceipt], None] | None) -> Callable[[BaseException, str], None]:
    """Hands a receipt (JSON text) that could not be appended to ``on_error``, if any."""

    def report(e: BaseException, receipt: str) -> None:
        if on_error is not None:
            on_error(e, HeartReceipt.from_json(json.loads(receipt)))

    return report
