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
