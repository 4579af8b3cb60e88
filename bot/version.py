"""The service's version, in a module of its own so ``serve`` can report it before anything is imported.

``pyproject.toml`` reads ``VERSION`` from here (``[tool.setuptools.dynamic]``), so the wheel, ``/health``
and ``switchboard --version`` cannot disagree.
"""

VERSION = "0.1.0"

#: The name on PyPI (``switchboard`` there is an unrelated project); the command is still ``switchboard``.
DISTRIBUTION = "switchboard-chatops"
