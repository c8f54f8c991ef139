from django.apps import AppConfig


class ReplaysConfig(AppConfig):
    name = "controlplane.replays"
    label = "replays"
