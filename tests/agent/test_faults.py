"""Fault tests: the real agent under kubelet restarts, hostile config edits, SIGKILL and
malformed requests. Nothing may be lost, leaked or left behind.

Random choices come from one seeded generator; the seed is printed (``-s`` shows it, and a
failure's captured output does), and ``TOKEN_RESOURCE_SEED=N`` replays a run.
``TOKEN_RESOURCE_SOAK=1`` (``make soak``) runs many more iterations.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import stat
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from tests.harness import AgentProcess, write_file
from tests.seeded import seeds
from tests.standin.kubelet import BINDING_NAME, KubeletStandin, KubeletView, serves_exactly
from token_resource.config.errors import ConfigError
from token_resource.config.load import load_reload
from token_resource.config.model import AgentSettings
from token_resource.host.control import ControlError, request
from token_resource.protocol import deviceplugin_pb2 as pb
from token_resource.protocol.deviceplugin import (
    ALLOCATE,
    GET_PREFERRED_ALLOCATION,
    PRE_START_CONTAINER,
)

SOAK = os.environ.get("TOKEN_RESOURCE_SOAK") == "1"


def scaled(normal: int, soak: int) -> int:
    return soak if SOAK else normal


# --- what the agent holds -------------------------------------------------------------------


# The threads of gRPC core's own pools (their names as the kernel has them, by grpcio version:
# 1.46 and 1.80+). gRPC grows them with the load, up to its own bound, and keeps them.
GRPC_POOL_THREADS = frozenset(
    ["grpc_global_tim", "default-executo", "resolver-execut", "event_engine", "lifeguard"]
)


@dataclass(frozen=True)
class Footprint:
    fds: int
    # every thread but gRPC core's pools (by name: Python's own threads are all "python")
    threads: int
    socket_fds: int
    socket_files: tuple[str, ...]
    # "socket:[inode]" of each socket descriptor, to say which one is new when a check fails
    sockets: frozenset[str] = frozenset()
    # connections whose other end is the kubelet.sock of the kubelet running now
    kubelet_connections: int = 0
    # connections whose other end is closed: to a kubelet that is gone
    dead_connections: int = 0


def footprint(agent: AgentProcess) -> Footprint:
    assert agent.process is not None
    pid = agent.process.pid
    links = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            links.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except FileNotFoundError:
            continue
    return Footprint(
        fds=len(links),
        threads=sum(
            thread_name(pid, task) not in GRPC_POOL_THREADS
            for task in os.listdir(f"/proc/{pid}/task")
        ),
        socket_fds=sum(link.startswith("socket:") for link in links),
        socket_files=tuple(socket_files(agent.device_plugin_dir)),
        sockets=frozenset(link for link in links if link.startswith("socket:")),
        **connections(pid),
    )


def connections(pid: int) -> dict[str, int]:
    """How many of ``pid``'s unix stream connections go to kubelet.sock, and to a closed end."""
    rows = [
        line.split()
        for line in subprocess.run(
            ["ss", "--unix", "--all", "--processes"], capture_output=True, text=True, check=True
        ).stdout.splitlines()[1:]
    ]
    # ss: Netid State Recv-Q Send-Q Local-Address Local-Inode Peer-Address Peer-Inode Process
    # ss names a listening socket by the name it was bound under (the stand-in's BINDING_NAME).
    kubelet_ends = {
        row[5] for row in rows if row[4].endswith(("/kubelet.sock", f"/{BINDING_NAME}"))
    }
    own = [row for row in rows if row[1] == "ESTAB" and f"pid={pid}," in row[-1]]
    return {
        "kubelet_connections": sum(row[7] in kubelet_ends for row in own),
        "dead_connections": sum(row[7] == "0" for row in own),
    }


def thread_name(pid: int, task: str) -> str:
    try:
        return Path(f"/proc/{pid}/task/{task}/comm").read_text().strip()
    except FileNotFoundError:
        return "(ended)"


def describe_sockets(links: frozenset[str]) -> str:
    """What each socket is (address, state, and with `ss`, its peer and the peer's process)."""
    inodes = {link[len("socket:[") : -1] for link in links}
    unix = [
        line.split()
        for line in Path("/proc/net/unix").read_text().splitlines()[1:]
        if len(line.split()) >= 7 and line.split()[6] in inodes
    ]
    described = [f"inode {f[6]} state {f[5]} path {f[7] if len(f) > 7 else '-'}" for f in unix]
    listing = subprocess.run(["ss", "-xap"], capture_output=True, text=True, check=True)
    described += [
        line for line in listing.stdout.splitlines() if any(i in line.split() for i in inodes)
    ]
    return "; ".join(described) or "not unix sockets"


def socket_files(directory: Path) -> list[str]:
    """Every socket in the device-plugin directory but the kubelet's, and in the agent's own
    directory there, relative to the device-plugin directory."""
    own = directory / "token-resource"
    found = [*directory.iterdir(), *(own.iterdir() if own.is_dir() else ())]
    return sorted(
        str(path.relative_to(directory))
        for path in found
        if path.name != "kubelet.sock" and stat.S_ISSOCK(path.lstat().st_mode)
    )


def settle(condition: Callable[[], bool], timeout: float = 20.0) -> bool:
    """For figures with no event to wait on (the agent's /proc): poll until true or timeout."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def since(mark: int, text: str) -> Callable[[list[str]], bool]:
    """A notify predicate: a line containing ``text`` arrived at index ``mark`` or later."""

    def arrived(lines: list[str]) -> bool:
        return any(text in line for line in lines[mark:])

    return arrived


REJECTED = "rejected, the previous configuration stays"


def logged_since(agent: AgentProcess, offset: int, text: str) -> Callable[[], bool]:
    def logged() -> bool:
        return text in agent.log()[offset:]

    return logged


def rejected_reload_since(mark: int) -> Callable[[list[str]], bool]:
    """A notify predicate: a reload started after ``mark`` and ended rejected."""

    def ended_rejected(lines: list[str]) -> bool:
        started = [i for i, line in enumerate(lines) if i >= mark and line == "RELOADING=1"]
        return bool(started) and any("last reload rejected" in line for line in lines[started[0] :])

    return ended_rejected


def toml(counts: Mapping[str, int]) -> str:
    return "[resources]\n" + "".join(f'"{name}" = {count}\n' for name, count in counts.items())


# --- kubelet restarts ------------------------------------------------------------------------


RESTART_COUNTS = {"example.com/a": 2, "example.com/b": 3, "example.com/c": 1, "acme/d": 4}


# 318421830: a Register failed by a kubelet's stop kept its connection (grpcio 1.46, CI under load)
@seeds(318421830)
@pytest.mark.timeout(600)  # many agent restarts: minutes under load
def test_kubelet_restarts_in_a_row_lose_nothing_and_leak_nothing(
    agent: AgentProcess, kubelet: KubeletStandin, rng: random.Random
) -> None:
    counts = dict(RESTART_COUNTS)
    agent.write_config(toml(counts))
    agent.start()
    kubelet.wait_for(serves_exactly(counts))
    agent.notify.wait_for(lambda lines: any("4/4 registered" in line for line in lines))
    before = footprint(agent)
    restarts = scaled(100, 1000)
    during_reload = 0
    for restart in range(1, restarts + 1):
        reload_thread = None
        if rng.random() < 0.3:
            # A reload in progress while the kubelet goes away and comes back: by a file edit
            # (the watcher's path), SIGHUP, or the control socket (systemctl reload's path).
            during_reload += 1
            counts["example.com/b"] = rng.randint(1, 6)
            agent.write_config(toml(counts), atomic=rng.random() < 0.5)
            how = rng.choice(["file", "sighup", "control"])
            if how == "sighup":
                agent.signal(signal.SIGHUP)
            elif how == "control":
                reload_thread = threading.Thread(
                    target=request, args=(agent.control_socket, "reload", 30.0)
                )
                reload_thread.start()
        kubelet.restart()

        def back(view: KubeletView, restart: int = restart) -> bool:
            return serves_exactly(counts)(view) and all(
                view.resources[name].registrations >= restart + 1 for name in counts
            )

        back.__qualname__ = f"every resource back after restart {restart}: {counts}"
        kubelet.wait_for(back)
        if reload_thread is not None:
            reload_thread.join()
        assert agent.process is not None
        assert agent.process.poll() is None
    print(f"{restarts} kubelet restarts, {during_reload} with a reload in progress")

    view = kubelet.wait_for(serves_exactly(counts))
    # A Register caught by the kubelet's stop is abandoned by the kubelet ("context canceled");
    # the plugin retries. Anything else the kubelet refused is a fault.
    assert [r for r in view.rejected if "context canceled" not in r] == []
    agent.notify.wait_for(
        lambda lines: any(line.startswith("STATUS=4 resource(s), 4/4") for line in lines[-3:])
    )

    # Nothing leaked: descriptors, sockets, threads (some close a moment after the last event).
    # A connection to the kubelet running now is not counted: gRPC closes a finished
    # registration's connection when it chooses (seen held after the last Register, with
    # grpcio 1.46 and 1.80 under load), and a leaked one outlives its kubelet, ending as a
    # connection to a closed end, which must be none. gRPC core's thread pools are not
    # counted either: they grow with the load and keep what they grew, up to gRPC's bound.
    def unchanged() -> bool:
        now = footprint(agent)
        return (
            now.socket_files == before.socket_files
            and now.dead_connections == 0
            and now.fds - now.kubelet_connections <= before.fds - before.kubelet_connections
            and now.socket_fds - now.kubelet_connections
            <= before.socket_fds - before.kubelet_connections
            and now.threads <= before.threads
        )

    if not settle(unchanged):
        after = footprint(agent)
        new = describe_sockets(after.sockets - before.sockets)
        pytest.fail(f"before {before}, after {after}; new sockets: {new}")
    assert kubelet.allocate("example.com/a", ["token-1"]).container_responses
    # Exactly one registration per kubelet generation, as the README promises: no duplicates.
    registrations = {name: view.resources[name].registrations for name in counts}
    assert registrations == dict.fromkeys(counts, restarts + 1), registrations


# --- random configuration writes -----------------------------------------------------------------


NAMES = ["example.com/a", "example.com/b", "acme/c", "example.org/d", "example.com/e"]


class ConfigFuzzer:
    """Makes random edits to the main file and the drop-ins, the way people and tools do.

    Most edits take more than one step (a directory removed before a file takes its place, a
    file emptied before it is written again), and the agent may read the files between two:
    :attr:`midway` has what the reload rule makes of each valid state on the way."""

    def __init__(self, agent: AgentProcess, rng: random.Random) -> None:
        self.agent = agent
        self.rng = rng
        self.main = agent.config_path
        self.dropins = agent.dropin_dir
        self.midway: list[dict[str, int]] = []

    def valid_resources(self) -> str:
        chosen = self.rng.sample(NAMES, self.rng.randint(0, 3))
        lines = []
        for name in chosen:
            if self.rng.random() < 0.3:
                lines.append(f'[resources."{name}"]\ncount = {self.rng.randint(0, 5)}\n')
            else:
                lines.insert(0, f'"{name}" = {self.rng.randint(0, 5)}\n')
        plain = [line for line in lines if not line.startswith("[")]
        tables = [line for line in lines if line.startswith("[")]
        return "[resources]\n" + "".join(plain) + "".join(tables)

    def invalid_resources(self) -> str:
        return self.rng.choice(
            [
                '[resources]\n"example.com/a" = \n',  # invalid TOML
                '[resources\n"example.com/a" = 1\n',
                '[resources]\n"example.com/a" = -1\n',  # invalid values
                '[resources]\n"example.com/a" = 100001\n',
                '[resources]\n"example.com/a" = "two"\n',
                '[resources]\n"kubernetes.io/a" = 1\n',
                '[resources]\n"no-slash" = 1\n',
                '[resources]\n"example.com/a" = 1\ncolour = "blue"\n',
                '[resources."example.com/a"]\nenv = "X"\n',  # count missing
                '[resources."example.com/a"]\ncount = 1\nenv = "SAME"\n'
                '[resources."example.com/b"]\ncount = 1\nenv = "SAME"\n',
                "[agent]\nsurprise = 1\n",
                "\x00\xff binary",
            ]
        )

    def edit(self) -> str:
        """Make one random edit; returns what it did."""
        edits: dict[str, Callable[[], None]] = {
            "main valid, renamed over": lambda: self.agent.write_config(self.valid_resources()),
            "main valid, in place": lambda: self._write_main(self.valid_resources(), atomic=False),
            "main valid, in two writes": self._two_writes,
            "main invalid": lambda: self._write_main(
                self.invalid_resources(), atomic=self.rng.random() < 0.5
            ),
            "main truncated": self._truncated,
            "main deleted": lambda: self.main.unlink(missing_ok=True),
            "drop-in valid": lambda: self._dropin(self.valid_resources()),
            "drop-in invalid": lambda: self._dropin(self.invalid_resources()),
            "drop-in deleted": lambda: self._retire_dropin(Path.unlink),
            "drop-in disabled": lambda: self._retire_dropin(
                lambda path: path.rename(path.with_name(path.name + ".disabled"))
            ),
            # Tests run as root, so chmod cannot make the directory unreadable; these can.
            "drop-in directory is a file": lambda: self._replace_dropins(
                lambda: self.dropins.write_text("not a directory")
            ),
            "drop-in directory is a dangling symlink": lambda: self._replace_dropins(
                lambda: self.dropins.symlink_to(self.dropins.with_name("nowhere"))
            ),
            "drop-in directory back": self._dropin_directory,
        }
        choice = self.rng.choice(sorted(edits))
        self.midway = []
        edits[choice]()
        return choice

    def _step_done(self) -> None:
        """A state on the way to the edit's last one."""
        counts, _ = reload_verdict(self.agent)
        if counts is not None:
            self.midway.append(counts)

    def on_disk(self) -> list[tuple[str, str]]:
        """What the edits can change: the main file and the drop-in path, with contents."""
        seen = []
        for path in (self.main, self.dropins, *self._entries()):
            if path.is_symlink():
                seen.append((str(path), f"symlink to {os.readlink(path)}"))
            elif path.is_file():
                seen.append((str(path), path.read_text(errors="replace")))
            elif path.is_dir():
                seen.append((str(path), "directory"))
        return seen

    def _entries(self) -> list[Path]:
        return sorted(self.dropins.iterdir()) if self.dropins.is_dir() else []

    def _write_main(self, resources: str, *, atomic: bool) -> None:
        self._write(self.main, self.agent.agent_section() + resources, atomic=atomic)

    def _write(self, path: Path, text: str, *, atomic: bool, cut: int = 0) -> None:
        """By rename (as write_file does), or in place: emptied, then ``text[:cut]`` and the
        rest in two writes."""
        if atomic:
            write_file(path, text, atomic=True)
            return
        with path.open("r+" if path.exists() else "w") as file:
            file.truncate(0)
            file.flush()
            self._step_done()
            if cut:
                file.write(text[:cut])
                file.flush()
                os.fsync(file.fileno())
                self._step_done()
            file.write(text[cut:])

    def _two_writes(self) -> None:
        """An in-place write that reaches the disk in two parts."""
        text = self.agent.agent_section() + self.valid_resources()
        self._write(self.main, text, atomic=False, cut=self.rng.randrange(len(text) + 1))

    def _truncated(self) -> None:
        """A writer that died mid-write: the file stays cut short."""
        text = self.agent.agent_section() + self.valid_resources()
        self._write(self.main, text[: self.rng.randrange(len(text))], atomic=False)

    def _dropin(self, text: str) -> None:
        self._dropin_directory()
        name = f"{self.rng.randint(10, 13)}-fuzz.toml"
        self._write(self.dropins / name, text, atomic=self.rng.random() < 0.5)

    def _retire_dropin(self, retire: Callable[[Path], object]) -> None:
        existing = sorted(self.dropins.glob("*.toml")) if self.dropins.is_dir() else []
        if existing:
            retire(self.rng.choice(existing))
        else:
            self._dropin(self.valid_resources())

    def _replace_dropins(self, create: Callable[[], object]) -> None:
        self._remove_dropins()
        self._step_done()
        create()

    def _remove_dropins(self) -> None:
        if self.dropins.is_symlink() or self.dropins.is_file():
            self.dropins.unlink()
        elif self.dropins.is_dir():
            shutil.rmtree(self.dropins)

    def _dropin_directory(self) -> None:
        if not self.dropins.is_dir() or self.dropins.is_symlink():
            self._remove_dropins()
            self._step_done()
            self.dropins.mkdir()
            self._step_done()


def last_valid(
    agent: AgentProcess, candidates: list[dict[str, int]], context: str
) -> dict[str, int]:
    """What the agent serves (its status, settled once the rejection was reported), which
    must be one of ``candidates``."""
    result = agent.cli("status", "--json")
    assert result.returncode == 0, result
    serving = {r["name"]: r["count"] for r in json.loads(result.stdout)["resources"]}
    assert serving in candidates, f"{context}: serves {serving}, not one of {candidates}"
    return serving


def reload_verdict(agent: AgentProcess) -> tuple[dict[str, int] | None, str]:
    """What the agent's own reload rule makes of the files now: (counts, "") or (None, error).

    The same function the agent calls, so the oracle cannot drift from it: a valid file that
    changes a restart-only setting (a file without [agent] moves device_plugin_dir back to the
    default) is a rejected reload, not a new configuration.
    """
    running = AgentSettings(device_plugin_dir=agent.device_plugin_dir)
    try:
        config = load_reload(agent.config_path, running)
    except ConfigError as error:
        return None, str(error)
    return {name: spec.count for name, spec in config.resources.items()}, ""


# 408391430: a truncated main file without [agent] moved device_plugin_dir (issue 9).
# 3540649418, 252638049, 2056230403: found an interim watcher that re-watched the drop-in
# directory on its every "modified" event and lost the events in between.
# 1881137, 871102402, 956387797: reported failing by end-of-session checks (which of the two
# `-k random` tests, and why, not said) and passing every replay here; kept in both so that
# they keep being tried. 1881137 later failed the SIGKILL test in CI: grpc.aio's traceback at
# stop (tests/host/test_wind_down.py). 956387797 came after that fix: 42 replays across the three
# virtualenvs, on a loaded machine too, and a soak run of each passed. 871102402 failed again
# beside stress-ng: a reload between the steps of "drop-in directory is a file" served the valid
# state on the way (no drop-in directory), which the oracle did not allow (ConfigFuzzer.midway).
@seeds(408391430, 3540649418, 252638049, 2056230403, 1881137, 871102402, 956387797)
def test_random_config_writes_never_kill_the_agent_and_the_last_valid_config_wins(
    agent: AgentProcess, kubelet: KubeletStandin, rng: random.Random
) -> None:
    fuzzer = ConfigFuzzer(agent, rng)
    agent.write_config(toml({"example.com/a": 2}))
    agent.start()
    served = {"example.com/a": 2}
    kubelet.wait_for(serves_exactly(served))
    rejections = 0
    for step in range(scaled(60, 600)):
        mark = len(agent.notify.assignments())
        log_mark = len(agent.log())
        on_disk = fuzzer.on_disk()
        what = fuzzer.edit()
        changed = fuzzer.on_disk() != on_disk
        wanted, error = reload_verdict(agent)
        context = f"step {step}: {what}; reload rule: {wanted if wanted is not None else error}"
        if wanted is not None:
            served = wanted
            # The watcher's reload brings the kubelet to exactly this.
            kubelet.wait_for(serves_exactly(served))
        elif changed:
            rejections += 1
            # The watcher's reload rejects it, says so in the log and in STATUS, and keeps
            # serving the last valid configuration.
            assert settle(logged_since(agent, log_mark, REJECTED)), context
            lines = agent.notify.wait_for(rejected_reload_since(mark))
            assert any(error[:60] in line for line in lines[mark:]), context
        # The control socket (systemctl reload's path) agrees with the reload rule, every time.
        if wanted is not None:
            request(agent.control_socket, "reload", 30.0)
        else:
            with pytest.raises(ControlError, match=re.escape(error[:60])):
                request(agent.control_socket, "reload", 30.0)
            # Reloads take turns, so every reload that read the files during the edit is done:
            # it serves the last valid state it read, from before the edit or on the way.
            served = last_valid(agent, [served, *fuzzer.midway], context)
        view = kubelet.wait_for(serves_exactly(served))
        assert not view.rejected, context
        assert agent.process is not None
        assert agent.process.poll() is None, f"{context}; the agent died:\n{agent.log()}"
        # Its sockets are exactly those of the resources served.
        assert len(socket_files(agent.device_plugin_dir)) == len(served), context
    print(f"{rejections} rejected edits; last served {served}")
    assert "Traceback" not in agent.log()


# --- SIGKILL and restart -------------------------------------------------------------------------


@seeds(1881137, 871102402, 956387797)  # see the random config-write test's seeds
@pytest.mark.timeout(600)  # many agent restarts: minutes under load
def test_sigkill_at_random_moments_then_restart_recovers(
    agent: AgentProcess, kubelet: KubeletStandin, rng: random.Random
) -> None:
    counts = {"example.com/a": 2, "example.com/b": 5, "acme/c": 1}
    agent.write_config(toml(counts))
    recoveries = []
    kills = scaled(8, 80)
    for kill in range(kills):
        mark = len(agent.notify.assignments())
        agent.start(wait_ready=False)
        assert agent.process is not None
        # A random moment: during start-up, registration, a reload or idle serving.
        if rng.random() < 0.3:
            counts["example.com/b"] = rng.randint(1, 6)
            agent.write_config(toml(counts))
        time.sleep(rng.uniform(0.0, 0.6))
        agent.process.send_signal(signal.SIGKILL)
        agent.process.wait(20)
        view = kubelet.snapshot()
        generation = {name: r.registrations for name, r in view.resources.items()}
        # The dead agent's sockets may be left behind: they must not block the next start.
        stale = socket_files(agent.device_plugin_dir)

        mark = len(agent.notify.assignments())
        killed = time.monotonic()
        agent.start(wait_ready=False)
        agent.notify.wait_for(since(mark, "READY=1"))

        def recovered(view: KubeletView, generation: dict[str, int] = generation) -> bool:
            return serves_exactly(counts)(view) and all(
                view.resources[name].registrations > generation.get(name, 0) for name in counts
            )

        kubelet.wait_for(recovered)
        recoveries.append(time.monotonic() - killed)
        assert "Traceback" not in agent.log(), f"kill {kill}, stale sockets {stale}"
        assert agent.stop() == 0
    print(
        f"SIGKILL → restarted agent serving everything again, {kills} times: min "
        f"{min(recoveries) * 1000:.0f} ms, median {statistics.median(recoveries) * 1000:.0f} ms, "
        f"max {max(recoveries) * 1000:.0f} ms"
    )
    # The last clean stop removed everything of ours.
    assert socket_files(agent.device_plugin_dir) == []


# --- malformed and oversized requests ------------------------------------------------------------


@pytest.fixture
def plugin_channel(
    agent: AgentProcess, kubelet: KubeletStandin
) -> Iterator[tuple[grpc.Channel, KubeletStandin]]:
    """A client connection of our own to example.com/a's plugin socket."""
    agent.write_config(toml({"example.com/a": 4, "example.com/b": 1000}))
    agent.start()
    view = kubelet.wait_for(serves_exactly({"example.com/a": 4, "example.com/b": 1000}))
    endpoint = view.resources["example.com/a"].endpoint
    with grpc.insecure_channel(f"unix:{agent.device_plugin_dir / endpoint}") as channel:
        yield channel, kubelet


def _raw(channel: grpc.Channel, method: str) -> grpc.UnaryUnaryMultiCallable[bytes, bytes]:
    return channel.unary_unary(method, lambda b: b, lambda b: b)


def test_many_containers_in_one_allocate(
    plugin_channel: tuple[grpc.Channel, KubeletStandin],
) -> None:
    _, kubelet = plugin_channel
    containers = [pb.ContainerAllocateRequest(devices_ids=[f"token-{i}"]) for i in range(1000)]
    # 1000 containers take the agent seconds under load; the real kubelet sets no deadline.
    response = kubelet.allocate_raw(
        "example.com/b", pb.AllocateRequest(container_requests=containers), timeout=60
    )
    assert [dict(c.envs) for c in response.container_responses] == [
        {"TOKEN_RESOURCE_EXAMPLE_COM_B": f"token-{i}"} for i in range(1000)
    ]
    # One bad container among many fails the whole request, and nothing else.
    containers.insert(500, pb.ContainerAllocateRequest(devices_ids=["token-1000"]))
    with pytest.raises(grpc.RpcError) as raised:
        kubelet.allocate_raw(
            "example.com/b", pb.AllocateRequest(container_requests=containers), timeout=60
        )
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    many = pb.PreferredAllocationRequest(
        container_requests=[
            pb.ContainerPreferredAllocationRequest(
                available_deviceIDs=[f"token-{i}" for i in range(1000)], allocation_size=size
            )
            for size in range(200)
        ]
    )
    response_ = kubelet.get_preferred_allocation_raw("example.com/b", many, timeout=60)
    assert [len(c.deviceIDs) for c in response_.container_responses] == list(range(200))
    assert kubelet.allocate("example.com/b", ["token-999"]).container_responses


def test_garbage_oversized_and_unknown_requests_get_grpc_errors(
    plugin_channel: tuple[grpc.Channel, KubeletStandin], agent: AgentProcess
) -> None:
    channel, kubelet = plugin_channel
    failures: dict[str, grpc.StatusCode] = {}
    attempts = {
        "not protobuf": (ALLOCATE, b"\xff\xff\xff\xff"),
        "over 4 MiB": (
            ALLOCATE,
            pb.AllocateRequest(
                container_requests=[pb.ContainerAllocateRequest(devices_ids=["x" * (5 << 20)])]
            ).SerializeToString(),
        ),
        "a 100 kB device ID": (
            ALLOCATE,
            pb.AllocateRequest(
                container_requests=[
                    pb.ContainerAllocateRequest(devices_ids=["token-" + "9" * 100_000])
                ]
            ).SerializeToString(),
        ),
        "100,000 unknown IDs": (
            GET_PREFERRED_ALLOCATION,
            pb.PreferredAllocationRequest(
                container_requests=[
                    pb.ContainerPreferredAllocationRequest(
                        available_deviceIDs=[f"gpu-{i}" for i in range(100_000)], allocation_size=1
                    )
                ]
            ).SerializeToString(),
        ),
        "unknown method": ("/v1beta1.DevicePlugin/Explode", b""),
        "unknown service": ("/v1beta2.DevicePlugin/Allocate", b""),
    }
    for name, (method, payload) in attempts.items():
        with pytest.raises(grpc.RpcError) as raised:
            _raw(channel, method)(payload, timeout=20)
        failures[name] = raised.value.code()
    # Every one is refused with a status the kubelet can read; none hangs or kills the agent.
    # gRPC itself answers what it cannot decode (INTERNAL or UNKNOWN, by version).
    assert failures.pop("not protobuf") in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
    # The rest must carry the agent's own answer: an oversized error text (the agent echoing
    # every unknown ID) exceeds gRPC's metadata limit and reaches the kubelet as another code.
    assert failures == {
        "over 4 MiB": grpc.StatusCode.RESOURCE_EXHAUSTED,
        "a 100 kB device ID": grpc.StatusCode.NOT_FOUND,
        "100,000 unknown IDs": grpc.StatusCode.NOT_FOUND,
        "unknown method": grpc.StatusCode.UNIMPLEMENTED,
        "unknown service": grpc.StatusCode.UNIMPLEMENTED,
    }
    # PreStartContainer is never requested, but answered if called.
    assert _raw(channel, PRE_START_CONTAINER)(b"", timeout=20) == b""
    # A storm of bad requests from many callers at once, then normal service.
    errors: list[grpc.StatusCode] = []

    def storm() -> None:
        for _ in range(20):
            try:
                _raw(channel, ALLOCATE)(b"\x0a\x00", timeout=20)
            except grpc.RpcError as error:
                errors.append(error.code())

    storms = [threading.Thread(target=storm) for _ in range(16)]
    for thread in storms:
        thread.start()
    for thread in storms:
        thread.join()
    assert errors == [grpc.StatusCode.INVALID_ARGUMENT] * 320
    assert kubelet.allocate("example.com/a", ["token-3"]).container_responses
    assert kubelet.snapshot().resources["example.com/a"].stream_open
    assert agent.process is not None
    assert agent.process.poll() is None
