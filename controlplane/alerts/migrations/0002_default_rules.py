"""Install the default rule pack (controlplane/alerts/defaults.py) as version 1 of each rule, once."""

from django.db import migrations


def install(apps, schema_editor):
    from controlplane.alerts.defaults import install_default_rules

    install_default_rules(apps.get_model("alerts", "AlertRule"), apps.get_model("alerts", "AlertRuleVersion"))


class Migration(migrations.Migration):
    dependencies = [("alerts", "0001_initial")]

    operations = [migrations.RunPython(install, migrations.RunPython.noop)]
