"""The speed-ups that rely on another library's layout (``core/`` and ``observability/``).

``django_rl/core/_speedups.py`` and ``django_rl/observability/_speedups.py``.

For each: a guard that fails loudly when the installed library (CPython,
``prometheus_client``) no longer has the layout the speed-up relies on, so
its slower fallback is never used unnoticed; and a test that the fallback
gives the same result when the layout is not as expected.
"""

from __future__ import annotations

import dataclasses
import inspect
import math

import pytest
from prometheus_client import CollectorRegistry, Histogram

from django_rl.core import _speedups as core_speedups
from django_rl.core import decision as decision_module
from django_rl.core.decision import Decision
from django_rl.observability import _speedups as observability_speedups
from django_rl.observability.counts import LATENCY_BUCKETS, PendingLatencies

FIELDS = [f.name for f in dataclasses.fields(Decision)]
AUDIT = "the layout changed: audit django_rl/{}/_speedups.py for this version"


# core: Decision's fields set through each slot's own setter ------------------


def test_guard_decisions_fields_are_set_through_their_slots():
    assert core_speedups.uses_slot_descriptors(Decision, FIELDS), AUDIT.format("core")
    # The setters Decision.__init__ uses are the slots' own, not the fallback's.
    assert all(
        getattr(setter, "__self__", None) is Decision.__dict__[name]
        for setter, name in zip(decision_module._SETTERS, FIELDS, strict=True)
    ), AUDIT.format("core")


def test_decisions_init_takes_its_fields_in_order_with_their_defaults():
    parameters = list(inspect.signature(Decision.__init__).parameters.values())[1:]
    assert [p.name for p in parameters] == FIELDS
    for parameter, field in zip(parameters, dataclasses.fields(Decision), strict=True):
        missing = field.default is dataclasses.MISSING
        expected = inspect.Parameter.empty if missing else field.default
        assert parameter.default == expected, field.name


@dataclasses.dataclass(frozen=True)
class Unslotted:
    """A frozen dataclass without slots: no member descriptors to write through."""

    first: int
    second: str = "b"


@dataclasses.dataclass(frozen=True, slots=True)
class Slotted:
    first: int
    second: str = "b"


def test_the_fallback_sets_the_fields_of_a_class_laid_out_otherwise():
    assert not core_speedups.uses_slot_descriptors(Unslotted, ["first", "second"])
    setters = core_speedups.slot_setters(Unslotted, ["first", "second"])
    made = object.__new__(Unslotted)
    for setter, value in zip(setters, (1, "x"), strict=True):
        setter(made, value)
    assert made == Unslotted(1, "x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.first = 2  # type: ignore[misc]


def test_the_slots_must_be_exactly_the_names_given():
    assert core_speedups.uses_slot_descriptors(Slotted, ["first", "second"])
    assert not core_speedups.uses_slot_descriptors(Slotted, ["second", "first"])
    assert not core_speedups.uses_slot_descriptors(Slotted, ["first"])
    # Out of order: the fallback, which still writes each name right.
    first, second = core_speedups.slot_setters(Slotted, ["second", "first"])
    made = object.__new__(Slotted)
    first(made, "y")
    second(made, 3)
    assert made == Slotted(3, "y")


def test_a_decision_stays_frozen_and_replaceable():
    made = Decision(True, 10, 9, 0.0, 6.0, "p", window=60)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.allowed = False  # type: ignore[misc]
    assert dataclasses.replace(made, remaining=3).remaining == 3
    assert made == Decision(
        allowed=True, limit=10, remaining=9, retry_after=0.0, reset_after=6.0, policy="p",
        window=60,
    )  # fmt: skip


# observability: a histogram's buckets added to once per bucket ----------------


def histogram(registry: CollectorRegistry | None = None) -> Histogram:
    return Histogram(
        "django_rl_speedups_seconds", "test", buckets=LATENCY_BUCKETS, registry=registry
    )


def samples(made: Histogram) -> dict[str, float]:
    """Return the histogram's exposed samples: cumulative buckets by ``le``, count and sum."""
    (family,) = made.collect()
    found = {}
    for sample in family.samples:
        if sample.name.endswith("_bucket"):
            found[sample.labels["le"]] = sample.value
        elif sample.name.endswith(("_count", "_sum")):
            found[sample.name.rsplit("_", 1)[1]] = sample.value
    return found


#: Latencies in every bucket, +Inf included, and on bounds (``le`` includes them).
OBSERVED = [0.00005, 0.0001, 0.0002, 0.0003, 0.0003, 0.004, 0.02, 0.02, 0.3, 1.0, 2.5]


def pending_of(values: list[float]) -> PendingLatencies:
    pending = PendingLatencies(LATENCY_BUCKETS)
    for value in values:
        pending.observe(value)
    return pending


def test_guard_prometheus_client_histograms_keep_a_value_per_bucket():
    made = histogram()
    assert observability_speedups.has_bucket_values(made, LATENCY_BUCKETS), AUDIT.format(
        "observability"
    )
    # Each bucket's value counts its own observations only; the exposition adds them up.
    expected = histogram()
    for value in OBSERVED:
        expected.observe(value)
    pending_of(OBSERVED).flush(observability_speedups.histogram_adder(made, LATENCY_BUCKETS))
    assert samples(made) == pytest.approx(samples(expected))


class PublicOnly:
    """A histogram laid out otherwise: only the public ``observe``."""

    def __init__(self) -> None:
        self.real = histogram()

    def observe(self, amount: float) -> None:
        self.real.observe(amount)


@pytest.mark.parametrize(
    "values",
    [OBSERVED, OBSERVED[:-1], [0.0, 0.0], [0.001] * 5, [3.0], [0.00012, 0.09, 0.0499]],
    ids=["every bucket", "none above the last", "zeros", "on a bound", "only above", "mixed"],
)
def test_the_fallback_keeps_every_bucket_and_the_sum(values):
    layout = PublicOnly()
    assert not observability_speedups.has_bucket_values(layout, LATENCY_BUCKETS)
    add = observability_speedups.histogram_adder(layout, LATENCY_BUCKETS)
    pending_of(values).flush(add)
    expected = histogram()
    for value in values:
        expected.observe(value)
    got, want = samples(layout.real), samples(expected)
    assert {k: v for k, v in got.items() if k != "sum"} == {
        k: v for k, v in want.items() if k != "sum"
    }
    assert math.isclose(got["sum"], want["sum"], rel_tol=1e-9, abs_tol=1e-12)


def test_a_histogram_of_other_bounds_is_not_written_to_directly():
    other = Histogram("django_rl_other_seconds", "test", buckets=(0.1, 1.0), registry=None)
    assert not observability_speedups.has_bucket_values(other, LATENCY_BUCKETS)
