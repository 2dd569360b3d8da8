from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save


class DjangoRlConfig(AppConfig):
    name = "django_rl"
    verbose_name = "Rate limiting"
    # Fixed here so a project's DEFAULT_AUTO_FIELD never asks for a migration.
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        # Importing the module registers the system checks.
        from django_rl.backends import health
        from django_rl.checks import system as checks  # noqa: F401
        from django_rl.checks.validation import settings_problems
        from django_rl.conf import use_validator
        from django_rl.contrib import dropin_policies
        from django_rl.core import installed
        from django_rl.http.headers import use_policy_windows
        from django_rl.inspection.targets import address_form
        from django_rl.models import Override
        from django_rl.observability.metrics import count_redis_error
        from django_rl.overrides.loader import (
            override_changed,
            use_address_forms,
            use_tick_listener,
        )
        from django_rl.policies import block_reading
        from django_rl.policies.registry import fallback_policy_names, policy_window, use_dropins

        # The front doors need not look for the app in INSTALLED_APPS: here it is.
        installed.ready()

        # Settings flow one way: validation reads conf, conf is handed its check.
        use_validator(settings_problems)
        # Overrides compare addresses as each policy writes them (the
        # registry's knowledge, which imports the loader: handed to it here).
        use_address_forms(address_form)
        # Hooks into lower layers, wired here and only here, because what they
        # need lives above them: the outage log line names the policies with a
        # fallback_rate (the registry's, above backends/), and a Decision made
        # by hand gets its named policy's window in its headers (above http/).
        health.fallback_policies = fallback_policy_names
        # Failed Redis calls are counted by kind in the metrics (observability
        # sits above backends/, which never import it).
        health.count_error = count_redis_error
        use_policy_windows(policy_window)
        # The admin and the command list the drop-ins' policies with the others.
        use_dropins(dropin_policies)
        # The loader's thread (below policies/) reads the mark of policies that
        # code blocked, so that every process's decisions read their blocks.
        use_tick_listener(block_reading.poll)
        # Saving or deleting an override tells every process (the loader reads the model).
        post_save.connect(override_changed, Override, dispatch_uid="django_rl.override_saved")
        post_delete.connect(override_changed, Override, dispatch_uid="django_rl.override_deleted")
