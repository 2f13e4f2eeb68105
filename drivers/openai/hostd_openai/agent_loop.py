"""The agent loop of one turn: model call, tool calls, next model call, until the model stops.

Rules this module guards:

- The conversation sent is: the system prompt, the host's stored history (the host has
  already removed overlap; earlier answers' tool calls and results rebuilt by `history`),
  the new user message; then, within the turn, each assistant message with its tool calls,
  one `tool` message per call, and steers as user messages. Nothing is kept across turns
  (the host's history is the one source), so nothing can be sent twice.
- Steering is native: before every model call, pending steers are taken (`SteerInjected`) and
  appended as user messages; when the next response starts, `TurnContext.message_start`
  reports the steer boundary before any chunk of it. A steer that arrives while the last
  answer streams gets one more model call, so it is answered in this turn.
- Model errors: 401/403 end the turn with `auth_required`; an unknown model names the
  server's models; 429 / 5xx / transport failures before any output are retried at most
  `model_retries` times with bounded backoff, each retry an `ApiRetry` event and a notice; a
  stream cut after output ends the turn `error` (the host keeps the partial answer); a context
  overflow compacts once (compaction events) or fails with a clear reason.
- `max_steps` model calls at most; a model still asking for tools then ends the turn with a
  clear reason. A finished answer with a steer still pending at the last step ends the turn
  normally: the harness reports the steer undelivered and the host runs it as the next turn.
- Usage comes from the stream (`stream_options.include_usage`), cumulative for the turn.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

import trio

from hostd_openai.chat_client import CHAT_PATH, ChatClient, ModelError, ModelHTTPError
from hostd_openai.chat_stream import (
    AssembledToolCall,
    ChatStreamDecoder,
    Finished,
    ReasoningPiece,
    ServerError,
    StreamDecodeError,
    TextPiece,
    UsageReport,
)
from hostd_openai.config import OpenAIOptions
from hostd_openai.history import content_parts, history_messages
from hostd_openai.mcp_tools import CatalogSnapshot, ToolCatalog
from hostd_openai.responses_api import PATH as RESPONSES_PATH
from hostd_openai.responses_api import ResponsesStreamDecoder, responses_body
from hostd_openai.tool_runner import ToolRun, ToolRunner
from hostd_openai.tool_search import plan
from hostd_protocol.common import CompactionAnchor, TextDelta, ThinkingDelta, Usage
from hostd_protocol.driver_harness import TurnContext, TurnFailed
from hostd_protocol.driver_messages import (
    ApiRetry,
    CompactionComplete,
    CompactionError,
    CompactionStart,
    Log,
    Notice,
    Send,
    UsageEvent,
)
from hostd_protocol.errors import AuthRequired

DRIVER_NAME = "openai"

SUMMARY_PROMPT = (
    "Summarise the conversation below for yourself, to continue it with less context: keep "
    "the user's goals, decisions, facts, names, numbers, open questions and the results of "
    "tool calls that still matter. Write only the summary."
)


# `AuthRequired` (401/403: set or fix the API key) is the protocol's own error, shared by
# every driver, so a client maps `auth_required` to one class.


class StreamCut(ModelError):
    """The response ended before the model finished (no finish reason, no `[DONE]`)."""


@dataclass
class TurnUsage:
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0

    def add(self, report: UsageReport) -> None:
        self.input_tokens += report.input_tokens
        self.output_tokens += report.output_tokens
        self.cached_tokens += report.cached_tokens

    def usage(self, opts: OpenAIOptions) -> Usage:
        cost = 0.0
        prices = opts.prices
        if prices is not None:
            uncached = self.input_tokens - self.cached_tokens
            cost = (
                uncached * prices.input
                + self.cached_tokens * (prices.cached_input or prices.input)
                + self.output_tokens * prices.output
            ) / 1_000_000
        return Usage(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cache_read_tokens=self.cached_tokens,
            cost_usd=cost,
        )


@dataclass
class Response:
    """One model response, as far as it got."""

    text: list[str] = field(default_factory=list)
    tool_calls: list[AssembledToolCall] = field(default_factory=list)
    finish_reason: str = ""
    emitted: bool = False

    def assistant_message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) or None}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.call_id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments or "{}"},
                }
                for c in self.tool_calls
            ]
        elif message["content"] is None:
            message["content"] = ""
        return message


def image_message(runs: list[ToolRun]) -> dict[str, Any] | None:
    """The images of a step's tool results as one user message (a `tool` message may hold
    only text), each after a line naming its call; None when there are none."""
    parts: list[dict[str, Any]] = []
    for run in runs:
        for n, (mime, data) in enumerate(run.images, 1):
            parts.append({"type": "text", "text": f"[image {n} of tool call {run.call.call_id}]"})
            parts.append({"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}})
    return {"role": "user", "content": parts} if parts else None


def initial_messages(system_prompt: str, turn: TurnContext) -> list[dict[str, Any]]:
    """System prompt + the host's history + the new user message."""
    messages: list[dict[str, Any]] = []
    if system_prompt:
        messages.append({"role": "system", "content": system_prompt})
    messages.extend(history_messages(turn.send.history))
    messages.append({"role": "user", "content": user_content(turn.send)})
    return messages


def user_content(send: Send) -> str | list[dict[str, Any]]:
    """The user message's content: the text, or with images (protocol 1.5) content parts."""
    return content_parts(send.text, send.attachments) if send.attachments else send.text


class AgentLoop:
    """Runs one turn (see the module docstring)."""

    def __init__(
        self,
        turn: TurnContext,
        *,
        client: ChatClient,
        opts: OpenAIOptions,
        model: str,
        system_prompt: str,
        catalog: ToolCatalog,
        snapshot: CatalogSnapshot,
    ) -> None:
        self.turn = turn
        self.client = client
        self.opts = opts
        self.model = model
        self.catalog = catalog
        self.snapshot = snapshot
        self._catalog_version = catalog.version
        self.messages = initial_messages(system_prompt, turn)
        self.usage = TurnUsage()
        self.plan = plan(snapshot.tools, opts.allowed_tools, opts.tool_search_over_tokens)
        self._compacted = False

    async def run(self) -> None:
        turn = self.turn
        for step in range(self.opts.max_steps):
            # Not before the first call: there is no answer yet to roll (an empty A1a); a
            # steer sent that early is taken after the first response instead.
            if step:
                for steer in await turn.take_steers():
                    self.messages.append({"role": "user", "content": steer.text})
                self._refresh_tools()
            response = await self._model_step()
            self.messages.append(response.assistant_message())
            if response.tool_calls:
                runs = await ToolRunner(turn, self.opts, self.snapshot, self.plan).run_all(
                    response.tool_calls
                )
                for run in runs:
                    self.messages.append(
                        {"role": "tool", "tool_call_id": run.call.call_id, "content": run.output}
                    )
                if self.opts.vision:
                    images = image_message(runs)
                    if images is not None:
                        self.messages.append(images)
                continue
            if turn.has_pending_steers and step + 1 < self.opts.max_steps:
                continue
            if response.finish_reason == "length":
                await turn.emit(
                    Notice(
                        code="max_tokens",
                        message="The answer was cut at the model's output limit (max_tokens).",
                        turn_id=turn.turn_id,
                    )
                )
            return
        raise TurnFailed(
            f"the model was still calling tools after {self.opts.max_steps} steps (max_steps); "
            "the turn was ended",
            driver=DRIVER_NAME,
        )

    def _refresh_tools(self) -> None:
        """Offer what the catalog holds now, if it changed (a server became ready, or broke);
        tools this turn's `tool_search` made callable stay callable."""
        version = self.catalog.version
        if version == self._catalog_version:
            return
        self._catalog_version = version
        self.snapshot = self.catalog.snapshot(kick=False)
        found = list(self.plan.visible)
        self.plan = plan(
            self.snapshot.tools, self.opts.allowed_tools, self.opts.tool_search_over_tokens
        )
        self.plan.activate(found)

    def body(self, messages: list[dict[str, Any]], *, tools: bool = True) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": messages, "stream": True}
        if self.opts.stream_usage:
            body["stream_options"] = {"include_usage": True}
        schemas = self.plan.schemas() if tools else []
        if schemas:
            body["tools"] = schemas
        if self.opts.temperature is not None:
            body["temperature"] = self.opts.temperature
        if self.opts.max_tokens is not None:
            body["max_tokens"] = self.opts.max_tokens
        if self.opts.api == "responses":
            body = responses_body(body)
        body.update(self.opts.extra_body)
        return body

    def _decoder(self) -> ChatStreamDecoder:
        return ResponsesStreamDecoder() if self.opts.api == "responses" else ChatStreamDecoder()

    @property
    def _path(self) -> str:
        return RESPONSES_PATH if self.opts.api == "responses" else CHAT_PATH

    async def _model_step(self) -> Response:
        """One model call (with its retries), reported to a tracing host as one."""
        turn = self.turn
        before = (self.usage.input_tokens, self.usage.output_tokens, self.usage.cached_tokens)
        call = await turn.model_call_start(self.model, "openai")
        try:
            response = await self._model_request()
        except Exception as exc:
            await turn.model_call_end(call, error=str(exc) or type(exc).__name__)
            raise
        u = self.usage
        await turn.model_call_end(
            call,
            finish_reason=response.finish_reason,
            usage=Usage(
                input_tokens=u.input_tokens - before[0],
                output_tokens=u.output_tokens - before[1],
                cache_read_tokens=u.cached_tokens - before[2],
            ),
        )
        return response

    async def _model_request(self) -> Response:
        attempt = 0
        while True:
            response = Response()
            try:
                await self._stream(self.body(self.messages), response)
                return response
            except ModelHTTPError as exc:
                if exc.kind == "auth":
                    raise AuthRequired(
                        f"the model server refused the credentials ({exc.status}): "
                        f"{exc.message}. Set the API key in the variable named by "
                        f"api_key_env ({self.opts.api_key_env or 'none configured'}).",
                        driver=DRIVER_NAME,
                    ) from None
                if exc.kind == "unknown_model":
                    models = await self.client.list_models()
                    listed = ", ".join(models[:50]) if models else "none listed"
                    raise TurnFailed(
                        f"unknown model {self.model!r} ({exc.message}); the server has: {listed}",
                        driver=DRIVER_NAME,
                    ) from None
                if exc.kind == "overflow":
                    await self._compact(exc)
                    continue
                if not exc.retryable or attempt >= self.opts.model_retries:
                    raise TurnFailed(
                        f"the model server answered {exc.status}: {exc.message}"
                        + (f" (after {attempt + 1} attempts)" if attempt else ""),
                        driver=DRIVER_NAME,
                    ) from None
                attempt += 1
                await self._backoff(attempt, exc.status, exc.retry_after, exc.message)
            except StreamCut as exc:
                # Cut after output: the user saw a partial answer; the host keeps it and the
                # turn ends in error. Cut before any: nothing is lost by asking again.
                if response.emitted or attempt >= self.opts.model_retries:
                    raise TurnFailed(str(exc), driver=DRIVER_NAME) from None
                attempt += 1
                await self._backoff(attempt, None, None, str(exc))
            except ModelError as exc:  # transport
                if response.emitted:
                    raise TurnFailed(
                        f"the model stream was cut mid-answer: {exc}", driver=DRIVER_NAME
                    ) from None
                if attempt >= self.opts.model_retries:
                    raise TurnFailed(
                        f"{exc} (after {attempt + 1} attempts)", driver=DRIVER_NAME
                    ) from None
                attempt += 1
                await self._backoff(attempt, None, None, str(exc))

    async def _backoff(
        self, attempt: int, status: int | None, retry_after: float | None, why: str
    ) -> None:
        opts = self.opts
        delay = opts.retry_base_delay * (2 ** (attempt - 1))
        delay = delay * (0.75 + random.random() / 2)  # jitter: many topics, one server
        if retry_after is not None:
            delay = retry_after
        delay = min(delay, opts.retry_max_delay)
        turn = self.turn
        await turn.emit(
            ApiRetry(
                turn_id=turn.turn_id,
                attempt=attempt,
                max_retries=opts.model_retries,
                retry_delay_ms=int(delay * 1000),
                error_status=status,
            )
        )
        # The windows hear of the retry once, from the host's notice for `ApiRetry`; a Notice
        # here too printed every retry twice. Why it failed goes to the log (and the turn's
        # error names it when the retries run out).
        await turn.emit(
            Log(
                level="warning",
                message=f"the model server failed ({why}); retry {attempt} of "
                f"{opts.model_retries} in {delay:.1f} s",
            )
        )
        await trio.sleep(delay)

    async def _stream(self, body: dict[str, Any], response: Response) -> None:
        turn = self.turn
        decoder = self._decoder()
        async with self.client.stream(
            body, path=self._path, traceparent=turn.traceparent
        ) as data_iter:
            # The response has started: this is the next assistant message's start, so a
            # steer injected before this call rolls the answer here (A1a / U2 / A2).
            await turn.message_start()
            failure: TurnFailed | None = None
            try:
                async for data in data_iter:
                    for item in decoder.feed(data):
                        await self._item(item, response)
                for item in decoder.close():
                    await self._item(item, response)
            except StreamDecodeError as exc:
                failure = TurnFailed(
                    f"the model server sent a malformed stream: {exc}", driver=DRIVER_NAME
                )
            except TurnFailed as exc:  # an error event inside the stream
                failure = exc
            if failure is not None:
                await _drain(data_iter)
                raise failure
        if not decoder.done and not response.finish_reason:
            raise StreamCut("the model stream was cut before the answer finished")
        response.tool_calls = decoder.tool_calls()

    async def _item(self, item: object, response: Response) -> None:
        turn = self.turn
        if isinstance(item, TextPiece):
            response.text.append(item.text)
            response.emitted = True
            await turn.chunk(TextDelta(text=item.text))
        elif isinstance(item, ReasoningPiece):
            response.emitted = True
            await turn.chunk(ThinkingDelta(text=item.text))
        elif isinstance(item, Finished):
            response.finish_reason = item.reason
        elif isinstance(item, UsageReport):
            self.usage.add(item)
            await turn.emit(UsageEvent(turn_id=turn.turn_id, usage=self.usage.usage(self.opts)))
        elif isinstance(item, ServerError):
            raise TurnFailed(
                f"the model server failed mid-answer: {item.message}", driver=DRIVER_NAME
            )

    # --- compaction ---------------------------------------------------------------------

    async def _compact(self, exc: ModelHTTPError) -> None:
        turn = self.turn
        reason = f"the conversation is too long for model {self.model!r}'s context: {exc.message}"
        if not self.opts.compact_on_overflow or self._compacted:
            raise TurnFailed(reason, driver=DRIVER_NAME)
        self._compacted = True
        head = [m for m in self.messages[:1] if m["role"] == "system"]
        body = self.messages[len(head) :]
        cut = max(0, len(body) - self.opts.compact_keep_last)
        # Never keep a tool result without the assistant message that called it.
        while cut > 0 and body[cut]["role"] == "tool":
            cut -= 1
        older, kept = body[:cut], body[cut:]
        await turn.emit(CompactionStart(turn_id=turn.turn_id, trigger="reactive"))
        if not older:
            await turn.emit(CompactionError(turn_id=turn.turn_id, message="nothing to compact"))
            raise TurnFailed(reason + " (and nothing older to summarise)", driver=DRIVER_NAME)
        started = time.monotonic()
        try:
            summary = await self._summarise(older)
        except (ModelError, TurnFailed) as failure:
            await turn.emit(CompactionError(turn_id=turn.turn_id, message=str(failure)))
            raise TurnFailed(
                f"{reason}; compacting failed: {failure}", driver=DRIVER_NAME
            ) from None
        before = _estimate_tokens(self.messages)
        self.messages = [
            *head,
            {"role": "user", "content": f"(Summary of the earlier conversation)\n{summary}"},
            *kept,
        ]
        await turn.emit(
            CompactionComplete(
                turn_id=turn.turn_id,
                anchor=CompactionAnchor(
                    trigger="reactive",
                    tokens_before=before,
                    tokens_after=_estimate_tokens(self.messages),
                    duration_ms=int((time.monotonic() - started) * 1000),
                    summary=summary,
                ),
            )
        )

    async def _summarise(self, older: list[dict[str, Any]]) -> str:
        lines = []
        for m in older:
            content = m.get("content") or ""
            if m.get("tool_calls"):
                calls = ", ".join(c["function"]["name"] for c in m["tool_calls"])
                content = f"{content} [called {calls}]".strip()
            lines.append(f"{m['role']}: {content}")
        body = self.body(
            [
                {"role": "system", "content": SUMMARY_PROMPT},
                {"role": "user", "content": "\n\n".join(lines)},
            ],
            tools=False,
        )
        decoder = self._decoder()
        parts: list[str] = []
        async with self.client.stream(body, path=self._path) as data_iter:
            async for data in data_iter:
                parts.extend(i.text for i in decoder.feed(data) if isinstance(i, TextPiece))
            parts.extend(i.text for i in decoder.close() if isinstance(i, TextPiece))
        summary = "".join(parts).strip()
        if not summary:
            raise TurnFailed("the model returned an empty summary", driver=DRIVER_NAME)
        return summary


#: Bounds on reading the rest of a response that failed mid-stream.
DRAIN_BYTES = 1 << 20
DRAIN_SECONDS = 2.0


async def _drain(data_iter: Any) -> None:
    """Read what is left of a failed response (bounded), so the HTTP library's generators end
    normally and the connection can be reused, rather than being left to the collector."""
    total = 0
    with trio.move_on_after(DRAIN_SECONDS):
        try:
            async for data in data_iter:
                total += len(data)
                if total > DRAIN_BYTES:
                    return
        except ModelError:
            return


def _estimate_tokens(messages: list[dict[str, Any]]) -> int:
    # ~4 characters per token: only for the compaction anchor's before/after figures.
    return sum(len(str(m.get("content") or "")) + 16 for m in messages) // 4
