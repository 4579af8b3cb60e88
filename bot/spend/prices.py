"""What a turn costs: exact decimal prices per million tokens, summed as integer micro-units.

Floats would drift over thousands of small sums; a micro-unit (a millionth of a dollar, euro …) is
finer than any provider bills, so a turn's cost is rounded once, to the nearest micro-unit, and every sum
after that is exact integer arithmetic.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from config.schema import ModelPricing

MICROS = 1_000_000
_PER_MILLION = Decimal(1_000_000)


def turn_cost_micros(pricing: ModelPricing | None, input_tokens: int, output_tokens: int, cached: int) -> int:
    """The cost of one turn in micro-units. ``cached`` prompt tokens are part of ``input_tokens`` (as
    OpenAI reports them) and are charged at the cached price instead of the input price."""
    if pricing is None:
        return 0
    cached = max(0, min(cached, input_tokens))
    cost = (
        Decimal(input_tokens - cached) * pricing.input
        + Decimal(cached) * pricing.cached
        + Decimal(output_tokens) * pricing.output
    ) / _PER_MILLION  # currency units
    return int((cost * MICROS).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def to_micros(amount: Decimal) -> int:
    return int((amount * MICROS).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def format_micros(micros: int) -> str:
    """The exact amount as a decimal string (``4000`` → ``"0.004"``), for APIs: no float on the way."""
    return format((Decimal(micros) / MICROS).normalize(), "f")


def money(micros: int, currency: str) -> str:
    """``0.012345 USD`` → ``$0.0123``; amounts under a cent keep four decimals so they are not shown as 0."""
    value = Decimal(micros) / MICROS
    places = Decimal("0.01") if abs(value) >= 1 else Decimal("0.0001")
    text = str(value.quantize(places, rounding=ROUND_HALF_UP))
    return f"${text}" if currency == "USD" else f"{text} {currency}"
