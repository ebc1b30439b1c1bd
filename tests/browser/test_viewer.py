"""The run viewer in a real headless Chromium, on a store of recorded LangGraph runs: what a person sees.

Each test opens a page of ``run-journal URL serve`` (its own process) and asserts on the rendered page:
rows, badges, task cards, the usage chart, diffs; one follows a run while another process writes it.
Screenshots of every page go to ``$RUN_JOURNAL_SCREENSHOTS`` (``docs/images`` for the README).
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from run_journal import open_store

from .conftest import REQUIRE, Served

try:
    from playwright.async_api import expect
except ImportError:
    if REQUIRE:  # CI installs it (dev extra): a missing Playwright there is a failure, not a skip
        raise
    pytest.skip("playwright is not installed (pip install -e '.[dev]')", allow_module_level=True)

pytestmark = pytest.mark.asyncio(loop_scope="session")

LIVE_WRITER = Path(__file__).with_name("live_writer.py")


async def open_view(page: Any, server: Served, fragment: str, ready: str) -> None:
    await page.goto(server.url + fragment)
    await page.wait_for_selector(ready, timeout=15_000)


async def texts(page: Any, selector: str) -> list[str]:
    found: list[str] = await page.locator(selector).all_inner_texts()
    return [" ".join(text.split()) for text in found]


async def shot(page: Any, screenshots: Path, name: str, *, full_page: bool = True) -> None:
    await page.wait_for_load_state("networkidle")
    await page.screenshot(path=str(screenshots / f"{name}.png"), full_page=full_page)


async def test_threads_page_lists_every_thread_with_its_latest_run(
    page: Any, server: Served, screenshots: Path
) -> None:
    await open_view(page, server, "#/", "#threads tbody tr")
    rows = await texts(page, "#threads tbody tr")
    # most recently active first: recorded in this order, the long run dated two days back
    assert [row.split()[0] for row in rows] == ["workspace-1", "research-1", "team-1", "broken-1",
                                                "support-42", "refund-7", "long-run"]
    refund = next(row for row in rows if row.startswith("refund-7"))
    assert refund.split()[1:5] == ["2", "2", "440", "$0.0014"]  # runs, messages, tokens, cost
    assert refund.split()[5] == "success"  # the latest run, the resumed one
    assert "Please refund my $40 order." not in refund  # the latest run's first message: the resume's
    await shot(page, screenshots, "viewer-threads")
    await page.click("text=support-42")
    await page.wait_for_selector("#runs tbody tr")
    assert page.url.endswith("#/t/support-42")


async def test_a_thread_shows_its_runs_usage_chart_and_conversation(
    page: Any, server: Served, screenshots: Path
) -> None:
    await open_view(page, server, "#/t/refund-7", "#runs tbody tr")
    runs = await texts(page, "#runs tbody tr")
    assert [run.split()[:2] for run in runs] == [["refund-resumes", "success"],  # newest first
                                                 ["refund-asks", "interrupted"]]
    chart = await texts(page, ".usage-chart .bar-row")
    assert chart[0].startswith("fake-gpt")
    assert "440 tok" in chart[0]
    conversation = await texts(page, "#conversation .msg")
    assert conversation[0].endswith("Please refund my $40 order.")
    assert conversation[-1].endswith("Refund of $40 approved and sent.")
    await shot(page, screenshots, "viewer-thread")


async def test_a_tool_turn_pairs_each_tool_call_with_its_outcome_and_ends_with_the_terminal_event(
    page: Any, server: Served, screenshots: Path
) -> None:
    await open_view(page, server, "#/t/support-42/r/tool-turn", "#timeline .ev")
    types = await page.locator("#timeline .ev").evaluate_all("rows => rows.map(r => r.dataset.type)")
    seqs = await page.locator("#timeline .ev").evaluate_all("rows => rows.map(r => +r.dataset.seq)")
    assert seqs == sorted(seqs)
    assert seqs[0] == 1
    assert types[0] == "run.start"
    assert types[-3:] == ["run.end", "run.score", "run.score"]  # the scores were given afterwards
    assert "tool.outcome" not in types  # each outcome is shown on its call's row
    calls = await texts(page, '#timeline .ev[data-type="tool.call"]')
    assert len(calls) == 2
    assert 'lookup_order({"order_id":"A-1001"}) ✓ success' in calls[0]
    assert 'refund_policy({"days":12}) ✓ success' in calls[1]
    terminal = page.locator("#timeline .ev.terminal")
    assert await terminal.count() == 1
    assert "success in" in await terminal.inner_text()
    answer = await texts(page, '#timeline .ev[data-type="llm.ai.response"]')
    assert "1,200+40 tok · $0.0034 · fake-gpt" in answer[0]
    chart = await texts(page, "#usage .bar-row")
    assert any(row.startswith("fake-gpt") and "2,650 tok · $0.0074 · 2 call(s)" in row for row in chart)
    assert "success" in await page.inner_text("#run-status")
    await shot(page, screenshots, "viewer-run")
    row = page.locator('#timeline .ev[data-type="tool.call"]').first
    await row.click()
    detail = await page.locator("#timeline .detail pre.json").inner_text()
    assert '"outcome": "success"' in detail
    assert '"tool_name": "lookup_order"' in detail


async def test_a_subagent_run_groups_the_steps_under_their_task_card(
    page: Any, server: Served, screenshots: Path
) -> None:
    await open_view(page, server, "#/t/research-1/r/research", "#timeline .task .step")
    card = page.locator('#timeline .task[data-task="task-1"]')
    assert await card.count() == 1
    await page.wait_for_selector("#timeline .task .pill.st-completed")
    header = " ".join((await card.locator("header").inner_text()).split())
    assert "researcher" in header
    assert "task-1" in header
    assert "completed" in header
    assert "Which papers cover event logs?" in header
    steps = await texts(page, "#timeline .task .step")
    assert steps == ["#0 ai Searching the index.",
                     "#1 tool search_papers 3 papers on event logs: 'Seq is all you need', 'Dense logs', "
                     "'Append-only at scale'",
                     "#2 ai Found three papers; 'Dense logs' is the closest match."]
    types = await page.locator("#timeline > .ev").evaluate_all("rows => rows.map(r => r.dataset.type)")
    assert "subagent.step" not in types
    assert "subagent.start" not in types
    chart = await texts(page, "#usage .bar-row")
    assert any(row.startswith("subagent:researcher") and "850 tok" in row for row in chart)
    await shot(page, screenshots, "viewer-subagent")


async def test_a_run_that_changed_files_shows_them_with_their_diffs(
    page: Any, server: Served, screenshots: Path
) -> None:
    await open_view(page, server, "#/t/workspace-1/r/files", "#workspace .file")
    files = await texts(page, "#workspace .file header")
    assert sorted(files) == sorted(["modified app.py +3 −3", "created README.md +3 −0",
                                    "deleted notes.txt +0 −1"])
    app = page.locator('#workspace .file[data-path="app.py"]')
    assert await texts(app, ".diff .del") == ["-def greet():", "- print('hello')", "-greet()"]
    added = await texts(app, ".diff .add")
    assert "+def greet(name):" in added
    assert "+greet('world')" in added
    assert await texts(page, '#workspace .file[data-path="notes.txt"] .diff .del') == \
        ["-remember to write the README"]
    last = await texts(page, "#timeline .ev")
    assert "workspace_changes" in last[-1]
    assert "3 file(s) changed" in last[-1]
    await shot(page, screenshots, "viewer-workspace")


async def test_an_interrupted_run_waits_for_a_human_and_its_resume_links_back(
    page: Any, server: Served
) -> None:
    await open_view(page, server, "#/t/refund-7/r/refund-asks", "#timeline .ev.terminal")
    assert "interrupted" in await page.inner_text("#run-status")
    terminal = await page.locator("#timeline .ev.terminal").inner_text()
    assert "run.interrupt" in terminal
    assert "Approve a $40 refund?" in terminal
    await open_view(page, server, "#/t/refund-7/r/refund-resumes", "#timeline .ev.terminal")
    await page.click("#run-stats a")
    await expect(page).to_have_url(re.compile(r"#/t/refund-7/r/refund-asks$"))


async def test_a_ten_thousand_event_run_opens_on_its_first_page_and_pages_on(
    page: Any, server: Served, screenshots: Path
) -> None:
    started = time.monotonic()
    await open_view(page, server, "#/t/long-run/r/ten-thousand", "#timeline .ev")
    first_page = time.monotonic() - started
    assert first_page < 10  # typically well under a second; the guard only catches a full load
    assert "200 event(s), seq 1–200" in await page.inner_text("#page-range")
    rows = await page.locator("#timeline .ev").count()
    assert 130 <= rows <= 200  # tool outcomes are folded into their calls' rows
    await shot(page, screenshots, "viewer-long-run", full_page=False)
    await page.click("#next-page")
    await expect(page.locator("#page-range")).to_contain_text("seq 201–400")
    for first in (401, 601, 801):
        await page.click("#next-page")
        await expect(page.locator("#page-range")).to_contain_text(f"seq {first}–{first + 199}")
    await page.goto(server.url + "#/t/long-run/r/ten-thousand?after=9900")
    await expect(page.locator("#page-range")).to_contain_text("seq 9901–10000")
    assert await page.locator("#next-page").count() == 0
    assert "run.end" in (await texts(page, "#timeline .ev"))[-1]


async def test_a_running_run_is_followed_live_while_another_process_writes_it(
    page: Any, recorded: dict[str, Any]
) -> None:
    url = f"sqlite:///{recorded['root']}/live.db"
    go = recorded["root"] / "go"
    writer = await asyncio.create_subprocess_exec(sys.executable, str(LIVE_WRITER), url, str(go))
    served: Served | None = None
    try:
        async with open_store(url) as store:  # wait until the run is in the store, still running
            for _ in range(1200):  # a minute: the writer imports LangChain first, on a busy machine too
                row = await store.get_run("live-run")
                called = await store.list_events("live", "live-run", event_types=["tool.call"])
                if row is not None and row.status == "running" and called:
                    break
                assert writer.returncode is None, f"the writer exited early ({writer.returncode})"
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the live run never showed up")
        served = await asyncio.to_thread(Served, url)
        await open_view(page, served, "#/t/live/r/live-run", '#timeline .ev[data-type="tool.call"]')
        assert "running" in await page.inner_text("#run-status")
        assert await page.locator("#live.live").count() == 1
        before = await page.locator("#timeline .ev").count()
        await asyncio.to_thread(go.touch)  # the writer's tool answers: the run goes on and ends
        await page.wait_for_selector("#timeline .ev.terminal", timeout=20_000)
        await page.wait_for_selector("#run-status .st-success", timeout=20_000)
        assert await page.locator("#live.live").count() == 0
        after = await texts(page, "#timeline .ev")
        assert len(after) > before
        assert "Approved; deploying v2 now." in after[-2]
        assert "✓ success" in (await texts(page, '#timeline .ev[data-type="tool.call"]'))[0]
        seqs = await page.locator("#timeline .ev").evaluate_all("rows => rows.map(r => +r.dataset.seq)")
        assert seqs == sorted(set(seqs))  # no event twice, in order
        assert await writer.wait() == 0
    finally:
        if writer.returncode is None:
            writer.kill()
            await writer.wait()
        if served is not None:
            await asyncio.to_thread(served.stop)


async def test_a_server_with_a_token_asks_for_it_once_per_tab(page: Any, recorded: dict[str, Any]) -> None:
    served = await asyncio.to_thread(Served, recorded["url"], "--token", "open-sesame")
    try:
        await open_view(page, served, "#/", "form.token")
        assert await page.locator("#token-refused").count() == 0  # asked, not yet refused
        await page.fill("form.token input", "wrong")
        await page.click("form.token button")
        await expect(page.locator("#token-refused")).to_contain_text("refused")
        assert await page.locator("form.token").count() == 1
        await page.fill("form.token input", "open-sesame")
        await page.click("form.token button")
        await page.wait_for_selector("#threads tbody tr")
        await page.goto(served.url + "#/t/research-1/r/research")
        await page.wait_for_selector("#timeline .task .step")
    finally:
        await asyncio.to_thread(served.stop)


async def test_a_failed_run_shows_its_traceback_as_text(page: Any, server: Served, screenshots: Path) -> None:
    await open_view(page, server, "#/t/broken-1/r/fails", "#run-error pre.traceback")
    assert "error" in await page.inner_text("#run-status")
    box = await page.inner_text("#run-error")
    assert box.startswith("InventoryDown: the inventory service refused SKU-9: 503")
    traceback = await page.locator("#run-error pre.traceback").inner_text()
    lines = traceback.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert any(line.strip() == 'raise InventoryDown(f"the inventory service refused {sku}: 503")'
               for line in lines)
    assert any(line.endswith("recorded.InventoryDown: the inventory service refused SKU-9: 503")
               for line in lines)  # its last line, one line of the text
    assert "\\n" not in traceback
    await shot(page, screenshots, "viewer-error")
    await page.locator('#timeline .ev[data-type="run.error"]').click()
    detail = page.locator("#timeline .detail")
    assert '"traceback": "(content.traceback: below)"' in await detail.locator("pre.json").inner_text()
    text = await detail.locator('pre.text[data-path="content.traceback"]').inner_text()
    assert text.splitlines()[0] == "Traceback (most recent call last):"


async def test_a_supervisor_run_names_each_agent_and_shows_its_handoffs(
    page: Any, server: Served, screenshots: Path
) -> None:
    await open_view(page, server, "#/t/team-1/r/supervised", "#timeline .ev")
    answers = await page.locator('#timeline .ev[data-type="llm.ai.response"] .caller').all_inner_texts()
    assert answers == ["lead_agent", "agent:research_expert", "agent:research_expert", "lead_agent",
                       "agent:math_expert", "agent:math_expert", "lead_agent"]
    kinds = await page.locator('#timeline .ev[data-type="llm.ai.response"] .caller .who').evaluate_all(
        "tags => tags.map(t => t.className)")
    assert kinds[:2] == ["who who-lead", "who who-agent"]
    handoffs = await texts(page, '#timeline .ev[data-type="agent.handoff"] .text')
    assert handoffs == [
        "lead_agent → agent:research_expert hands over (tool call s1)",
        "agent:research_expert → lead_agent hands over",
        "lead_agent → agent:math_expert hands over (tool call s2)",
        "agent:math_expert → lead_agent hands over",
    ]
    tools = await texts(page, '#timeline .ev[data-type="tool.call"]')
    assert any("agent:research_expert web_search" in row for row in tools)
    assert any("agent:math_expert add" in row for row in tools)
    chart = await texts(page, "#usage .bar-row")
    by_name = {row.split()[0]: row for row in chart}
    assert "2 call(s)" in by_name["agent:research_expert"]
    assert "2 call(s)" in by_name["agent:math_expert"]
    assert "3 call(s)" in by_name["lead_agent"]
    await shot(page, screenshots, "viewer-agents")


async def test_a_subagent_task_card_names_its_caller_like_the_timeline(page: Any, server: Served) -> None:
    await open_view(page, server, "#/t/research-1/r/research", "#timeline .task header .who")
    assert await page.locator("#timeline .task header .who-subagent").inner_text() == "subagent:researcher"


async def test_a_runs_scores_are_shown_on_it(page: Any, server: Served) -> None:
    await open_view(page, server, "#/t/support-42/r/tool-turn", "#scores li")
    scores = await texts(page, "#scores li")
    assert scores == ["refund_policy_called pass check refund_policy was called once",
                      "feedback ▲ up human clear and complete"]
    assert await page.locator('#scores li[data-name="feedback"] .pill.st-success').count() == 1
    timeline = await texts(page, '#timeline .ev[data-type="run.score"] .text')
    assert timeline == ["refund_policy_called = pass (check): refund_policy was called once",
                        "feedback = ▲ up (human): clear and complete"]
    await open_view(page, server, "#/t/support-42/r/tool-turn-again", "#timeline .ev.terminal")
    await expect(page.locator("h1")).to_contain_text("tool-turn-again")
    await expect(page.locator("#scores-panel")).to_have_count(0)  # no score, no panel


async def test_two_runs_of_a_thread_compared_show_the_first_divergence_and_the_deltas(
    page: Any, server: Served, recorded: dict[str, Any], screenshots: Path
) -> None:
    async with open_store(recorded["url"]) as store:
        calls = await store.list_events("support-42", "tool-turn", event_types=["tool.call"])
    policy = next(event.seq for event in calls if event.content["tool_name"] == "refund_policy")
    await open_view(page, server, "#/t/support-42", "#compare-form")
    assert await page.locator("#compare-a").input_value() == "tool-turn"  # the two latest runs
    assert await page.locator("#compare-b").input_value() == "tool-turn-again"
    await page.click("#compare-form button")
    await expect(page).to_have_url(re.compile(r"#/t/support-42/compare\?a=tool-turn&b=tool-turn-again$"))
    await page.wait_for_selector("#compare-steps tbody tr")
    summary = await page.inner_text("#compare-summary")
    assert summary.startswith("First divergence: step 1: model call of lead_agent")
    assert "refund_policy" in summary
    figures = dict(await page.locator("#compare-sides tbody tr").evaluate_all(
        "rows => rows.map(r => [r.dataset.figure, [...r.cells].slice(1).map(c => c.textContent)])"))
    assert figures["tool calls"] == ["2", "1", "−1"]
    assert figures["tokens"] == ["2,650", "2,430", "−220"]
    assert figures["cost"] == ["$0.0074", "$0.0067", "−$0.0007"]
    assert figures["model calls"] == ["2", "2", "="]
    rows = page.locator("#compare-steps tbody tr")
    assert await rows.count() == 4
    assert await page.locator("#compare-steps tr.diverged").get_attribute("data-position") == "1"
    only_a = await texts(page, "#compare-steps tr.step-only-a")
    assert only_a == [f"3 lead_agent tool refund_policy #{policy} — only in A"]
    first = await page.locator("#compare-steps tr.diverged").inner_text()
    assert 'tool_calls[1]: {"args":{"days":12},"name":"refund_policy"} → <absent>' in " ".join(first.split())
    assert "final_answer" in await page.inner_text("#compare-run-fields")
    await shot(page, screenshots, "viewer-compare")
    await page.click(f'#compare-steps tr.step-only-a a:text("#{policy}")')
    await page.wait_for_selector(f'#timeline .ev[data-seq="{policy}"]')
    assert "refund_policy" in await page.locator(f'#timeline .ev[data-seq="{policy}"]').inner_text()


async def test_a_model_call_opens_its_request_next_to_its_reply(
    page: Any, server: Served, screenshots: Path
) -> None:
    await open_view(page, server, "#/t/support-42/r/tool-turn", '#timeline .ev[data-type="llm.ai.response"]')
    await page.locator('#timeline .ev[data-type="llm.ai.response"]').nth(1).click()
    call = page.locator("#timeline .detail.call")
    await call.wait_for()
    assert await call.get_attribute("data-call") == "1"
    system = call.locator("details.system-prompt")
    assert await system.get_attribute("open") is None  # folded
    assert (await system.locator("summary").inner_text()).startswith("System prompt (")
    await system.locator("summary").click()
    assert (await system.locator("pre").inner_text()).startswith("You are the order desk of a small shop.\n")
    messages = await texts(call, ".request-messages > li")
    assert messages == [
        "human Where is order A-1001, and can I still return it?",
        'ai Let me look that up. → lookup_order({"order_id":"A-1001"}) call-1 '
        '→ refund_policy({"days":12}) call-2',
        "tool lookup_order · call-1 order A-1001: shipped on 2026-05-02, arriving Friday",
        "tool refund_policy · call-2 refundable",
    ]
    assert await call.locator(".request-messages").get_attribute("start") == "2"  # after the system prompt
    tools = await call.locator(".request-tools li").evaluate_all("items => items.map(i => i.dataset.tool)")
    assert tools == ["lookup_order", "refund_policy"]
    await call.locator(".request-tools summary").click()
    assert '"order_id"' in await call.locator('.request-tools li[data-tool="lookup_order"] pre').inner_text()
    reply = " ".join((await call.locator(".call-reply").inner_text()).split())
    assert "Order A-1001 shipped on 2026-05-02 and arrives Friday; it is still refundable." in reply
    assert "1,350 in + 60 out tokens · $0.0040" in reply
    await shot(page, screenshots, "viewer-call")
    request_row = page.locator('#timeline .ev[data-type="llm.request"]').first
    # the system prompt and the question
    assert "sent 2 message(s) and tools" in await request_row.inner_text()
    await request_row.click()
    first = page.locator('#timeline .detail.call[data-call="0"]')
    await first.wait_for()
    assert await texts(first, ".request-messages > li") == [
        "human Where is order A-1001, and can I still return it?"]
    assert "Let me look that up." in await first.locator(".call-reply").inner_text()


async def test_feedback_buttons_record_a_score_on_a_server_that_takes_writes(
    page: Any, recorded: dict[str, Any]
) -> None:
    copy = recorded["root"] / "feedback.db"
    await asyncio.to_thread(backup, recorded["root"] / "journal.db", copy)
    url = f"sqlite:///{copy}"
    plain = await asyncio.to_thread(Served, url)
    try:  # without a token the server takes no write: no buttons
        await open_view(page, plain, "#/t/refund-7/r/refund-resumes", "#timeline .ev.terminal")
        assert await page.locator("#feedback").count() == 0
    finally:
        await asyncio.to_thread(plain.stop)
    served = await asyncio.to_thread(Served, url, "--token", "open-sesame")
    try:
        await open_view(page, served, "#/t/refund-7/r/refund-resumes", "form.token")
        await page.fill("form.token input", "open-sesame")
        await page.click("form.token button")
        await page.wait_for_selector("#feedback")
        assert await page.locator("#scores li").count() == 0
        await page.fill('#feedback input[name="comment"]', "quick and right")
        await page.click("#feedback button.thumb.up")
        await expect(page.locator("#feedback-said")).to_contain_text("recorded as feedback = ▲ up")
        assert await texts(page, "#scores li") == ["feedback ▲ up human quick and right"]
        await page.click("#feedback button.thumb.down")
        await expect(page.locator("#scores li")).to_have_count(2)
        await page.reload()
        await page.wait_for_selector("#scores li")
        assert await texts(page, "#scores li") == ["feedback ▲ up human quick and right",
                                                   "feedback ▼ down human"]
    finally:
        await asyncio.to_thread(served.stop)
    async with open_store(url) as store:
        scores = await store.list_events("refund-7", "refund-resumes", event_types=["run.score"])
    assert [(e.content["value"], e.content.get("comment")) for e in scores] == [("up", "quick and right"),
                                                                                ("down", None)]


def backup(source: Path, target: Path) -> None:
    """A consistent copy of a SQLite store (another process has it open)."""
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)
