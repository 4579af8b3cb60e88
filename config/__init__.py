"""Settings: the schema of ``config.yaml`` and its loader. Imports nothing else from the project."""

from config.loader import ConfigError, load_settings
from config.schema import Settings

__all__ = ["ConfigError", "Settings", "load_settings"]
