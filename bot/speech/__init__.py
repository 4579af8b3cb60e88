"""Voice in: voice messages and audio clips written down before the router reads them (docs/voice.md)."""
