"""Time-ordered UUIDs (RFC 9562 version 7) for every id that reaches a client.

Random enough not to be guessed, and ordered by creation time within a
millisecond thanks to a per-process counter in the ``rand_a`` bits, so rows
created in the same instant still sort in insertion order.
"""

from __future__ import annotations

import os
import threading
import time
import uuid

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def uuid7() -> uuid.UUID:
    global _last_ms, _counter
    with _lock:
        now_ms = time.time_ns() // 1_000_000
        if now_ms > _last_ms:
            _last_ms = now_ms
            _counter = int.from_bytes(os.urandom(2), "big") & 0x3FF  # leave room to count up
        else:
            _counter += 1
            if _counter > 0xFFF:  # more than ~3000 ids in one millisecond: borrow the next one
                _last_ms += 1
                _counter = 0
        ms, counter = _last_ms, _counter
    rand_b = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | counter << 64 | 0b10 << 62 | rand_b
    return uuid.UUID(int=value)
