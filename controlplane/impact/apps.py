from django.apps import AppConfig


class ImpactConfig(AppConfig):
    name = "controlplane.impact"
    label = "impact"
