"""The JSON contract at run time: load it, validate records against it, render the events reference."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from run_journal.catalog import EVENTS, MIDDLEWARE_PREFIX, canonical_event_type


@cache
def load_contract() -> dict[str, Any]:
    """The contract shipped with the package (``contracts/run_event_stream_contract.json``)."""
    text = resources.files("run_journal").joinpath("contract.json").read_text("utf-8")
    contract: dict[str, Any] = json.loads(text)
    return contract


@cache
def _validators() -> dict[str, tuple[Draft202012Validator, Draft202012Validator]]:
    contract = load_contract()
    registry: Registry[Any] = Registry().with_resource(
        contract["$id"], Resource.from_contents(contract)
    )
    out: dict[str, tuple[Draft202012Validator, Draft202012Validator]] = {}
    for section in ("events", "dynamic_events"):
        for name in contract[section]:
            pointer = f"{contract['$id']}#/{section}/{name}".replace("{", "%7B").replace("}", "%7D")
            out[name] = (
                Draft202012Validator({"$ref": f"{pointer}/content"}, registry=registry),
                Draft202012Validator({"$ref": f"{pointer}/metadata"}, registry=registry),
            )
    record = Draft202012Validator(
        {"$ref": f"{contract['$id']}#/$defs/record"},
        registry=registry,
        format_checker=Draft202012Validator.FORMAT_CHECKER,
    )
    out[""] = (record, record)
    return out


def validate_record(record: Mapping[str, Any]) -> list[str]:
    """Problems of one stored record (its ``to_dict()`` form) against the contract; [] when valid.

    The envelope is checked for every record; content and metadata for catalog events, the
    middleware pattern and the legacy alias. Unknown event types pass (additions are additive).
    """
    validators = _validators()
    record_validator = validators[""][0]
    problems = [f"record: {_describe(error)}" for error in record_validator.iter_errors(record)]
    if problems:
        return problems
    name = canonical_event_type(str(record["event_type"]))
    if name.startswith(MIDDLEWARE_PREFIX):
        name = "middleware:{tag}"
    if name not in validators:
        return []
    content_validator, metadata_validator = validators[name]
    problems += [f"content: {_describe(e)}" for e in content_validator.iter_errors(record["content"])]
    problems += [
        f"metadata: {_describe(e)}" for e in metadata_validator.iter_errors(record["metadata"])
    ]
    return problems


def _describe(error: Any) -> str:
    where = "/".join(str(part) for part in error.absolute_path) or "(root)"
    return f"{where}: {error.message}"


def render_events_markdown() -> str:
    """``docs/events.md``: every event with its category, producer and payload fields."""
    contract = load_contract()
    lines = [
        "# Events reference",
        "",
        "Generated from `run_journal.catalog` and `contracts/run_event_stream_contract.json` by",
        "`python -m run_journal.contract > docs/events.md`; a test fails when it drifts.",
        f"Contract version {contract['contract_version']}.",
        "",
        "| event type | category | producer | summary |",
        "| --- | --- | --- | --- |",
    ]
    specs = {**contract["events"], **contract["dynamic_events"]}
    for name, spec in specs.items():
        lines.append(f"| `{name}` | {spec['category']} | {spec['producer']} | {spec['summary']} |")
    lines += ["", "Legacy aliases (read-only, never written by producers):", ""]
    for alias, spec in contract["legacy_aliases"].items():
        lines.append(f"- `{alias}` reads as `{spec['canonical']}` ({spec['category']})")
    for name, spec in specs.items():
        lines += ["", f"## `{name}`", "", spec["summary"], ""]
        if name in EVENTS or "pattern" in spec:
            lines.append(f"Category `{spec['category']}`; written by {spec['producer']}.")
        if "pattern" in spec:
            lines.append(f"Pattern: `{spec['pattern']}`.")
        for part in ("content", "metadata"):
            lines += ["", f"**{part}**: {_field_table(spec[part], contract)}"]
    return "\n".join(lines) + "\n"


def _field_table(schema: Mapping[str, Any], contract: Mapping[str, Any]) -> str:
    if "$ref" in schema:
        target = schema["$ref"].rsplit("/", 1)[-1]
        schema = contract["$defs"][target]
    if schema.get("type") != "object":
        return f"{schema.get('type', 'any JSON value')}. {schema.get('description', '')}".strip()
    required = set(schema.get("required", ()))
    fields = [
        f"`{key}`{'' if key in required else ' (optional)'}: {_type_name(value)}"
        for key, value in schema.get("properties", {}).items()
    ]
    return "object; " + "; ".join(fields) if fields else "object"


def _type_name(schema: Mapping[str, Any]) -> str:
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if "enum" in schema:
        return " | ".join(json.dumps(value) for value in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"])
    if "anyOf" in schema:
        return " or ".join(_type_name(option) for option in schema["anyOf"])
    kind = schema.get("type", "any")
    return " or ".join(map(str, kind)) if isinstance(kind, list) else str(kind)


if __name__ == "__main__":
    print(render_events_markdown(), end="")
