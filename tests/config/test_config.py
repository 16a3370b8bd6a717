from __future__ import annotations

import dataclasses
import errno
import os
from pathlib import Path

import pytest

from token_resource.config.diff import diff_configs
from token_resource.config.errors import ConfigError, find_line
from token_resource.config.load import (
    Validation,
    config_files,
    dropin_dir,
    load_config,
    parse_config,
    validate_config,
)
from token_resource.config.model import (
    DEFAULT_CONFIG_PATH,
    DEFAULT_DEVICE_PLUGIN_DIR,
    DEVICE_PLUGIN,
    MAX_COUNT,
    NODE_STATUS,
    AgentSettings,
    Config,
    KubernetesSettings,
    ResourceSpec,
)
from token_resource.config.names import default_env_name

MAIN = Path("/etc/token-resource.toml")
TOKEN_KEY = 'resources."example.com/token"'
COUNT_REASON = f"count must be an integer between 0 and {MAX_COUNT}, got"


def dropin(number: int) -> Path:
    return Path(f"/etc/token-resource.d/{number:02}-dropin.toml")


def parse(main: str, *dropins: str) -> Config:
    documents = [(MAIN, main), *((dropin(n), text) for n, text in enumerate(dropins, 1))]
    return parse_config(documents)


def parse_error(main: str, *dropins: str) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        parse(main, *dropins)
    return caught.value


def spec(name: str, count: int, env: str | None = None, source: Path = MAIN) -> ResourceSpec:
    return ResourceSpec(name, count, env or default_env_name(name), source)


# Names and paths


def test_defaults() -> None:
    assert Path("/etc/token-resource.toml") == DEFAULT_CONFIG_PATH
    assert Path("/var/lib/kubelet/device-plugins") == DEFAULT_DEVICE_PLUGIN_DIR
    assert MAX_COUNT == 100_000
    assert dropin_dir(DEFAULT_CONFIG_PATH) == Path("/etc/token-resource.d")
    assert dropin_dir(Path("conf/agent.v2.toml")) == Path("conf/agent.v2.d")


@pytest.mark.parametrize(
    ("name", "env"),
    [
        ("example.com/token", "TOKEN_RESOURCE_EXAMPLE_COM_TOKEN"),
        ("acme/token", "TOKEN_RESOURCE_ACME_TOKEN"),
        ("a--b.c/x_y.Z", "TOKEN_RESOURCE_A_B_C_X_Y_Z"),
        ("x9/Seats2", "TOKEN_RESOURCE_X9_SEATS2"),
    ],
)
def test_default_env_name(name: str, env: str) -> None:
    assert default_env_name(name) == env


# ConfigError


def test_config_error_names_file_line_and_key() -> None:
    error = ConfigError("count is wrong", file=MAIN, key="resources.x", line=7)
    assert str(error) == f"{MAIN}, line 7, key resources.x: count is wrong"
    assert (error.file, error.key, error.line, error.reason) == (
        MAIN,
        "resources.x",
        7,
        "count is wrong",
    )


def test_config_error_omits_what_is_unknown() -> None:
    assert str(ConfigError("bad", file=MAIN)) == f"{MAIN}: bad"
    assert str(ConfigError("bad", file=MAIN, key="agent")) == f"{MAIN}, key agent: bad"
    assert str(ConfigError("bad")) == "bad"


# Valid configurations


def test_empty_resources_table_has_no_resources_and_default_settings() -> None:
    config = parse("[resources]\n")
    assert config == Config(AgentSettings(), {}, (MAIN,))
    assert config.agent.device_plugin_dir == DEFAULT_DEVICE_PLUGIN_DIR


@pytest.mark.parametrize("text", ["", "\n", "  \n\t\n", "# only a comment\n# and another\n"])
def test_a_main_file_that_defines_nothing_is_an_incomplete_write(text: str) -> None:
    # What a truncating writer leaves for a moment, or for good on a full disk: serving it as
    # "no resources" would take every token away.
    assert str(parse_error(text)) == (
        f"{MAIN}: the main file defines nothing (empty, or only comments): an incomplete "
        "write? To serve no resources, write an empty [resources] table"
    )


def test_an_empty_dropin_is_fine() -> None:
    assert list(parse('[resources]\n"a.com/x" = 1\n', "", "# nothing\n").resources) == ["a.com/x"]


def test_shorthand_and_long_form() -> None:
    config = parse(
        """
        [agent]
        device_plugin_dir = "/run/kubelet/plugins/"

        [resources]
        "example.com/token" = 2

        [resources."example.com/license"]
        count = 5
        env = "LICENSE_SEATS"

        [resources."acme/seat"]
        count = 0
        """
    )
    assert config.agent.device_plugin_dir == Path("/run/kubelet/plugins")
    assert list(config.resources.values()) == [
        spec("acme/seat", 0),
        spec("example.com/license", 5, "LICENSE_SEATS"),
        spec("example.com/token", 2),
    ]


def test_count_bounds_are_inclusive() -> None:
    config = parse(f'[resources]\n"a.com/x" = 0\n"b.com/x" = {MAX_COUNT}\n')
    assert [s.count for s in config.resources.values()] == [0, MAX_COUNT]


def test_config_is_immutable_and_sorted_however_built() -> None:
    config = Config(AgentSettings(), {"b/x": spec("b/x", 1), "a/x": spec("a/x", 2)}, (MAIN,))
    assert list(config.resources) == ["a/x", "b/x"]
    with pytest.raises(TypeError):
        config.resources["c/x"] = spec("c/x", 3)  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.files = ()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec("a/x", 1).count = 2  # type: ignore[misc]


@pytest.mark.parametrize(
    "name",
    [
        "acme/token",
        "example.com/token",
        "x.example.com/a_b.c-D9",
        "1-2.example/9",
        "example.kubernetes.io.example.com/token",
        f"{'a' * 63}.{'b' * 63}.{'c' * 63}.{'d' * 52}/token",  # a 244-character domain
        f"example.com/{'x' * 63}",
    ],
)
def test_valid_resource_names(name: str) -> None:
    assert list(parse(f"[resources]\n{name!r} = 1\n").resources) == [name]


# Drop-ins


def test_files_are_the_documents_in_order() -> None:
    assert parse("[resources]\n", "", "").files == (MAIN, dropin(1), dropin(2))


def test_dropin_overrides_key_by_key_and_keeps_the_rest() -> None:
    config = parse(
        '[resources."example.com/token"]\ncount = 1\nenv = "CUSTOM"\n',
        '[resources]\n"example.com/token" = 3\n',
    )
    token = config.resources["example.com/token"]
    assert token == spec("example.com/token", 3, "CUSTOM")
    assert token.source == dropin(1)
    assert token.origins == {"count": dropin(1), "env": MAIN}
    assert token.origin("advertise") is None


def test_dropin_table_without_count_changes_only_what_it_sets() -> None:
    config = parse(
        '[resources]\n"example.com/token" = 4\n',
        '[resources."example.com/token"]\nenv = "SEATS"\n',
    )
    assert config.resources["example.com/token"] == spec("example.com/token", 4, "SEATS")


def test_remove_takes_away_what_earlier_files_defined_and_a_later_file_may_add_it_again() -> None:
    main = '[resources]\n"a.com/x" = { count = 1, env = "A" }\n"b.com/x" = 2\n'
    removal = '[resources."a.com/x"]\nremove = true\n'
    assert list(parse(main, removal).resources) == ["b.com/x"]
    # Removing what no file defines is no error: a fleet may ship the drop-in everywhere.
    assert list(parse(main, removal, removal).resources) == ["b.com/x"]
    again = parse(main, removal, '[resources]\n"a.com/x" = 5\n').resources["a.com/x"]
    # Defined afresh: nothing of the removed definition comes back.
    assert again == spec("a.com/x", 5)
    assert again.origins == {"count": dropin(2)}


@pytest.mark.parametrize(
    ("table", "shown"),
    [
        ("remove = false", "false"),
        ('remove = "yes"', '"yes"'),
        ("remove = true\ncount = 1", "true"),
    ],
)
def test_remove_must_be_true_and_alone(table: str, shown: str) -> None:
    error = parse_error('[resources]\n"a.com/x" = 1\n', f'[resources."a.com/x"]\n{table}\n')
    assert str(error).startswith(
        f'{dropin(1)}, line 2, key resources."a.com/x".remove: remove must be true and alone'
        f" in the resource's table (it takes away what earlier files defined), got {shown}"
    )


def test_later_dropin_wins_and_others_are_kept() -> None:
    config = parse(
        '[resources]\n"a.com/x" = 1\n"b.com/x" = 1\n',
        '[resources]\n"b.com/x" = 2\n"c.com/x" = 2\n',
        '[resources]\n"b.com/x" = 3\n',
    )
    assert list(config.resources.values()) == [
        spec("a.com/x", 1),
        spec("b.com/x", 3, source=dropin(2)),
        spec("c.com/x", 2, source=dropin(1)),
    ]


def test_dropin_with_only_agent_overrides_only_that_key() -> None:
    config = parse(
        '[agent]\ndevice_plugin_dir = "/a"\n[resources]\n"a.com/x" = 1\n',
        '[agent]\ndevice_plugin_dir = "/b"\n',
        "",
    )
    assert config.agent.device_plugin_dir == Path("/b")
    assert list(config.resources) == ["a.com/x"]


def test_dropin_may_redefine_only_resources() -> None:
    config = parse('[agent]\ndevice_plugin_dir = "/a"\n', '[resources]\n"a.com/x" = 1\n')
    assert config.agent.device_plugin_dir == Path("/a")
    assert config.resources["a.com/x"].source == dropin(1)


def test_dropin_errors_name_the_dropin() -> None:
    error = parse_error('[resources]\n"a.com/x" = 1\n', '\n[resources]\n"a.com/x" = -1\n')
    assert str(error) == f'{dropin(1)}, line 3, key resources."a.com/x": {COUNT_REASON} -1'


# Syntax errors


def test_invalid_toml_names_file_and_line_without_tomllib_position() -> None:
    error = parse_error('[resources]\n"example.com/token" = 2\n"oops = 1\n')
    assert (error.file, error.line, error.key) == (MAIN, 3, None)
    assert str(error).startswith(f"{MAIN}, line 3: invalid TOML: ")
    assert "(at line" not in str(error)


def test_invalid_toml_at_end_of_document_has_no_line() -> None:
    error = parse_error("a = [1,\n2,\n")
    assert (error.file, error.line) == (MAIN, None)
    assert str(error).startswith(f"{MAIN}: invalid TOML: ")


def test_deeply_nested_toml_is_a_config_error() -> None:
    error = parse_error("a = " + "[" * 10_000)
    assert str(error) == f"{MAIN}: invalid TOML: values are nested too deeply"


# Structure


@pytest.mark.parametrize(
    ("text", "key", "line", "allowed"),
    [
        ("\ncluster = 1\n", "cluster", 2, "agent, dra, kubernetes, metrics, resources"),
        ("[cluster.api]\nurl = 1\n", "cluster", 1, "agent, dra, kubernetes, metrics, resources"),
        (
            "[kubernetes]\nserver = 1\n",
            "kubernetes.server",
            2,
            "in_cluster, kubeconfig, lease_duration_seconds, lease_namespace, node_name, "
            "renew_deadline_seconds, resync_seconds, retry_period_seconds",
        ),
        (
            '[agent]\ndevice_plugin_dir = "/x"\nsocket = 1\n',
            "agent.socket",
            3,
            "device_plugin_dir, pod_resources_socket",
        ),
        (
            '[resources."example.com/token"]\ncount = 1\ncolour = true\n',
            f"{TOKEN_KEY}.colour",
            3,
            "advertise, count, env, nodes, probe, remove, scope",
        ),
        (
            '[resources]\n"example.com/token" = { count = 1, "odd key" = 2 }\n',
            f'{TOKEN_KEY}."odd key"',
            2,
            "advertise, count, env, nodes, probe, remove, scope",
        ),
    ],
)
def test_unknown_keys_are_named_with_the_allowed_ones(
    text: str, key: str, line: int, allowed: str
) -> None:
    error = parse_error(text)
    unknown = key.rsplit(".", 1)[-1].strip('"')
    assert (
        str(error) == f'{MAIN}, line {line}, key {key}: unknown key "{unknown}"; allowed: {allowed}'
    )


@pytest.mark.parametrize(
    ("text", "key", "shown"),
    [
        ("agent = 1", "agent", "1"),
        ('resources = "many"', "resources", '"many"'),
        ('[[resources]]\n"a.com/x" = 1', "resources", "an array"),
    ],
)
def test_sections_must_be_tables(text: str, key: str, shown: str) -> None:
    assert (
        str(parse_error(text)) == f"{MAIN}, line 1, key {key}: {key} must be a table, got {shown}"
    )


# Resource names


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("token", 'a resource name must be "<domain>/<name>" with exactly one "/"'),
        ("a.com/b/c", 'a resource name must be "<domain>/<name>" with exactly one "/"'),
        ("/token", 'the domain before "/" is empty'),
        (
            f"{'a' * 63}.{'b' * 63}.{'c' * 63}.{'d' * 53}/x",
            "the domain is longer than 244 characters",
        ),
        ("Example.com/x", 'the domain "Example.com" is not a DNS subdomain'),
        ("-a.com/x", 'the domain "-a.com" is not a DNS subdomain'),
        ("a-.com/x", 'the domain "a-.com" is not a DNS subdomain'),
        ("a..com/x", 'the domain "a..com" is not a DNS subdomain'),
        ("a_b.com/x", 'the domain "a_b.com" is not a DNS subdomain'),
        ("bücher.de/x", 'the domain "bücher.de" is not a DNS subdomain'),
        ("kubernetes.io/x", 'the domain "kubernetes.io" is reserved'),
        ("node.kubernetes.io/x", 'the domain "node.kubernetes.io" is reserved'),
        ("notkubernetes.io/x", 'the domain "notkubernetes.io" is reserved'),
        ("requests.example.com/x", 'a resource name must not start with "requests."'),
        ("example.com/", 'the name after "/" is empty'),
        (f"example.com/{'x' * 64}", 'the name after "/" is longer than 63 characters'),
        ("example.com/-x", 'the name after "/" ("-x") must consist of'),
        ("example.com/x.", 'the name after "/" ("x.") must consist of'),
        ("example.com/a b", 'the name after "/" ("a b") must consist of'),
    ],
)
def test_invalid_resource_names(name: str, reason: str) -> None:
    error = parse_error(f'\n[resources]\n"{name}" = 1\n')
    assert (error.file, error.line) == (MAIN, 3)
    assert error.key == ("resources.token" if name == "token" else f'resources."{name}"')
    assert str(error).startswith(f"{MAIN}, line 3, key {error.key}: {reason}")


# Counts


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("-1", "-1"),
        (str(MAX_COUNT + 1), str(MAX_COUNT + 1)),
        ("true", "true"),
        ("2.0", "2.0"),
        ("inf", "inf"),
        ('"3"', '"3"'),
        ("[1]", "an array"),
        ("1979-05-27", "a date"),
    ],
)
def test_shorthand_count_must_be_an_integer_in_range(value: str, shown: str) -> None:
    error = parse_error(f'[resources]\n"example.com/token" = {value}\n')
    assert str(error) == f"{MAIN}, line 2, key {TOKEN_KEY}: {COUNT_REASON} {shown}"


def test_long_form_count_error_points_at_the_count_line() -> None:
    error = parse_error('[resources."example.com/token"]\nenv = "X"\ncount = false\n')
    assert str(error) == f"{MAIN}, line 3, key {TOKEN_KEY}.count: {COUNT_REASON} false"


def test_long_form_requires_count() -> None:
    error = parse_error('[resources]\n\n[resources."example.com/token"]\nenv = "X"\n')
    assert str(error) == (
        f"{MAIN}, line 3, key {TOKEN_KEY}: count is required: no file sets it for this resource"
    )


def test_count_set_by_no_file_is_named_in_the_last_file() -> None:
    error = parse_error(
        '[resources]\n"a.com/x" = 1\n',
        '[resources."a.com/x"]\nremove = true\n',
        '\n[resources."a.com/x"]\nenv = "X"\n',
    )
    assert str(error) == (
        f'{dropin(2)}, line 2, key resources."a.com/x": count is required: no file sets it for'
        " this resource"
    )


# Environment variables


@pytest.mark.parametrize(("value", "shown"), [('"1X"', '"1X"'), ('"A-B"', '"A-B"'), ('""', '""')])
def test_env_must_be_a_variable_name(value: str, shown: str) -> None:
    error = parse_error(f'[resources."example.com/token"]\ncount = 1\nenv = {value}\n')
    assert str(error) == (
        f"{MAIN}, line 3, key {TOKEN_KEY}.env: env must be an environment variable name"
        f" (letters, digits and '_', not starting with a digit), got {shown}"
    )


def test_env_must_be_a_string() -> None:
    error = parse_error('[resources."example.com/token"]\ncount = 1\nenv = 5\n')
    assert (error.line, error.key) == (3, f"{TOKEN_KEY}.env")
    assert str(error).endswith(", got 5")


def test_explicit_env_collision_names_both_resources() -> None:
    error = parse_error(
        '[resources]\n"a.com/x" = { count = 1, env = "SEATS" }\n'
        '"b.com/x" = { count = 1, env = "SEATS" }\n'
    )
    assert str(error) == (
        f'{MAIN}, line 3, key resources."b.com/x": env "SEATS" is also the env of resource'
        f' "a.com/x" (defined in {MAIN}); set a different env for one of them'
    )


def test_default_env_collision_across_files_names_both() -> None:
    error = parse_error('[resources]\n"a-b.com/x" = 1\n', '[resources]\n"a.b.com/x" = 1\n')
    assert (error.file, error.line, error.key) == (dropin(1), 2, 'resources."a.b.com/x"')
    assert 'env "TOKEN_RESOURCE_A_B_COM_X" is also the env of resource "a-b.com/x"' in str(error)
    assert f"(defined in {MAIN})" in str(error)


def test_env_collision_resolved_by_override() -> None:
    config = parse('[resources]\n"a-b.com/x" = 1\n"a.b.com/x" = { count = 1, env = "OTHER" }\n')
    assert [s.env for s in config.resources.values()] == ["TOKEN_RESOURCE_A_B_COM_X", "OTHER"]


def test_env_collision_resolved_by_dropin_is_fine() -> None:
    main = (
        '[resources]\n"a.com/x" = { count = 1, env = "E" }\n"b.com/x" = { count = 1, env = "E" }\n'
    )
    # A count alone keeps the colliding env; a new env resolves it.
    assert "is also the env of" in str(parse_error(main, '[resources]\n"b.com/x" = 1\n'))
    config = parse(main, '[resources."b.com/x"]\nenv = "F"\n')
    assert config.resources["b.com/x"].env == "F"


# Agent settings


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ('"relative/dir"', '"relative/dir"'),
        ('""', '""'),
        ("5", "5"),
        ('"/a\\u0000b"', '"/a\\u0000b"'),
    ],
)
def test_device_plugin_dir_must_be_an_absolute_path(value: str, shown: str) -> None:
    error = parse_error(f"[agent]\n\ndevice_plugin_dir = {value}\n")
    assert str(error) == (
        f"{MAIN}, line 3, key agent.device_plugin_dir: device_plugin_dir must be an absolute path,"
        f" got {shown}"
    )


# Line finding


@pytest.mark.parametrize(
    ("text", "key_path", "line"),
    [
        ('[resources]\n"a.com/x" = 1', ("resources", "a.com/x"), 2),
        ("[resources]\n  'a.com/x'=1", ("resources", "a.com/x"), 2),
        ("[resources]\ntoken = 1", ("resources", "token"), 2),
        ('[ resources . "a.com/x" ]  # c\ncount = 1', ("resources", "a.com/x"), 1),
        ('resources."a.com/x" = 1', ("resources", "a.com/x"), 1),
        ('[resources]\n"a.com/x".count = 1', ("resources", "a.com/x", "count"), 2),
        ('# "a.com/x" = 1\n[resources]\n"a.com/x" = 1', ("resources", "a.com/x"), 3),
        ('[resources]\n"a\\u002ecom/x" = 1', ("resources", "a.com/x"), 2),
        (
            '[resources."a.com/x"]\ncount = 1\n[resources."b.com/x"]\ncount = 2',
            ("resources", "b.com/x", "count"),
            4,
        ),
        ('[resources]\n"a.com/x" = { count = -1 }', ("resources", "a.com/x", "count"), 2),
        ("[other]\ncount = 1\n[agent]\n\nx = 1\n", ("agent", "x"), 5),
        ("[kubernetes.api]", ("kubernetes",), 1),
        ('["bad \\q"]\nx = 1\n[agent]\nx = 1', ("agent", "x"), 4),
        ("", ("resources", "a.com/x"), None),
        ("[agent]\nx = 1", ("resources", "a.com/x"), None),
    ],
)
def test_find_line(text: str, key_path: tuple[str, ...], line: int | None) -> None:
    assert find_line(text, key_path) == line


# Files


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_config_files_without_dropin_dir(tmp_path: Path) -> None:
    main = tmp_path / "agent.toml"
    assert config_files(main) == [main]


def test_config_files_lists_dropins_in_lexical_order(tmp_path: Path) -> None:
    main = write(tmp_path / "agent.toml", "")
    directory = tmp_path / "agent.d"
    later = write(directory / "b.toml", "")
    earlier = write(directory / "10-a.toml", "")
    broken = directory / "c.toml"
    broken.symlink_to(tmp_path / "nowhere")
    write(directory / "notes.txt", "")
    (directory / "sub.toml").mkdir()
    (directory / ".#b.toml").symlink_to("root@host.123")  # an Emacs lock file
    assert config_files(main) == [main, earlier, later, broken]


def test_validate_config_finds_every_error_and_load_config_raises_the_first(
    tmp_path: Path,
) -> None:
    main = write(tmp_path / "agent.toml", '[resources]\n"a.com/x" = -1\n"a.com/y" = true\n')
    (tmp_path / "agent.d").mkdir()
    unreadable = tmp_path / "agent.d" / "10-gone.toml"
    unreadable.symlink_to(tmp_path / "nowhere")
    validation = validate_config(main)
    assert validation.config is None
    assert [(error.file, error.key) for error in validation.errors] == [
        (unreadable, None),  # reading comes first, as it did when the first error stopped all
        (main, 'resources."a.com/x"'),
        (main, 'resources."a.com/y"'),
    ]
    with pytest.raises(ConfigError) as first:
        load_config(main)
    assert str(first.value) == str(validation.errors[0])
    unreadable.unlink()
    write(main, '[resources]\n"a.com/x" = 1\n')
    assert validate_config(main) == Validation(load_config(main), ())


def test_load_config_reads_main_then_dropins(tmp_path: Path) -> None:
    main = write(tmp_path / "agent.toml", '[resources]\n"a.com/x" = 1\n"b.com/x" = 1\n')
    dropin_file = write(tmp_path / "agent.d" / "50.toml", '[resources]\n"b.com/x" = 4\n')
    config = load_config(main)
    assert config.files == (main, dropin_file)
    assert list(config.resources.values()) == [
        spec("a.com/x", 1, source=main),
        spec("b.com/x", 4, source=dropin_file),
    ]


def test_missing_main_file_is_an_error(tmp_path: Path) -> None:
    main = tmp_path / "agent.toml"
    with pytest.raises(ConfigError) as caught:
        load_config(main)
    assert str(caught.value) == f"{main}: cannot read: No such file or directory"


# Running as root defeats chmod 000, so unreadable files are simulated.
@pytest.mark.parametrize("is_directory", [True, False])
def test_unreadable_main_file_is_named(tmp_path: Path, is_directory: bool) -> None:
    main = tmp_path / "agent.toml"
    if is_directory:
        main.mkdir()
    else:
        main.symlink_to(tmp_path / "nowhere")
    with pytest.raises(ConfigError) as caught:
        load_config(main)
    reason = os.strerror(errno.EISDIR if is_directory else errno.ENOENT)
    assert str(caught.value) == f"{main}: cannot read: {reason}"


def test_unreadable_dropin_is_named(tmp_path: Path) -> None:
    main = write(tmp_path / "agent.toml", "")
    broken = tmp_path / "agent.d" / "10.toml"
    broken.parent.mkdir()
    broken.symlink_to(tmp_path / "nowhere")
    with pytest.raises(ConfigError) as caught:
        load_config(main)
    assert caught.value.file == broken
    assert str(caught.value) == f"{broken}: cannot read: No such file or directory"


def test_unlistable_dropin_dir_is_named(tmp_path: Path) -> None:
    main = write(tmp_path / "agent.toml", "")
    not_a_directory = write(tmp_path / "agent.d", "")
    with pytest.raises(ConfigError) as caught:
        load_config(main)
    assert str(caught.value) == (
        f"{not_a_directory}: cannot list the drop-in directory: {os.strerror(errno.ENOTDIR)}"
    )


def test_invalid_utf8_names_file_and_line(tmp_path: Path) -> None:
    main = tmp_path / "agent.toml"
    main.write_bytes(b'[resources]\n"a.com/x" = 1 # caf\xe9\n')
    with pytest.raises(ConfigError) as caught:
        load_config(main)
    assert (
        str(caught.value) == f"{main}, line 2: invalid UTF-8: invalid continuation byte at byte 31"
    )


def test_syntax_error_in_loaded_file_names_it(tmp_path: Path) -> None:
    main = write(tmp_path / "agent.toml", "[resources\n")
    with pytest.raises(ConfigError) as caught:
        load_config(main)
    assert (caught.value.file, caught.value.line) == (main, 1)


# Diffs


def test_diff_classifies_every_resource() -> None:
    old = parse(
        """
        [resources]
        "gone.com/x" = 1
        "resized.com/x" = 1
        "renamed-env.com/x" = 1
        "moved.com/x" = 1
        "same.com/x" = 1
        "b-same.com/x" = 1
        """
    )
    new = parse(
        """
        [resources]
        "b-same.com/x" = 1
        "same.com/x" = 1
        "resized.com/x" = 2
        "renamed-env.com/x" = { count = 1, env = "NEW" }
        "new.com/x" = 3
        """,
        '[resources]\n"moved.com/x" = 1\n',
    )
    diff = diff_configs(old, new)
    assert diff.added == (spec("new.com/x", 3),)
    assert diff.removed == (spec("gone.com/x", 1),)
    assert diff.changed == (
        (spec("renamed-env.com/x", 1), spec("renamed-env.com/x", 1, "NEW")),
        (spec("resized.com/x", 1), spec("resized.com/x", 2)),
    )
    assert diff.unchanged == (
        spec("b-same.com/x", 1),
        spec("moved.com/x", 1, source=dropin(1)),
        spec("same.com/x", 1),
    )
    assert not diff.empty


def test_diff_of_equal_resources_is_empty() -> None:
    old = parse('[resources]\n"a.com/x" = 1\n')
    new = parse('[agent]\ndevice_plugin_dir = "/elsewhere"\n[resources]\n"a.com/x" = 1\n')
    diff = diff_configs(old, new)
    assert diff.empty
    assert diff.unchanged == (spec("a.com/x", 1),)
    assert diff_configs(parse("[resources]"), parse("[agent]")).empty


# Node-status resources and API access


def test_node_status_resources_and_kubernetes_settings() -> None:
    config = parse(
        '[kubernetes]\nkubeconfig = "/etc/k.conf"\nnode_name = "node-1"\nresync_seconds = 5\n'
        '[resources]\n"example.com/token" = 2\n'
        '[resources."example.com/dongle"]\ncount = 4\nadvertise = "node-status"\n'
    )
    assert config.kubernetes == KubernetesSettings(
        kubeconfig=Path("/etc/k.conf"), in_cluster=False, node_name="node-1", resync_seconds=5.0
    )
    assert config.resources["example.com/dongle"].advertise == NODE_STATUS
    assert config.resources["example.com/token"].advertise == DEVICE_PLUGIN
    assert list(config.advertised_by(NODE_STATUS).resources) == ["example.com/dongle"]
    assert list(config.advertised_by(DEVICE_PLUGIN).resources) == ["example.com/token"]


@pytest.mark.parametrize(
    ("main", "dropin_text", "uses"),
    [
        ('[resources]\n"example.com/token" = 2\n', "", False),
        ('[resources."example.com/d"]\ncount = 1\nadvertise = "node-status"\n', "", True),
        # No node-status resource left, but a [kubernetes] table, even an empty one in a
        # drop-in: the agent still looks for the resources its Node lists as its own.
        ("[resources]\n", "[kubernetes]\n", True),
    ],
    ids=["device-plugins-only", "node-status", "kubernetes-table"],
)
def test_when_the_agent_uses_the_api_server(main: str, dropin_text: str, uses: bool) -> None:
    assert parse(main, dropin_text).uses_api_server is uses


def test_kubernetes_defaults() -> None:
    assert parse("[resources]").kubernetes == KubernetesSettings(
        kubeconfig=Path("/etc/kubernetes/kubelet.conf"),
        in_cluster=False,
        node_name=None,
        resync_seconds=300.0,
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[resources."example.com/d"]\ncount = 1\nadvertise = "api"\n',
            f'{MAIN}, line 3, key resources."example.com/d".advertise: advertise must be'
            ' "device-plugin", "node-status" or "dra", got "api"',
        ),
        (
            '[resources."example.com/d"]\ncount = 1\nadvertise = "node-status"\nenv = "X"\n',
            f'{MAIN}, line 4, key resources."example.com/d".env: env only applies to'
            " device-plugin and DRA resources: node-status resources allocate no IDs",
        ),
        (
            '[kubernetes]\nnode_name = "Node_1"\n',
            f"{MAIN}, line 2, key kubernetes.node_name: node_name must be a Node name"
            ' (a lowercase DNS subdomain), got "Node_1"',
        ),
        (
            "[kubernetes]\nresync_seconds = 0.5\n",
            f"{MAIN}, line 2, key kubernetes.resync_seconds: resync_seconds must be a number"
            " between 1 and 3600, got 0.5",
        ),
        (
            '[kubernetes]\nin_cluster = "yes"\n',
            f"{MAIN}, line 2, key kubernetes.in_cluster:"
            ' in_cluster must be true or false, got "yes"',
        ),
        (
            '[kubernetes]\nkubeconfig = "kubelet.conf"\n',
            f"{MAIN}, line 2, key kubernetes.kubeconfig: kubeconfig must be an absolute path,"
            ' got "kubelet.conf"',
        ),
        (
            '[kubernetes]\nkubeconfig = "/k.conf"\nin_cluster = true\n',
            "key kubernetes: set either kubeconfig or in_cluster = true, not both",
        ),
    ],
)
def test_node_status_errors(text: str, message: str) -> None:
    assert str(parse_error(text)) == message


def test_node_status_resources_do_not_claim_an_env_name() -> None:
    config = parse(
        '[resources]\n"example.com/token" = 1\n'
        '[resources."example.com/TOKEN"]\ncount = 1\nadvertise = "node-status"\n'
    )
    assert len(config.resources) == 2


def test_moving_a_resource_between_modes_is_a_change_each_mode_sees() -> None:
    before = parse('[resources]\n"example.com/x" = 1\n')
    after = parse('[resources."example.com/x"]\ncount = 1\nadvertise = "node-status"\n')
    plugins = diff_configs(before.advertised_by(DEVICE_PLUGIN), after.advertised_by(DEVICE_PLUGIN))
    status = diff_configs(before.advertised_by(NODE_STATUS), after.advertised_by(NODE_STATUS))
    assert [spec.name for spec in plugins.removed] == ["example.com/x"]
    assert [spec.name for spec in status.added] == ["example.com/x"]
