from django.apps import AppConfig


class ParamsConfig(AppConfig):
    name = "controlplane.params"
    label = "params"
