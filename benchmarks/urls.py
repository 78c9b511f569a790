"""URLs of the API benchmark's server: the example project's, and the plain Django baseline under ``baseline/``."""

from django.urls import path

from example_project.urls import urlpatterns as example_urlpatterns

from . import baseline

urlpatterns = [
    path("baseline/conversations/", baseline.conversation_list),
    path("baseline/conversations/<uuid:conversation_id>/", baseline.conversation_detail),
    path("baseline/conversations/<uuid:conversation_id>/messages/", baseline.message_list),
    path("baseline/conversations/<uuid:conversation_id>/events/", baseline.event_list),
    path("baseline/conversations/<uuid:conversation_id>/runs/", baseline.run_list),
    path("baseline/conversations/<uuid:conversation_id>/interrupts/", baseline.interrupt_list),
    path("baseline/conversations/<uuid:conversation_id>/files/", baseline.file_list),
    path("baseline/tasks/", baseline.task_list),
    *example_urlpatterns,
]
