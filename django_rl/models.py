"""The admin's entry for the live counters. It has no table: the state lives in Redis."""

from __future__ import annotations

from django.db import models


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
