"""How answers reach Discord: rate limits, failed edits and long answers split at 2,000 characters."""

from __future__ import annotations

from tests.channels.discord.conftest import USER_ID, eventually, final_reply
from tests.fakes.openai_server import Reply

STREAMED = Reply(text="one two three four five six seven eight nine ten", chunk_size=4, delay=0.15)
FINAL = "one two three four five six seven eight nine ten"


async def test_a_429_on_an_intermediate_edit_is_waited_out_by_discord_py_and_the_final_text_lands(
    discord_harness, discord_fake, llm
):
    # A normal Discord 429 (with its Via header): discord.py sleeps retry_after and retries by itself.
    discord_fake.fail_next("edit", 429, retry_after=0.3)
    llm.script(STREAMED)
    dm = discord_fake.new_id()
    discord_fake.message_create(dm, USER_ID, "count")
    reply = await final_reply(discord_fake, dm, FINAL)
    await discord_harness.idle()
    limited, retried = discord_fake.calls_to("edit")[:2]
    assert (limited["status"], retried["status"]) == (429, 200)
    assert limited["json"]["content"] == retried["json"]["content"]  # the same edit, retried by discord.py
    assert len(discord_fake.in_channel(dm)) == 1
    assert reply.text == FINAL


async def test_a_429_that_discord_py_will_not_retry_drops_that_update_and_later_edits_land(
    discord_harness, discord_fake, llm
):
    # Without the Via header discord.py raises at once; the channel maps it to RetryAfter and the reply
    # scheduler skips that update, waits retry_after, then carries on with newer text.
    discord_fake.fail_next("edit", 429, retry_after=0.5, cloudflare=True)
    llm.script(STREAMED)
    dm = discord_fake.new_id()
    discord_fake.message_create(dm, USER_ID, "count")
    reply = await final_reply(discord_fake, dm, FINAL)
    await discord_harness.idle()
    statuses = [c["status"] for c in discord_fake.calls_to("edit")]
    assert statuses[0] == 429 and statuses[-1] == 200
    assert len(discord_fake.in_channel(dm)) == 1
    assert reply.text == FINAL


async def test_when_the_reply_can_no_longer_be_edited_the_answer_arrives_as_a_new_message(
    discord_harness, discord_fake, llm
):
    discord_fake.fail_next("edit", 404, times=20)  # someone deleted the "…" message
    dm = discord_fake.new_id()
    discord_fake.message_create(dm, USER_ID, "are you there")
    await final_reply(discord_fake, dm, "echo: are you there")
    await discord_harness.idle()
    placeholder, answer = discord_fake.in_channel(dm)
    assert placeholder.text == "…"
    assert answer.text == "echo: are you there"


async def test_a_5000_character_answer_is_split_at_2000_without_breaking_a_code_fence(
    discord_harness, discord_fake, llm
):
    prose = [f"Line {i}: " + "words " * 6 for i in range(40)]
    code = ["```python"] + [f"print('step {i}')  # " + "x" * 20 for i in range(30)] + ["```"]
    tail = [f"After {i}: " + "more " * 8 for i in range(60)]
    text = "\n".join(prose + code + tail)
    assert len(text) > 4500
    llm.script(Reply(text=text, chunk_size=600))
    dm = discord_fake.new_id()
    discord_fake.message_create(dm, USER_ID, "write a lot")
    await final_reply(discord_fake, dm, "After 59:")
    await discord_harness.idle()
    messages = discord_fake.in_channel(dm)
    assert len(messages) >= 3
    for message in messages:
        assert 0 < len(message.text) <= 2000
        assert message.text.count("```") % 2 == 0, "every message renders its code block on its own"
    shown = "\n".join(m.text for m in messages)
    for line in prose + tail + code[1:-1]:
        assert line.strip() in shown


async def test_replies_never_ping_anyone(discord_harness, discord_fake, llm):
    llm.script(Reply(text="@everyone @here <@1234> look at this"))
    dm = discord_fake.new_id()
    discord_fake.message_create(dm, USER_ID, "ping them")
    reply = await final_reply(discord_fake, dm, "look at this")
    await discord_harness.idle()
    await eventually(lambda: reply.allowed_mentions)
    assert all(a == {"parse": []} for a in reply.allowed_mentions)


async def test_a_discord_server_error_on_an_edit_is_retried_and_the_answer_still_lands(
    discord_harness, discord_fake, llm
):
    discord_fake.fail_next("edit", 502)
    dm = discord_fake.new_id()
    discord_fake.message_create(dm, USER_ID, "hello through an outage")
    reply = await final_reply(discord_fake, dm, "echo: hello through an outage")
    await discord_harness.idle()
    assert discord_fake.calls_to("edit")[0]["status"] == 502
    assert discord_fake.in_channel(dm) == [reply]


async def test_a_long_answer_in_tight_buckets_follows_discords_rate_limit_headers_and_never_meets_a_429(
    discord_harness, discord_fake, llm
):
    # Discord publishes no per-route numbers, only the X-RateLimit-* headers on each answer; the client
    # must read them. Here one send and two edits per second per channel: discord.py waits out the
    # bucket it was told about, so Discord never has to refuse a call.
    discord_fake.route_limits.update({"send": (1, 1.0), "edit": (2, 1.0)})
    text = "\n".join(f"Line {i}: " + "words " * 20 for i in range(40))
    assert len(text) > 4000
    llm.script(Reply(text=text, chunk_size=400, delay=0.05))
    dm = discord_fake.new_id()
    discord_fake.message_create(dm, USER_ID, "write a lot")
    await final_reply(discord_fake, dm, "Line 39:", timeout=60)
    await discord_harness.idle()
    assert len(discord_fake.in_channel(dm)) >= 3
    assert discord_fake.rate_limited == []
    answered = [c for c in discord_fake.calls_to("send") + discord_fake.calls_to("edit")]
    assert answered and all(c["status"] == 200 for c in answered)
