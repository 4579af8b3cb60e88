"""SCENARIOS 15, 16, 44: tool-calling turns through the manager, with a real shell in the workspace."""

from __future__ import annotations

from agent.paths import ThreadPaths
from tests.agent.helpers import agent_settings, all_tool_results, everything_shown, system_text
from tests.fakes.openai_server import Reply, ToolCall
from tests.harness import Harness


async def thread_paths(h: Harness, chat: str = "chat-1") -> ThreadPaths:
    conversation = await h.service.threads.get(h.chat.make_message("", chat=chat).conversation_key)
    assert conversation is not None
    return ThreadPaths(h.service.data_dir, conversation.owner, conversation.thread_id)


async def test_a_tool_calling_turn_runs_bash_in_the_workspace_and_reports_the_output(tmp_path, llm):
    llm.script(
        Reply(tool_calls=[ToolCall("bash", {"command": "pwd; echo hello > greeting.txt; cat greeting.txt"})]),
        Reply(text="The file greeting.txt now says hello."),
    )
    async with Harness.running(agent_settings(tmp_path, llm)) as h:
        answer = await h.ask("make a greeting file")
        paths = await thread_paths(h)
    assert answer == "The file greeting.txt now says hello."
    assert (paths.workspace / "greeting.txt").read_text() == "hello\n"
    [result] = all_tool_results(llm)
    # The shell ran in the workspace, and the model saw the path it knows, not the host path.
    assert result == "[exit code 0]\n/mnt/user-data/workspace\nhello"
    assert str(tmp_path) not in result
    assert [t["function"]["name"] for t in llm.completions[0]["tools"]] == [
        "bash",
        "ls",
        "read_file",
        "write_file",
        "str_replace",
        "present_files",
        "schedule_task",
        "list_scheduled_tasks",
        "cancel_scheduled_task",
        "web_fetch",
    ]


async def test_tool_use_shows_a_short_progress_line_while_the_tool_runs(tmp_path, llm):
    command = "sleep 1; echo finished-after-a-while; " + "true; " * 30
    llm.script(Reply(tool_calls=[ToolCall("bash", {"command": command})]), Reply(text="All done."))
    async with Harness.running(agent_settings(tmp_path, llm)) as h:
        answer = await h.ask("run the slow thing")
    assert answer == "All done."
    [message] = h.chat.in_chat("chat-1")
    progress = [text for text in message.history if text.startswith("⏳ running `sleep 1; echo")]
    assert progress, message.history
    # Short: the long command is cut, and the line never grows past the budget.
    assert all(len(text) <= 80 for text in progress)
    assert "…`…" in progress[0]
    assert message.text == "All done."


async def test_only_assistant_text_reaches_the_chat_not_tool_arguments_results_or_context(tmp_path, llm):
    settings = agent_settings(tmp_path, llm, agent={"system_prompt": "SYSTEM-MARKER-5521"})
    llm.script(
        Reply(
            text="Let me write that down.",
            tool_calls=[
                ToolCall("write_file", {"path": "notes.txt", "content": "CONTENT-MARKER-7781"}),
                ToolCall("bash", {"command": "cat notes.txt; echo OUTPUT-MARKER-$((3000 + 310))"}),
            ],
        ),
        Reply(text="Saved your note."),
    )
    async with Harness.running(settings) as h:
        answer = await h.ask("note this")
    assert answer == "Let me write that down.\n\nSaved your note."
    shown = "\n".join(everything_shown(h.chat))
    for secret in (
        "SYSTEM-MARKER-5521",
        "CONTENT-MARKER-7781",
        "OUTPUT-MARKER-3310",
        "/mnt/user-data/workspace —",
    ):
        assert secret not in shown
    results = all_tool_results(llm)
    assert any("OUTPUT-MARKER-3310" in r and "CONTENT-MARKER-7781" in r for r in results)
    assert "SYSTEM-MARKER-5521" in system_text(llm.completions[0])


async def test_a_thread_continues_after_a_restart(tmp_path, llm):
    settings = agent_settings(tmp_path, llm)
    async with Harness.running(settings) as first:
        assert await first.ask("remember the word kiwi") == "echo: remember the word kiwi"
    async with Harness.running(settings) as second:
        # A fresh MemoryChannel counts message ids from 1 again; give this one its own id.
        assert await second.ask("which word?", message_id="after-restart") == "echo: which word?"
    contents = [m.get("content") for m in llm.completions[-1]["messages"] if m["role"] != "system"]
    assert contents == ["remember the word kiwi", "echo: remember the word kiwi", "which word?"]


async def test_an_uploaded_file_lands_in_uploads_and_the_agent_can_read_it(tmp_path, llm):
    llm.script(
        Reply(tool_calls=[ToolCall("read_file", {"path": "/mnt/user-data/uploads/report.txt"})]),
        Reply(text="I read it."),
    )
    async with Harness.running(agent_settings(tmp_path, llm)) as h:
        await h.chat.say("please read this", files=[("report.txt", b"UPLOADED-CONTENT-42\n")])
        await h.idle()
        paths = await thread_paths(h)
    assert (paths.uploads / "report.txt").read_bytes() == b"UPLOADED-CONTENT-42\n"
    first_user = [m for m in llm.completions[0]["messages"] if m["role"] == "user"][-1]["content"]
    assert "/mnt/user-data/uploads/report.txt" in first_user
    assert all_tool_results(llm) == ["UPLOADED-CONTENT-42\n"]
    assert h.chat.in_chat("chat-1")[-1].text == "I read it."


async def test_present_files_delivers_files_from_outputs_and_refuses_anything_else(tmp_path, llm):
    llm.script(
        Reply(
            tool_calls=[
                ToolCall(
                    "bash",
                    {"command": "echo report > /mnt/user-data/outputs/report.txt; echo draft > draft.txt"},
                ),
            ]
        ),
        Reply(
            tool_calls=[
                ToolCall(
                    "present_files",
                    {"paths": ["/mnt/user-data/outputs/report.txt", "/mnt/user-data/workspace/draft.txt"]},
                )
            ]
        ),
        Reply(tool_calls=[ToolCall("present_files", {"paths": ["/etc/hostname"]})]),
        Reply(text="Here is the report."),
    )
    async with Harness.running(agent_settings(tmp_path, llm)) as h:
        answer = await h.ask("make me a report")
    assert "Here is the report." in answer
    assert [p.name for p in h.chat.sent_files] == ["report.txt"]
    results = all_tool_results(llm)
    assert "will be delivered to the user: /mnt/user-data/outputs/report.txt" in results[1]
    assert "draft.txt: only files under /mnt/user-data/outputs can be presented" in results[1]
    assert results[2].startswith("Error: nothing to present") and "outside /mnt/user-data" in results[2]


async def test_a_vision_model_gets_uploaded_images_and_other_models_get_only_the_path(tmp_path, llm):
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
    models = [
        {
            "name": "default",
            "model": "fake-model",
            "api_key": "sk-test",
            "base_url": llm.base_url,
            "supports_vision": True,
        },
        {"name": "plain", "model": "fake-plain", "api_key": "sk-test", "base_url": llm.base_url},
    ]
    async with Harness.running(agent_settings(tmp_path, llm, models=models)) as h:
        await h.chat.say("what is in this picture?", files=[("cat.png", png)])
        await h.idle()
        await h.ask("/models plain")
        await h.chat.say("and this one?", files=[("dog.png", png)])
        await h.idle()
    vision_user = [m for m in llm.completions[0]["messages"] if m["role"] == "user"][-1]["content"]
    assert isinstance(vision_user, list)
    assert vision_user[0]["type"] == "text" and "/mnt/user-data/uploads/cat.png" in vision_user[0]["text"]
    assert vision_user[1]["image_url"]["url"].startswith("data:image/png;base64,")
    plain_user = [m for m in llm.completions[-1]["messages"] if m["role"] == "user"][-1]["content"]
    assert isinstance(plain_user, str) and "/mnt/user-data/uploads/dog.png" in plain_user
    # The earlier image stays in the thread but is not sent to a model that cannot see it.
    assert "image_url" not in str(llm.completions[-1]["messages"])
