"""The runtime's models and tools: building and caching chat models, binding a tool profile, and what
``/models``, ``/tools`` and ``/status`` report.

A mixin of :class:`agent.runtime.AgentRuntime` (which sets the attributes declared here in its
``__init__``), kept apart so the LangGraph loop reads on its own.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agent.approval import Mode, RiskPolicy
from agent.events import (
    FULL_PROFILE,
    ToolProfile,
)
from agent.mcp_tools import McpHub
from agent.models import ModelLoadError, build_chat_model
from agent.sandbox import (
    SandboxProvider,
)
from agent.skills import Skill
from agent.tools import TOOLS, ToolSpec, tool_schemas
from config.schema import ModelConfig, Settings
from config.secrets import known_secrets

if TYPE_CHECKING:
    pass


log = logging.getLogger(__name__)


class ModelsAndTools:
    """Models, tool profiles and what they report; the attributes below are set by ``AgentRuntime``."""

    settings: Settings
    skills: dict[str, Skill]
    sandbox_provider: SandboxProvider
    known_secrets: list[str]
    mcp: McpHub | None
    extra_tools: dict[str, ToolSpec]
    risk: RiskPolicy
    disabled_tools: frozenset[str]
    _models: dict[str, Any]
    _bound: dict[tuple[str, ...], Any]

    def model_names(self) -> list[str]:
        return [m.name for m in self.settings.models]

    def tool_names(self) -> list[str]:
        """Every tool the model is offered, built-in first, then MCP tools (``server__tool``)."""
        return [n for n in TOOLS if n not in self.disabled_tools] + list(self.extra_tools)

    def tool_descriptions(self) -> list[tuple[str, str]]:
        """(name, one-line description) for ``/tools``."""
        specs = [TOOLS[n] for n in TOOLS if n not in self.disabled_tools] + list(self.extra_tools.values())
        return [(spec.name, spec.description.split(". ")[0].rstrip(".")) for spec in specs]

    def sandbox_limits(self) -> dict[str, object]:
        """Which protections and limits the sandbox has in force here (``/health``)."""
        return self.sandbox_provider.limits_report()

    def mcp_status(self) -> dict[str, str]:
        """Each MCP server: ``ok (N tools)`` or ``error: …`` (empty without MCP servers)."""
        return self.mcp.status() if self.mcp is not None else {}

    def skill_names(self) -> list[str]:
        """Skills a person can ask for with ``/skill-name`` (known once the runtime has started)."""
        return list(self.skills)

    def _skills_for(self, profile: ToolProfile) -> dict[str, Skill]:
        """The skills a turn under ``profile`` sees (a named agent may have only some)."""
        if profile.skills is None:
            return self.skills
        return {name: skill for name, skill in self.skills.items() if profile.allows_skill(name)}

    def replace_models(self, models: list[ModelConfig]) -> list[Any]:
        """Swap in a new ``models`` list (``SIGHUP``): every model is built first, so a bad entry raises
        :class:`ModelLoadError` and changes nothing. A running turn keeps the model object it holds.

        Returns the models replaced, for the caller to retire on the event loop (their connections
        close once no call uses them; bot/reload.py)."""
        built = {cfg.name: build_chat_model(cfg) for cfg in models}
        replaced = list(self._models.values())
        self.settings.models = models
        self._models = built
        self._bound = {}
        self.known_secrets = known_secrets(self.settings, os.environ)
        return replaced

    def replace_risk_rules(self, mode: Mode, patterns: list[str]) -> None:
        """``sandbox.approval`` / ``risky_patterns`` for turns that start from now on (``SIGHUP``)."""
        self.risk = RiskPolicy(mode, patterns)

    def chat_model(self, name: str | None) -> Any:
        cfg = self.settings.model_named(name if name in self.model_names() else None)
        if cfg.name not in self._models:
            self._models[cfg.name] = build_chat_model(cfg)
        return self._models[cfg.name]

    def _model_config(self, name: str | None) -> ModelConfig:
        """The named model's config, or the default's when the name is unknown (as ``chat_model``)."""
        return self.settings.model_named(name if name in self.model_names() else None)

    def offered_schemas(self, profile: ToolProfile = FULL_PROFILE) -> list[dict[str, Any]]:
        """The tool schemas a turn under ``profile`` is offered: built-in first, then MCP tools."""
        hidden = self.disabled_tools | {name for name in TOOLS if not profile.allows(name)}
        mcp = [s.schema() for s in self.extra_tools.values() if profile.allows(s.name, is_mcp=True)]
        return tool_schemas(frozenset(hidden)) + mcp

    def tool_model(
        self, name: str | None, profile: ToolProfile = FULL_PROFILE, fallbacks: Sequence[str] = ()
    ) -> Any:
        """The model with the profile's tools bound (or the plain model, if its class cannot call tools);
        with ``fallbacks`` (a named agent's ``fallback_models``), each is tried in turn when it fails."""
        cfg = self.settings.model_named(name if name in self.model_names() else None)
        others = tuple(f for f in fallbacks if f in self.model_names() and f != cfg.name)
        key = (cfg.name, profile.name, *others)
        if key not in self._bound:
            bound = [self._bind(model_name, profile) for model_name in (cfg.name, *others)]
            self._bound[key] = bound[0].with_fallbacks(bound[1:]) if others else bound[0]
        return self._bound[key]

    def _bind(self, name: str, profile: ToolProfile) -> Any:
        model = self.chat_model(name)
        try:
            return model.bind_tools(self.offered_schemas(profile))
        except (NotImplementedError, AttributeError):
            log.warning("model %s cannot call tools; it answers without them", name)
            return model

    def _warm_models(self) -> None:
        """Build every configured model now, in a worker thread.

        Constructing the first model imports its provider SDK (seconds on a busy machine); doing that
        lazily inside the first turn blocked the event loop and every chat with it. A model that cannot
        be built is left for the turn to report in plain words (and for ``switchboard doctor``).
        """
        for cfg in self.settings.models:
            try:
                self.chat_model(cfg.name)
            except ModelLoadError as exc:
                log.warning("model %s is not usable yet: %s", cfg.name, exc)
