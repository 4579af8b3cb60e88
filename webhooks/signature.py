"""``X-Hub-Signature-256`` verification.

GitHub signs the exact bytes it sent, so verification must run on the raw body before any JSON parsing
(re-serialising would change whitespace and break the digest). The compare is constant-time so the
response time does not leak how many leading bytes of a forged signature were right.
"""

from __future__ import annotations

import hmac

PREFIX = "sha256="


def _hex_digest(secret: str, body: bytes) -> str:
    # hmac.digest: the one-shot C path, without an HMAC object (the cheaper half of a verification).
    return hmac.digest(secret.encode(), body, "sha256").hex()


def sign(secret: str, body: bytes) -> str:
    """The header value GitHub would send for ``body`` (also used by tests, the bench and retries)."""
    return PREFIX + _hex_digest(secret, body)


def signature_problem(secret: str, body: bytes, header: str | None) -> str | None:
    """Why ``header`` does not prove ``body`` came from GitHub, or ``None`` when it does."""
    if not header:
        return "missing X-Hub-Signature-256 header"
    if not header.startswith(PREFIX) or len(header) != len(PREFIX) + 64:
        return "malformed X-Hub-Signature-256 header (expected sha256=<64 hex digits>)"
    if not hmac.compare_digest(_hex_digest(secret, body).encode(), header[len(PREFIX) :].encode()):
        return "X-Hub-Signature-256 does not match the body"
    return None
