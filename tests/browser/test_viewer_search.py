"""The viewer's runs page and usage page in a real headless Chromium, over ``/api/runs`` and
``/api/usage`` (``search_runs`` and the usage trend): filters, newest first, a chart whose figures are
the sums of the run rows. See ``test_viewer.py`` for the browser and the recorded store.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from run_journal import open_store

from .conftest import Served
from .test_viewer import expect, open_view, shot  # a missing Playwright skips (or fails) there

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_the_runs_page_filters_runs_of_every_thread_newest_first(
    page: Any, server: Served, recorded: dict[str, Any], screenshots: Path
) -> None:
    async with open_store(recorded["url"]) as store:
        newest_first = [row.run_id for row in (await store.search_runs(limit=100)).rows]
    await open_view(page, server, "#/runs", "#all-runs tbody tr")
    shown = await page.locator("#all-runs tbody tr").evaluate_all("rows => rows.map(r => r.dataset.run)")
    assert shown == newest_first
    assert shown[-1] == "ten-thousand"  # started two days before the others
    await shot(page, screenshots, "viewer-runs")
    await page.select_option('#run-filters select[name="status"]', "error")
    await page.click('#run-filters button[type="submit"]')
    await expect(page).to_have_url(re.compile(r"#/runs\?status=error$"))
    await expect(page.locator("#all-runs tbody tr")).to_have_count(1)
    assert await page.locator("#all-runs tbody tr").get_attribute("data-run") == "fails"
    await page.goto(server.url + "#/runs")
    await expect(page.locator("#all-runs tbody tr")).to_have_count(len(newest_first))
    await page.fill('#run-filters input[name="tool"]', "refund_policy")
    await page.click('#run-filters button[type="submit"]')
    await expect(page.locator("#all-runs tbody tr")).to_have_count(1)
    assert await page.locator("#all-runs tbody tr").get_attribute("data-run") == "tool-turn"
    with_model_calls = [run for run in newest_first
                        if run not in {"ten-thousand", "fails", "refund-asks"}]  # no model call in those
    await page.goto(server.url + "#/runs?range=1d&model=fake-gpt")
    # the previous filter's one row stays on screen until this query's rows replace it
    await expect(page.locator("#all-runs tbody tr")).to_have_count(len(with_model_calls))
    recent = await page.locator("#all-runs tbody tr").evaluate_all("rows => rows.map(r => r.dataset.run)")
    assert recent == with_model_calls
    assert await page.locator('#run-filters select[name="range"]').input_value() == "1d"
    await page.goto(server.url + "#/runs?text=sku-9")
    await expect(page.locator("#all-runs tbody tr")).to_have_count(1)
    assert await page.locator("#all-runs tbody tr").get_attribute("data-run") == "fails"
    await page.goto(server.url + "#/runs?status=cancelled")
    await page.wait_for_selector("#no-runs")


async def test_the_usage_page_charts_tokens_and_cost_per_day_as_the_run_rows_add_up(
    page: Any, server: Served, recorded: dict[str, Any], screenshots: Path
) -> None:
    async with open_store(recorded["url"]) as store:
        rows = (await store.search_runs(limit=100)).rows
    tokens: dict[str, int] = {}
    for row in rows:
        assert row.started_at is not None
        day = row.started_at.date().isoformat()
        tokens[day] = tokens.get(day, 0) + row.usage.total_tokens
    await open_view(page, server, "#/usage", "#day-chart rect")
    bars = dict(await page.locator("#day-chart rect").evaluate_all(
        "bars => bars.map(b => [b.dataset.day, +b.dataset.tokens])"))
    first, last = min(tokens), max(tokens)
    assert next(iter(bars)) == first
    assert list(bars)[-1] == last
    assert {day: value for day, value in bars.items() if value} == tokens  # days between: zero
    assert len(bars) >= 3  # the long run's day, the days after it, today
    dots = await page.locator("#day-chart circle").count()
    assert dots == len(bars)
    model = " ".join((await page.locator('.usage-table tr[data-key="fake-gpt"]').inner_text()).split())
    assert f"{sum(row.usage.total_tokens for row in rows if 'fake-gpt' in row.usage_by_model):,}" in model
    assert model.endswith("+ ?")  # the long run has no price: its cost is not counted as zero
    callers = await page.locator(".usage-table tr[data-key]").evaluate_all(
        "rows => rows.map(r => r.dataset.key)")
    assert {"lead_agent", "agent:research_expert", "agent:math_expert", "subagent:researcher"} <= set(callers)
    await shot(page, screenshots, "viewer-usage")
