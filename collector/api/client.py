"""HTTP client for the collector's API: finds the running daemon of a database and calls it with its token.

client = Client.for_db(Path("runs/runwatch.duckdb"))   # None when no collector is running
client.get("/api/runs"); client.post("/api/alerts/3/ack", {"note": "known"})
client.get("/api/runs/a", model=models.RunDetail)   # parsed into the answer's type (collector.api.models)
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from collector.core.runtime import (
    PROOF_TIMEOUT_S,
    marker_path,
    marker_state,
    read_marker,
    read_token,
    token_path,
)

if TYPE_CHECKING:
    import httpx


def _httpx() -> ModuleType:
    """httpx, imported on first use: it is a tenth of a second of every command's start, and a command
    talks HTTP only when a collector is running."""
    import httpx

    return httpx


class ApiError(RuntimeError):
    """The API answered with an error (or could not be reached); `status` is the HTTP status (0: no answer)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Client:
    """One keep-alive connection to a collector's API."""

    def __init__(self, base_url: str, token: str, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._http: httpx.Client = _httpx().Client(
            base_url=self.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout
        )

    @classmethod
    def for_db(cls, db: Path, timeout: float = 30.0) -> Client | None:
        """A client for the live collector of `db`, or None when none is running (no marker, a dead pid, or a
        stale marker: what answers on its port cannot prove it holds the token). The token is sent only to a
        collector that proved itself (`runtime.marker_state`); one that does not answer in time is an error."""
        db = Path(db).resolve()
        info = read_marker(db, prove=False)
        if info is None:
            return None
        token = read_token(db)
        if token is None:
            raise ApiError(
                0,
                f"a collector runs for {db} (pid {info['pid']}) but its token {token_path(db)} is unreadable",
            )
        host = info.get("host") or "127.0.0.1"
        state = marker_state(db, info)
        if state == "stale":
            return None
        if state == "unanswered":
            raise ApiError(
                0,
                f"{marker_path(db)} names pid {info['pid']} on http://{host}:{info['port']}, which did not prove"
                f" to be this database's collector within {PROOF_TIMEOUT_S:.0f} s (busy, or another program"
                " holds the port); the token was not sent. Try again; if that pid is not a runwatch collector,"
                " delete the marker",
            )
        return cls(f"http://{host}:{info['port']}", token, timeout)

    def close(self) -> None:
        self._http.close()

    def get(self, path: str, params: dict | list | None = None, model: Any = None) -> Any:
        """The answer as JSON data, or parsed into `model` (a `collector.api.models` type, or `list[...]` of
        one): a ValueError (pydantic's ValidationError) names the field when the answer does not fit it."""
        data = self._call("GET", path, params=params)
        return data if model is None else parse(data, model)

    def post(self, path: str, body: dict | None = None) -> Any:
        return self._call("POST", path, json=body or {})

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except _httpx().HTTPError as e:
            raise ApiError(
                0, f"the collector at {self.base_url} did not answer {method} {path}: {e}"
            ) from None
        if response.status_code >= 400:
            try:
                detail = response.json().get("detail", response.text)
            except ValueError:
                detail = response.text
            raise ApiError(response.status_code, f"{method} {path}: {response.status_code} {detail}")
        # json.loads, not response.json(): the API writes NaN/Infinity bare, and only the stdlib reads them.
        return json.loads(response.content)

    def stream(self, path: str, params: dict | list | None = None) -> Iterator[dict]:
        """The server-sent events of a stream route, one dict per `data:` line, until the caller stops."""
        with self._http.stream("GET", path, params=params, timeout=None) as response:
            if response.status_code >= 400:
                response.read()
                raise ApiError(response.status_code, f"GET {path}: {response.status_code} {response.text}")
            for line in response.iter_lines():
                if line.startswith("data: "):
                    yield json.loads(line[6:])


def parse(data: Any, model: Any) -> Any:
    """`data` (an API answer) as `model`: a `collector.api.models` type or `list[...]` of one."""
    return _adapter(model).validate_python(data)


@functools.cache
def _adapter(model: Any) -> Any:
    from pydantic import TypeAdapter  # (imported when a typed answer is first asked for)

    return TypeAdapter(model)
