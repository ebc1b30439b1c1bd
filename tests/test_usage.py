"""Usage extraction from every provider shape, pricing and the run tally."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, Generation, LLMResult

from run_journal.redact import is_secret_key, redact_secrets
from run_journal.usage import RunTally, TokenUsage, cost_of, extract_usage, usage_from_mapping


def chat(usage: dict[str, object] | None = None, **llm_output: object) -> LLMResult:
    message = AIMessage("x", usage_metadata=usage) if usage else AIMessage("x")  # type: ignore[arg-type]  # test data
    return LLMResult(generations=[[ChatGeneration(message=message)]], llm_output=llm_output or None)


def test_usage_metadata_wins_and_details_are_read() -> None:
    usage = {"input_tokens": 10, "output_tokens": 4, "total_tokens": 14,
             "input_token_details": {"cache_read": 3, "cache_creation": 2},
             "output_token_details": {"reasoning": 1}}
    found = extract_usage(chat(usage, token_usage={"prompt_tokens": 999, "completion_tokens": 1}))
    assert found == TokenUsage(10, 4, 14, 3, 2, 1)


def test_every_generation_is_summed() -> None:
    usage = {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3}
    result = LLMResult(generations=[[ChatGeneration(message=AIMessage("a", usage_metadata=usage)),  # type: ignore[arg-type]  # test data
                                     ChatGeneration(message=AIMessage("b", usage_metadata=usage))]])  # type: ignore[arg-type]  # test data
    assert extract_usage(result) == TokenUsage(2, 4, 6)


def test_openai_llm_output() -> None:
    found = extract_usage(chat(token_usage={
        "prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
        "prompt_tokens_details": {"cached_tokens": 30},
        "completion_tokens_details": {"reasoning_tokens": 5}}))
    assert found == TokenUsage(100, 20, 120, 30, 0, 5)


def test_anthropic_usage_counts_cache_into_input() -> None:
    wire = {"input_tokens": 10, "output_tokens": 5,  # Anthropic's wire shape, not LangChain's
            "cache_read_input_tokens": 100, "cache_creation_input_tokens": 50}
    found = extract_usage(LLMResult(generations=[[ChatGeneration(message=AIMessage("x"))]],
                                    llm_output={"usage": wire}))
    assert found is not None
    assert (found.input_tokens, found.cache_read_tokens, found.cache_creation_tokens) == (160, 100, 50)
    assert found.total_tokens == 165


def test_generation_info_and_nothing_reported() -> None:
    info = Generation(text="x", generation_info={"token_usage": {"prompt_tokens": 3, "completion_tokens": 4}})
    assert extract_usage(LLMResult(generations=[[info]])) == TokenUsage(3, 4, 7)
    assert extract_usage(LLMResult(generations=[[Generation(text="x")]])) is None
    assert usage_from_mapping("junk") is None
    assert usage_from_mapping({"input_tokens": -5, "output_tokens": True}) == TokenUsage(0, 0, 0)


def test_pricing_and_unknown_models() -> None:
    usage = TokenUsage(input_tokens=1_000_000, output_tokens=1_000_000, total_tokens=2_000_000,
                       cache_read_tokens=500_000, cache_creation_tokens=100_000)
    pricing = {"m": {"input": 2.0, "output": 8.0, "cache_read": 0.5, "cache_write": 2.5}}
    assert cost_of(usage, "m", pricing) == pytest.approx(0.4 * 2 + 0.5 * 0.5 + 0.1 * 2.5 + 8.0)
    assert cost_of(usage, "other", pricing) is None
    assert cost_of(usage, None, pricing) is None
    tally = RunTally(pricing=pricing)
    tally.add_call("lead_agent", "m", TokenUsage(1000, 0, 1000))
    assert tally.total.cost_usd == pytest.approx(0.002)
    tally.add_call("subagent:x", "unpriced", TokenUsage(1000, 0, 1000))
    assert tally.total.cost_usd is None  # unknown is not free
    assert tally.by_caller["lead_agent"].cost_usd == pytest.approx(0.002)
    assert tally.by_model["unpriced"].cost_usd is None
    assert tally.total.llm_calls == 2


@pytest.mark.parametrize(
    ("key", "secret"),
    [("api_key", True), ("X-Api-Key", True), ("Authorization", True), ("db_password", True),
     ("client_secret", True), ("access_token", True), ("token", True), ("max_tokens", False),
     ("input_tokens", False), ("query", False), ("clientSecret", True), ("authToken", True),
     ("sessionToken", True), ("dbPassword", True), ("accessKey", True), ("apiKey", True),
     ("maxTokens", False), ("tokenizer", False), ("author", False)],
)
def test_default_redaction(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret
    redacted = redact_secrets({"nested": [{key: "value"}]})
    assert (redacted["nested"][0][key] == "[redacted]") is secret


# -- cache writes by lifetime, audio, service tiers ----------------------------------------------------
ANTHROPIC_PLAIN = {  # what langchain-anthropic reports for a non-streamed call with both kinds of writes
    "input_tokens": 3_010, "output_tokens": 40, "total_tokens": 3_050,
    "input_token_details": {"cache_read": 1_000, "cache_creation": 0,
                            "ephemeral_5m_input_tokens": 1_200, "ephemeral_1h_input_tokens": 800}}
ANTHROPIC_STREAMED = {  # the same call streamed: the stream's last event has the writes' total only
    "input_tokens": 3_010, "output_tokens": 40, "total_tokens": 3_050,
    "input_token_details": {"cache_read": 1_000, "cache_creation": 2_000}}


def test_cache_writes_reported_by_lifetime_are_counted() -> None:
    plain, streamed = extract_usage(chat(ANTHROPIC_PLAIN)), extract_usage(chat(ANTHROPIC_STREAMED))
    assert plain is not None
    assert streamed is not None
    assert (plain.cache_creation_tokens, plain.cache_creation_1h_tokens) == (2_000, 800)
    assert (streamed.cache_creation_tokens, streamed.cache_creation_1h_tokens) == (2_000, 0)
    assert plain.input_tokens == streamed.input_tokens
    assert plain.cache_read_tokens == streamed.cache_read_tokens
    both = {**ANTHROPIC_PLAIN, "input_token_details": {**ANTHROPIC_PLAIN["input_token_details"],  # type: ignore[dict-item]
                                                       "cache_creation": 2_000}}
    found = extract_usage(chat(both))  # a total beside its split is not counted twice
    assert found is not None
    assert (found.cache_creation_tokens, found.cache_creation_1h_tokens) == (2_000, 800)


def test_cache_writes_by_lifetime_in_anthropics_wire_shape() -> None:
    wire = {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 100,
            "cache_creation_input_tokens": 50,
            "cache_creation": {"ephemeral_5m_input_tokens": 20, "ephemeral_1h_input_tokens": 30}}
    found = usage_from_mapping(wire)
    assert found is not None
    assert (found.input_tokens, found.cache_creation_tokens, found.cache_creation_1h_tokens) == (160, 50, 30)


def test_audio_and_service_tier_details_are_read() -> None:
    usage = {"input_tokens": 900, "output_tokens": 300, "total_tokens": 1_200,
             "input_token_details": {"audio": 400, "priority_cache_read": 100, "priority": 800},
             "output_token_details": {"audio": 120, "priority_reasoning": 60, "priority": 240}}
    found = extract_usage(chat(usage))
    assert found == TokenUsage(900, 300, 1_200, cache_read_tokens=100, reasoning_tokens=60,
                               input_audio_tokens=400, output_audio_tokens=120)
    openai_wire = {"prompt_tokens": 900, "completion_tokens": 300,
                   "prompt_tokens_details": {"cached_tokens": 100, "audio_tokens": 400},
                   "completion_tokens_details": {"reasoning_tokens": 60, "audio_tokens": 120}}
    assert usage_from_mapping(openai_wire) == found


def test_the_stored_shape_round_trips_every_kind() -> None:
    usage = TokenUsage(1, 2, 3, 4, 5, 6, 7, 8, 9)
    assert TokenUsage.from_dict(usage.to_dict()) == usage
    assert usage_from_mapping(usage.to_dict()) == usage
    assert TokenUsage.from_dict({"input_tokens": 3, "output_tokens": 4}) == TokenUsage(3, 4, 7)
    assert TokenUsage.from_dict(None) is None


# -- the subagent usage rule ---------------------------------------------------------------------------
def test_a_tasks_reported_usage_counts_once_and_only_when_none_of_its_calls_was_seen() -> None:
    tally = RunTally(pricing={"m": {"input": 1.0, "output": 1.0}})
    reported = TokenUsage(100, 10, 110)
    tally.task_started("t1", "subagent:a")
    assert tally.task_ended("t1", "subagent:a", "m", reported)  # ran elsewhere: its report counts
    tally.task_started("t1", "subagent:a")
    assert not tally.task_ended("t1", "subagent:a", "m", reported)  # once per task
    tally.task_started("t2", "subagent:a")
    tally.add_call("subagent:a", "m", TokenUsage(5, 5, 10))  # seen in process
    assert not tally.task_ended("t2", "subagent:a", "m", reported)
    tally.task_started("t3", "subagent:b")
    assert not tally.task_ended("t3", "subagent:b", "m", None)  # nothing reported
    assert tally.by_caller["subagent:a"].llm_calls == 2
    assert tally.by_caller["subagent:a"].input_tokens == 105
    assert "subagent:b" not in tally.by_caller


def test_repricing_depends_on_the_shared_usage_code_only() -> None:
    """The reader's side (``cli/reprice``, repricing) imports neither the journal's side of usage (reading
    LangChain results) nor LangChain, directly or through the shared modules."""
    import ast
    from pathlib import Path

    import run_journal

    root = Path(run_journal.__file__).parent
    graph: dict[str, set[str]] = {}
    shared = ("usage.repricing", "usage.tally", "usage.tokens", "usage", "prices", "runs")
    for module in ("cli.reprice", *shared):
        path = root / (module.replace(".", "/") + ("/__init__.py" if module == "usage" else ".py"))
        imported = set()
        todo: list[ast.AST] = [ast.parse(path.read_text(encoding="utf-8"))]
        while todo:
            for node in ast.iter_child_nodes(todo.pop()):
                if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                    continue  # names for the type checker only
                if isinstance(node, ast.ImportFrom) and node.module:
                    imported.add(node.module)
                elif isinstance(node, ast.Import):
                    imported.update(alias.name for alias in node.names)
                todo.append(node)
        graph[module] = imported
    reached = set().union(*graph.values())
    assert "run_journal.usage.reading" not in reached
    assert not any(name.startswith("langchain") for name in reached)
    assert "run_journal.usage.repricing" in graph["cli.reprice"]
