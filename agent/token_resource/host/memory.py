"""The C library's allocator: fewer arenas, for a process whose threads are mostly gRPC's.

glibc gives each thread that allocates while another holds the main arena an arena of its own,
up to eight per core, and memory freed in one is not reused by the others. gRPC's event-engine
threads take an arena each, which cost the agent about 14 MiB RSS at 1,000 resources
(docs/performance.md); two arenas make no difference to its CPU time there. ``MALLOC_ARENA_MAX``
in the environment, which glibc reads itself, is left to win; other C libraries ignore this.
"""

from __future__ import annotations

import ctypes
import os

M_ARENA_MAX = -8  # <malloc.h>
ARENAS = 2


def limit_malloc_arenas(arenas: int = ARENAS) -> bool:
    """Cap the allocator's arenas, unless the environment sets it; whether it was set."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl's mallopt does nothing either)
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(M_ARENA_MAX, arenas))
