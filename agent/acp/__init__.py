"""Coding agents as subagents over ACP, the Agent Client Protocol (https://agentclientprotocol.com).

An installed coding-agent CLI (``claude-code-acp``, ``codex-acp``, ``gemini --experimental-acp``) runs
in the thread's sandbox as an ACP *agent*; this service is its *client*. :mod:`agent.acp.rpc` is the
JSON-RPC 2.0 line protocol over the process's stdin/stdout, :mod:`agent.acp.client` one task's
conversation (initialize, session/new, session/prompt, and the agent's requests to us). Nothing here
needs a package beyond the standard library (the ``acp`` extra is empty).
"""
