"""Files the wheel carries for ``switchboard init`` and ``switchboard deploy-files``.

``config.example.yaml`` and ``deploy/`` here are symlinks to the repository's copies (one source of
truth); building the wheel follows them, so an installed package holds real files.
"""
