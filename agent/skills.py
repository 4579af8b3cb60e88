"""Skills: folders of instructions (``SKILL.md``) and files the agent can pull in when a task needs them.

A skill is a directory under ``skills_dir`` holding ``SKILL.md`` with YAML front matter::

    ---
    name: release-notes
    description: Write release notes from merged pull requests, in our house style.
    ---
    1. List the merged PRs since the last tag …

The agent is told only each skill's name and one-line description (cheap on every turn); it reads the
full text with the ``load_skill`` tool when it decides to use one, or gets it up front for one turn when
a person sends ``/release-notes …``. Files beside ``SKILL.md`` (templates, scripts) are readable,
never writable, at ``/mnt/skills/<name>/``. Skills are read once at start; a broken one is skipped with
a warning naming the file, so one typo cannot stop the service.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

log = logging.getLogger(__name__)

SKILLS_ROOT = "/mnt/skills"
SKILL_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
MAX_SKILL_CHARS = 50_000
MAX_DESCRIPTION = 200


@dataclass(frozen=True, slots=True)
class Skill:
    name: str
    description: str
    directory: Path
    instructions: str

    def files(self) -> list[str]:
        """Agent-visible paths of the files that come with the skill (besides SKILL.md)."""
        found = []
        for path in sorted(self.directory.rglob("*")):
            if path.is_file() and not path.is_symlink() and path.name != "SKILL.md":
                found.append(f"{SKILLS_ROOT}/{self.name}/{path.relative_to(self.directory).as_posix()}")
        return found[:100]

    def prompt(self) -> str:
        """The skill's full text as the model gets it, with where its files are."""
        files = self.files()
        listing = (
            ("\nFiles of this skill (read-only):\n" + "\n".join(f"- {f}" for f in files)) if files else ""
        )
        return f"# Skill: {self.name}\n{self.instructions.strip()}{listing}"


class SkillError(ValueError):
    """A SKILL.md that cannot be used; the message names the file and the problem."""


def parse_skill(path: Path) -> Skill:
    text = path.read_text(encoding="utf-8")
    if len(text) > MAX_SKILL_CHARS:
        raise SkillError(f"{path}: longer than {MAX_SKILL_CHARS} characters")
    match = re.match(r"^---\s*\n(.*?)\n---\s*\n?(.*)$", text, re.S)
    if not match:
        raise SkillError(f"{path}: no front matter (--- name: …, description: … ---) at the top")
    try:
        meta = yaml.safe_load(match.group(1)) or {}
    except yaml.YAMLError as exc:
        raise SkillError(f"{path}: front matter is not valid YAML ({exc.__class__.__name__})") from None
    if not isinstance(meta, dict):
        raise SkillError(f"{path}: front matter must be a mapping with name and description")
    name = str(meta.get("name") or path.parent.name).strip()
    description = " ".join(str(meta.get("description") or "").split())
    if not SKILL_NAME.match(name):
        raise SkillError(f"{path}: name {name!r} must be 1-32 lowercase letters, digits, '-' or '_'")
    if not description:
        raise SkillError(f"{path}: description is missing")
    return Skill(name, description[:MAX_DESCRIPTION], path.parent, match.group(2))


def load_skills(directory: Path | None) -> dict[str, Skill]:
    """Every usable skill under ``directory`` (none if it does not exist), by name."""
    if directory is None or not directory.is_dir():
        return {}
    skills: dict[str, Skill] = {}
    for path in sorted(directory.glob("*/SKILL.md")):
        try:
            skill = parse_skill(path)
        except (SkillError, OSError, UnicodeDecodeError) as exc:
            log.warning("skill skipped: %s", exc)
            continue
        if skill.name in skills:
            log.warning(
                "skill skipped: %s: name %r is already used by %s",
                path,
                skill.name,
                skills[skill.name].directory,
            )
            continue
        skills[skill.name] = skill
    return skills


def catalogue(skills: dict[str, Skill]) -> str:
    """The short list the model sees on every turn."""
    if not skills:
        return ""
    lines = [f"- {s.name}: {s.description}" for s in skills.values()]
    return (
        "Skills you can use — call load_skill with the name to read one before following it:\n"
        + "\n".join(lines)
    )
