"""The price database: model prices from ``genai-prices``, matched the way it matches them, cheap per call.

``genai-prices`` (Pydantic's maintained price data for every major provider) is imported the first
time a price is needed, never by ``import run_journal``. A model name is matched by the database
itself: its provider from the name (``gpt-4o`` is OpenAI's, ``claude-...`` Anthropic's), dated names
and aliases through each model's match rules (``gpt-4o-2024-08-06``, ``claude-3-5-sonnet-latest``,
``models/gemini-1.5-pro``), and a ``provider:model`` or ``provider/model`` name by that provider
when the whole name matches nothing. The price in force at the time of the call is used (some
prices change by date, or by the hour).

The database's own calculation is exact and slow (a few hundred microseconds a call), too slow for
a callback that holds the journal's lock. So each model's price is compiled once into per-token
rates (input, cache read, cache write, output, reasoning, a per-request fee, and the threshold
tiers that apply to a whole request), and the compiled rates are checked against the database's own
calculation on a set of probe usages before they are used: a price they do not reproduce (a unit
the rates do not model) is computed by the database for each call instead.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final

DATABASE: Final = "genai-prices"
"""The distribution that holds the prices (a dependency of run-journal)."""
_RESOLVED_FOR: Final = 600.0
"""Seconds a model lookup is reused; a database updated in place (``genai_prices.UpdatePrices``)
is seen for a model within this time."""
_PROBES: Final = (
    (0, 0, 0, 0, 0),
    (1000, 0, 0, 0, 0),
    (1000, 400, 0, 0, 0),
    (1000, 0, 300, 0, 0),
    (0, 0, 0, 1000, 0),
    (0, 0, 0, 1000, 250),
    (3000, 1200, 700, 900, 300),
)
"""(input incl. cache, cache read, cache write, output, reasoning) usages the rates must price as the
database does; each is also tried just below and above every tier threshold."""


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

    def cost(self, input_tokens: float, cache_read: float, cache_write: float, output_tokens: float,
             reasoning: float) -> float:
        total = max(input_tokens, cache_read + cache_write)
        plain = total - cache_read - cache_write
        reasoning = min(reasoning, output_tokens)
        return (
            self.per_request
            + plain * self.input.at(total)
            + cache_read * self.cache_read.at(total)
            + cache_write * self.cache_write.at(total)
            + (output_tokens - reasoning) * self.output.at(total)
            + reasoning * self.reasoning.at(total)
        )

    @property
    def thresholds(self) -> set[int]:
        return {start for rate in (self.input, self.output, self.cache_read, self.cache_write, self.reasoning)
                for start, _ in rate.tiers}


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
        self._found: dict[str, Found | str] = {}
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
        except Exception:  # noqa: BLE001 - a failed warm-up is retried, and reported, on first use
            pass

    # -- lookups -------------------------------------------------------------------------------------
    def find(self, model: str) -> Found | str:
        """The database's entry for ``model``, or why there is none."""
        now = time.monotonic()
        found = self._found.get(model)
        if isinstance(found, Found) and now - found.at < _RESOLVED_FOR:
            return found
        if isinstance(found, str):
            return found
        module = self.load()
        if module is None:
            return self._failure or f"{DATABASE} is not installed"
        result = self._lookup(module, model, now)
        with self._lock:
            self._found[model] = result
        return result

    def _lookup(self, module: Any, model: str, now: float) -> Found | str:
        attempts: list[tuple[str, str | None]] = [(model, None)]
        for separator in (":", "/"):
            prefix, _, rest = model.partition(separator)
            if rest and prefix:
                attempts.append((rest, prefix))
        version = self.version
        for name, provider in attempts:
            try:
                calculation = module.calc_price(module.Usage(), name, provider_id=provider)
            except LookupError:
                continue
            except Exception as error:  # noqa: BLE001 - a database bug must not break a run
                return f"{DATABASE} {version} could not look up {model!r}: {type(error).__name__}: {error}"
            return Found(calculation.model, calculation.provider, now)
        return f"no price for model {model!r} in {DATABASE} {version}"

    def quote(self, model: str, input_tokens: float, cache_read: float, cache_write: float,
              output_tokens: float, reasoning: float, at: datetime | None = None) -> Quote:
        """The cost of one call of ``model`` at time ``at`` (now by default)."""
        found = self.find(model)
        if isinstance(found, str):
            return None, found
        try:
            price = found.model.get_prices(at or datetime.now(UTC))
            rates = self._rates_of(price)
            if rates is not None:
                return rates.cost(input_tokens, cache_read, cache_write, output_tokens, reasoning), None
            usage = self._usage(input_tokens, cache_read, cache_write, output_tokens, reasoning)
            return float(price.calc_price(usage)["total_price"]), None
        except Exception as error:  # noqa: BLE001 - a database bug must not break a run
            return None, (f"{DATABASE} {self.version} could not price {model!r} ({found.name}): "
                          f"{type(error).__name__}: {error}")

    def _usage(self, input_tokens: float, cache_read: float, cache_write: float, output_tokens: float,
               reasoning: float) -> Any:
        module = self.load()
        return module.Usage(
            input_tokens=max(input_tokens, cache_read + cache_write), cache_read_tokens=cache_read,
            cache_write_tokens=cache_write, output_tokens=output_tokens,
            output_reasoning_tokens=min(reasoning, output_tokens),
        )

    # -- compiled rates ------------------------------------------------------------------------------
    def _rates_of(self, price: Any) -> Rates | None:
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
            fee = getattr(price, "requests_kcount", None)
            rates = Rates(
                input=plain, output=output,
                cache_read=rate("cache_read_mtok", plain),
                cache_write=rate("cache_write_mtok", plain),
                reasoning=rate("output_reasoning_mtok", output),
                per_request=float(fee) / 1000 if isinstance(fee, Decimal) else 0.0,
            )
            return rates if self._agrees(price, rates) else None
        except Exception:  # noqa: BLE001 - rates that cannot be built: the database prices each call
            return None

    def _agrees(self, price: Any, rates: Rates) -> bool:
        """Whether the rates price every probe usage exactly as the database does."""
        probes: list[tuple[int, int, int, int, int]] = list(_PROBES)
        for start in sorted(rates.thresholds):
            for total in (start, start + 1, start + 5000):
                probes.append((total, min(total, 1000), 0, 500, 100))
                probes.append((total, 0, min(total, 2000), 500, 0))
        for probe in probes:
            expected = float(price.calc_price(self._usage(*probe))["total_price"])
            if abs(rates.cost(*probe) - expected) > 1e-12 + 1e-9 * abs(expected):
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
        read, write = entry.get("cache_read"), entry.get("cache_write")
        return Rates(
            input=plain, output=output, reasoning=output,
            cache_read=plain if read is None else Rate(float(read) / 1_000_000),
            cache_write=plain if write is None else Rate(float(write) / 1_000_000),
        )
    except (TypeError, ValueError) as error:
        return f"its pricing-table entry is not a number of USD per million tokens ({error})"
