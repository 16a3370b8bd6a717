"""The [metrics] table and [agent] pod_resources_socket: parsed, validated, restart-only."""

from __future__ import annotations

from pathlib import Path

import pytest

from token_resource.config.errors import ConfigError
from token_resource.config.load import load_reload, parse_config
from token_resource.config.model import (
    DEFAULT_POD_RESOURCES_SOCKET,
    AgentSettings,
    MetricsSettings,
    format_listen,
)

MAIN = Path("/etc/token-resource.toml")
RESOURCES = '[resources]\n"example.com/token" = 1\n'


def parse_metrics(text: str) -> MetricsSettings:
    return parse_config([(MAIN, RESOURCES + text)]).metrics


def test_both_outputs_are_off_by_default_and_the_socket_is_the_kubelets() -> None:
    config = parse_config([(MAIN, RESOURCES)])
    assert config.metrics == MetricsSettings()
    assert not config.metrics.enabled
    assert config.agent.pod_resources_socket == DEFAULT_POD_RESOURCES_SOCKET
    assert Path("/var/lib/kubelet/pod-resources/kubelet.sock") == DEFAULT_POD_RESOURCES_SOCKET


@pytest.mark.parametrize(
    ("listen", "address", "shown"),
    [
        ("127.0.0.1:9464", ("127.0.0.1", 9464), "127.0.0.1:9464"),
        ("0.0.0.0:0", ("0.0.0.0", 0), "0.0.0.0:0"),
        ("[::1]:9464", ("::1", 9464), "[::1]:9464"),
        ("[::]:65535", ("::", 65535), "[::]:65535"),
    ],
)
def test_listen_takes_an_ip_address_and_port(
    listen: str, address: tuple[str, int], shown: str
) -> None:
    metrics = parse_metrics(f'[metrics]\nlisten = "{listen}"\n')
    assert metrics.listen == address
    assert metrics.enabled
    assert format_listen(address) == shown


def test_textfile_and_socket_paths() -> None:
    config = parse_config(
        [
            (
                MAIN,
                '[agent]\npod_resources_socket = "/run/pr.sock"\n'
                + RESOURCES
                + '[metrics]\ntextfile = "/var/lib/node-exporter/tr.prom"\n',
            )
        ]
    )
    assert config.agent.pod_resources_socket == Path("/run/pr.sock")
    assert config.metrics.textfile == Path("/var/lib/node-exporter/tr.prom")


LISTEN_REASON = 'listen must be "IP:PORT" or "[IPv6]:PORT"'


@pytest.mark.parametrize(
    ("text", "key", "line", "reason"),
    [
        ('listen = "localhost:9464"', "metrics.listen", 5, LISTEN_REASON),
        ('listen = "127.0.0.1"', "metrics.listen", 5, LISTEN_REASON),
        ('listen = "127.0.0.1:"', "metrics.listen", 5, LISTEN_REASON),
        ('listen = "127.0.0.1:65536"', "metrics.listen", 5, LISTEN_REASON),
        ('listen = "127.0.0.1:-1"', "metrics.listen", 5, LISTEN_REASON),
        ('listen = "::1:9464"', "metrics.listen", 5, LISTEN_REASON),
        ('listen = ":9464"', "metrics.listen", 5, LISTEN_REASON),
        ("listen = 9464", "metrics.listen", 5, f"{LISTEN_REASON} (an IP address"),
        ('textfile = "relative.prom"', "metrics.textfile", 5, "textfile must be an absolute"),
        ('textfile = "/var/lib/x.txt"', "metrics.textfile", 5, "textfile must end in .prom"),
        ("port = 9464", "metrics.port", 5, 'unknown key "port"; allowed: listen, textfile'),
    ],
)
def test_bad_metrics_settings_name_file_line_and_key(
    text: str, key: str, line: int, reason: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_metrics(f"\n[metrics]\n{text}\n")
    assert str(caught.value).startswith(f"{MAIN}, line {line}, key {key}: {reason}")


def test_a_bad_pod_resources_socket_is_named() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config([(MAIN, '[agent]\npod_resources_socket = "kubelet.sock"\n' + RESOURCES)])
    assert str(caught.value) == (
        f"{MAIN}, line 2, key agent.pod_resources_socket: pod_resources_socket must be an "
        'absolute path, got "kubelet.sock"'
    )


def test_changing_where_metrics_go_takes_a_restart_but_the_socket_reloads(
    tmp_path: Path,
) -> None:
    main = tmp_path / "token-resource.toml"
    running_agent = AgentSettings(device_plugin_dir=tmp_path)
    running = MetricsSettings(listen=("127.0.0.1", 9464))
    agent = f'[agent]\ndevice_plugin_dir = "{tmp_path}"\npod_resources_socket = "/run/x.sock"\n'
    main.write_text(agent + RESOURCES + '[metrics]\nlisten = "127.0.0.1:9464"\n')
    assert load_reload(main, running_agent, running).agent.pod_resources_socket == Path(
        "/run/x.sock"
    )
    main.write_text(agent + RESOURCES + '[metrics]\nlisten = "127.0.0.1:9465"\n')
    with pytest.raises(ConfigError) as caught:
        load_reload(main, running_agent, running)
    assert str(caught.value) == (
        f"{main}, key metrics.listen: listen changed from 127.0.0.1:9464 to 127.0.0.1:9465: "
        "this takes a new agent (token-resource handover, or a restart), not a reload"
    )
    main.write_text(agent + RESOURCES + f'[metrics]\ntextfile = "{tmp_path}/m.prom"\n')
    with pytest.raises(ConfigError, match=r"key metrics\.textfile: textfile changed from unset to"):
        load_reload(main, running_agent, MetricsSettings(listen=None))
