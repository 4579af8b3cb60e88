"""``agent.subagents`` (docs/subagents.md): off unless asked for, and a bad profile is a clear start-up error."""

from __future__ import annotations

import pytest

from config.loader import ConfigError, load_settings

REVIEWER = {"name": "reviewer", "description": "reviews", "system_prompt": "You review."}


def settings_with(**subagents: object):  # type: ignore[no-untyped-def]
    return load_settings(overrides={"agent": {"subagents": subagents}}, env={})


def test_subagents_are_off_by_default_with_the_documented_limits():
    config = settings_with().agent.subagents
    assert not config.enabled
    assert (config.max_concurrent, config.max_depth, config.max_turns) == (3, 1, 12)
    assert (config.timeout_seconds, config.max_tokens, config.result_chars) == (300, 200_000, 4000)


@pytest.mark.parametrize(
    ("subagents", "message"),
    [
        (
            {"profiles": [{**REVIEWER, "model": "gpt-9"}]},
            "agent.subagents.profiles: reviewer names the model 'gpt-9', which is not in models (default)",
        ),
        ({"profiles": [{**REVIEWER, "name": "general"}]}, "not 'general', which is built in"),
        ({"profiles": [{**REVIEWER, "name": "Code Review"}]}, "must be lower-case letters, digits, - or _"),
        (
            {"profiles": [{**REVIEWER, "name": "tool"}]},
            "subagent name 'tool' is taken: it is a kind of task card",
        ),
        ({"profiles": [{**REVIEWER, "name": "goal"}]}, "subagent name 'goal' is taken"),
        ({"profiles": [REVIEWER, REVIEWER]}, "the name(s) reviewer are used twice"),
        ({"max_concurrent": 0}, "max_concurrent"),
        ({"max_deep": 2}, "max_deep"),
    ],
)
def test_a_bad_subagents_section_is_refused_with_what_is_wrong(subagents, message):
    with pytest.raises(ConfigError) as caught:
        settings_with(**subagents)
    assert message in str(caught.value)


def test_every_kind_of_task_card_is_a_name_no_subagent_may_take():
    """A profile named like a card kind would show (and, for ``tool``, behave) as that kind."""
    from bot.tasks.card import KIND_LABELS
    from config.schema import TASK_CARD_KINDS

    assert set(KIND_LABELS) == TASK_CARD_KINDS
