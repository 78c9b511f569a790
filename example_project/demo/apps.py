"""The demo app: a scripted agent and a small page to watch it stream."""

from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "example_project.demo"
    label = "demo"
