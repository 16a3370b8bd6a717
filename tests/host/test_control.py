"""The control socket's protocol, with a real unix socket in-process."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from token_resource.host.control import (
    Answer,
    ControlError,
    ControlServer,
    default_control_socket,
    request,
)


def test_default_path_follows_systemds_runtime_directory() -> None:
    assert default_control_socket({}) == Path("/run/token-resource/control.sock")
    runtime = {"RUNTIME_DIRECTORY": "/run/token-resource:/run/other"}
    assert default_control_socket(runtime) == Path("/run/token-resource/control.sock")
    assert default_control_socket({"RUNTIME_DIRECTORY": "/tmp/x"}) == Path("/tmp/x/control.sock")


def test_requests_and_answers(socket_dir: Path) -> None:
    path = socket_dir / "run" / "control.sock"

    async def handle(command: str) -> Answer:
        return (command == "status", f"{command} handled")

    async def scenario() -> list[object]:
        server = ControlServer(path, handle)
        await server.start()
        try:
            assert path.stat().st_mode & 0o777 == 0o600
            loop = asyncio.get_running_loop()
            results: list[object] = []
            for command in ("status", "reload", "bogus"):
                try:
                    results.append(await loop.run_in_executor(None, request, path, command, 5.0))
                except ControlError as error:
                    results.append(str(error))
            return results
        finally:
            await server.close()

    assert asyncio.run(scenario()) == [
        "status handled",
        "reload handled",
        "unknown command 'bogus'; known: reload, status, handover",
    ]
    assert not path.exists()


def test_no_agent_is_a_clear_error(socket_dir: Path) -> None:
    with pytest.raises(ControlError, match=r"cannot reach the agent on .*control\.sock"):
        request(socket_dir / "control.sock", "status", 1.0)
