# The overrides' action "percent" (an override of a policy's enforce_percent).
from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = (("django_rl", "0002_override"),)

    operations = (
        migrations.AlterField(
            model_name="override",
            name="action",
            field=models.CharField(
                choices=[
                    ("rate", "Rate: decide at another rate"),
                    ("exempt", "Exempt: not limited"),
                    ("block", "Block: always denied"),
                    ("percent", "Percent: enforce_percent of the whole policy"),
                ],
                max_length=7,
            ),
        ),
    )
