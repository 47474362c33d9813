"""The contract's constants, from the core (``bridge::contract_json``): the error codes, the
statuses, the defaults, the lost causes' codes, why work did not run. Parsed once here; the
package keeps no copy."""

from __future__ import annotations

import json
from typing import Any, Final

from . import _native

CONTRACT: Final[dict[str, Any]] = json.loads(_native.contract())
