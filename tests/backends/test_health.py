"""One warning per outage and one line when it ends; one line per incident of an error reply."""

from __future__ import annotations

import logging
import time

import pytest
import redis
from redis.exceptions import OutOfMemoryError, ResponseError

from django_rl.backends.health import Health

REFUSED = ConnectionError("Connection refused")


@pytest.fixture
def log(caplog):
    caplog.set_level(logging.INFO, logger="django_rl")
    return caplog


def levels(log) -> list[str]:
    return [record.levelname for record in log.records]


def test_an_outage_logs_once_and_its_end_once(log):
    health = Health("default")
    assert [health.failed(REFUSED, health.epoch) for _ in range(3)] == [True, False, False]
    assert [health.succeeded(health.epoch) for _ in range(3)] == [True, False, False]
    assert levels(log) == ["WARNING", "INFO"]
    assert log.records[1].getMessage() == "Redis for rate limiting (CACHES['default']) is back."


def test_a_late_answer_to_a_call_sent_before_the_outage_does_not_end_it(log):
    health = Health("default")
    sent_before = health.epoch  # a call sent while Redis was up...
    health.failed(REFUSED, health.epoch)  # ...another call finds it dead...
    health.succeeded(sent_before)  # ...then the first one's answer arrives
    assert health.down
    health.failed(REFUSED, health.epoch)
    assert levels(log) == ["WARNING"]


def test_a_call_stuck_in_the_outage_that_fails_after_it_does_not_start_another(log):
    health = Health("default")
    health.failed(REFUSED, health.epoch)
    stuck = health.epoch  # a call sent to the hung server
    health.succeeded(health.epoch)  # Redis answers again
    health.failed(TimeoutError("Timeout reading from socket"), stuck)
    assert not health.down
    assert levels(log) == ["WARNING", "INFO"]


def test_the_end_of_an_outage_runs_on_end_once_before_the_new_epoch_is_seen(log):
    # A node replaces its connections in on_end: a call that starts in the
    # new epoch must find them replaced already, or it could still reach a
    # demoted primary and log a second outage.
    seen: list[tuple[int, bool]] = []
    health = Health("default", on_end=lambda: seen.append((health.epoch, health.down)))
    health.failed(REFUSED, health.epoch)
    during = health.epoch
    assert [health.succeeded(during) for _ in range(2)] == [True, False]
    assert seen == [(during, True)]
    assert health.epoch == during + 1
    health.answered_with_error(OutOfMemoryError("OOM"), "oom", health.epoch)  # not down: no call
    assert len(seen) == 1


def test_callers_without_an_epoch_count_as_current(log):
    health = Health("default")
    health.failed(REFUSED)
    health.succeeded()
    assert levels(log) == ["WARNING", "INFO"]


OOM = OutOfMemoryError("command not allowed when used memory > 'maxmemory'.")
WRONGTYPE = ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")


def test_each_cause_of_error_replies_logs_once_per_incident(log):
    health = Health("default")
    health.incident_quiet = 0.2
    for _ in range(3):
        assert not health.answered_with_error(OOM, "oom", health.epoch)
        health.succeeded(health.epoch)  # a read between failed writes ends nothing
    health.answered_with_error(WRONGTYPE, "wrongtype", health.epoch)
    assert levels(log) == ["WARNING", "ERROR"]
    time.sleep(0.25)
    health.answered_with_error(OOM, "oom", health.epoch)  # no success yet: the same incident
    assert levels(log) == ["WARNING", "ERROR"]
    time.sleep(0.25)
    health.succeeded(health.epoch)  # the cause stopped: both incidents are over
    health.answered_with_error(OOM, "oom", health.epoch)
    health.answered_with_error(WRONGTYPE, "wrongtype", health.epoch)
    assert levels(log) == ["WARNING", "ERROR", "WARNING", "ERROR"]
    assert (dict(health.errors), health.down, health.outages) == (
        {"oom": 5, "wrongtype": 2},
        False,
        0,
    )


def test_an_error_reply_ends_an_outage_the_server_answers(log):
    health = Health("default")
    health.failed(redis.ConnectionError("Connection refused"), health.epoch)
    health.failed(redis.TimeoutError("Timeout reading from socket"), health.epoch)
    assert health.answered_with_error(OOM, "oom", health.epoch)
    assert not health.down
    assert levels(log) == ["WARNING", "WARNING", "INFO"]
    assert dict(health.errors) == {"connection": 1, "timeout": 1, "oom": 1}
