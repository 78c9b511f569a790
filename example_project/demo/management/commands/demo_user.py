"""Create the demo's superuser (demo / demo) if it does not exist."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create the demo superuser 'demo' with password 'demo' (development only)."

    def handle(self, *args: Any, **options: Any) -> None:
        User = get_user_model()
        if User.objects.filter(username="demo").exists():
            self.stdout.write("User 'demo' exists.")
            return
        User.objects.create_superuser("demo", "demo@example.com", "demo")
        self.stdout.write(self.style.SUCCESS("Created superuser demo / demo."))
