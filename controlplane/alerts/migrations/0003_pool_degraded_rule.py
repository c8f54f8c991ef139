"""Install the `pool-degraded` rule added to the default pack after 0002 (existing rules are left alone)."""

from django.db import migrations


def install(apps, schema_editor):
    from controlplane.alerts.defaults import install_default_rules

    install_default_rules(apps.get_model("alerts", "AlertRule"), apps.get_model("alerts", "AlertRuleVersion"))


class Migration(migrations.Migration):
    dependencies = [("alerts", "0002_default_rules")]

    operations = [migrations.RunPython(install, migrations.RunPython.noop)]
