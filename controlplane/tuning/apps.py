from django.apps import AppConfig


class TuningConfig(AppConfig):
    name = "controlplane.tuning"
    label = "tuning"
