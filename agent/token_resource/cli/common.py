"""What the commands share: exit statuses, and the configuration as `run` and `check` need it."""

from __future__ import annotations

from pathlib import Path

from token_resource.config.errors import ConfigError
from token_resource.config.load import load_config
from token_resource.config.model import DEVICE_PLUGIN, Config
from token_resource.host import logs
from token_resource.kubelet.sockets import SocketLayout, SocketPathError

EXIT_OK = 0
EXIT_FAILED = 1  # invalid configuration, rejected reload, agent unreachable, directory taken
EXIT_USAGE = 2
EXIT_UNSUPPORTED = 3  # handover: the running agent predates it (the package restarts it instead)


def load_servable(path: Path) -> Config:
    """The validated configuration, including that every socket path fits; or ConfigError."""
    config = load_config(path)
    errors = socket_errors(config, path)
    if errors:
        raise errors[0]
    return config


def socket_errors(config: Config, path: Path) -> list[ConfigError]:
    """A device-plugin resource whose socket path would be too long, each."""
    errors = []
    layouts = [
        SocketLayout(config.agent.device_plugin_dir, subdirectory=subdirectory)
        for subdirectory in (True, False)
    ]
    for name in config.advertised_by(DEVICE_PLUGIN).resources:
        try:
            for layout in layouts:
                layout.endpoint(name)
        except SocketPathError as error:
            errors.append(ConfigError(str(error), file=path, key="agent.device_plugin_dir"))
    return errors


def complain(error: ConfigError) -> int:
    logs.print_error(f"token-resource: invalid configuration: {error}")
    return EXIT_FAILED
