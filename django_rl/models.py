"""The admin's models: the live counters (no table: the state lives in Redis), and overrides."""

from __future__ import annotations

from django.db import models

from django_rl.overrides.rules import BLOCK, EXEMPT, PERCENT, RATE


class LiveCounter(models.Model):
    """Stands for the rate-limit state in Redis in the admin and in permissions.

    It gives the admin index its "Live counters" link under "Rate limiting",
    and Django's permission machinery two permissions to grant:
    ``django_rl.view_livecounter`` (see the page) and
    ``django_rl.reset_livecounter`` (reset counters). Unmanaged: no table is
    made and none is ever queried.
    """

    class Meta:
        managed = False
        default_permissions = ("view",)
        permissions = (("reset_livecounter", "Can reset live counters"),)
        verbose_name = "live counter"
        verbose_name_plural = "live counters"


class Override(models.Model):
    """A change to what one policy decides for one identity or address network, until it expires.

    The database is the source of truth: every process loads the overrides
    in force in the background (``overrides/loader.py``) and decisions read
    them from memory. Saving or deleting one through the ORM (the admin
    does) tells every process once the transaction commits; code that
    changes rows another way (``QuerySet.update``, SQL) should call
    ``django_rl.overrides.notify_changed()`` after it, or wait for each
    process's full reload (30 s).

    Permissions are Django's own for the model: ``django_rl.view_override``,
    ``add_override``, ``change_override``, ``delete_override``.
    """

    ACTIONS = (
        (RATE, "Rate: decide at another rate"),
        (EXEMPT, "Exempt: not limited"),
        (BLOCK, "Block: always denied"),
        (PERCENT, "Percent: enforce_percent of the whole policy"),
    )

    # Help texts are the admin form's (``admin/override_form.py``).
    policy = models.CharField(max_length=100)
    identity = models.CharField("identity or network", max_length=200)
    action = models.CharField(max_length=7, choices=ACTIONS)
    rate = models.CharField(max_length=50, blank=True)
    expires_at = models.DateTimeField("expires")
    reason = models.CharField(max_length=500)
    created_by = models.CharField(max_length=150, editable=False, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_by = models.CharField(max_length=150, editable=False, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("-created_at",)
        constraints = (
            models.UniqueConstraint(
                fields=("policy", "identity"), name="django_rl_override_one_per_target"
            ),
        )
        verbose_name = "override"
        verbose_name_plural = "overrides"

    def __str__(self) -> str:
        if self.action == PERCENT:
            return f"{self.policy}: enforced for {self.rate} % of identities"
        what = f"rate {self.rate}" if self.action == RATE else self.action
        return f"{self.policy} / {self.identity}: {what}"
