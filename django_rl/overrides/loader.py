"""Overrides loaded in the background: each process keeps them in memory, no decision waits.

The database is the source of truth (``models.Override``). Every process
that decides holds the overrides in force as rules (``rules.py``), which a
daemon thread of its own loads:

* at start, and every :data:`FULL_RELOAD_INTERVAL` seconds whatever happens,
  so a missed change, a lost marker or a Redis restart still converge;
* within about :data:`POLL_INTERVAL` seconds of a change: saving or deleting
  an override (the admin, or the model in code) writes a new random token
  to the marker key ``{KEY_PREFIX}:~overrides`` once the transaction
  commits, and every loader reads that key each second (one ``GET``, off
  the decision path) and reloads when the token is not the one it last saw.
  A token that disappears (Redis restarted, the key expired) is a change
  too. The marker has a TTL (:data:`MARKER_TTL_MS`), renewed by each change.

The same thread reads, once a second, what higher floors ask through
:func:`use_tick_listener` (the mark of policies whose identities code has
blocked, ``policies/block_reading.py``), overrides on or off.

The thread starts with the first decision of each process (a forked worker
starts its own), never at import, so a process that decides nothing
(``migrate``, the parent of a ``--preload``-ing server) starts none. A decision only reads the rules
this thread last built: no database query, no round trip.

While the database cannot be read (no database, the table not migrated, a
connection refused), a process keeps the overrides it last loaded, none if it
never loaded any, logs one warning when that starts and one line when it
ends, and tries again every :data:`FULL_RELOAD_INTERVAL` seconds without
polling Redis meanwhile. Decisions go on as usual.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from django.db import transaction
from redis.exceptions import RedisError

from django_rl.backends import RedisNode, get_backend
from django_rl.conf import forget_on_change, get_settings
from django_rl.core.identities import AddressForm
from django_rl.core.switches import LIMITS
from django_rl.overrides.rules import DEFAULT_FORM, PolicyRules, Row, build_rules

#: How often each process reads the change marker (seconds).
POLL_INTERVAL = 1.0
#: How often each process reloads every override from the database anyway.
FULL_RELOAD_INTERVAL = 30.0
#: The change marker's TTL; each change writes it again.
MARKER_TTL_MS = 86_400_000
#: What a marker read that failed gives (no reload is triggered by it).
_UNREAD = object()

logger = logging.getLogger("django_rl")


def marker_key(prefix: str) -> str:
    """Return the key whose value changes whenever an override does."""
    return f"{prefix}:~overrides"


class Loader:
    """This process's overrides (:attr:`rules`) and the thread that keeps them fresh.

    :ivar rules: policy name -> its rules; replaced whole by each load, so a
        decision reads one consistent set without a lock.
    :ivar started: whether a decision has started the loader (:meth:`start`)
        since the process began, forked, or changed its settings.
    :ivar consulted: whether a decision must call :func:`rules_for`: the
        loader not started yet (the call starts it) or some policy has
        overrides. ``False``, the usual case, lets a decision skip the call
        (one attribute test); kept by :attr:`rules` and :attr:`started`.
    :ivar autostart: whether the first decision starts the thread (the test
        suite turns it off and loads with :meth:`load` where it means to).
    :ivar loads: successful loads so far, in this process.
    """

    def __init__(self) -> None:
        self._rules: dict[str, PolicyRules] = {}
        self._started = False
        self.consulted = True
        self.autostart = True
        self.loads = 0
        self._reset_thread_state()
        self._seen: object = _UNREAD
        self._next_full = 0.0
        self._database_ok: bool | None = None
        self._failing = False
        self._warned_rows: set[str] = set()

    @property
    def rules(self) -> dict[str, PolicyRules]:
        return self._rules

    @rules.setter
    def rules(self, rules: dict[str, PolicyRules]) -> None:
        self._rules = rules
        self.consulted = not self._started or bool(rules)

    @property
    def started(self) -> bool:
        return self._started

    @started.setter
    def started(self, started: bool) -> None:
        self._started = started
        self.consulted = not started or bool(self._rules)

    def _reset_thread_state(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._asked = False
        self._thread: threading.Thread | None = None

    # The thread ---------------------------------------------------------------

    def start(self) -> None:
        """Start the thread if overrides are on and none runs; called by the first decision.

        Never raises: a decision calls it.
        """
        with self._lock:
            if self.started:
                return
            self.started = True
            if not enabled():
                self.rules = {}
                if not _tick_listeners:
                    return
            if not self.autostart or (self._thread is not None and self._thread.is_alive()):
                return
            thread = threading.Thread(target=self._run, name="django_rl overrides", daemon=True)
            try:
                thread.start()
            except RuntimeError as exc:  # no thread can be started: no overrides, no failure
                logger.warning("Rate-limit overrides cannot be loaded: %s", exc)
                return
            self._thread = thread

    @property
    def running(self) -> bool:
        """Return whether the thread runs in this process."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def stop_at_exit(self) -> None:
        """Stop the thread as the process exits, waiting at most :data:`EXIT_WAIT` for its load.

        A daemon thread still writing to a stream (a warning) when the
        interpreter finalizes can abort the process (Python's
        ``_enter_buffered_busy`` fatal error); stopped first, it cannot.
        """
        self._stopping = True
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=EXIT_WAIT)

    def wake(self) -> None:
        """Have the thread reload now (after a change made in this process)."""
        self._asked = True
        self._wake.set()

    def _run(self) -> None:
        while not self._stopping:
            overrides = enabled()
            if not overrides:
                self.rules = {}
                if not _tick_listeners:
                    break
            try:
                if not LIMITS.off:  # rate_limits_disabled: no Redis command while on
                    if overrides:
                        self._step()
                    for listener in _tick_listeners:
                        listener()
            except Exception:  # the thread must outlive any surprise
                logger.exception("Rate-limit overrides: the loader met an unexpected error")
            if self._wake.wait(POLL_INTERVAL):
                self._wake.clear()

    def _step(self) -> None:
        # Read the marker before the database: a change committed in between
        # is then either in this load or seen as a new token next time.
        token = self._read_marker() if self._database_ok is not False else _UNREAD
        asked, self._asked = self._asked, False
        changed = token is not _UNREAD and token != self._seen
        if not (asked or changed or time.monotonic() >= self._next_full):
            return
        self._database_ok = self.load(close=True)
        if self._database_ok and token is not _UNREAD:
            self._seen = token
        self._next_full = time.monotonic() + FULL_RELOAD_INTERVAL

    def _read_marker(self) -> object:
        try:
            settings = get_settings()
            return get_backend(settings.connection).run(marker_key(settings.key_prefix), _get)
        except RedisError:
            return _UNREAD  # the outage is logged by the node; the full reload still runs
        except Exception as exc:  # invalid settings: decisions say so
            logger.debug("Rate-limit overrides: cannot read the change marker: %s", exc)
            return _UNREAD

    # Loading -------------------------------------------------------------------

    def load(self, *, close: bool = False) -> bool:
        """Read every override in force from the database into :attr:`rules`; return success.

        Never raises. On failure :attr:`rules` stay as they were.

        :param close: close this thread's database connection afterwards
            (the loader thread's; never a request's).
        """
        try:
            rows = read_rows(close=close)
        except Exception as exc:  # no database, no table, refused: no overrides
            self._failed(exc)
            return False
        self.rules, problems = build_rules(rows, _address_form)
        self.loads += 1
        for listener in _load_listeners:
            listener(self.rules)
        for problem in problems:
            if problem not in self._warned_rows:
                self._warned_rows.add(problem)
                logger.warning("Rate-limit override left out: %s", problem)
        if self._failing:
            self._failing = False
            logger.info(
                "Rate-limit overrides load from the database again: %d in force.", len(rows)
            )
        return True

    def _failed(self, exc: Exception) -> None:
        if self._failing:
            logger.debug("Rate-limit overrides still cannot be loaded: %s", exc)
            return
        self._failing = True
        logger.warning(
            "Rate-limit overrides could not be loaded from the database (%s: %s). This process "
            "applies %s until they can be, and tries again every %d s; decisions go on. If the "
            "table is missing, run `manage.py migrate django_rl`; to turn overrides off, set "
            "DJANGO_RL['OVERRIDES'] = False.",
            type(exc).__name__,
            exc,
            "the overrides it loaded last" if self.loads else "none",
            FULL_RELOAD_INTERVAL,
        )

    def reset(self) -> None:
        """Forget the rules, the loads and any incident (for tests); the thread is left alone."""
        self.rules = {}
        for listener in _load_listeners:
            listener(self.rules)
        self.loads = 0
        self._failing = False
        self._warned_rows.clear()

    # Settings and forks --------------------------------------------------------

    def settings_changed(self) -> None:
        """Settings changed: the next decision checks again whether to run, the thread reloads."""
        self.started = False
        self._seen = _UNREAD
        self._database_ok = None
        self.wake()

    def after_fork(self) -> None:
        """In a forked child: no thread runs; the next decision starts one. Rules are kept."""
        self._reset_thread_state()
        self.started = False


def _get(node: RedisNode, key: str) -> Any:
    return node.client.get(key)


def _set(node: RedisNode, key: str, token: str) -> None:
    node.client.set(key, token, px=MARKER_TTL_MS)


def _settings_form(policy: str) -> AddressForm | None:
    """How the ``ip`` key writes addresses at the settings' prefixes (until the app is ready)."""
    settings = get_settings()
    return AddressForm("ip:", settings.ipv4_prefix, settings.ipv6_prefix)


#: ``policy name -> AddressForm | None``: how each policy's identities write
#: addresses. The app's ``ready`` hands over ``overrides.targets.address_form``
#: (:func:`use_address_forms`), which knows policies' keys and the drop-ins:
#: a function of the registry, which imports this module.
_address_forms: list[Callable[[str], AddressForm | None]] = [_settings_form]


def use_address_forms(function: Callable[[str], AddressForm | None]) -> None:
    """Have loads compare targets as ``function(policy)`` says that policy writes addresses."""
    _address_forms[0] = function


def _address_form(policy: str) -> AddressForm | None:
    try:
        return _address_forms[0](policy)
    except Exception as exc:  # invalid settings: decisions say so; compare as by default
        logger.debug("Rate-limit overrides: how %r writes addresses is unknown: %s", policy, exc)
        return DEFAULT_FORM


def enabled() -> bool:
    """Return whether overrides apply: ``DJANGO_RL["OVERRIDES"]`` and the app installed."""
    from django.apps import apps

    try:
        return get_settings().overrides and apps.is_installed("django_rl")
    except Exception:  # invalid settings: every decision reports them already
        return False


def read_rows(*, close: bool = False) -> list[Row]:
    """Return the overrides in force (not yet expired), from the database.

    :raises Exception: whatever the database raises (no table, no database).
    """
    from django.db import connections, router
    from django.utils import timezone

    from django_rl.models import Override

    alias = router.db_for_read(Override)
    try:
        query = Override.objects.using(alias).filter(expires_at__gt=timezone.now())
        fields = ("id", "policy", "identity", "action", "rate", "expires_at")
        return [Row(*values) for values in query.values_list(*fields)]
    finally:
        if close:
            connections[alias].close()


#: Seconds an exiting process waits for the thread's load under way.
EXIT_WAIT = 1.0

LOADER = Loader()
atexit.register(LOADER.stop_at_exit)
os.register_at_fork(after_in_child=LOADER.after_fork)


#: Called with the rules by policy whenever they are loaded (``policies/rollout.py``:
#: which policies an override of ``enforce_percent`` applies to).
_load_listeners: list[Callable[[dict[str, PolicyRules]], None]] = []


def use_load_listener(listener: Callable[[dict[str, PolicyRules]], None]) -> None:
    """Call ``listener(rules)`` after each load of the overrides (a higher floor's hook)."""
    _load_listeners.append(listener)


#: Called by the thread once a :data:`POLL_INTERVAL` (``policies/block_reading.poll``:
#: the policies code has blocked); each never raises. With any, the thread runs even
#: while overrides are off.
_tick_listeners: list[Callable[[], None]] = []


def use_tick_listener(listener: Callable[[], None]) -> None:
    """Call ``listener()`` once a second in the thread (a higher floor's hook; once each)."""
    if listener not in _tick_listeners:
        _tick_listeners.append(listener)


def rules_for(policy: str) -> PolicyRules | None:
    """Return the overrides of ``policy`` in this process, or ``None`` (the usual case).

    What decisions call (where ``LOADER.consulted`` says they must): an
    attribute test and a dict lookup, no I/O. The first call in a process
    starts the loader thread.
    """
    loader = LOADER
    if not loader._started:
        loader.start()
    return loader._rules.get(policy)


def override_changed(sender: Any, using: str, **kwargs: Any) -> None:
    """Tell every process once the transaction that saved or deleted an override commits.

    The ``post_save``/``post_delete`` receiver of ``models.Override``,
    connected by ``AppConfig.ready`` (the model imports nothing of this
    module, which reads the model's rows). After the commit, so no process
    reloads before the change is visible.
    """
    transaction.on_commit(notify_changed, using=using)


def notify_changed() -> None:
    """Tell every process that overrides changed; called once a change is committed.

    Writes a new token to the marker key, and has this process's loader
    reload now. If Redis cannot be written, other processes see the change
    at their next full reload (logged). Never raises.
    """
    LOADER.wake()
    try:
        settings = get_settings()
        backend = get_backend(settings.connection)
        key, token = marker_key(settings.key_prefix), uuid.uuid4().hex
        try:
            backend.run(key, _set, token)
        except RedisError:
            # Once more, on a new connection: the one kept may be stale (a
            # restart of Redis since the last change, a failover).
            backend.run(key, _set, token)
    except Exception as exc:
        logger.warning(
            "Rate-limit overrides changed, but the change marker could not be written to "
            "Redis (%s); other processes apply the change within %d s, at their next full "
            "reload.",
            exc,
            FULL_RELOAD_INTERVAL,
        )


# RATELIMIT_* (the masks) and REST_FRAMEWORK: how the drop-ins write addresses.
forget_on_change(
    LOADER.settings_changed,
    "DJANGO_RL", "CACHES", "DATABASES", "INSTALLED_APPS", "REST_FRAMEWORK", "ROOT_URLCONF",
    "RATELIMIT_*",
)  # fmt: skip
