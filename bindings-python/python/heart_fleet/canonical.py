"""Canonical JSON, digests, deterministic ids, effect keys and receipt verification.

The canonical form is the reference's ``dreamnet-sorted-json``: keys in UTF-16 code-unit
order, JavaScript number formatting, ``JSON.stringify`` string escaping. It is computed by
the Rust core from the JSON text of a Python value (``json.dumps``), so it is byte for byte
what every other runtime of heart-fleet produces.

A value may nest lists and dicts at most 512 levels deep (``MAX_JSON_DEPTH`` of the core's
canonical JSON); a deeper one is :class:`InvalidInputError` at any depth. A lone surrogate in
a string value is kept (as its ``\\udxxx`` escape, as ``JSON.stringify`` does); in an id
(``deterministic_resource_id``, an ``effect_key`` prefix) it is invalid input.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from . import _check
from . import _native
from .errors import InvalidInputError, InvalidTypeError
from .types import HeartReceipt, LogReport

__all__ = [
    "DIGEST_PREFIX",
    "RECEIPT_SCHEMA_VERSION",
    "canonicalize",
    "digest",
    "canonical_sha256",
    "sha256_hex",
    "deterministic_resource_id",
    "effect_key",
    "verify_receipt",
    "verify_receipts",
]

#: The prefix of every canonical digest, and the receipts' schema version: the core's.
DIGEST_PREFIX: str = _check.CONTRACT["digestPrefix"]
RECEIPT_SCHEMA_VERSION: str = _check.CONTRACT["receiptSchemaVersion"]


def _js_number(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    return "Infinity" if x > 0 else "-Infinity"


def _find_bad(v: Any, seen: set[int]) -> Exception | None:
    """The reference's error for the first value canonical JSON cannot hold."""
    if v is None or isinstance(v, (bool, str, int)):
        return None
    if isinstance(v, float):
        if math.isfinite(v):
            return None
        return InvalidInputError(f"Canonical JSON Error: Non-finite number {_js_number(v)} cannot be serialized.")
    if isinstance(v, (list, tuple, Mapping)):
        if id(v) in seen:
            return InvalidTypeError("Canonical JSON Error: circular structure")
        seen.add(id(v))
        items = v.values() if isinstance(v, Mapping) else v
        if isinstance(v, Mapping):
            for k in v:
                if not isinstance(k, str):
                    return InvalidTypeError(f"Canonical JSON Error: object keys must be str, got {type(k).__name__}")
        for x in items:
            bad = _find_bad(x, seen)
            if bad is not None:
                return bad
        seen.discard(id(v))
        return None
    return InvalidTypeError(f"Canonical JSON Error: Unsupported value type {type(v).__name__}")


def json_text(value: Any) -> str:
    """JSON text of a value for the core; the reference's errors for what JSON cannot hold.
    A value nested deeper than the core's ``MAX_JSON_DEPTH`` (512 levels of lists and dicts)
    is an :class:`InvalidInputError`, whatever depth ``json.dumps`` gives up at."""
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        if _check.nesting(value) == "deep":
            raise _check.too_deep("Canonical JSON Error") from None
        bad = _find_bad(value, set())
        raise (bad or InvalidTypeError("Canonical JSON Error: the value is not JSON")) from None


def canonicalize(value: Any) -> str:
    """The canonical JSON text of a JSON value (dicts with str keys, lists, tuples, str,
    int, finite float, bool, None)."""
    return str(_native.canonicalize_json(json_text(value)))


def digest(value: Any) -> str:
    """``sha256:dreamnet-sorted-json:v0:`` + sha256 hex of the canonical form."""
    return str(_native.digest_json(json_text(value)))


def canonical_sha256(value: Any) -> str:
    """Lowercase sha256 hex of the canonical form."""
    return str(_native.canonical_sha256_json(json_text(value)))


def sha256_hex(text: str) -> str:
    """Lowercase sha256 hex of the UTF-8 bytes of ``text``. A lone surrogate (which has no
    UTF-8 form) is encoded as U+FFFD, as JavaScript's ``TextEncoder`` does, so the digest is
    the Node package's and the reference's."""
    if not isinstance(text, str):
        raise InvalidTypeError(f"sha256_hex: text must be a str, got {_check.describe(text)}")
    if not _check.wellformed(text):
        # UTF-16 round trip: each lone surrogate becomes one U+FFFD, pairs stay as they are.
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return str(_native.sha256_hex(text))


def deterministic_resource_id(kind: str, key: str) -> str:
    """``heart:resource:`` + sha256 hex of the canonical ``{kind, key}`` (both non-empty and
    well-formed: a lone surrogate is invalid input, as for every id)."""
    for name, v in (("kind", kind), ("key", key)):
        if not isinstance(v, str):
            raise InvalidTypeError(f"{name} must be a str, got {_check.describe(v)}")
        if not _check.wellformed(v):
            raise _check.ill_formed(name)
    return str(_native.deterministic_resource_id(kind, key))


def effect_key(prefix: str, identity: Any) -> str:
    """``prefix + ":" +`` sha256 hex of the canonical form of ``identity`` (``prefix`` must be
    well-formed: the result is an id)."""
    if not isinstance(prefix, str):
        raise InvalidTypeError(f"prefix must be a str, got {_check.describe(prefix)}")
    if not _check.wellformed(prefix):
        raise _check.ill_formed("prefix")
    return str(_native.effect_key_json(prefix, json_text(identity)))


def verify_receipt(receipt: HeartReceipt | Mapping[str, Any]) -> bool:
    """``True`` when the receipt's digest matches its fields; raises
    ``ReceiptTamperedError`` when it does not, ``InvalidInputError`` when it is not a receipt."""
    if isinstance(receipt, HeartReceipt):
        data: Any = receipt.to_dict()
    elif isinstance(receipt, Mapping):
        data = dict(receipt)
    else:
        raise InvalidTypeError(f"verify_receipt: a receipt is a HeartReceipt or a mapping, got {_check.describe(receipt)}")
    _native.verify_receipt_json(json_text(data))
    return True


def verify_receipts(
    log: str | bytes | Sequence[HeartReceipt | Mapping[str, Any]],
    *,
    key: str | None = None,
    public_key: str | None = None,
    run: str | None = None,
    final_seq: Mapping[str, int] | None = None,
    require_chain: bool = False,
) -> LogReport:
    """Checks a receipt log: every receipt's digest, each run's chain (gaps, reorders,
    duplicates, forks, broken links, truncation given ``final_seq``) and, with ``key`` (the
    fleet's HMAC key) or ``public_key`` (an Ed25519 public key), each as a key file's text, who
    signed it. ``log`` is JSON Lines (``str`` or ``bytes``) or a sequence of receipts (item
    ``i`` is line ``i + 1``). The report is ``heart-fleet verify-receipts --json``'s. Raises
    :class:`InvalidInputError` for a log that is not JSON Lines, a receipt of an unknown schema
    version or of another run than ``run``, or bad options; the core does all of it."""
    if isinstance(log, str):
        data = log.encode("utf-8", "surrogatepass")
    elif isinstance(log, (bytes, bytearray, memoryview)):
        data = bytes(log)
    elif isinstance(log, Sequence):
        lines = []
        for r in log:
            item: Any = r.to_dict() if isinstance(r, HeartReceipt) else r
            lines.append(json_text(item) + "\n")
        data = "".join(lines).encode("utf-8", "surrogatepass")
    else:
        raise InvalidTypeError(f"verify_receipts: the log is JSON Lines (str or bytes) or a sequence of receipts, got {_check.describe(log)}")
    options: dict[str, Any] = {"requireChain": _check.flag("require_chain", require_chain)}
    for name, field, value in (("key", "key", key), ("public_key", "publicKey", public_key), ("run", "run", run)):
        if value is not None:
            if not isinstance(value, str):
                _check.type_error(f"verify_receipts: {name} must be a str, got {_check.describe(value)}")
            options[field] = value
    if final_seq is not None:
        if not isinstance(final_seq, Mapping):
            _check.type_error(f"verify_receipts: final_seq must be a mapping of run ids to seqs, got {_check.describe(final_seq)}")
        options["finalSeq"] = dict(final_seq)
    return LogReport.from_report(json.loads(_native.verify_receipts_json(data, json_text(options))))
