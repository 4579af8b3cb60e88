"""Build chat models from config: ``use: "module:Class"`` plus the section's other keys as arguments."""

from __future__ import annotations

import importlib
from typing import Any

from config.schema import ModelConfig

# Keys of ModelConfig that describe the model to Switchboard rather than configure the class.
_OWN_KEYS = {"name", "use", "supports_vision", "supports_thinking", "context_tokens"}

# Friendly install hints for the providers people use most.
_PACKAGE_HINTS = {
    "langchain_openai": "langchain-openai",
    "langchain_anthropic": "langchain-anthropic",
    "langchain_google_genai": "langchain-google-genai",
    "langchain_ollama": "langchain-ollama",
    "langchain_deepseek": "langchain-deepseek",
    "langchain_mistralai": "langchain-mistralai",
}


#: Sent as the API key to a ``base_url`` server configured without one.
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


def build_chat_model(cfg: ModelConfig) -> Any:
    """Instantiate the model; a missing package or bad argument becomes a :class:`ModelLoadError`."""
    cls = resolve_class(cfg.use)
    kwargs = model_kwargs(cfg)
    if cfg.use.startswith("langchain_openai:") and not kwargs.get("api_key") and kwargs.get("base_url"):
        # A local OpenAI-compatible server (Ollama, vLLM, llama.cpp) takes no key, but the client insists
        # on one; an explicit placeholder also keeps $OPENAI_API_KEY from being sent to that server.
        kwargs["api_key"] = NO_KEY_PLACEHOLDER
    elif cfg.use.startswith("langchain_openai:") and not kwargs.get("api_key"):
        raise ModelLoadError(
            f"model {cfg.name!r} has no api_key; set it in config (e.g. api_key: $OPENAI_API_KEY) "
            "and make sure the variable is set"
        )
    if cfg.use.startswith("langchain_openai:"):
        # Token usage arrives in the last chunk of a streamed answer only when asked for; /status and
        # TurnFinished need it, and the library leaves it off for custom base URLs.
        kwargs.setdefault("stream_usage", True)
    try:
        return cls(**kwargs)
    except Exception as exc:  # constructor validation errors name the bad argument
        raise ModelLoadError(f"model {cfg.name!r} ({cfg.use}) could not be created: {exc}") from None
