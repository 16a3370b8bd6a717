"""The [dra] table and advertise = "dra": what a valid DRA configuration is, and every bad
one refused with its file, line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.config.test_config import MAIN, parse, parse_error
from token_resource.config.errors import ConfigError
from token_resource.config.load import load_reload
from token_resource.config.model import (
    DEFAULT_CDI_DIR,
    DEFAULT_DRIVER,
    DEFAULT_PLUGINS_DIR,
    DEFAULT_PLUGINS_REGISTRY_DIR,
    DRA,
    MAX_DRA_COUNT,
    AgentSettings,
    DraSettings,
)

DRA_TOKEN = '[resources."example.com/token"]\ncount = 4\nadvertise = "dra"\n'


def test_dra_defaults_and_paths() -> None:
    config = parse(DRA_TOKEN)
    assert config.resources["example.com/token"].advertise == DRA
    assert config.resources["example.com/token"].env == "TOKEN_RESOURCE_EXAMPLE_COM_TOKEN"
    assert config.dra == DraSettings(
        DEFAULT_DRIVER, DEFAULT_PLUGINS_REGISTRY_DIR, DEFAULT_PLUGINS_DIR, DEFAULT_CDI_DIR
    )
    assert config.dra.driver_dir == Path("/var/lib/kubelet/plugins/token-resource")
    # DRA talks to the API server; it is no reason to touch the Node's status.
    assert config.uses_api_server
    assert not config.manages_node_status


def test_a_dra_table_and_its_dropin_override() -> None:
    main = '[dra]\ndriver = "tokens.example.com"\ncdi_dir = "/etc/cdi"\n' + DRA_TOKEN
    config = parse(main, '[dra]\nplugins_dir = "/srv/plugins"\n')
    assert config.dra == DraSettings(
        "tokens.example.com", DEFAULT_PLUGINS_REGISTRY_DIR, Path("/srv/plugins"), Path("/etc/cdi")
    )


def test_dra_resources_name_their_tokens_in_an_env_of_their_own() -> None:
    config = parse(DRA_TOKEN + 'env = "SEATS"\n')
    assert config.resources["example.com/token"].env == "SEATS"
    error = parse_error(
        DRA_TOKEN + 'env = "SEATS"\n[resources."example.com/seat"]\ncount = 1\nenv = "SEATS"\n'
    )
    assert 'env "SEATS" is also the env of resource "example.com/seat"' in str(error)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[dra]\ndriver = "Tokens_Example"\n',
            f"{MAIN}, line 2, key dra.driver: driver must be a DRA driver name (a lowercase DNS"
            ' subdomain of at most 63 characters, e.g. tokens.example.com), got "Tokens_Example"',
        ),
        (
            f'[dra]\ndriver = "{"d" * 64}"\n',
            f"{MAIN}, line 2, key dra.driver: driver must be a DRA driver name",
        ),
        (
            '[dra]\nplugins_dir = "kubelet/plugins"\n',
            f"{MAIN}, line 2, key dra.plugins_dir: plugins_dir must be an absolute path, got"
            ' "kubelet/plugins"',
        ),
        (
            '[dra]\nsocket = "/x.sock"\n',
            f'{MAIN}, line 2, key dra.socket: unknown key "socket"; allowed: cdi_dir, driver,'
            " plugins_dir, plugins_registry_dir",
        ),
        (
            '[resources."example.com/token"]\ncount = 4097\nadvertise = "dra"\n',
            f'{MAIN}, line 2, key resources."example.com/token".count: a DRA resource has at'
            f" most {MAX_DRA_COUNT} tokens (each node publishes them as ResourceSlices of 128"
            " devices: 4096 make 32), got 4097",
        ),
        ("dra = 1\n", f"{MAIN}, line 1, key dra: dra must be a table, got 1"),
    ],
)
def test_bad_dra_settings_are_refused_with_file_line_and_key(text: str, message: str) -> None:
    assert str(parse_error(text + ("" if "resources" in text else DRA_TOKEN))).startswith(message)


def test_the_dra_paths_and_driver_take_a_restart(tmp_path: Path) -> None:
    main = tmp_path / "token-resource.toml"
    main.write_text('[dra]\ndriver = "b.example.com"\n' + DRA_TOKEN)
    running = DraSettings("a.example.com")
    with pytest.raises(ConfigError) as refused:
        load_reload(main, AgentSettings(), running_dra=running)
    assert str(refused.value) == (
        f"{main}, key dra.driver: driver changed from a.example.com to b.example.com: this"
        " takes a new agent (token-resource handover, or a restart), not a reload"
    )
    assert load_reload(main, AgentSettings(), running_dra=DraSettings("b.example.com")).dra == (
        DraSettings("b.example.com")
    )
