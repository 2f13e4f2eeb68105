"""The HTTP side of model calls: one `httpx2.AsyncClient` per driver process, errors mapped once.

Why httpx2 directly rather than the `openai` package: both the official `openai` (3.x) and
`mcp` (2.x) packages are built on httpx2, and it runs under trio (httpcore2 has a trio
backend), so the driver already has it. Going through `openai` would add pydantic models per
streamed chunk and its own hidden retries (a 429 retried inside the SDK never reaches the
user); here the stream is decoded by `chat_stream` with msgspec and every retry is ours, so
it can be reported.

Every foreign exception is translated in `_map_errors`, the one place (httpcore's model):

- `ModelHTTPError`: the server answered with a non-200 status (auth, unknown model,
  rate limit, overload, context overflow are told apart by `kind`).
- `ModelTransportError`: connecting, sending or reading failed or timed out.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing, asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import httpx2

from hostd_openai.config import OpenAIOptions

#: Bytes of an error body read for its message.
MAX_ERROR_BODY = 64 * 1024

ErrorKind = Literal["auth", "unknown_model", "rate_limit", "server", "overflow", "bad_request"]

_OVERFLOW_RE = re.compile(
    r"context[ _-]?(length|window)|maximum context|too many tokens|prompt is too long|"
    r"exceeds? the (model'?s? )?(context|maximum)",
    re.IGNORECASE,
)
_UNKNOWN_MODEL_RE = re.compile(
    r"model.*(not (be )?found|does not exist|unknown)|unknown model", re.I
)


class ModelError(Exception):
    """A model call failed. `retryable` says whether the same request may succeed later."""

    retryable = False


@dataclass
class ModelHTTPError(ModelError):
    status: int
    message: str
    kind: ErrorKind
    retry_after: float | None = None

    def __post_init__(self) -> None:
        super().__init__(self.message)

    @property
    def retryable(self) -> bool:  # type: ignore[override]
        return self.kind in ("rate_limit", "server")


class ModelTransportError(ModelError):
    """Connecting to, writing to or reading from the server failed (or timed out)."""

    retryable = True


def classify(status: int, message: str, code: str) -> ErrorKind:
    """What a non-200 answer means (pure; servers word their errors differently)."""
    if status in (401, 403):
        return "auth"
    if status == 429:
        return "rate_limit"
    if status >= 500:
        return "server"
    if code == "context_length_exceeded" or _OVERFLOW_RE.search(message):
        return "overflow"
    if code == "model_not_found" or (status in (400, 404) and _UNKNOWN_MODEL_RE.search(message)):
        return "unknown_model"
    return "bad_request"


def _error_fields(body: bytes) -> tuple[str, str]:
    """(message, code) from an error body: OpenAI's `{"error": {...}}` or anything else."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text[:500] or "(empty body)", ""
    error = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(error, dict):
        message = str(error.get("message") or error.get("detail") or error)
        return message[:2000], str(error.get("code") or error.get("type") or "")
    return str(error)[:2000], ""


def _retry_after(headers: httpx2.Headers) -> float | None:
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


@contextmanager
def _map_errors(what: str) -> Iterator[None]:
    try:
        yield
    except httpx2.TimeoutException as exc:
        raise ModelTransportError(f"{what}: timed out ({type(exc).__name__})") from None
    except httpx2.TransportError as exc:
        detail = str(exc) or type(exc).__name__
        raise ModelTransportError(f"{what}: {detail}") from None


CHAT_PATH = "/chat/completions"


class ChatClient:
    """Chat Completions calls against one OpenAI-compatible server."""

    def __init__(self, opts: OpenAIOptions, api_key: str | None) -> None:
        headers = dict(opts.headers)
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._base = opts.base_url.rstrip("/")
        self._client = httpx2.AsyncClient(
            headers=headers,
            timeout=httpx2.Timeout(opts.read_timeout, connect=opts.connect_timeout),
            # One conversation at a time per process: a small pool, kept alive between calls.
            limits=httpx2.Limits(max_connections=8, max_keepalive_connections=4),
            follow_redirects=False,
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    @asynccontextmanager
    async def stream(
        self, body: dict[str, Any], *, path: str = CHAT_PATH, traceparent: str = ""
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """POST `path` (Chat Completions, or `/responses`) with `stream: true`; yields the
        body's byte iterator.
        `traceparent`: the host's W3C trace context, sent on (a traced server joins it).

        Raises `ModelHTTPError` for a non-200 answer, `ModelTransportError` for transport
        failures (also while the body is read).
        """
        with _map_errors("the model request failed"):
            async with self._client.stream(
                "POST",
                f"{self._base}{path}",
                json=body,
                headers={"traceparent": traceparent} if traceparent else None,
            ) as response:
                if response.status_code != 200:
                    raise await self._http_error(response)
                # Closed explicitly: a reader that stops early (stop, a malformed event)
                # must not leave generators for the garbage collector to finish.
                body = self._body(response)
                async with aclosing(body):
                    yield body

    @staticmethod
    async def _body(response: httpx2.Response) -> AsyncIterator[bytes]:
        raw = response.aiter_raw()
        async with aclosing(raw):
            with _map_errors("the model stream broke"):
                async for data in raw:
                    yield data

    @staticmethod
    async def _http_error(response: httpx2.Response) -> ModelHTTPError:
        body = b""
        raw = response.aiter_raw()
        async with aclosing(raw):
            with _map_errors("reading the error answer failed"):
                async for data in raw:
                    body += data
                    if len(body) >= MAX_ERROR_BODY:
                        break
        message, code = _error_fields(body)
        return ModelHTTPError(
            status=response.status_code,
            message=message,
            kind=classify(response.status_code, message, code),
            retry_after=_retry_after(response.headers),
        )

    async def list_models(self) -> list[str]:
        """The model ids the server lists (GET /models); [] when it lists none or fails."""
        try:
            with _map_errors("listing models failed"):
                response = await self._client.get(f"{self._base}/models")
            if response.status_code != 200:
                return []
            data = response.json()
        except (ModelError, ValueError):
            return []
        items = data.get("data", []) if isinstance(data, dict) else []
        return sorted(str(m["id"]) for m in items if isinstance(m, dict) and "id" in m)

    async def warm(self) -> None:
        """Open a kept-alive connection now (a cheap GET), so the first turn skips connecting."""
        try:
            with _map_errors("warming the connection failed"):
                response = await self._client.get(f"{self._base}/models")
                await response.aread()
        except ModelError:
            pass
