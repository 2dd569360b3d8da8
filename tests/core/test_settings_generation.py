"""One ``setting_changed`` receiver for the whole library, and the settings generation."""

from __future__ import annotations

from django.core.signals import setting_changed
from django.test import override_settings

from django_rl import conf
from django_rl.policies.registry import get_policy


def test_the_library_has_one_setting_changed_receiver():
    """Every cache of settings registers with conf.forget_on_change instead of a receiver."""
    # Each entry: (lookup key, weak reference to the receiver, ...) across Django versions.
    receivers = [entry[1]() for entry in setting_changed.receivers]
    ours = [r for r in receivers if getattr(r, "__module__", "").startswith("django_rl")]
    assert [(r.__module__, r.__qualname__) for r in ours] == [
        ("django_rl.conf", "_settings_changed")
    ]


def test_a_watched_setting_bumps_the_generation_and_forgets_the_caches(settings):
    policy = get_policy("login")
    before = conf.generation
    with override_settings(SOME_SETTING_NO_ONE_READS=1):
        assert conf.generation == before  # not watched: nothing forgotten
        assert get_policy("login") is policy
    settings.DJANGO_RL = {**settings.DJANGO_RL}
    assert conf.generation > before
    assert get_policy("login") is not policy  # built again under the new generation


def test_a_prefix_watches_every_setting_it_starts():
    calls = []
    conf.forget_on_change(lambda: calls.append(1), "TEST_GENERATION_*")
    with override_settings(TEST_GENERATION_A=1):
        pass
    assert calls == [1, 1]  # set, then restored
