"""``ChatCompletions`` (the default model class) against the fake OpenAI server on a real socket: what the
agent relies on — streamed text and tool calls, usage, plain calls, retries, errors the chat can explain,
and a key that never shows."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, SystemMessage, ToolMessage

from agent.chat_completions import (
    APIConnectionError,
    AuthenticationError,
    BadRequestError,
    ChatCompletions,
    InternalServerError,
    NotFoundError,
    RateLimitError,
)
from agent.errors import describe_error, is_context_overflow
from agent.models import build_chat_model
from agent.stream_end import was_cut
from config.schema import ModelConfig
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

KEY = "sk-live-NEVERSHOWN-0123456789abcdef"
BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "run a command",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}


def model_for(llm: FakeOpenAI, **extra: object) -> ChatCompletions:
    cfg = ModelConfig.model_validate(
        {"name": "default", "model": "fake-model", "api_key": KEY, "base_url": llm.base_url, **extra}
    )
    model = build_chat_model(cfg)
    assert isinstance(model, ChatCompletions)
    return model


async def streamed(model: object, messages: list[object]) -> AIMessageChunk:
    total: AIMessageChunk | None = None
    parts = 0
    async for chunk in model.astream(messages):  # type: ignore[attr-defined]
        parts += 1
        total = chunk if total is None else total + chunk
    assert total is not None and parts > 1, "the answer arrived in pieces"
    return total


async def test_a_streamed_answer_carries_text_tool_calls_usage_and_why_it_ended(llm: FakeOpenAI) -> None:
    llm.script(
        Reply(
            text="Let me look.",
            chunk_size=3,
            tool_calls=[
                ToolCall("bash", {"command": "ls -la /tmp"}, id="call_a"),
                ToolCall("bash", {"command": "pwd"}),
            ],
            prompt_tokens=120,
            completion_tokens=30,
            cached_tokens=64,
        )
    )
    answer = await streamed(model_for(llm).bind_tools([BASH]), [HumanMessage("list files")])
    assert answer.content == "Let me look."
    assert [(c["name"], c["args"]) for c in answer.tool_calls] == [
        ("bash", {"command": "ls -la /tmp"}),
        ("bash", {"command": "pwd"}),
    ]
    assert answer.tool_calls[0]["id"] == "call_a"
    assert answer.response_metadata["finish_reason"] == "tool_calls"
    assert answer.usage_metadata is not None
    assert (answer.usage_metadata["input_tokens"], answer.usage_metadata["output_tokens"]) == (120, 30)
    assert answer.usage_metadata.get("input_token_details") == {"cache_read": 64}
    [body] = llm.completions
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["tools"] == [BASH] and body["model"] == "fake-model"
    assert llm.api_key_seen == [f"Bearer {KEY}"]


async def test_a_plain_call_sends_the_history_as_the_api_takes_it_and_reads_the_answer(
    llm: FakeOpenAI,
) -> None:
    llm.script(
        Reply(text="", tool_calls=[ToolCall("bash", {"command": "date"}, id="call_9")], prompt_tokens=7)
    )
    history = [
        SystemMessage("be brief"),
        HumanMessage([{"type": "text", "text": "what is here?"}]),
        AIMessage("", tool_calls=[{"name": "bash", "args": {"command": "ls"}, "id": "call_1"}]),
        ToolMessage("a.txt\nb.txt", tool_call_id="call_1"),
    ]
    answer = await model_for(llm, temperature=0.2, max_tokens=50).bind_tools([BASH]).ainvoke(history)
    assert isinstance(answer, AIMessage)
    assert [(c["name"], c["args"], c["id"]) for c in answer.tool_calls] == [
        ("bash", {"command": "date"}, "call_9")
    ]
    assert answer.usage_metadata is not None and answer.usage_metadata["input_tokens"] == 7
    assert not was_cut(answer)
    [body] = llm.completions
    assert "stream" not in body and (body["temperature"], body["max_tokens"]) == (0.2, 50)
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "what is here?"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "a.txt\nb.txt"},
    ]


async def test_streamed_calls_reuse_one_kept_alive_connection(llm: FakeOpenAI) -> None:
    model = model_for(llm)
    for word in ("one", "two", "three"):
        answer = await streamed(model, [HumanMessage(word)])
        assert answer.content == f"echo: {word}"
    peers = {r["peer"] for r in llm.requests if r["path"] == "/v1/chat/completions"}
    assert len(peers) == 1, f"a connection per call: {peers}"  # a new TLS handshake each, on a hosted API
    assert llm.open_connections() == 1


async def test_a_body_left_open_after_done_does_not_hold_the_answer_back(llm: FakeOpenAI) -> None:
    llm.script(Reply(text="whole answer", linger_after_done=4))
    started = time.monotonic()
    answer = await streamed(model_for(llm), [HumanMessage("hi")])
    assert answer.content == "whole answer" and not was_cut(answer)
    assert time.monotonic() - started < 3, "waited for the body's end only briefly"


async def test_a_stream_that_ends_without_a_finish_reason_reads_as_cut(llm: FakeOpenAI) -> None:
    llm.script(Reply(text="a long answer that the proxy cuts", chunk_size=4, cut_after_chunks=3))
    answer = await streamed(model_for(llm), [HumanMessage("hi")])
    assert answer.content == "a long answer"[:12] and was_cut(answer)


async def test_a_connection_dropped_mid_stream_is_a_connection_error(llm: FakeOpenAI) -> None:
    llm.script(Reply(text="x" * 64, chunk_size=4, abort_after_chunks=2))
    with pytest.raises(APIConnectionError) as caught:
        await streamed(model_for(llm, max_retries=0), [HumanMessage("hi")])
    assert describe_error(caught.value) == "I couldn't reach the model service. Please try again shortly."


async def test_429_is_retried_after_the_servers_retry_after_and_5xx_with_backoff(llm: FakeOpenAI) -> None:
    llm.script(
        Reply(status=429, error="slow down", retry_after=0.6),
        Reply(status=503, error="busy"),
        Reply(text="ok"),
    )
    started = time.monotonic()
    answer = await model_for(llm).ainvoke("hi")
    assert answer.content == "ok" and len(llm.completions) == 3
    times = [t for t, _ in llm.completion_times]
    assert times[1] - times[0] >= 0.55, "waited the Retry-After"
    assert 0.5 <= times[2] - times[1] <= 2.0, "then backoff"
    assert time.monotonic() - started < 10


async def test_with_no_retries_left_the_error_carries_status_code_and_message(llm: FakeOpenAI) -> None:
    llm.script(
        Reply(status=503, error="overloaded"), Reply(status=429, error="slow down", error_code="rate_limit")
    )
    model = model_for(llm, max_retries=0)
    with pytest.raises(InternalServerError) as server:
        await model.ainvoke("hi")
    assert (server.value.status_code, str(server.value)) == (503, "overloaded")
    with pytest.raises(RateLimitError) as limited:
        await model.ainvoke("hi")
    assert (limited.value.status_code, limited.value.code) == (429, "rate_limit")
    assert len(llm.completions) == 2, "no retries"
    assert describe_error(server.value) == "The model service had an error while answering. Please try again."
    assert describe_error(limited.value).startswith("The model service is rate limiting us")


async def test_refusals_read_as_the_chat_sentences_and_a_400_is_not_retried(llm: FakeOpenAI) -> None:
    llm.script(
        Reply(status=400, error="Unsupported parameter: 'temperature'", error_code="unsupported_parameter"),
        Reply(status=404, error="The model `x` does not exist", error_code="model_not_found"),
        Reply(status=401, error=f"Incorrect API key provided: {KEY}"),
        Reply(
            status=400,
            error="This model's maximum context length is 8192 tokens",
            error_code="context_length_exceeded",
        ),
    )
    model = model_for(llm)  # retries on: a refusal is still asked once
    errors = []
    for _ in range(4):
        with pytest.raises(Exception) as caught:
            await model.ainvoke("hi")
        errors.append(caught.value)
    assert len(llm.completions) == 4
    bad, missing, denied, too_long = errors
    assert isinstance(bad, BadRequestError) and isinstance(missing, NotFoundError)
    assert isinstance(denied, AuthenticationError) and denied.status_code == 401
    assert describe_error(bad) == (
        "The model rejected the request: Unsupported parameter: 'temperature'. This is a model setting, not your"
        " message — ask an admin to check the model settings."
    )
    assert describe_error(missing).startswith("The model service does not know the configured model")
    assert describe_error(denied) == (
        "The model service rejected our credentials — an operator needs to check the API key."
    )
    assert is_context_overflow(too_long) and not is_context_overflow(bad)


async def test_an_unreachable_service_is_retried_then_explained() -> None:
    cfg = ModelConfig.model_validate(
        {
            "name": "default",
            "model": "m",
            "api_key": KEY,
            "base_url": "http://127.0.0.1:9/v1",
            "max_retries": 1,
        }
    )
    with pytest.raises(APIConnectionError) as caught:
        await build_chat_model(cfg).ainvoke("hi")
    assert describe_error(caught.value) == "I couldn't reach the model service. Please try again shortly."
    assert KEY not in str(caught.value) and "127.0.0.1" not in str(caught.value)


def test_the_key_never_shows_in_repr_or_dumps_and_a_keyless_server_gets_no_header(llm: FakeOpenAI) -> None:
    model = model_for(llm)
    for text in (repr(model), str(model), model.model_dump_json(), json.dumps(model.to_json(), default=str)):
        assert "NEVERSHOWN" not in text
    keyless = build_chat_model(ModelConfig(name="local", model="m", base_url=llm.base_url))
    llm.script(Reply(text="hi"))
    assert keyless.invoke("hello").content == "hi"  # the synchronous path, too
    assert llm.api_key_seen == [""]


def test_one_model_serves_turns_on_different_event_loops(llm: FakeOpenAI) -> None:
    model = model_for(llm)
    for word in ("one", "two"):  # the second loop must not inherit a connection of the first
        answer = asyncio.run(model.ainvoke(word))
        assert answer.content == f"echo: {word}"


def test_the_default_class_does_not_import_the_openai_sdk(llm: FakeOpenAI) -> None:
    code = (
        "import sys\n"
        "from agent.models import build_chat_model\n"
        "import agent.errors, agent.rejections, agent.runtime\n"
        "from config.schema import ModelConfig\n"
        f"model = build_chat_model(ModelConfig(name='d', api_key='k', base_url={llm.base_url!r}))\n"
        "print(type(model).__name__, model.invoke('x').content)\n"
        "assert 'openai' not in sys.modules and 'langchain_openai' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ChatCompletions echo: x"


def test_chatopenai_still_works_when_configured(llm: FakeOpenAI) -> None:
    pytest.importorskip("langchain_openai")
    cfg = ModelConfig.model_validate(
        {
            "name": "o",
            "use": "langchain_openai:ChatOpenAI",
            "model": "m",
            "base_url": llm.base_url,
            "max_retries": 0,
        }
    )
    model = build_chat_model(cfg)
    assert type(model).__name__ == "ChatOpenAI"
    llm.script(Reply(status=400, error="Unsupported parameter: 'seed'", error_code="unsupported_parameter"))
    with pytest.raises(Exception) as caught:
        model.invoke("hi")
    assert describe_error(caught.value).startswith(
        "The model rejected the request: Unsupported parameter: 'seed'."
    )


async def test_a_named_tool_choice_is_sent_as_a_function_and_an_empty_tool_list_not_at_all(
    llm: FakeOpenAI,
) -> None:
    model = model_for(llm, model_kwargs={"top_k": 20})
    await model.bind_tools([BASH], tool_choice="bash").ainvoke("hi")
    await model.bind_tools([]).ainvoke("hi")
    forced, plain = llm.completions
    assert (
        forced["tool_choice"] == {"type": "function", "function": {"name": "bash"}} and forced["top_k"] == 20
    )
    assert "tools" not in plain and "tool_choice" not in plain
