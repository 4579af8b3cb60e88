"""Build chat models from config: ``use: "module:Class"`` plus the section's other keys as arguments."""

from __future__ import annotations

import difflib
import importlib
import inspect
from typing import Any

from pydantic import BaseModel

from config.schema import ModelConfig

# Keys of ModelConfig that describe the model to Switchboard rather than configure the class.
_OWN_KEYS = {"name", "use", "supports_vision", "supports_thinking", "context_tokens", "pricing"}

# Friendly install hints for the providers people use most.
_PACKAGE_HINTS = {
    "langchain_openai": "langchain-openai",
    "langchain_anthropic": "langchain-anthropic",
    "langchain_google_genai": "langchain-google-genai",
    "langchain_ollama": "langchain-ollama",
    "langchain_deepseek": "langchain-deepseek",
    "langchain_mistralai": "langchain-mistralai",
}


#: Classes that talk to OpenAI's API (or a compatible server) and need a key unless ``base_url`` is set.
#: ``ChatCompletions`` sends no key at all to a keyless server and never reads ``$OPENAI_API_KEY``.
_OPENAI_STYLE = ("langchain_openai:", "agent.chat_completions:")

#: Sent as the API key to a ``base_url`` server configured without one (``ChatOpenAI`` insists on a key).
NO_KEY_PLACEHOLDER = "no-key-configured"


class ModelLoadError(Exception):
    """The configured model cannot be constructed; the message says how to fix it."""


def resolve_class(use: str) -> type[Any]:
    module_name, sep, class_name = use.partition(":")
    if not sep or not module_name or not class_name:
        raise ModelLoadError(f"model 'use' must look like 'module:Class', got {use!r}")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = module_name.split(".")[0]
        if exc.name and exc.name.split(".")[0] != top:
            raise ModelLoadError(f"{use}: importing it failed because {exc.name} is missing") from None
        package = _PACKAGE_HINTS.get(top, top.replace("_", "-"))
        raise ModelLoadError(
            f"{use}: the Python package for {module_name} is not installed; install it with "
            f"`pip install {package}`"
        ) from None
    try:
        return getattr(module, class_name)
    except AttributeError:
        raise ModelLoadError(f"{use}: module {module_name} has no class {class_name}") from None


def model_kwargs(cfg: ModelConfig) -> dict[str, Any]:
    data = cfg.model_dump(exclude_none=True)
    for key in _OWN_KEYS:
        data.pop(key, None)
    return data


def accepted_keys(cls: type[Any]) -> set[str] | None:
    """The keyword arguments ``cls`` takes (a pydantic model's fields and their aliases), or None when
    it takes any (``**kwargs``), so nothing can be said about a key."""
    if issubclass(cls, BaseModel):
        names = set(cls.model_fields)
        for field in cls.model_fields.values():
            names.update(a for a in (field.alias, field.validation_alias) if isinstance(a, str))
        return names
    try:
        parameters = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return {p.name for p in parameters if p.kind is not inspect.Parameter.VAR_POSITIONAL}


def unknown_keys(cfg: ModelConfig, cls: type[Any]) -> list[str]:
    """``KEY: not a setting of module:Class (did you mean NEAREST?)`` for each key ``cls`` does not take.

    LangChain's chat models do not refuse an unknown argument: they pass it on to the provider's API
    (``model_kwargs``) with a warning, so ``temprature: 0.2`` would fail at the first chat turn, as a
    400 from the provider, instead of at start-up naming the typo.
    """
    accepted = accepted_keys(cls)
    if accepted is None:
        return []
    public = sorted(k for k in accepted if not k.startswith("_"))
    lines = []
    for key in sorted(set(model_kwargs(cfg)) - accepted):
        near = difflib.get_close_matches(key, public, n=1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        lines.append(f"{key}: not a setting of {cfg.use}{hint}")
    return lines


def check_model(cfg: ModelConfig, where: str) -> list[str]:
    """Offline problems with one ``models[]`` entry (``where`` is its key, ``models.0``), one line each."""
    try:
        cls = resolve_class(cfg.use)
    except ModelLoadError as exc:
        return [f"{where}.use: {exc}"]
    return [f"{where}.{line}" for line in unknown_keys(cfg, cls)]


def build_chat_model(cfg: ModelConfig) -> Any:
    """Instantiate the model; a missing package or bad argument becomes a :class:`ModelLoadError`."""
    cls = resolve_class(cfg.use)
    unknown = unknown_keys(cfg, cls)
    if unknown:
        raise ModelLoadError("; ".join(unknown))
    kwargs = model_kwargs(cfg)
    openai_style = cfg.use.startswith(_OPENAI_STYLE)
    if openai_style and not kwargs.get("api_key") and not kwargs.get("base_url"):
        raise ModelLoadError(
            f"model {cfg.name!r} has no api_key; set it in config (e.g. api_key: $OPENAI_API_KEY) "
            "and make sure the variable is set"
        )
    if cfg.use.startswith("langchain_openai:"):
        if not kwargs.get("api_key"):
            # A local OpenAI-compatible server (Ollama, vLLM, llama.cpp) takes no key, but the client
            # insists on one; an explicit placeholder also keeps $OPENAI_API_KEY from being sent there.
            kwargs["api_key"] = NO_KEY_PLACEHOLDER
        # Token usage arrives in the last chunk of a streamed answer only when asked for; /status and
        # TurnFinished need it, and the library leaves it off for custom base URLs.
        kwargs.setdefault("stream_usage", True)
    try:
        return cls(**kwargs)
    except Exception as exc:  # constructor validation errors name the bad argument
        raise ModelLoadError(f"model {cfg.name!r} ({cfg.use}) could not be created: {exc}") from None
