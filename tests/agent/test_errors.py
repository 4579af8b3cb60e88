"""Provider errors are recognised by what the SDKs really raise, and turned into sentences users can act on."""

from __future__ import annotations

import httpx
import openai
from langchain_core.exceptions import ModelInvalidRequestError

from agent.errors import ContextOverflowError, describe_error, is_context_overflow
from agent.rejections import MAX_REASON_CHARS, safe_reason


def bad_request(message: str, code: str | None, status: int = 400) -> openai.APIStatusError:
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    body = {"error": {"message": message, "type": "invalid_request_error", "code": code}}
    response = httpx.Response(status, request=request, json=body)
    cls = openai.BadRequestError if status == 400 else openai.APIStatusError
    return cls(message, response=response, body=body)


def test_openais_context_length_code_is_an_overflow_even_when_wrapped():
    original = bad_request("Please reduce the length of the messages.", "context_length_exceeded")
    assert is_context_overflow(original)
    try:
        try:
            raise original
        except openai.BadRequestError as exc:
            raise ValueError("wrapped by a library") from exc
    except ValueError as wrapped:
        assert is_context_overflow(wrapped)


def test_common_overflow_texts_of_other_providers_are_recognised_on_client_errors():
    assert is_context_overflow(bad_request("prompt is too long: 210000 tokens > 200000 maximum", None))
    assert is_context_overflow(bad_request("This model's maximum context length is 8192 tokens", None))
    assert is_context_overflow(bad_request("Request too large", "x", status=413)) is False
    assert is_context_overflow(bad_request("input is too long for the context window", None, status=413))


def test_other_bad_requests_and_server_errors_are_not_overflows():
    assert not is_context_overflow(bad_request("Invalid value for 'model'", "model_not_found"))
    assert not is_context_overflow(bad_request("too many tokens in flight", None, status=500))
    assert not is_context_overflow(RuntimeError("maximum context length"))


def test_an_overflow_that_compaction_could_not_fix_names_the_model_and_the_way_out():
    sentence = describe_error(ContextOverflowError("small"))
    assert sentence == "This conversation is too long for model small — send /new or /compact."


def test_a_refusal_wrapped_by_another_library_still_quotes_the_providers_reason():
    try:
        try:
            raise bad_request("Invalid value for 'tool_choice'", "invalid_value")
        except openai.BadRequestError as exc:
            raise RuntimeError("graph node failed") from exc
    except RuntimeError as wrapped:
        assert describe_error(wrapped).startswith(
            "The model rejected the request: Invalid value for 'tool_choice'."
        )


def test_langchains_provider_neutral_invalid_request_is_a_refusal_too():
    sentence = describe_error(ModelInvalidRequestError("messages: roles must alternate"))
    assert sentence.startswith("The model rejected the request: messages: roles must alternate. Send /new")


def test_a_quoted_reason_is_one_short_line_without_urls_or_keys():
    reason = safe_reason(
        "bad\nrequest at http://u:p@h/x?token=abc Bearer abc.def api_key=AAAAAAAA token_limit " + "word " * 80
    )
    assert reason.startswith("bad request at <url> *** *** token_limit word")
    assert "\n" not in reason and len(reason) <= MAX_REASON_CHARS + 2 and reason.endswith(" …")
