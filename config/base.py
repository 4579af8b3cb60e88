"""Shared building blocks for the settings schema.

Every settings model forbids unknown keys: a typo in ``config.yaml`` must stop start-up with a line naming
the key, not be silently ignored while the operator wonders why nothing changed.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A config section: unknown keys are errors, values are validated on assignment too."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ChannelSection(Section):
    """Common shape of a channel section. ``enabled`` gates both start-up and secret checks."""

    enabled: bool = False

    def required_secrets(self) -> dict[str, str | None]:
        """Map of key name → value that must be non-empty when the channel is enabled."""
        return {}
