"""The agent caps glibc's malloc arenas before gRPC starts its threads (host/memory.py)."""

from __future__ import annotations

import os
import subprocess
import sys

# Eight threads each allocate with malloc, which gives each an arena of its own unless capped;
# malloc_stats() then prints one "Arena N:" block per arena on stderr.
PROGRAM = """
import ctypes, sys, threading
from token_resource.host.memory import limit_malloc_arenas
print(limit_malloc_arenas() if sys.argv[1] == "capped" else "uncapped")
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
ready = threading.Barrier(8)
def allocate():
    ready.wait()
    libc.malloc(1000)
threads = [threading.Thread(target=allocate) for _ in range(8)]
for thread in threads: thread.start()
for thread in threads: thread.join()
libc.malloc_stats()
"""


def arenas(mode: str, **env: str) -> tuple[str, int]:
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM, mode],
        capture_output=True,
        text=True,
        check=True,
        env={**environ, **env},
    )
    return result.stdout.strip(), result.stderr.count("Arena ")


def test_the_arenas_are_capped_unless_the_environment_says_otherwise() -> None:
    assert arenas("uncapped")[1] > 2
    assert arenas("capped") == ("True", 2)
    # glibc reads MALLOC_ARENA_MAX itself; the agent leaves it alone.
    assert arenas("capped", MALLOC_ARENA_MAX="3") == ("False", 3)
