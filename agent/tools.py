"""The tools the model sees: ``bash``, ``ls``, ``read_file``, ``write_file``, ``str_replace``, ``present_files``.

Each tool is a small spec (name, description, argument model, handler, one-line summary). Handlers only
talk to a :class:`~agent.sandbox.Sandbox`, so swapping the local sandbox for a container touches no tool.
Every result is masked for the run's secrets before the model (or the chat) sees it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from agent.approval import RiskPolicy
from agent.events import ApprovalGate, TaskScheduler, TrustLevel
from agent.mcp_tools import McpCallFailed, McpHub, McpTool
from agent.paths import VIRTUAL_ROOT
from agent.sandbox import Sandbox, SandboxError, SecretMasker
from agent.skills import Skill
from agent.web import FetchRefused, WebFetcher, WebSearcher

if TYPE_CHECKING:
    from agent.long_tools import LongCalls

SUMMARY_CHARS = 60
MAX_LIST_ENTRIES = 500
MAX_EDIT_BYTES = 5 * 1024 * 1024


class Delegator(Protocol):
    """Starts subagents for the ``task`` tool (agent/subagents.py); answers with the task's result."""

    async def delegate(self, *, call_id: str, kind: str, title: str, prompt: str) -> str: ...


@dataclass(slots=True)
class ToolContext:
    """Everything a tool call may use during one turn."""

    sandbox: Sandbox
    secrets: Mapping[str, str]
    masker: SecretMasker
    command_timeout: float
    max_output: int
    files: list[Path] = field(default_factory=list)
    web: WebFetcher | None = None
    search: WebSearcher | None = None
    skills: Mapping[str, Skill] = field(default_factory=dict)
    scheduler: TaskScheduler | None = None
    risk: RiskPolicy = field(default_factory=RiskPolicy)
    approvals: ApprovalGate | None = None
    #: The turn's sender's trust level: a guest's request is approved by an admin, never by the guest.
    trust: TrustLevel = "member"
    #: Starts subagents (the ``task`` tool); None: subagents are off here.
    subagents: Delegator | None = None
    #: The id of the tool call being run (a copy of the context per call carries it).
    call_id: str = ""
    #: Gives a call still running after ``agent.long_tool_seconds`` a task card (agent/long_tools.py);
    #: None: no cards (turned off, no chat to show them in, or a subagent's calls).
    long_calls: LongCalls | None = None


class BashArgs(BaseModel):
    command: str = Field(description="The bash command line to run.")


class LsArgs(BaseModel):
    path: str = Field(f"{VIRTUAL_ROOT}/workspace", description="Directory to list.")


class ReadFileArgs(BaseModel):
    path: str = Field(description="File to read.")
    start_line: int | None = Field(None, ge=1, description="First line to return (1-based).")
    end_line: int | None = Field(None, ge=1, description="Last line to return (inclusive).")


class WriteFileArgs(BaseModel):
    path: str = Field(description="File to write; parent directories are created.")
    content: str = Field(description="The full text to write.")
    append: bool = Field(False, description="Append instead of replacing the file.")


class StrReplaceArgs(BaseModel):
    path: str = Field(description="File to edit.")
    old_str: str = Field(description="Exact text to replace; it must occur exactly once.")
    new_str: str = Field("", description="Replacement text.")


class McpArgs(BaseModel):
    """Arguments of an MCP tool: whatever its server's schema says (the server validates them)."""

    model_config = ConfigDict(extra="allow")


WHEN_FORMS = (
    "'in 20m', 'in 2h', 'at 17:30', 'tomorrow 09:00', '2026-12-24 18:00', 'every day 09:00', "
    "'every weekday 09:00', 'every mon,wed 18:30', 'every hour', 'every 15m', 'cron 0 9 * * 1-5'"
)


class ScheduleTaskArgs(BaseModel):
    when: str = Field(description=f"When to run it, one of the forms {WHEN_FORMS}.")
    what: str = Field(description="The request to run then, as the user would write it.")


class CancelScheduleArgs(BaseModel):
    id: str = Field(description="The schedule's id, as list_scheduled_tasks shows it.")


class NoArgs(BaseModel):
    pass


class LoadSkillArgs(BaseModel):
    name: str = Field(description="The skill's name, from the list of skills.")


class WebSearchArgs(BaseModel):
    query: str = Field(description="What to search the web for.")


class WebFetchArgs(BaseModel):
    url: str = Field(description="The http(s) URL of the page to read.")


class TaskArgs(BaseModel):
    title: str = Field(description="A few words naming the job (shown to the people in the chat).")
    prompt: str = Field(
        description="The whole brief: the subagent sees nothing of this conversation, only this text."
    )
    kind: str = Field("general", description="Which subagent: 'general' or a kind listed in the prompt.")


class PresentFilesArgs(BaseModel):
    paths: list[str] = Field(description=f"Files under {VIRTUAL_ROOT}/outputs to send to the user.")


Handler = Callable[[ToolContext, Any], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    args: type[BaseModel]
    handler: Handler
    #: One progress line from (arguments, secret masker); mask before cutting so no secret prefix leaks.
    summarize: Callable[[Any, Callable[[str], str]], str]
    #: A JSON schema given by someone else (an MCP server) instead of the one ``args`` describes.
    parameters: dict[str, Any] | None = None

    def schema(self) -> dict[str, Any]:
        """The OpenAI-style function schema ``bind_tools`` accepts."""
        if self.parameters is not None:
            return {
                "type": "function",
                "function": {
                    "name": self.name,
                    "description": self.description,
                    "parameters": self.parameters,
                },
            }
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": _parameters_of(self.args),
            },
        }


@functools.cache
def _parameters_of(args: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of a tool's arguments, built once and shared by every request: pydantic builds it
    anew on each call (~0.5–1 ms a tool) and a turn asks for all tools' schemas several times (binding,
    context estimates). Nobody mutates it; a caller that wanted to would have to copy it."""
    parameters = args.model_json_schema()
    parameters.pop("title", None)
    for prop in parameters.get("properties", {}).values():
        prop.pop("title", None)
    return parameters


def short(text: str, limit: int = SUMMARY_CHARS) -> str:
    """One line, no backticks (they would break the progress line's code span), at most ``limit``."""
    flat = re.sub(r"\s+", " ", text).strip().replace("`", "'")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


# --- handlers --------------------------------------------------------------------------------------
async def run_bash(ctx: ToolContext, args: BashArgs) -> str:
    verdict = ctx.risk.judge(args.command)
    if verdict.blocked is not None:
        # The blocklist: no approval mode lifts it, so nobody is asked (agent/approval.py, BLOCKLIST).
        return (
            f"[refused] This command {verdict.blocked}, which this bot never runs, whatever its approval "
            "settings. Do not try another way to do the same; tell the user what you wanted and why."
        )
    if verdict.reason is not None:
        if ctx.approvals is None:
            return (
                f"[not run] This command needs a person's approval (it {verdict.reason}) and nobody can be "
                "asked in this run. Tell the user what you wanted to run and why."
            )
        # The person sees the command as the model wrote it, with any known secret masked.
        decision = await ctx.approvals.approve(
            ctx.masker(args.command), verdict.reason, patterns=verdict.patterns, trust=ctx.trust
        )
        if not decision.approved:
            return f"[not run] {decision.note}"
    result = await ctx.sandbox.run(
        args.command, secrets=ctx.secrets, time_limit=ctx.command_timeout, max_output=ctx.max_output
    )
    status = "timed out" if result.timed_out else f"exit code {result.exit_code}"
    body = result.output.rstrip("\n") or "(no output)"
    return f"[{status}]\n{body}"


async def list_dir(ctx: ToolContext, args: LsArgs) -> str:
    entries = await ctx.sandbox.list_dir(args.path)
    if not entries:
        return f"{args.path} is empty"
    lines = [f"{e.name}/" if e.is_dir else f"{e.name}  ({e.size} bytes)" for e in entries[:MAX_LIST_ENTRIES]]
    if len(entries) > MAX_LIST_ENTRIES:
        lines.append(f"… and {len(entries) - MAX_LIST_ENTRIES} more")
    return "\n".join(lines)


async def read_file(ctx: ToolContext, args: ReadFileArgs) -> str:
    ranged = args.start_line is not None or args.end_line is not None
    text, cut = await ctx.sandbox.read_text(args.path, MAX_EDIT_BYTES if ranged else ctx.max_output)
    if ranged:
        lines = text.splitlines(keepends=True)
        start = (args.start_line or 1) - 1
        end = args.end_line or len(lines)
        text = "".join(lines[start:end])
        cut = len(text) > ctx.max_output
        text = text[: ctx.max_output]
    if cut:
        text += "\n… [file cut here; read further with start_line/end_line]"
    return text or "(empty file)"


async def write_file(ctx: ToolContext, args: WriteFileArgs) -> str:
    target = await ctx.sandbox.write_text(args.path, args.content, append=args.append)
    return f"{'appended' if args.append else 'wrote'} {len(args.content)} characters to {ctx.sandbox.virtual(target)}"


async def str_replace(ctx: ToolContext, args: StrReplaceArgs) -> str:
    if not args.old_str:
        raise SandboxError("old_str must not be empty")
    text, cut = await ctx.sandbox.read_text(args.path, MAX_EDIT_BYTES)
    if cut:
        raise SandboxError(f"{args.path} is too large to edit with str_replace")
    count = text.count(args.old_str)
    if count != 1:
        raise SandboxError(
            f"old_str occurs {count} times in {args.path}; it must occur exactly once (add context)"
        )
    await ctx.sandbox.write_text(args.path, text.replace(args.old_str, args.new_str, 1))
    return f"edited {args.path}"


async def present_files(ctx: ToolContext, args: PresentFilesArgs) -> str:
    if not args.paths:
        raise SandboxError("no files given")
    outputs = ctx.sandbox.outputs_dir()
    accepted: list[str] = []
    refused: list[str] = []
    for path in args.paths:
        try:
            real = ctx.sandbox.resolve(path)
        except SandboxError as exc:
            refused.append(f"{path}: {exc}")
            continue
        if outputs not in real.parents:
            refused.append(f"{path}: only files under {VIRTUAL_ROOT}/outputs can be presented")
        elif not real.is_file():
            refused.append(f"{path}: no such file")
        else:
            if real not in ctx.files:
                ctx.files.append(real)
            accepted.append(ctx.sandbox.virtual(real))
    lines = []
    if accepted:
        lines.append("will be delivered to the user: " + ", ".join(accepted))
    if refused:
        lines.append("refused: " + "; ".join(refused))
    if not accepted:
        raise SandboxError("nothing to present — " + "; ".join(refused))
    return "\n".join(lines)


def _scheduler(ctx: ToolContext) -> TaskScheduler:
    if ctx.scheduler is None:
        raise SandboxError("scheduled tasks are not available here")
    return ctx.scheduler


async def schedule_task(ctx: ToolContext, args: ScheduleTaskArgs) -> str:
    return await _scheduler(ctx).add(f"{args.when.strip()} {args.what.strip()}")


async def list_scheduled_tasks(ctx: ToolContext, args: NoArgs) -> str:
    return await _scheduler(ctx).listing()


async def cancel_scheduled_task(ctx: ToolContext, args: CancelScheduleArgs) -> str:
    return await _scheduler(ctx).cancel(args.id)


async def load_skill(ctx: ToolContext, args: LoadSkillArgs) -> str:
    skill = ctx.skills.get(args.name.strip().lstrip("/"))
    if skill is None:
        known = ", ".join(ctx.skills) or "none on this server"
        raise SandboxError(f"there is no skill named {args.name!r}; skills: {known}")
    return skill.prompt()


async def web_search(ctx: ToolContext, args: WebSearchArgs) -> str:
    if ctx.search is None:
        raise SandboxError("web_search is not set up on this server (web.search_url)")
    try:
        results = await ctx.search.search(args.query)
    except FetchRefused as exc:
        raise SandboxError(str(exc)) from None
    if not results:
        return f"No results for {args.query!r}."
    return "\n\n".join(f"{n}. {r.title}\n{r.url}\n{r.snippet}" for n, r in enumerate(results, 1))


async def web_fetch(ctx: ToolContext, args: WebFetchArgs) -> str:
    if ctx.web is None:
        raise SandboxError("web_fetch is turned off on this server (web.fetch: false)")
    try:
        page = await ctx.web.fetch(args.url)
    except FetchRefused as exc:
        raise SandboxError(str(exc)) from None
    text = page.text.strip() or "(the page has no readable text)"
    cut = page.truncated or len(text) > ctx.max_output
    text = text[: ctx.max_output]
    if cut:
        text += "\n… [page cut here]"
    return f"{page.url} ({page.content_type})\n\n{text}"


async def delegate_task(ctx: ToolContext, args: TaskArgs) -> str:
    if ctx.subagents is None:
        raise SandboxError("subagents are turned off on this server (agent.subagents.enabled)")
    return await ctx.subagents.delegate(
        call_id=ctx.call_id, kind=args.kind.strip(), title=args.title.strip(), prompt=args.prompt
    )


TOOLS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in (
        ToolSpec(
            "bash",
            f"Run a bash command in {VIRTUAL_ROOT}/workspace (stdin is empty; there is a timeout and the "
            "output is cut when long). Returns the exit code and combined stdout/stderr. Commands that "
            "delete, push, install or send data may first wait for the user's approval in chat; a "
            "result starting with [not run] says why the command did not run.",
            BashArgs,
            run_bash,
            lambda a, m: f"running `{short(m(a.command), SUMMARY_CHARS - 10)}`",
        ),
        ToolSpec(
            "ls",
            f"List a directory under {VIRTUAL_ROOT}.",
            LsArgs,
            list_dir,
            lambda a, m: f"listing {short(m(a.path), SUMMARY_CHARS - 8)}",
        ),
        ToolSpec(
            "read_file",
            f"Read a text file under {VIRTUAL_ROOT}, optionally a line range.",
            ReadFileArgs,
            read_file,
            lambda a, m: f"reading {short(m(a.path), SUMMARY_CHARS - 8)}",
        ),
        ToolSpec(
            "write_file",
            f"Create or overwrite a text file under {VIRTUAL_ROOT}/workspace or /outputs.",
            WriteFileArgs,
            write_file,
            lambda a, m: f"writing {short(m(a.path), SUMMARY_CHARS - 8)}",
        ),
        ToolSpec(
            "str_replace",
            "Replace one exact occurrence of old_str with new_str in a text file.",
            StrReplaceArgs,
            str_replace,
            lambda a, m: f"editing {short(m(a.path), SUMMARY_CHARS - 8)}",
        ),
        ToolSpec(
            "present_files",
            f"Send files from {VIRTUAL_ROOT}/outputs to the user in the chat. Write them there first.",
            PresentFilesArgs,
            present_files,
            lambda a, m: f"sharing {len(a.paths)} file(s)",
        ),
        ToolSpec(
            "schedule_task",
            "Schedule a request to run later, or repeatedly, in this chat as the user (a reminder, a daily "
            "report). It then runs like a message they sent. Returns the confirmation with the schedule id.",
            ScheduleTaskArgs,
            schedule_task,
            lambda a, m: f"scheduling {short(m(a.when), SUMMARY_CHARS - 11)}",
        ),
        ToolSpec(
            "list_scheduled_tasks",
            "List this chat's scheduled tasks with their ids and next run times.",
            NoArgs,
            list_scheduled_tasks,
            lambda a, m: "listing scheduled tasks",
        ),
        ToolSpec(
            "cancel_scheduled_task",
            "Cancel one of this chat's scheduled tasks by id (only ones the user set up).",
            CancelScheduleArgs,
            cancel_scheduled_task,
            lambda a, m: f"cancelling schedule {short(m(a.id), 16)}",
        ),
        ToolSpec(
            "load_skill",
            "Read the full instructions of one of the listed skills (and where its files are).",
            LoadSkillArgs,
            load_skill,
            lambda a, m: f"reading skill {short(m(a.name), SUMMARY_CHARS - 14)}",
        ),
        ToolSpec(
            "web_search",
            "Search the web; returns titles, URLs and snippets. Read a result with web_fetch.",
            WebSearchArgs,
            web_search,
            lambda a, m: f"searching {short(m(a.query), SUMMARY_CHARS - 10)}",
        ),
        ToolSpec(
            "web_fetch",
            "Read a web page (or a text/JSON URL) and get its main content as markdown. Private and "
            "loopback addresses are refused.",
            WebFetchArgs,
            web_fetch,
            lambda a, m: f"reading {short(m(a.url), SUMMARY_CHARS - 8)}",
        ),
        ToolSpec(
            "task",
            "Delegate a self-contained job to a subagent with a fresh context of its own (it works in the "
            "same files but sees none of this conversation, so the prompt must say everything it needs). "
            "Several task calls in one message run at the same time. Returns the subagent's concise result.",
            TaskArgs,
            delegate_task,
            lambda a, m: f"delegating {short(m(a.title), SUMMARY_CHARS - 11)}",
        ),
    )
}


def tool_schemas(exclude: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    return [spec.schema() for spec in TOOLS.values() if spec.name not in exclude]


def mcp_tool_spec(hub: McpHub, tool: McpTool) -> ToolSpec:
    """An MCP server's tool as one of ours: same checks, progress line, masking and error results."""

    async def call(ctx: ToolContext, args: McpArgs) -> str:
        try:
            text, ok = await hub.call(tool, args.model_dump())
        except McpCallFailed as exc:
            raise SandboxError(str(exc)) from None
        if not ok:
            raise SandboxError(text)
        return text

    return ToolSpec(
        tool.qualified,
        f"[{tool.server}] {tool.description}",
        McpArgs,
        call,
        lambda a, m: f"calling {short(m(tool.qualified), SUMMARY_CHARS - 8)}",
        parameters=tool.parameters,
    )
