"""Alert severities: one vocabulary for rules, the store, the API and the app.

`Severity` is a `StrEnum`: a member is its string (`Severity.ERROR == "error"`), so JSON, DuckDB and the API
carry the same words as before.
"""

from __future__ import annotations

from enum import StrEnum


class Severity(StrEnum):
    INFO = "info"
    WARN = "warn"
    ERROR = "error"

    @property
    def rank(self) -> int:
        """0 for info, 1 for warn, 2 for error: a higher rank is more severe."""
        return _RANK[self]


_RANK = {Severity.INFO: 0, Severity.WARN: 1, Severity.ERROR: 2}
SEVERITIES = tuple(s.value for s in Severity)  # ("info", "warn", "error"): config and CLI choices
