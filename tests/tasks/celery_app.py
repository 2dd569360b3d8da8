"""The Celery app and tasks of ``tests/tasks/``, imported by the workers the tests start.

Never imported by the test process itself: it publishes by task name
(``workers.client_app``), so no ``RateLimitedTask`` subclass naming these
policies lingers there for other tests' ``manage.py check``.

Each task records its start in the suite's Redis (``DJANGO_RL_TEST_REDIS``)
with the server's ``TIME``, in one script: ``"<what> <seconds> <microseconds>"``
appended to a list.
"""

from __future__ import annotations

import os
from typing import Any

import django
import redis
from celery import Celery
from celery.signals import worker_init

from django_rl.contrib.celery import RateLimitedTask

app = Celery("django_rl_tests")
app.conf.update(
    broker_url=os.environ.get("DJANGO_RL_TEST_BROKER", "memory://"),
    result_backend=os.environ.get("DJANGO_RL_TEST_RESULTS"),
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=True,
)


@worker_init.connect
def _decide_before_the_fork(**kwargs: Any) -> None:
    """The worker's main process decides (a connection kept) before its pool forks:
    its children must each make their own, never share this one."""
    django.setup()
    from django_rl import get_policy

    get_policy("tasks.global").hit("main-process")


_RECORD = (
    "local t = redis.call('TIME') "
    "redis.call('RPUSH', KEYS[1], ARGV[1] .. ' ' .. t[1] .. ' ' .. t[2]) "
    "redis.call('PEXPIRE', KEYS[1], 600000) return 1"
)
_clients: dict[int, redis.Redis] = {}


def record(key: str, what: str) -> None:
    """Append ``what`` and the server's time to the list ``key`` (a client per process)."""
    client = _clients.get(os.getpid())
    if client is None:
        client = _clients[os.getpid()] = redis.Redis.from_url(os.environ["DJANGO_RL_TEST_REDIS"])
    client.eval(_RECORD, 1, key, what)


@app.task(name="tests.started", base=RateLimitedTask, rate_policies=["tasks.global"], bind=True)
def started(self: Any, number: int) -> int:
    record("tasks:started", f"{number} {self.request.id}")
    return number


def _pairs(x: int, y: int) -> str:
    return "pairs"


@app.task(name="tests.add", base=RateLimitedTask, rate_policies=["tasks.pairs"], rate_key=_pairs)
def add(x: int, y: int) -> int:
    record("tasks:add", f"{x}+{y}")
    return x + y


@app.task(
    name="tests.flaky",
    base=RateLimitedTask,
    rate_policies=["tasks.once"],
    bind=True,
    max_retries=1,
)
def flaky(self: Any, number: int) -> int:
    """Retries once by itself; rate-limit delays must not use up its one retry."""
    record("tasks:flaky", f"{number} {self.request.retries}")
    if self.request.retries == 0:
        raise self.retry(countdown=0.05)
    return int(self.request.retries)


def _customer(customer: str) -> Any:
    if customer == "none":
        return None
    return {"a": "customer:a"}[customer]  # KeyError for any other


@app.task(
    name="tests.keyed", base=RateLimitedTask, rate_policies=["tasks.keyed"], rate_key=_customer
)
def keyed(customer: str) -> str:
    record("tasks:keyed", customer)
    return customer
