"""The console API's response and request bodies (its OpenAPI schema, tag **admin**).

Free text in them (message previews, errors, commands) has passed the service's secret masker; no
model carries configuration, tokens or webhook secrets.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from connections.api import ConnectionOut


class ChannelOut(BaseModel):
    name: str
    state: str = Field(description="as /health reports it: connected, receiving, error, …")
    detail: str | None = Field(None, description="why, when the state is not plain")
    intake: str | None = Field(None, description="whether messages reach this instance, and if not, why")


class TurnOut(BaseModel):
    id: str = Field(description="the inbox entry id; POST .../stop with it")
    channel: str
    chat: str
    sender: str = Field(description="the sender's display name, else their platform id")
    text: str = Field(description="the message, cut to 200 characters")
    state: Literal["running", "queued", "waiting"] = Field(
        description="running: being answered; queued: behind another turn of its thread; waiting: "
        "accepted, not yet handed to a thread (or running on another instance)"
    )
    age_seconds: float


class DeadLetterOut(BaseModel):
    id: str = Field(description="the inbox entry id; POST .../retry with it")
    channel: str
    chat: str
    sender: str
    text: str
    status: Literal["failed", "dead"]
    attempts: int
    error: str | None
    age_seconds: float


class DeliveryOut(BaseModel):
    id: str = Field(description="GitHub's X-GitHub-Delivery id; POST .../retry with it")
    event: str = Field(description="event.action, e.g. issue_comment.created")
    status: Literal["received", "done", "failed", "retry", "stuck"] = Field(
        description="stuck: still 'received' long after its process should have finished it"
    )
    attempts: int
    detail: str = Field(description="the error, or which agents it fired")
    retryable: bool = Field(description="failed or stuck: POST .../retry runs it again")
    age_seconds: float


class ApprovalOut(BaseModel):
    id: str = Field(description="the approval id; POST .../approve or .../deny with it")
    channel: str
    chat: str
    sender: str = Field(description="who asked for the turn that wants to run the command")
    command: str = Field(description="the command as shown in the chat (secrets masked)")
    reason: str
    age_seconds: float


class ScheduleOut(BaseModel):
    id: str = Field(description="the schedule id; POST .../cancel with it")
    owner: str
    channel: str
    chat: str
    when: str = Field(description="as it was asked for, e.g. 'every weekday 09:00'")
    what: str = Field(description="the task it sends, cut to 200 characters")
    next_at: float = Field(description="next run, seconds since the epoch")


class UsageOut(BaseModel):
    """One person's token use over their current conversations, as the model provider reported it."""

    owner: str = Field(description="the person (a signed-in user or an unconnected platform account)")
    threads: int = Field(description="conversations with recorded usage")
    turns: int
    input_tokens: int
    output_tokens: int
    models: list[str] = Field(description="the model each conversation's last turn used")
    last_used_at: float = Field(description="seconds since the epoch")
    cost_today: str = Field(
        description="what their turns cost today (UTC), from models[].pricing; '0' unpriced"
    )
    cost_month: str = Field(description="what their turns cost this month (UTC)")
    currency: str = Field(description="the prices' currency (docs/budgets.md)")


class PersonOut(BaseModel):
    id: str = Field(description="the user id (the JWT's sub)")
    last_seen_at: float = Field(description="seconds since the epoch")
    connections: list[ConnectionOut] = Field(description="active connections; POST .../unlink to remove one")


class DecisionIn(BaseModel):
    session: bool = Field(
        False, description="approve only: also allow the command's patterns for the rest of the conversation"
    )


class ActionOut(BaseModel):
    id: str
    result: str = Field(description="what happened, in words")
