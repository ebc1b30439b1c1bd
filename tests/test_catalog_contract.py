"""The catalog and the JSON contract are twins: same names, categories, producers, limits.

Producers write from ``run_journal.catalog``; consumers in other languages read the JSON contract. If the
two drift, a consumer routes a row to the wrong place, so every disagreement fails here, and
``docs/events.md`` (what users read) is checked against the renderer so it cannot drift either.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from run_journal import catalog
from run_journal.catalog import Category, EventDefinition
from run_journal.contract import load_contract, render_events_markdown, validate_record

ROOT = Path(__file__).resolve().parent.parent
CONTRACT_PATH = ROOT / "contracts" / "run_event_stream_contract.json"


def catalog_differences(contract: dict[str, Any]) -> list[str]:
    """Every way the live catalog module and ``contract`` disagree (reads ``catalog`` at call time)."""
    problems: list[str] = []
    events = contract["events"]
    for name in sorted(set(catalog.EVENTS) ^ set(events)):
        where = "catalog" if name in catalog.EVENTS else "contract"
        problems.append(f"{name}: only in the {where}")
    for name in sorted(set(catalog.EVENTS) & set(events)):
        problems += _entry_differences(name, catalog.EVENTS[name], events[name])
    dynamic = contract["dynamic_events"]
    if set(dynamic) != {catalog.MIDDLEWARE_EVENT.event_type}:
        problems.append(f"dynamic events {sorted(dynamic)} != [{catalog.MIDDLEWARE_EVENT.event_type}]")
    else:
        name = catalog.MIDDLEWARE_EVENT.event_type
        problems += _entry_differences(name, catalog.MIDDLEWARE_EVENT, dynamic[name])
    categories = [category.value for category in catalog.Category]
    if list(contract["categories"]) != categories:
        problems.append(f"categories {list(contract['categories'])} != {categories}")
    aliases = {alias: spec["canonical"] for alias, spec in contract["legacy_aliases"].items()}
    if aliases != dict(catalog.LEGACY_ALIASES):
        problems.append(f"legacy aliases {aliases} != {dict(catalog.LEGACY_ALIASES)}")
    for alias, spec in contract["legacy_aliases"].items():
        target = catalog.EVENTS.get(catalog.LEGACY_ALIASES.get(alias, ""))
        if target is None or spec["category"] != target.category.value or spec.get("read_only") is not True:
            problems.append(f"legacy alias {alias}: {spec} does not match its read-only catalog target")
    return problems


def _entry_differences(name: str, definition: EventDefinition, spec: dict[str, Any]) -> list[str]:
    problems = []
    for field in ("category", "producer", "summary"):
        ours = getattr(definition, field)
        ours = ours.value if isinstance(ours, Category) else ours
        if spec.get(field) != ours:
            theirs = spec.get(field)
            problems.append(f"{name}: {field} is {ours!r} in the catalog, {theirs!r} in the contract")
    return problems


@pytest.fixture(scope="module")
def contract() -> dict[str, Any]:
    return load_contract()


def test_packaged_contract_is_the_repository_file(contract: dict[str, Any]) -> None:
    assert json.loads(CONTRACT_PATH.read_text("utf-8")) == contract


def test_catalog_and_contract_agree(contract: dict[str, Any]) -> None:
    assert catalog_differences(contract) == []


def test_the_catalog_holds_the_specified_events() -> None:
    specified = {
        "run.start": "trace", "run.end": "outputs", "run.error": "error", "llm.human.input": "message",
        "llm.ai.response": "message", "llm.tool.result": "message", "llm.error": "trace",
        "context:memory": "context", "subagent.start": "subagent", "subagent.step": "subagent",
        "subagent.end": "subagent", "workspace_changes": "workspace",
        # the names that close the specification's known gaps
        "tool.call": "trace", "tool.outcome": "trace", "run.interrupt": "outputs", "run.cancel": "error",
        # multi-agent runs: which agent handed the turn to which
        "agent.handoff": "trace",
        # evaluation: a score given to a run (check results, feedback)
        "run.score": "trace",
        # what each model call was sent (its bodies stored once per thread)
        "llm.request": "trace",
    }
    assert {name: entry.category.value for name, entry in catalog.EVENTS.items()} == specified
    assert catalog.MIDDLEWARE_EVENT.category is Category.MIDDLEWARE
    assert "ai_message" not in catalog.EVENTS  # the alias stays outside the canonical catalog
    assert [c.value for c in Category] == [
        "message", "trace", "outputs", "error", "middleware", "context", "subagent", "workspace"
    ]


def test_changing_one_category_in_the_catalog_alone_is_reported(
    contract: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    moved = dict(catalog.EVENTS)
    original = moved["llm.tool.result"]
    moved["llm.tool.result"] = EventDefinition(
        original.event_type, Category.TRACE, original.producer, original.summary
    )
    monkeypatch.setattr(catalog, "EVENTS", MappingProxyType(moved))
    problems = catalog_differences(contract)
    assert problems == [
        "llm.tool.result: category is 'trace' in the catalog, 'message' in the contract"
    ]


def test_adding_renaming_or_aliasing_in_one_place_is_reported(
    contract: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    extra = dict(catalog.EVENTS)
    extra["run.pause"] = EventDefinition("run.pause", Category.TRACE, "nobody", "not in the contract")
    monkeypatch.setattr(catalog, "EVENTS", MappingProxyType(extra))
    assert catalog_differences(contract) == ["run.pause: only in the catalog"]
    monkeypatch.undo()
    monkeypatch.setattr(catalog, "LEGACY_ALIASES", MappingProxyType({"ai_msg": "llm.ai.response"}))
    assert any("legacy alias" in problem for problem in catalog_differences(contract))
    monkeypatch.undo()
    renamed = {"middleware:{name}": contract["dynamic_events"]["middleware:{tag}"]}
    changed = {**contract, "dynamic_events": renamed}
    assert any("dynamic events" in problem for problem in catalog_differences(changed))


def test_limits_are_the_same_in_catalog_and_contract(contract: dict[str, Any]) -> None:
    assert contract["limits"] == {
        "event_type_max_length": catalog.EVENT_TYPE_MAX_LENGTH,
        "category_max_length": catalog.CATEGORY_MAX_LENGTH,
        "middleware_tag_min_length": 1,
        "middleware_tag_max_length": catalog.MIDDLEWARE_TAG_MAX_LENGTH,
        "id_max_length": catalog.ID_MAX_LENGTH,
    }
    assert len(catalog.MIDDLEWARE_PREFIX) + catalog.MIDDLEWARE_TAG_MAX_LENGTH == catalog.EVENT_TYPE_MAX_LENGTH
    record = contract["$defs"]["record"]["properties"]
    assert record["event_type"]["maxLength"] == catalog.EVENT_TYPE_MAX_LENGTH
    assert record["category"]["maxLength"] == catalog.CATEGORY_MAX_LENGTH
    for field in ("thread_id", "run_id", "event_id", "user_id"):
        assert record[field]["maxLength"] == catalog.ID_MAX_LENGTH
    assert all(len(name) <= catalog.EVENT_TYPE_MAX_LENGTH for name in catalog.EVENTS)
    assert all(len(c.value) <= catalog.CATEGORY_MAX_LENGTH for c in Category)


def _schemas(contract: dict[str, Any]) -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = [("(document)", contract)]
    for section in ("events", "dynamic_events"):
        for name, spec in contract[section].items():
            found += [(f"{name}.content", spec["content"]), (f"{name}.metadata", spec["metadata"])]
    found += [(f"$defs/{name}", schema) for name, schema in contract["$defs"].items()]
    return found


def test_every_schema_in_the_contract_is_valid_2020_12(contract: dict[str, Any]) -> None:
    schemas = _schemas(contract)
    assert len(schemas) == 1 + 2 * (len(catalog.EVENTS) + 1) + len(contract["$defs"])
    assert contract["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    for where, schema in schemas:
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as error:  # pragma: no cover - the message names the broken schema
            pytest.fail(f"{where} is not a valid 2020-12 schema: {error.message}")


def test_check_schema_would_catch_a_broken_schema() -> None:
    with pytest.raises(SchemaError):
        Draft202012Validator.check_schema({"type": "object", "required": "caller"})


def test_payload_objects_allow_additional_properties(contract: dict[str, Any]) -> None:
    for where, schema in _schemas(contract)[1:]:
        if schema.get("type") == "object" and "properties" in schema:
            assert schema.get("additionalProperties") is True, where
            assert set(schema.get("required", ())) <= set(schema["properties"]), where


def test_contract_is_versioned_and_documents_compatibility(contract: dict[str, Any]) -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", contract["contract_version"])
    assert contract["compatibility"]["additive"]
    assert contract["compatibility"]["breaking"]
    assert any("category" in rule for rule in contract["compatibility"]["breaking"])
    assert isinstance(contract["known_gaps"], list)


def _record(**changes: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "thread_id": "t1", "run_id": "r1", "seq": 1, "event_type": "run.cancel", "category": "error",
        "content": {"reason": "user"}, "metadata": {"status": "cancelled"},
        "created_at": "2025-01-02T03:04:05.678901+00:00",
    }
    record.update(changes)
    return record


def test_record_schema_accepts_a_minimal_record_with_unknown_fields() -> None:
    assert validate_record(_record()) == []
    assert validate_record(_record(event_id="e1", user_id=None, shard=7, content_is_json=True)) == []
    assert validate_record(_record(user_id="u1")) == []


@pytest.mark.parametrize(
    "field",
    ["thread_id", "run_id", "seq", "event_type", "category", "content", "metadata", "created_at"],
)
def test_record_schema_requires_every_envelope_field(field: str) -> None:
    record = _record()
    del record[field]
    assert any(f"'{field}' is a required property" in problem for problem in validate_record(record))


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"seq": 0}, "seq"),
        ({"seq": -3}, "seq"),
        ({"seq": "1"}, "seq"),
        ({"created_at": "yesterday"}, "created_at"),
        ({"created_at": "2025-01-02T03:04:05"}, "created_at"),  # no offset: not an RFC 3339 date-time
        ({"event_type": "x" * 33}, "event_type"),
        ({"category": "c" * 17}, "category"),
        ({"event_id": ""}, "event_id"),
        ({"user_id": 5}, "user_id"),
        ({"metadata": []}, "metadata"),
    ],
)
def test_record_schema_rejects_bad_envelopes(changes: dict[str, Any], fragment: str) -> None:
    problems = validate_record(_record(**changes))
    assert problems
    assert all(problem.startswith(f"record: {fragment}") for problem in problems)


def test_payload_schemas_are_applied_through_the_references() -> None:
    assert validate_record(_record(content={})) == ["content: (root): 'reason' is a required property"]
    assert validate_record(_record(metadata={"status": "success"}))  # const "cancelled"
    message = {"type": "ai", "content": "hi", "tool_calls": []}
    ai = _record(event_type="llm.ai.response", category="message", content=message,
                 metadata={"caller": "lead_agent", "llm_call_index": 0})
    assert validate_record(ai) == []
    assert validate_record({**ai, "content": {"content": "hi"}})  # $defs/message needs "type"
    assert validate_record({**ai, "event_type": "ai_message", "content": {"x": 1}})  # alias -> target
    middleware = _record(event_type="middleware:guardrail", category="middleware",
                         content={"name": "g", "hook": "before_model", "action": "block", "changes": {}},
                         metadata={})
    assert validate_record(middleware) == []
    assert validate_record({**middleware, "content": {"name": "g"}})
    assert validate_record(_record(event_type="brand.new", category="trace", content=[1])) == []
    score = _record(event_type="run.score", category="trace", metadata={"source": "human"},
                    content={"name": "helpful", "value": 1, "source": "human", "comment": None})
    assert validate_record(score) == []
    for value in (True, 0.5, "up"):
        assert validate_record({**score, "content": {**score["content"], "value": value}}) == []
    assert validate_record({**score, "content": {**score["content"], "value": [1]}})  # not a score value
    assert validate_record({**score, "content": {"name": "helpful", "value": 1}})  # source is required
    digest = "ab" * 32
    request = _record(event_type="llm.request", category="trace",
                      content={"messages_sha256": digest, "message_count": 2, "tools_sha256": None,
                               "params_sha256": digest},
                      metadata={"caller": "lead_agent", "llm_call_index": 0, "llm_run_id": "r",
                                "model_name": "m"})
    assert validate_record(request) == []
    assert validate_record({**request, "content": {**request["content"], "messages_sha256": "AB" * 32}})
    assert validate_record({**request, "content": {**request["content"], "message_count": -1}})
    assert validate_record({**request, "content": {**request["content"], "tools_sha256": "x"}})
    assert validate_record({**request, "metadata": {"caller": "lead_agent", "llm_call_index": 0}})


def test_middleware_pattern_accepts_1_to_21_characters(contract: dict[str, Any]) -> None:
    pattern = re.compile(contract["dynamic_events"]["middleware:{tag}"]["pattern"])
    for length in (1, 2, 20, 21):
        assert pattern.search("middleware:" + "t" * length), length
        assert catalog.middleware_event_type("t" * length) == "middleware:" + "t" * length
    for length in (0, 22):
        assert not pattern.search("middleware:" + "t" * length), length
        with pytest.raises(ValueError, match="1-21 characters"):
            catalog.middleware_event_type("t" * length)
    for tag in ("guardrail", "safety_termination", "skill_activation", "skill_secrets", "a.b-c_9"):
        assert pattern.search(catalog.middleware_event_type(tag))


def test_docs_events_md_is_the_rendered_contract() -> None:
    path = ROOT / "docs" / "events.md"
    assert path.read_text("utf-8") == render_events_markdown(), (
        "docs/events.md is stale: run `python -m run_journal.contract > docs/events.md`"
    )


def test_events_reference_lists_every_event_with_category_producer_and_fields(
    contract: dict[str, Any],
) -> None:
    text = render_events_markdown()
    for definition in [*catalog.EVENTS.values(), catalog.MIDDLEWARE_EVENT]:
        row = f"| `{definition.event_type}` | `{definition.category.value}` | {definition.producer} |"
        assert row in text, definition.event_type
        assert f"\n## `{definition.event_type}`\n" in text
    for name, spec in contract["events"].items():
        section = text.split(f"\n## `{name}`\n", 1)[1].split("\n## ", 1)[0]
        content = spec["content"]
        for field in content.get("required", ()):
            assert f"| `{field}` |" in section, (name, field)
        for field in spec["metadata"].get("required", ()):
            assert f"| `{field}` |" in section, (name, field)
    assert "`ai_message`" in text
    for gap in contract["known_gaps"]:
        assert gap in text
