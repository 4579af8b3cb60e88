"""Issue 18 (skills): SKILL.md folders the agent can list, load and read files from — read-only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.agent.helpers import agent_settings, all_tool_results, system_text
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall
from tests.harness import Harness

RELEASE_NOTES = """---
name: release-notes
description: Write release notes from merged pull requests, in the house style.
---
Group changes under Added / Changed / Fixed. SKILL-BODY-MARKER-6631.
"""


def make_skills(root: Path) -> Path:
    skills = root / "skills"
    (skills / "release-notes").mkdir(parents=True)
    (skills / "release-notes" / "SKILL.md").write_text(RELEASE_NOTES)
    (skills / "release-notes" / "template.md").write_text("## Added\nTEMPLATE-MARKER-1180\n")
    (skills / "broken").mkdir()
    (skills / "broken" / "SKILL.md").write_text("no front matter here")
    return skills


def skill_settings(tmp_path: Path, llm: FakeOpenAI, mode: str, **extra: Any):  # type: ignore[no-untyped-def]
    return agent_settings(
        tmp_path, llm, skills_dir=str(make_skills(tmp_path)), sandbox={"mode": mode}, **extra
    )


async def test_the_model_sees_the_list_of_skills_but_not_their_text_until_it_loads_one(tmp_path, llm):
    llm.script(Reply(tool_calls=[ToolCall("load_skill", {"name": "release-notes"})]), Reply(text="Loaded."))
    async with Harness.running(skill_settings(tmp_path, llm, "bwrap")) as h:
        await h.ask("write the release notes")
    first = system_text(llm.completions[0])
    assert "- release-notes: Write release notes from merged pull requests, in the house style." in first
    assert "SKILL-BODY-MARKER-6631" not in first
    assert "broken" not in first  # a SKILL.md without front matter is skipped, not fatal
    [loaded] = all_tool_results(llm)
    assert loaded.startswith("# Skill: release-notes\nGroup changes under Added / Changed / Fixed.")
    assert "- /mnt/skills/release-notes/template.md" in loaded
    assert "load_skill" in [t["function"]["name"] for t in llm.completions[0]["tools"]]


@pytest.mark.parametrize("mode", ["bwrap", "host"])
async def test_skill_files_are_readable_at_mnt_skills_and_never_writable(tmp_path, llm, mode):
    llm.script(
        Reply(
            tool_calls=[
                ToolCall("read_file", {"path": "/mnt/skills/release-notes/template.md"}),
                ToolCall("bash", {"command": "cat /mnt/skills/release-notes/template.md"}),
                ToolCall("write_file", {"path": "/mnt/skills/release-notes/template.md", "content": "x"}),
                ToolCall("bash", {"command": "echo x > /mnt/skills/release-notes/template.md"}),
            ]
        ),
        Reply(text="Done."),
    )
    async with Harness.running(skill_settings(tmp_path, llm, mode)) as h:
        await h.ask("use the template")
    read, cat, write, overwrite = all_tool_results(llm)
    assert read == "## Added\nTEMPLATE-MARKER-1180\n"
    assert cat == "[exit code 0]\n## Added\nTEMPLATE-MARKER-1180"
    assert write == "Error: files can only be written inside workspace/ or outputs/"
    if mode == "bwrap":
        assert "Read-only file system" in overwrite
        assert (tmp_path / "skills" / "release-notes" / "template.md").read_text().startswith("## Added")


async def test_an_unknown_skill_name_gets_the_list(tmp_path, llm):
    llm.script(Reply(tool_calls=[ToolCall("load_skill", {"name": "deploy"})]), Reply(text="ok"))
    async with Harness.running(skill_settings(tmp_path, llm, "bwrap")) as h:
        await h.ask("deploy it")
    assert all_tool_results(llm) == ["Error: there is no skill named 'deploy'; skills: release-notes"]


async def test_without_a_skills_folder_no_skill_tool_is_offered(tmp_path, llm):
    async with Harness.running(agent_settings(tmp_path, llm, skills_dir=str(tmp_path / "none"))) as h:
        await h.ask("hello")
    assert "load_skill" not in [t["function"]["name"] for t in llm.completions[0]["tools"]]
    assert "Skills you can use" not in system_text(llm.completions[0])


async def test_slash_skill_name_puts_that_skill_into_this_turns_prompt_only(tmp_path, llm):
    async with Harness.running(skill_settings(tmp_path, llm, "bwrap")) as h:
        answer = await h.ask("/release-notes for version 2.1")
        later = await h.ask("and now something else")
        unknown = await h.ask("/deploy-everything now")
        help_text = await h.ask("/help")
    assert answer == "echo: for version 2.1"
    with_skill, without_skill = system_text(llm.completions[0]), system_text(llm.completions[1])
    assert "asked you to use the skill release-notes" in with_skill
    assert "SKILL-BODY-MARKER-6631" in with_skill
    assert "SKILL-BODY-MARKER-6631" not in without_skill
    assert later == "echo: and now something else"
    assert unknown == "Unknown command /deploy-everything. Send /help to see what I understand."
    assert "Skills: /release-notes" in help_text


async def test_tools_lists_what_the_assistant_can_use(tmp_path, llm):
    async with Harness.running(skill_settings(tmp_path, llm, "bwrap")) as h:
        listing = await h.ask("/tools")
    assert listing.startswith("Tools I can use:\n• bash — Run a bash command")
    assert "• web_fetch — " in listing and "• load_skill — " in listing
    assert "Skills (send /name to use one): /release-notes" in listing
    assert llm.completions == []  # answered by the bot itself, no model call
