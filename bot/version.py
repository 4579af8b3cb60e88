"""The service's version, in a module of its own so ``serve`` can report it before anything is imported."""

VERSION = "0.1.0"
