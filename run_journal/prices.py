"""The price database: model prices from ``genai-prices``, matched the way it matches them, cheap per call.

``genai-prices`` (Pydantic's maintained price data for every major provider) is imported the first
time a price is needed, never by ``import run_journal``. A model name is matched by the database
itself: by the provider the call was made through when it is known (LangChain's ``ls_provider``:
``amazon_bedrock`` prices a Bedrock model id as AWS bills it), otherwise its provider from the name
(``gpt-4o`` is OpenAI's, ``claude-...`` Anthropic's), dated names and aliases through each model's
match rules (``gpt-4o-2024-08-06``, ``claude-3-5-sonnet-latest``, ``models/gemini-1.5-pro``), and a
``provider:model`` or ``provider/model`` name by that provider when the whole name matches nothing.
The price in force at the time of the call is used (some prices change by date, or by the hour).

The database's own calculation is exact and slow (a few hundred microseconds a call), too slow for
a callback that holds the journal's lock. So each model's price is compiled once into per-token
rates (input, cache read, five-minute and one-hour cache writes, audio input, output, reasoning,
audio output, a per-request fee, and the threshold tiers that apply to a whole request), and the
compiled rates are checked against the database's own calculation on a set of probe usages that
hold every token kind the journal counts, below and above every tier, before they are used: a price
they do not reproduce is computed by the database for each call instead.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final, NamedTuple, Protocol

DATABASE: Final = "genai-prices"
"""The distribution that holds the prices (a dependency of run-journal)."""
_RESOLVED_FOR: Final = 600.0
"""Seconds a model lookup is reused; a database updated in place (``genai_prices.UpdatePrices``)
is seen for a model within this time."""


class TokenCounts(Protocol):
    """What a price is applied to: one call's tokens by kind (``run_journal.usage.TokenUsage``).

    ``input_tokens`` includes the cache reads, cache writes and audio input; ``cache_creation_tokens``
    includes the one-hour writes; ``output_tokens`` includes the reasoning and audio output.
    """

    @property
    def input_tokens(self) -> int: ...
    @property
    def cache_read_tokens(self) -> int: ...
    @property
    def cache_creation_tokens(self) -> int: ...
    @property
    def cache_creation_1h_tokens(self) -> int: ...
    @property
    def input_audio_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def reasoning_tokens(self) -> int: ...
    @property
    def output_audio_tokens(self) -> int: ...


class Probe(NamedTuple):
    """A usage the compiled rates must price as the database does (see ``_PROBES``)."""

    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    cache_creation_1h_tokens: int = 0
    input_audio_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    output_audio_tokens: int = 0


_PROBES: Final = (
    Probe(),
    Probe(input_tokens=1000),
    Probe(input_tokens=1000, cache_read_tokens=400),
    Probe(input_tokens=1000, cache_creation_tokens=300),
    Probe(input_tokens=1000, cache_creation_tokens=300, cache_creation_1h_tokens=300),
    Probe(input_tokens=1000, input_audio_tokens=600),
    Probe(output_tokens=1000),
    Probe(output_tokens=1000, reasoning_tokens=250),
    Probe(output_tokens=1000, output_audio_tokens=700),
    Probe(3000, 1200, 700, 200, 400, 900, 300, 100),
)
"""Usages the rates must price as the database does, every token kind the journal counts among them;
each is also tried at, just above and well above every tier threshold."""


@dataclasses.dataclass(frozen=True, slots=True)
class Leaves:
    """A call's tokens split into disjoint kinds, each billed at one rate (how the database splits them:
    a kind's count is its own tokens less those of the more specific kinds inside it)."""

    total_input: int
    plain_input: int
    cache_read: int
    cache_write_5m: int
    cache_write_1h: int
    audio_input: int
    plain_output: int
    reasoning: int
    audio_output: int

    @classmethod
    def of(cls, usage: TokenCounts) -> Leaves:
        """Counts that contradict each other are reconciled: the input is at least its cached, written
        and audio parts, the one-hour writes at most the writes, the output at least its parts."""
        read, write = usage.cache_read_tokens, usage.cache_creation_tokens
        write_1h = min(usage.cache_creation_1h_tokens, write)
        audio_in = usage.input_audio_tokens
        total_input = max(usage.input_tokens, read + write + audio_in)
        output = usage.output_tokens
        reasoning = min(usage.reasoning_tokens, output)
        audio_out = min(usage.output_audio_tokens, output - reasoning)
        return cls(total_input, total_input - read - write - audio_in, read, write - write_1h, write_1h,
                   audio_in, output - reasoning - audio_out, reasoning, audio_out)


@dataclasses.dataclass(frozen=True, slots=True)
class Rate:
    """USD per token, by the request's total input tokens: ``base`` until the first tier's start."""

    base: float
    tiers: tuple[tuple[int, float], ...] = ()

    def at(self, total_input: float) -> float:
        for start, price in reversed(self.tiers):
            if total_input > start:
                return price
        return self.base


@dataclasses.dataclass(frozen=True, slots=True)
class Rates:
    """One model's price as per-token rates (what a pricing-table entry is too)."""

    input: Rate
    output: Rate
    cache_read: Rate
    cache_write: Rate
    reasoning: Rate
    per_request: float = 0.0
    cache_write_1h: Rate | None = None
    """None: one-hour writes cost what other writes cost."""
    input_audio: Rate | None = None
    """None: audio input costs what other input costs."""
    output_audio: Rate | None = None
    """None: audio output costs what other output costs."""

    def cost(self, usage: TokenCounts, calls: int = 1) -> float:
        """The cost of ``calls`` calls whose tokens add up to ``usage``, priced as that many average
        calls (a tier is chosen by the average call's input). Counts are reconciled as
        :meth:`Leaves.of` does (this is the same split, written out: it runs for every model call)."""
        read, write, audio_in = usage.cache_read_tokens, usage.cache_creation_tokens, usage.input_audio_tokens
        total = max(usage.input_tokens, read + write + audio_in)
        output = usage.output_tokens
        reasoning = min(usage.reasoning_tokens, output)
        audio_out = min(usage.output_audio_tokens, output - reasoning)
        at = total / calls if calls > 1 else total
        cost = (self.per_request * calls + (total - read - write - audio_in) * self.input.at(at)
                + (output - reasoning - audio_out) * self.output.at(at))
        if read:
            cost += read * self.cache_read.at(at)
        if write:
            write_1h = min(usage.cache_creation_1h_tokens, write)
            cost += (write - write_1h) * self.cache_write.at(at)
            if write_1h:
                cost += write_1h * (self.cache_write_1h or self.cache_write).at(at)
        if audio_in:
            cost += audio_in * (self.input_audio or self.input).at(at)
        if reasoning:
            cost += reasoning * self.reasoning.at(at)
        if audio_out:
            cost += audio_out * (self.output_audio or self.output).at(at)
        return cost

    @property
    def thresholds(self) -> set[int]:
        rates = (self.input, self.output, self.cache_read, self.cache_write, self.reasoning,
                 self.cache_write_1h, self.input_audio, self.output_audio)
        return {start for rate in rates if rate is not None for start, _ in rate.tiers}


@dataclasses.dataclass(frozen=True, slots=True)
class Found:
    """A model the database knows: its entry, and the provider it is priced for."""

    model: Any  # genai_prices.types.ModelInfo
    provider: Any  # genai_prices.types.Provider
    at: float

    @property
    def name(self) -> str:
        return f"{self.provider.id}:{self.model.id}"


Quote = tuple[float | None, str | None]
"""A call's cost in USD and, when it is None, why."""


class PriceDatabase:
    """Thread-safe lookups in ``genai-prices`` with compiled rates (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._found: dict[tuple[str, str | None], Found | str] = {}
        self._compiled: dict[int, tuple[Any, Rates | None]] = {}
        self._module: Any = None
        self._failure: str | None = None
        self._warming = False

    # -- loading -------------------------------------------------------------------------------------
    def load(self) -> Any:
        """The ``genai_prices`` module (imported on first use), or None when it is not installed."""
        if self._module is None and self._failure is None:
            try:
                import genai_prices
            except ImportError as error:
                self._failure = f"{DATABASE} is not installed ({error})"
            else:
                self._module = genai_prices
        return self._module

    @property
    def version(self) -> str | None:
        module = self.load()
        return None if module is None else str(module.__version__)

    @property
    def cold(self) -> bool:
        """Nobody has loaded the database, or started to."""
        return self._module is None and self._failure is None and not self._warming

    def warm_up(self) -> None:
        """Import the database in a background thread, so the first priced call does not wait for it
        (a journal's first model call usually comes a network round trip after the journal is made)."""
        with self._lock:
            if not self.cold:
                return
            self._warming = True
        threading.Thread(target=self._warm, name="run-journal-prices", daemon=True).start()

    def _warm(self) -> None:
        try:
            if self.load() is not None:
                self.find("gpt-4o")  # loads the bundled price data too
        except Exception:  # noqa: BLE001, S110 - a failed warm-up is retried, and reported, on first use
            pass

    # -- lookups -------------------------------------------------------------------------------------
    def find(self, model: str, provider: str | None = None) -> Found | str:
        """The database's entry for ``model``, or why there is none. ``provider`` (LangChain's
        ``ls_provider``, e.g. ``amazon_bedrock``, or a database provider id) is tried first: a
        Bedrock model id is only known as AWS's."""
        now = time.monotonic()
        key = (model, provider)
        found = self._found.get(key)
        if isinstance(found, Found) and now - found.at < _RESOLVED_FOR:
            return found
        if isinstance(found, str):
            return found
        module = self.load()
        if module is None:
            return self._failure or f"{DATABASE} is not installed"
        result = self._lookup(module, model, provider, now)
        with self._lock:
            self._found[key] = result
        return result

    def _lookup(self, module: Any, model: str, provider: str | None, now: float) -> Found | str:
        attempts: list[tuple[str, str | None]] = [(model, provider)] if provider else []
        attempts.append((model, None))
        for separator in (":", "/"):
            prefix, _, rest = model.partition(separator)
            if rest and prefix:
                attempts.append((rest, prefix))
        version = self.version
        for name, provider_id in attempts:
            try:
                calculation = module.calc_price(module.Usage(), name, provider_id=provider_id)
            except LookupError:
                continue
            except Exception as error:  # noqa: BLE001 - a database bug must not break a run
                return f"{DATABASE} {version} could not look up {model!r}: {type(error).__name__}: {error}"
            return Found(calculation.model, calculation.provider, now)
        return f"no price for model {model!r} in {DATABASE} {version}"

    def quote(self, model: str, usage: TokenCounts, at: datetime | None = None, calls: int = 1,
              provider: str | None = None) -> Quote:
        """The cost of ``calls`` calls of ``model`` at time ``at`` (now by default) whose tokens add up
        to ``usage`` (priced as that many average calls)."""
        found = self.find(model, provider)
        if isinstance(found, str):
            return None, found
        try:
            price = found.model.get_prices(at or datetime.now(UTC))
            rates = self.compiled(price)
            if rates is not None:
                return rates.cost(usage, calls), None
            return float(price.calc_price(self.usage_of(usage, calls))["total_price"]) * calls, None
        except Exception as error:  # noqa: BLE001 - a database bug must not break a run
            return None, (f"{DATABASE} {self.version} could not price {model!r} ({found.name}): "
                          f"{type(error).__name__}: {error}")

    def usage_of(self, usage: TokenCounts, calls: int = 1) -> Any:
        """``usage`` (an average of ``calls`` calls) as the database's ``Usage``: every kind the journal
        counts, and a zero for the kinds where two of them meet (cached audio, audio reasoning), which
        the journal cannot tell apart and the database would otherwise ask for."""
        leaves = Leaves.of(usage)

        def per_call(value: int) -> float | int:
            return value / calls if calls > 1 else value

        return self.load().Usage(
            input_tokens=per_call(leaves.total_input),
            cache_read_tokens=per_call(leaves.cache_read),
            cache_write_tokens=per_call(leaves.cache_write_5m + leaves.cache_write_1h),
            cache_write_1h_tokens=per_call(leaves.cache_write_1h),
            input_audio_tokens=per_call(leaves.audio_input),
            output_tokens=per_call(leaves.plain_output + leaves.reasoning + leaves.audio_output),
            output_reasoning_tokens=per_call(leaves.reasoning),
            output_audio_tokens=per_call(leaves.audio_output),
            cache_audio_read_tokens=0, cache_audio_write_tokens=0, cache_audio_write_1h_tokens=0,
            output_audio_reasoning_tokens=0,
        )

    # -- compiled rates ------------------------------------------------------------------------------
    def compiled(self, price: Any) -> Rates | None:
        """The compiled rates of one price object (None: use the database's calculation)."""
        cached = self._compiled.get(id(price))
        if cached is not None and cached[0] is price:
            return cached[1]
        rates = self._compile(price)
        with self._lock:
            self._compiled[id(price)] = (price, rates)  # the price object is kept, so its id stays its own
        return rates

    def _compile(self, price: Any) -> Rates | None:
        def rate(key: str, fallback: Rate) -> Rate:
            value = getattr(price, key, None)
            if value is None:
                return fallback
            if isinstance(value, Decimal):
                return Rate(float(value) / 1_000_000)
            base, tiers = getattr(value, "base", None), getattr(value, "tiers", None)
            if isinstance(base, Decimal) and isinstance(tiers, list):
                return Rate(float(base) / 1_000_000,
                            tuple((int(tier.start), float(tier.price) / 1_000_000) for tier in tiers))
            raise TypeError(f"unexpected price {value!r}")

        try:
            plain = rate("input_mtok", Rate(0.0))
            output = rate("output_mtok", Rate(0.0))
            write = rate("cache_write_mtok", plain)
            fee = getattr(price, "requests_kcount", None)
            rates = Rates(
                input=plain, output=output,
                cache_read=rate("cache_read_mtok", plain),
                cache_write=write,
                reasoning=rate("output_reasoning_mtok", output),
                per_request=float(fee) / 1000 if isinstance(fee, Decimal) else 0.0,
                cache_write_1h=rate("cache_write_1h_mtok", write),
                input_audio=rate("input_audio_mtok", plain),
                output_audio=rate("output_audio_mtok", output),
            )
            return rates if self._agrees(price, rates) else None
        except Exception:  # noqa: BLE001 - rates that cannot be built: the database prices each call
            return None

    def _agrees(self, price: Any, rates: Rates) -> bool:
        """Whether the rates price every probe usage exactly as the database does."""
        probes = list(_PROBES)
        for start in sorted(rates.thresholds):
            for total in (start, start + 1, start + 5000):
                probes.append(Probe(total, min(total, 1000), output_tokens=500, reasoning_tokens=100))
                probes.append(Probe(total, 0, min(total, 2000), min(total, 800), output_tokens=500))
                probes.append(Probe(total, input_audio_tokens=min(total, 700), output_tokens=500,
                                    output_audio_tokens=200))
        for probe in probes:
            expected = float(price.calc_price(self.usage_of(probe))["total_price"])
            if abs(rates.cost(probe) - expected) > 1e-12 + 1e-9 * abs(expected):
                return False
        return True


DEFAULT: Final = PriceDatabase()
"""The process's price database (lookups and compiled rates are shared by every journal)."""


def table_rates(entry: Any) -> Rates | str:
    """A pricing-table entry (USD per million tokens) as rates, or what is wrong with it."""
    if not isinstance(entry, Mapping) or "input" not in entry or "output" not in entry:
        return "its pricing-table entry needs both 'input' and 'output' (USD per million tokens)"
    try:
        plain, output = Rate(float(entry["input"]) / 1_000_000), Rate(float(entry["output"]) / 1_000_000)
        read, write, write_1h = entry.get("cache_read"), entry.get("cache_write"), entry.get("cache_write_1h")
        cache_write = plain if write is None else Rate(float(write) / 1_000_000)
        return Rates(
            input=plain, output=output, reasoning=output,
            cache_read=plain if read is None else Rate(float(read) / 1_000_000),
            cache_write=cache_write,
            cache_write_1h=cache_write if write_1h is None else Rate(float(write_1h) / 1_000_000),
        )
    except (TypeError, ValueError) as error:
        return f"its pricing-table entry is not a number of USD per million tokens ({error})"
