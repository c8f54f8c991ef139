from django.apps import AppConfig


class ReviewsConfig(AppConfig):
    name = "controlplane.reviews"
    label = "reviews"
