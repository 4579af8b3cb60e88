"""The agent's own tables (memory and goals), on their own ``MetaData`` so the service can create them.

They live in the service database — not in files — so several instances sharing PostgreSQL agree on what
an owner's memory holds and which goal a thread is working on.
"""

from __future__ import annotations

from sqlalchemy import Column, Float, Index, Integer, MetaData, String, Table, Text, UniqueConstraint

metadata = MetaData()

memory_facts = Table(
    "agent_memory_facts",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("owner", String(200), nullable=False),
    Column("content", Text, nullable=False),
    Column("category", String(32), nullable=False),
    Column("confidence", Float, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Index("ix_agent_memory_facts_owner", "owner"),
)

memory_profiles = Table(
    "agent_memory_profiles",
    metadata,
    Column("owner", String(200), primary_key=True),
    Column("summary", Text, nullable=False),
    Column("updated_at", Float, nullable=False),
)

goals = Table(
    "agent_goals",
    metadata,
    Column("thread_id", String(64), primary_key=True),
    Column("owner", String(200), nullable=False),
    Column("objective", Text, nullable=False),
    # active | satisfied | stood_down | cap_reached | no_progress | stopped
    Column("status", String(32), nullable=False),
    Column("continuations", Integer, nullable=False, default=0),
    Column("no_progress", Integer, nullable=False, default=0),
    Column("last_decision", String(32)),
    Column("last_reason", Text),
    Column("seen_outputs", Text, nullable=False, default="[]"),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)

goal_continuations = Table(
    "agent_goal_continuations",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("thread_id", String(64), nullable=False),
    Column("owner", String(200), nullable=False),
    # The goal this step belongs to: agent_goals.created_at of that goal (a new /goal gets a new one).
    Column("goal_created_at", Float, nullable=False),
    Column("number", Integer, nullable=False),
    Column("prompt", Text, nullable=False),
    Column("notice", Text, nullable=False),
    # The inbound message that started the goal, as JSON, so a restart can answer in the same chat.
    Column("message", Text, nullable=False),
    # queued | running | answered | done | cancelled
    Column("status", String(16), nullable=False),
    Column("reply_text", Text),
    Column("reason", Text),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    UniqueConstraint("thread_id", "goal_created_at", "number", name="uq_goal_continuation_step"),
    Index("ix_agent_goal_continuations_status", "status"),
)

memory_cursors = Table(
    "agent_memory_cursors",
    metadata,
    Column("thread_id", String(64), primary_key=True),
    Column("owner", String(200), nullable=False),
    # Id of the newest message already read by extraction (or passed over by /memory clear).
    Column("last_message_id", String(200)),
    Column("updated_at", Float, nullable=False),
    Index("ix_agent_memory_cursors_owner", "owner"),
)

memory_pending = Table(
    "agent_memory_pending",
    metadata,
    Column("owner", String(200), primary_key=True),
    Column("thread_id", String(64), primary_key=True),
    Column("model", String(200)),
    # When the debounce ends: a restart waits only for what is left of it.
    Column("due_at", Float, nullable=False),
)

thread_usage = Table(
    "agent_thread_usage",
    metadata,
    Column("thread_id", String(64), primary_key=True),
    Column("model", String(200), nullable=False),  # the model of the last turn
    Column("last_input_tokens", Integer, nullable=False),
    Column("last_output_tokens", Integer, nullable=False),
    Column("total_input_tokens", Integer, nullable=False),
    Column("total_output_tokens", Integer, nullable=False),
    Column("turns", Integer, nullable=False),
    Column("updated_at", Float, nullable=False),
)

subagent_tasks = Table(
    "agent_tasks",
    metadata,
    # Derived from the thread and the tool call (agent/subagents.py): the same after a redelivered turn.
    Column("task_id", String(64), primary_key=True),
    Column("thread_id", String(64), nullable=False),
    Column("parent_task_id", String(64)),  # None: started by the turn itself
    Column("tool_call_id", String(200), nullable=False),
    Column("kind", String(64), nullable=False),
    Column("title", Text, nullable=False),
    Column("prompt", Text, nullable=False),
    # queued | running | done | failed | stopped (agent.events.TaskStatus)
    Column("status", String(16), nullable=False),
    Column("result", Text),
    Column("input_tokens", Integer, nullable=False, default=0),
    Column("output_tokens", Integer, nullable=False, default=0),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Index("ix_agent_tasks_thread", "thread_id"),
)

subagent_steps = Table(
    "agent_task_steps",
    metadata,
    Column("task_id", String(64), primary_key=True),
    Column("number", Integer, primary_key=True),
    Column("thread_id", String(64), nullable=False),  # so erasing a thread finds its steps
    # model (what the subagent said / asked for) | tool (a call starting) | output (its result) | note
    Column("kind", String(16), nullable=False),
    Column("text", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Index("ix_agent_task_steps_thread", "thread_id"),
)
