import unicodedata

from django.db import migrations, models

import jobsvc.accounts.models


def _key(username: str) -> str:
    # jobsvc.accounts.usernames.username_key, as of this migration.
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", username).casefold())


def fill_username_keys(apps, schema_editor):
    """Store usernames in NFKC form with their keys; stop if two names are one."""
    User = apps.get_model("accounts", "User")
    owners: dict[str, str] = {}
    users = list(User.objects.using(schema_editor.connection.alias).order_by("pk"))
    for user in users:
        key = _key(user.username)
        if key in owners:
            raise RuntimeError(
                f"usernames {owners[key]!r} and {user.username!r} differ only in case or "
                "compatibility forms: rename one of them, then migrate again"
            )
        owners[key] = user.username
        user.username = unicodedata.normalize("NFKC", user.username)
        user.username_key = key
        user.save(update_fields=["username", "username_key"])


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0004_job_weight_bounds"),
    ]

    operations = [
        migrations.AlterModelManagers(
            name="user",
            managers=[("objects", jobsvc.accounts.models.Users())],
        ),
        migrations.AddField(
            model_name="user",
            name="username_key",
            field=models.CharField(editable=False, max_length=600, null=True),
        ),
        migrations.RunPython(fill_username_keys, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="user",
            name="username_key",
            field=models.CharField(editable=False, max_length=600, unique=True),
        ),
    ]
