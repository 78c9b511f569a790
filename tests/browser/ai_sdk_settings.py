"""The example project's settings, plus the bundled useChat page as static files under ``/static/ai-sdk/``.

For :mod:`tests.browser.test_ai_sdk`: ``AP_AI_SDK_PAGE`` is the folder ``tests/browser/ai_sdk/build.mjs``
wrote; WhiteNoise serves it (through the static files finders while ``DEBUG`` is on), from the same
origin as the API.
"""

import os

from example_project.settings import *  # noqa: F403 - these settings, and one more

STATICFILES_DIRS = [("ai-sdk", os.environ["AP_AI_SDK_PAGE"])]
