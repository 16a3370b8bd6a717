"""``make demo``: the agent with the shipped example config, against a kubelet stand-in.

Runs everything in a temporary directory and shows, live, what the "kubelet" sees. Edit the
config file it names (in another terminal) and watch the change arrive; Ctrl-C ends the demo.
``--tour`` makes a few edits itself and then ends (the test suite runs it that way).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tests.paths import short_directory
from tests.standin.kubelet import KubeletStandin, KubeletView

EXAMPLE = Path(__file__).resolve().parent.parent / "etc" / "token-resource.toml"
_SHOWN_TOKENS = 8


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tour", action="store_true", help="make a few edits, then exit")
    args = parser.parse_args(argv)
    # The kubelet's and the agent's sockets live in it: a short directory (tests/paths.py).
    workdir = short_directory("token-resource-demo-")
    try:
        return _demo(workdir, tour=args.tour)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _demo(workdir: Path, *, tour: bool) -> int:
    device_plugin_dir = workdir / "device-plugins"
    config = workdir / "token-resource.toml"
    config.write_text(
        re.sub(
            r'(?m)^device_plugin_dir = ".*"$',
            f'device_plugin_dir = "{device_plugin_dir}"',
            EXAMPLE.read_text(),
        )
    )
    print(f"demo: the shipped example {EXAMPLE} copied to {config}")
    print(f"demo: a kubelet stand-in serves {device_plugin_dir}/kubelet.sock")
    with KubeletStandin(device_plugin_dir) as kubelet:
        command = [
            sys.executable,
            "-m",
            "token_resource",
            "run",
            "--config",
            str(config),
            "--control-socket",
            str(workdir / "control.sock"),
        ]
        print(f"demo: starting {' '.join(command[1:])}\n")
        agent = subprocess.Popen(command)
        try:
            view = _show_until(kubelet, lambda view: len(view.resources) >= 2, None)
            if tour:
                _tour(kubelet, config)
            else:
                _follow(kubelet, agent, config, view)
        finally:
            code = _stop(agent)
    print(f"\ndemo: the agent exited with status {code}")
    return code


def _tour(kubelet: KubeletStandin, config: Path) -> None:
    steps: list[tuple[str, Callable[[], None], Callable[[KubeletView], bool]]] = [
        (
            "example.com/token = 2 → 4 in the file",
            lambda: _edit(config, '"example.com/token" = 2', '"example.com/token" = 4'),
            lambda view: view.resources["example.com/token"].allocatable == 4,
        ),
        (
            "a new resource, acme.io/dongle = 1",
            lambda: _edit(config, "[resources]\n", '[resources]\n"acme.io/dongle" = 1\n'),
            lambda view: view.counts().get("acme.io/dongle") == 1,
        ),
        (
            "the kubelet restarts (every socket wiped)",
            kubelet.restart,
            lambda view: all(
                r.registrations == 2 and r.allocatable == r.capacity
                for r in view.resources.values()
            ),
        ),
    ]
    for title, act, done in steps:
        print(f"\ndemo: {title}")
        act()
        _show_until(kubelet, done, None)


def _follow(
    kubelet: KubeletStandin, agent: subprocess.Popen[bytes], config: Path, view: KubeletView
) -> None:
    """Show every change the kubelet sees until Ctrl-C (or SIGTERM) or the agent ends."""
    print(f"\ndemo: edit {config} and watch; Ctrl-C to stop\n")
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    while not stop.is_set() and agent.poll() is None:
        try:
            view = kubelet.wait_for(_differs_from(view), timeout=0.5)
        except AssertionError:
            continue
        print(_render(view))


def _stop(agent: subprocess.Popen[bytes]) -> int:
    """The agent's exit status. Ctrl-C in a terminal reaches the agent too (one process
    group), and it stops by itself; otherwise it is asked to with SIGTERM."""
    try:
        return agent.wait(2)
    except subprocess.TimeoutExpired:
        agent.terminate()
        return agent.wait(20)


def _edit(config: Path, old: str, new: str) -> None:
    temporary = config.with_name(".edit.tmp")
    temporary.write_text(config.read_text().replace(old, new, 1))
    os.replace(temporary, config)


def _show_until(
    kubelet: KubeletStandin, predicate: Callable[[KubeletView], bool], timeout: float | None
) -> KubeletView:
    """Print every new view until ``predicate`` holds (or ``timeout`` passes)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    shown = kubelet.snapshot()
    print(_render(shown))
    while not predicate(shown):
        remaining = 20.0 if deadline is None else deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            shown = kubelet.wait_for(_differs_from(shown), remaining)
        except AssertionError:
            if deadline is None:
                raise
            break
        print(_render(shown))
    return shown


def _differs_from(old: KubeletView) -> Callable[[KubeletView], bool]:
    return lambda view: view != old


def _render(view: KubeletView) -> str:
    lines = [f"kubelet (generation {view.generation}) sees:"]
    if not view.resources:
        lines.append("  nothing registered yet")
    for name, resource in sorted(view.resources.items()):
        ids = [device_id for device_id, _ in resource.devices]
        shown = " ".join(ids[:_SHOWN_TOKENS]) + (" …" if len(ids) > _SHOWN_TOKENS else "")
        lines.append(
            f"  {name:24} allocatable {resource.allocatable}/{resource.capacity}"
            f"  registered {resource.registrations}x  [{shown}]"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
