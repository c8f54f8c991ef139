from django.apps import AppConfig


class AdviceConfig(AppConfig):
    name = "controlplane.advice"
    label = "advice"
