"""Extra CLI subcommands, one module each, with ``register(subparsers, load_settings_or_exit)``."""
