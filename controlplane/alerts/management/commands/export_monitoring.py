"""Write the alert rules as a Prometheus rule file and the overview as a Grafana dashboard (JSON)."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from controlplane.alerts import export, selectors


class Command(BaseCommand):
    help = "Export the alert rules (Prometheus rule file) and the overview dashboard (Grafana JSON)."

    def add_arguments(self, parser):
        parser.add_argument("--rules", metavar="PATH", help="where to write the Prometheus rule file (YAML)")
        parser.add_argument("--grafana", metavar="PATH", help="where to write the Grafana dashboard (JSON)")

    def handle(self, *args, rules=None, grafana=None, **options):
        if not rules and not grafana:
            raise CommandError("name at least one of --rules PATH, --grafana PATH")
        versions = list(selectors.current_rule_versions())
        if rules:
            Path(rules).write_text(export.prometheus_rules_yaml(versions), encoding="utf-8")
            enabled = sum(1 for v in versions if v.is_enabled)
            self.stdout.write(f"wrote {rules}: {enabled} rules as Prometheus alerts")
        if grafana:
            Path(grafana).write_text(export.grafana_dashboard_json(versions), encoding="utf-8")
            self.stdout.write(f"wrote {grafana}: the overview dashboard")
