"""URLs of the example project."""

from django.contrib import admin
from django.urls import include, path

from example_project.demo import views as demo

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("agent_persistence.api.urls")),
    path("", demo.index, name="demo"),
]
