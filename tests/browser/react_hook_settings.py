"""The example project's settings, plus the bundled useConversation page as static files under ``/static/react-hook/``.

For :mod:`tests.browser.test_react_hook`: ``AP_REACT_HOOK_PAGE`` is the folder
``tests/browser/react_hook/build.mjs`` wrote; WhiteNoise serves it (through the
static files finders while ``DEBUG`` is on), from the same origin as the API and
the websocket.
"""

import os

from example_project.settings import *  # noqa: F403 - these settings, and one more

STATICFILES_DIRS = [("react-hook", os.environ["AP_REACT_HOOK_PAGE"])]
