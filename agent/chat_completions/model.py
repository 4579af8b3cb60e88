"""``ChatCompletions``: a LangChain chat model for any OpenAI-compatible ``/chat/completions`` API.

Why our own and not ``langchain_openai.ChatOpenAI``: that class brings the whole ``openai`` SDK
(~27 MiB of resident memory and seconds of imports before ``/ready``), and the SDK's typed request
transform re-walks every message and tool schema on every call, the largest per-turn CPU cost of a long
thread (docs/PERFORMANCE.md). Switchboard needs little of it: streamed text and tool calls, usage,
plain calls for summaries and judgements, and the SDK's retry rules, all on one ``httpx`` client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import httpx
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import LanguageModelInput
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field, PrivateAttr, SecretStr

from agent.chat_completions import retry
from agent.chat_completions.errors import (
    APIConnectionError,
    APIError,
    APITimeoutError,
    status_error,
    stream_error,
)
from agent.chat_completions.wire import chunk_message, full_message, to_wire

log = logging.getLogger(__name__)

#: The ``openai`` SDK's default: ten minutes for an answer, five seconds to connect.
DEFAULT_TIMEOUT = 600.0
CONNECT_TIMEOUT = 5.0
#: The ``openai`` SDK's pool: many turns stream at once (httpx's own default of 100 would queue them).
POOL_LIMITS = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
#: How long the end of a streamed body may take to arrive after ``[DONE]`` (it is normally sent with it).
BODY_END_SECONDS = 1.0
#: Request settings sent only when configured (the service's default otherwise).
_OPTIONAL = ("temperature", "max_tokens", "top_p", "stop", "seed", "reasoning_effort")
#: Keyword arguments LangChain passes along that are not request fields.
_NOT_SENT = frozenset({"stream", "ls_structured_output_format"})


async def _finish_body(lines: AsyncIterator[str]) -> None:
    """Read what follows ``[DONE]`` (the end of the body), so the connection goes back to the pool.

    Why: a response closed before its body ends takes its connection down with it, and every streamed
    call paid for a new connection (a TLS handshake to a hosted API) instead of reusing the last one. A
    server that keeps the body open after ``[DONE]`` is not waited for, and nothing read here can fail
    an answer that is already whole: the connection is then closed as before.
    """
    with contextlib.suppress(TimeoutError, httpx.HTTPError):
        async with asyncio.timeout(BODY_END_SECONDS):
            async for _ in lines:
                pass


class ChatCompletions(BaseChatModel):
    """Streams text and tool calls from ``{base_url}/chat/completions`` (the settings a ``models[]``
    entry passes; ``model_kwargs`` adds any other request field)."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    model_name: str = Field(default="gpt-4o-mini", alias="model")
    api_key: SecretStr | None = None
    base_url: str = "https://api.openai.com/v1"
    temperature: float | None = None
    max_tokens: int | None = None
    top_p: float | None = None
    stop: list[str] | str | None = None
    seed: int | None = None
    reasoning_effort: str | None = None
    #: Seconds for a whole request (None: ten minutes, as the ``openai`` SDK).
    timeout: float | None = None
    max_retries: int = Field(default=2, ge=0)
    #: Ask for the usage report at the end of a stream (``stream_options.include_usage``).
    stream_usage: bool = True
    #: Always stream, even without a streaming callback (accepted for ``ChatOpenAI`` configurations).
    streaming: bool = False
    default_headers: dict[str, str] | None = None
    #: Other request fields, sent as they are (``{"top_k": 20}`` for a server that takes it).
    model_kwargs: dict[str, Any] = Field(default_factory=dict)

    _client: tuple[asyncio.AbstractEventLoop, httpx.AsyncClient] | None = PrivateAttr(default=None)
    #: Calls in flight on the shared client (sent, and their answers not yet read to the end).
    _calls: int = PrivateAttr(default=0)
    #: Set by :meth:`retire`: the shared client is closed whenever no call uses it.
    _retired: bool = PrivateAttr(default=False)

    @property
    def _llm_type(self) -> str:
        return "chat-completions"

    @property
    def lc_secrets(self) -> dict[str, str]:
        return {"api_key": "OPENAI_API_KEY"}

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {
            "model_name": self.model_name,
            **{k: getattr(self, k) for k in _OPTIONAL if getattr(self, k) is not None},
        }

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | dict[str, Any] | bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """The model with ``tools`` offered on every call (OpenAI function schemas pass unchanged)."""
        if tool_choice is True or tool_choice == "any":
            tool_choice = "required"
        elif isinstance(tool_choice, str) and tool_choice not in ("auto", "none", "required"):
            tool_choice = {"type": "function", "function": {"name": tool_choice}}
        if tool_choice not in (None, False):
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    # -- the request --------------------------------------------------------------------------------

    def _body(
        self, messages: list[BaseMessage], stop: list[str] | None, stream: bool, **kwargs: Any
    ) -> bytes:
        body: dict[str, Any] = {"model": self.model_name, "messages": [to_wire(m) for m in messages]}
        body.update({k: getattr(self, k) for k in _OPTIONAL if getattr(self, k) is not None})
        if stop:
            body["stop"] = stop
        body.update(self.model_kwargs)
        body.update({k: v for k, v in kwargs.items() if k not in _NOT_SENT})
        if not body.get("tools"):  # some servers refuse an empty list
            body.pop("tools", None)
            body.pop("tool_choice", None)
        if stream:
            body["stream"] = True
            if self.stream_usage:
                body["stream_options"] = {"include_usage": True}
        return json.dumps(body).encode()

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", **(self.default_headers or {})}
        if self.api_key is not None and self.api_key.get_secret_value():
            headers["Authorization"] = f"Bearer {self.api_key.get_secret_value()}"
        return headers

    def _new_client(self) -> httpx.AsyncClient:
        seconds = self.timeout if self.timeout is not None else DEFAULT_TIMEOUT
        return httpx.AsyncClient(
            timeout=httpx.Timeout(seconds, connect=min(CONNECT_TIMEOUT, seconds)), limits=POOL_LIMITS
        )

    def _async_client(self) -> httpx.AsyncClient:
        """This event loop's client: a pooled connection belongs to the loop that opened it (a model
        object outlives a test's loop, or is used by a worker thread's own loop)."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._client[0] is not loop:
            self._client = (loop, self._new_client())
        return self._client[1]

    @contextlib.asynccontextmanager
    async def _in_use(self) -> AsyncIterator[httpx.AsyncClient]:
        """The shared client for one call, counted while the call runs: a retired model's client is
        closed by the last call that ends, never under one still reading its answer."""
        client = self._async_client()
        self._calls += 1
        try:
            yield client
        finally:
            self._calls -= 1
            if self._retired and self._calls == 0:
                await self._close_client()

    async def retire(self) -> None:
        """A reload replaced this model (bot/reload.py): close its connections once no call uses them.

        Why not at once: a turn that started before the reload keeps this object to its end, and its
        answer must not be cut off. Why not never: each reload built a new client, and the old pools
        stayed open for the life of the process. A call made after this (the same turn's next step)
        opens a client for itself, and it is closed as that call ends, so a retired model holds no pool
        open between calls. Call on the event loop the model serves.
        """
        self._retired = True
        if self._calls == 0:
            await self._close_client()

    async def _close_client(self) -> None:
        held, self._client = self._client, None
        if held is None:
            return
        loop, client = held
        if loop is asyncio.get_running_loop():
            await client.aclose()
        elif loop.is_running():  # a client of another thread's loop is closed there
            asyncio.run_coroutine_threadsafe(client.aclose(), loop)

    async def _send(self, body: bytes, client: httpx.AsyncClient) -> httpx.Response:
        """The response (headers read, body not yet), after up to ``max_retries`` more attempts."""
        url = self.base_url.rstrip("/") + "/chat/completions"
        retries_left = self.max_retries
        while True:
            headers: httpx.Headers | None = None
            try:
                request = client.build_request("POST", url, content=body, headers=self._headers())
                response = await client.send(request, stream=True)
            except httpx.TimeoutException as exc:
                error: APIError = APITimeoutError()
                error.__cause__ = exc
            except httpx.TransportError as exc:
                error = APIConnectionError()
                error.__cause__ = exc
            else:
                if response.is_success:
                    return response
                raw = await response.aread()
                await response.aclose()
                error, headers = status_error(response.status_code, raw), response.headers
                if not retry.should_retry(response):
                    raise error
            if retries_left <= 0:
                raise error
            wait = retry.delay(retries_left, self.max_retries, headers)
            log.info("model %s: %s; retrying in %.1f s", self.model_name, type(error).__name__, wait)
            retries_left -= 1
            await asyncio.sleep(wait)

    @contextlib.asynccontextmanager
    async def _answer(self, body: bytes, client: httpx.AsyncClient) -> AsyncIterator[httpx.Response]:
        """One call, streamed or not: the request sent (with retries) and its response open for a reader.

        Why one place: whichever reader takes the body, a connection that breaks or stalls while the
        answer arrives must become the same error, with the same sentence in the chat, and the response
        must be closed however the reading ends (a consumer that stops early included).
        """
        response = await self._send(body, client)
        try:
            yield response
        except httpx.TimeoutException as exc:
            raise APITimeoutError() from exc
        except httpx.TransportError as exc:
            raise APIConnectionError("The connection to the model service broke during the answer.") from exc
        finally:
            await response.aclose()

    # -- streamed answers ---------------------------------------------------------------------------

    @staticmethod
    async def _events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
        """The JSON events of a server-sent event stream, up to ``[DONE]`` or the end of the body (an
        event not finished by a blank line is dropped: the connection ended inside it)."""
        data: list[str] = []
        lines = response.aiter_lines()
        async for line in lines:
            if line.startswith("data:"):
                data.append(line[5:].lstrip())
                continue
            if line or not data:
                continue
            text, data = "\n".join(data), []
            if text == "[DONE]":
                await _finish_body(lines)
                return
            try:
                event = json.loads(text)
            except ValueError:
                raise APIError("The model service sent a malformed stream event.") from None
            if isinstance(event, dict) and event.get("error"):
                raise stream_error(event)
            yield event

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        body = self._body(messages, stop, stream=True, **kwargs)
        async with self._in_use() as client, self._answer(body, client) as response:
            async for event in self._events(response):
                message = chunk_message(event)
                if message is None:
                    continue
                chunk = ChatGenerationChunk(message=message)
                if run_manager is not None:
                    await run_manager.on_llm_new_token(str(message.content), chunk=chunk)
                yield chunk

    # -- whole answers ------------------------------------------------------------------------------

    async def _whole(self, body: bytes, client: httpx.AsyncClient) -> ChatResult:
        async with self._answer(body, client) as response:
            raw = await response.aread()
        try:
            message = full_message(json.loads(raw))
        except (ValueError, AttributeError, IndexError):
            raise APIError("The model service sent an answer that is not a chat completion.") from None
        return ChatResult(
            generations=[ChatGeneration(message=message)], llm_output={"model_name": self.model_name}
        )

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        body = self._body(messages, stop, stream=False, **kwargs)
        async with self._in_use() as client:
            return await self._whole(body, client)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        """A call from synchronous code (not used by the service): the async path on a loop of its own,
        with a client of its own (the shared one belongs to the service's loop)."""
        body = self._body(messages, stop, stream=False, **kwargs)

        async def once() -> ChatResult:
            async with self._new_client() as client:
                return await self._whole(body, client)

        return asyncio.run(once())
