"""RateLimitedTask run eagerly (``task_always_eager``), called directly, and its checks.

A denied eager run raises ``RateLimited``; limits hold for ``delay``,
``apply_async``, ``apply``, chains and direct calls. The tasks are made per
test on an app of their own and let go after it, so no subclass naming
these policies lingers for other tests' ``manage.py check``.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from celery import Celery, chain

from django_rl.contrib.celery import RateLimitedTask
from django_rl.contrib.celery_checks import check_celery_tasks
from django_rl.exceptions import RateLimited
from tests.tasks.policies import POLICIES

EAGER_POLICIES = {
    **POLICIES,
    "tasks.open": {"algorithm": "fixed_window", "rate": "1/h", "key": "ip", "fail_open": True},
    "tasks.closed": {"algorithm": "fixed_window", "rate": "1/h", "key": "ip", "fail_open": False},
    "tasks.plan": {"algorithm": "fixed_window", "rate": "tests.support.plans.exact_rate"},
}
_apps = itertools.count()


@pytest.fixture(autouse=True)
def _policies(settings: Any) -> None:
    settings.DJANGO_RL = {"POLICIES": EAGER_POLICIES}


def _customer(customer: str) -> Any:
    if customer == "none":
        return None
    return {"a": "customer:a"}[customer]


@pytest.fixture
def tasks() -> Iterator[SimpleNamespace]:
    number = next(_apps)
    app = Celery(f"eager{number}", set_as_current=False)
    app.conf.update(task_always_eager=True, task_eager_propagates=True, broker_url="memory://")

    @app.task(name=f"eager{number}.add", base=RateLimitedTask, rate_policies=["tasks.pairs"])
    def add(x: int, y: int) -> int:
        return x + y

    @app.task(
        name=f"eager{number}.keyed",
        base=RateLimitedTask,
        rate_policies=["tasks.keyed"],
        rate_key=_customer,
    )
    def keyed(customer: str) -> str:
        return customer

    @app.task(name=f"eager{number}.open", base=RateLimitedTask, rate_policies=["tasks.open"])
    def fails_open() -> str:
        return "ran"

    @app.task(name=f"eager{number}.closed", base=RateLimitedTask, rate_policies=["tasks.closed"])
    def fails_closed() -> str:
        return "ran"

    made = SimpleNamespace(app=app, add=add, keyed=keyed, open=fails_open, closed=fails_closed)
    try:
        yield made
    finally:
        app.close()
        emptied()


def emptied() -> None:
    """Empty every RateLimitedTask subclass a test made: ``manage.py check`` sees them all.

    The apps are finalized first: a task an app only promised (``@app.task``
    before finalizing) gets its class then, with the policies it was given.
    """
    from django_rl.contrib.celery_checks import _finalize_celery_apps

    _finalize_celery_apps()
    stack = list(RateLimitedTask.__subclasses__())
    while stack:
        cls = stack.pop()
        cls.rate_policies = ()
        cls.rate_key = None
        stack += cls.__subclasses__()


def test_eager_runs_honour_the_limit(tasks: SimpleNamespace) -> None:
    assert tasks.add.delay(1, 2).get() == 3
    assert tasks.add.apply_async((2, 3)).get() == 5
    with pytest.raises(RateLimited) as raised:
        tasks.add.delay(3, 4)
    decision = raised.value.decision
    assert decision.policy == "tasks.pairs" and not decision.allowed
    assert 0 < decision.retry_after <= 1
    with pytest.raises(RateLimited):
        tasks.add.apply((3, 4))
    with pytest.raises(RateLimited):
        tasks.add(3, 4)  # called directly


def test_a_denied_eager_run_raises_without_eager_propagates(tasks: SimpleNamespace) -> None:
    tasks.app.conf.task_eager_propagates = False
    assert tasks.add.delay(1, 2).get() == 3
    assert tasks.add.delay(1, 2).get() == 3
    with pytest.raises(RateLimited):
        tasks.add.delay(3, 4)  # at the call, not as a failed result


def test_an_eager_chain_counts_each_step(tasks: SimpleNamespace) -> None:
    assert chain(tasks.add.s(1, 2), tasks.add.s(3)).apply_async().get() == 6
    with pytest.raises(RateLimited):
        tasks.add.delay(0, 0)


def test_rate_key_junk_shares_one_identity_logged_once(
    tasks: SimpleNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="django_rl")
    assert tasks.keyed.delay("a").get() == "a"  # its own identity
    assert tasks.keyed.delay("b").get() == "b"  # KeyError: the shared identity
    with pytest.raises(RateLimited):
        tasks.keyed.delay("c")  # KeyError again: shared, and 1/s is used
    with pytest.raises(RateLimited):
        tasks.keyed.delay("none")  # junk: shared too
    warnings = [r.getMessage() for r in caplog.records if "rate_key" in r.getMessage()]
    assert len(warnings) == 2, warnings
    assert "raised KeyError" in warnings[0] and "'global'" in warnings[0]
    assert "returned None" in warnings[1]


def test_redis_down_follows_fail_open(tasks: SimpleNamespace, private_redis: Any) -> None:
    private_redis.stop()
    assert tasks.open.delay().get() == "ran"
    with pytest.raises(RateLimited) as raised:
        tasks.closed.delay()
    assert raised.value.decision.degraded


def test_checks_report_unknown_policies() -> None:
    app = Celery("checked", set_as_current=False)

    class Unknown(RateLimitedTask):  # type: ignore[misc]
        name = "checked.unknown"
        rate_policies = ("tasks.pairs", "nope")

    class NotAList(RateLimitedTask):  # type: ignore[misc]
        name = "checked.not_a_list"
        rate_policies = "tasks.pairs"

    class PerPlan(RateLimitedTask):  # type: ignore[misc]
        name = "checked.per_plan"
        rate_policies = ("tasks.plan",)

    class BadKey(RateLimitedTask):  # type: ignore[misc]
        name = "checked.bad_key"
        rate_policies = ("tasks.pairs",)
        rate_key = "customer"

    # A task an app only promised (made when the app is finalized).
    app.task(name="checked.promised", base=RateLimitedTask, rate_policies=["missing"])(_customer)
    try:
        found = {(m.id, m.msg.split(" ")[1].rstrip(":")) for m in check_celery_tasks()}
        assert found == {
            ("django_rl.E160", "checked.unknown"),
            ("django_rl.E160", "checked.promised"),
            ("django_rl.E161", "checked.not_a_list"),
            ("django_rl.E161", "checked.per_plan"),
            ("django_rl.E162", "checked.bad_key"),
        }
        assert all(m.hint and "https://" in m.hint for m in check_celery_tasks())
    finally:
        app.close()
        emptied()
        emptied()
    assert check_celery_tasks() == []
