"""Settings of the end-to-end server processes: the test settings, with Redis when REDIS_URL is set."""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F401,F403

if os.environ.get("REDIS_URL"):
    CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [os.environ["REDIS_URL"]]}}
    }
