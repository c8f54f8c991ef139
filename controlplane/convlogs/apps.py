from django.apps import AppConfig


class ConvlogsConfig(AppConfig):
    name = "controlplane.convlogs"
    verbose_name = "Conversation logs"
