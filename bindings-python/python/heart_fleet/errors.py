"""The exception hierarchy: one class per stable code of the core's error registry.

Every exception the package raises on purpose is a :class:`HeartFleetError` with a stable
``.code`` (kebab-case, the same code every runtime of heart-fleet uses). Invalid input is
also a :class:`ValueError` (:class:`InvalidInputError`) or, for a value of the wrong type, a
:class:`TypeError` (:class:`InvalidTypeError`), so ``except ValueError`` keeps working.
"""

from __future__ import annotations

from typing import Final

from . import _native
from ._contract import CONTRACT

__all__ = [
    "ERROR_CODES",
    "HeartFleetError",
    "InvalidInputError",
    "InvalidTypeError",
    "RunNotFoundError",
    "LeaseHeldError",
    "CollisionError",
    "FenceRejectedError",
    "QuarantinedError",
    "DedupedError",
    "StoreUnavailableError",
    "StoreProtocolError",
    "ReceiptTamperedError",
    "EffectFailedError",
    "InvalidStateError",
    "LeaseLostError",
    "error_for_code",
]


class HeartFleetError(Exception):
    """The root of every heart-fleet error. ``code`` is the core's stable code."""

    code: str = "invalid-state"

    def __init__(self, message: str = "", code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        """The error's text."""
        return str(self.args[0]) if self.args else ""


class InvalidInputError(HeartFleetError, ValueError):
    """Input the core refuses (``invalid-input``); nothing was changed."""

    code = "invalid-input"


class InvalidTypeError(InvalidInputError, TypeError):
    """An argument of the wrong type (``invalid-input``); nothing was changed."""


class RunNotFoundError(HeartFleetError):
    """``run-not-found``."""

    code = "run-not-found"


class LeaseHeldError(HeartFleetError):
    """``lease-held``: another owner holds a live lease on the run."""

    code = "lease-held"


class CollisionError(HeartFleetError):
    """``collision``: the run changed under the operation."""

    code = "collision"


class FenceRejectedError(HeartFleetError):
    """``fence-rejected``: the token no longer proves a live lease."""

    code = "fence-rejected"


class QuarantinedError(HeartFleetError):
    """``quarantined``: the run hit its retry ceiling."""

    code = "quarantined"


class DedupedError(HeartFleetError):
    """``deduped``: the effect already happened."""

    code = "deduped"


class StoreUnavailableError(HeartFleetError):
    """``store-unavailable``: the store failed; the message names the step it stopped at."""

    code = "store-unavailable"


class StoreProtocolError(HeartFleetError):
    """``store-protocol``: a store answered something that is not a StoreAnswer."""

    code = "store-protocol"


class ReceiptTamperedError(HeartFleetError):
    """``receipt-tampered``: a receipt's digest does not match its fields."""

    code = "receipt-tampered"


class EffectFailedError(HeartFleetError):
    """``effect-failed``."""

    code = "effect-failed"


class InvalidStateError(HeartFleetError):
    """``invalid-state``: the run is not in a state that allows the action."""

    code = "invalid-state"


class LeaseLostError(HeartFleetError):
    """The lease-lost signal of ``execute_with_lease``: why the lease was lost.

    ``cause`` is ``superseded``, ``expired``, ``released``, ``not-found`` or
    ``store-unavailable``; ``code`` is ``store-unavailable`` for the last, else
    ``fence-rejected``.
    """

    def __init__(self, cause: str, run_id: str) -> None:
        super().__init__(f"lease on run {run_id} lost: {cause}", CONTRACT["lostCodes"][cause])
        self.cause = cause
        self.run_id = run_id


_BY_CODE: Final[dict[str, type[HeartFleetError]]] = {
    "invalid-input": InvalidInputError,
    "run-not-found": RunNotFoundError,
    "lease-held": LeaseHeldError,
    "collision": CollisionError,
    "fence-rejected": FenceRejectedError,
    "quarantined": QuarantinedError,
    "deduped": DedupedError,
    "store-unavailable": StoreUnavailableError,
    "store-protocol": StoreProtocolError,
    "receipt-tampered": ReceiptTamperedError,
    "effect-failed": EffectFailedError,
    "invalid-state": InvalidStateError,
}

#: Every stable code of the core's registry, in its order (from the core: no copy here).
ERROR_CODES: Final[tuple[str, ...]] = tuple(_native.error_codes())


def error_for_code(code: str, message: str) -> HeartFleetError:
    """The exception of a coded error (an unknown code keeps its code on the root class)."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return HeartFleetError(message, code)
    return cls(message)
