"""Releases pin the whitelist versions they use; every existing release pins the versions current now."""

from django.db import migrations, models
from django.db.models import F

# The schema's default of `max_tokens.whitelist` when this migration was written (a version that omits the field).
DEFAULT_WHITELISTS = ["legal"]


def pin_current_versions(apps, schema_editor):
    """What the pools' gateways used until now: the latest version of every whitelist their version names."""
    PoolRelease = apps.get_model("nodes", "PoolRelease")
    WhitelistVersion = apps.get_model("params", "WhitelistVersion")
    latest = {
        v.whitelist.name: v
        for v in WhitelistVersion.objects.filter(number=F("whitelist__latest_number")).select_related("whitelist")
    }
    for release in PoolRelease.objects.select_related("version").iterator():
        names = (release.version.params.get("max_tokens") or {}).get("whitelist", DEFAULT_WHITELISTS)
        pinned = [latest[name] for name in names if name in latest]
        if pinned:
            release.whitelist_versions.set(pinned)


class Migration(migrations.Migration):
    dependencies = [
        ("nodes", "0008_client_keys"),
        ("params", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="poolrelease",
            name="whitelist_versions",
            field=models.ManyToManyField(blank=True, related_name="releases", to="params.whitelistversion"),
        ),
        migrations.RunPython(pin_current_versions, migrations.RunPython.noop),
    ]
