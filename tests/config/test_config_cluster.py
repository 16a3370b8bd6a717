"""Cluster-scoped resources in the files: `scope`, `nodes` (a label selector, parsed as
apimachinery's labels.Parse does) and the [kubernetes] table's leader-election keys; every
refusal named with its file, line and key, and drop-ins merged key by key."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.config.test_config import MAIN, dropin, parse, parse_error
from tests.config.test_config_properties import BOUNDED
from tests.standin.apiserver.labels import label_key_errors, label_value_errors
from token_resource.config.diff import describe_change, diff_configs
from token_resource.config.model import (
    CLUSTER_SCOPE,
    DEFAULT_LEASE_DURATION,
    DEFAULT_RENEW_DEADLINE,
    DEFAULT_RETRY_PERIOD,
    DOES_NOT_EXIST,
    EXISTS,
    IN,
    NODE_SCOPE,
    NOT_IN,
    KubernetesSettings,
    NodeSelection,
    SelectorRequirement,
)
from token_resource.config.selectors import (
    SelectorError,
    label_key_problem,
    label_value_problem,
    parse_selector,
)

SEAT = 'resources."example.com/seat"'
CLUSTER_SEAT = '[resources."example.com/seat"]\ncount = 20\nadvertise = "dra"\nscope = "cluster"\n'


def requirement(key: str, operator: str, *values: str) -> SelectorRequirement:
    return SelectorRequirement(key, operator, values)


# What a valid cluster resource is


def test_a_resource_is_node_scoped_for_all_nodes_unless_told() -> None:
    spec = parse('[resources]\n"example.com/seat" = 2\n').resources["example.com/seat"]
    assert (spec.scope, spec.nodes, spec.cluster_scoped) == (NODE_SCOPE, None, False)
    node = parse(CLUSTER_SEAT.replace("cluster", "node")).resources["example.com/seat"]
    assert (node.scope, node.origin("scope")) == (NODE_SCOPE, MAIN)


def test_a_cluster_pool_for_every_node_or_for_the_selected_ones() -> None:
    everywhere = parse(CLUSTER_SEAT).resources["example.com/seat"]
    assert (everywhere.scope, everywhere.nodes, everywhere.cluster_scoped) == (
        CLUSTER_SCOPE,
        None,
        True,
    )
    selected = parse(CLUSTER_SEAT + 'nodes = "site in (b,a), !spot"\n').resources[
        "example.com/seat"
    ]
    assert selected.nodes == NodeSelection(
        "site in (b,a), !spot",
        (requirement("site", IN, "a", "b"), requirement("spot", DOES_NOT_EXIST)),
    )
    assert selected.origin("nodes") == MAIN
    # A cluster pool may be probed by a command (the free seats), tcp or http.
    probed = parse(CLUSTER_SEAT + f'[{SEAT}.probe]\ncommand = ["/usr/bin/free-seats"]\n')
    assert probed.resources["example.com/seat"].probe is not None


@pytest.mark.parametrize(
    ("selector", "requirements"),
    [
        ("license-zone=a", [requirement("license-zone", IN, "a")]),
        ("a==b", [requirement("a", IN, "b")]),
        ("tier!=batch", [requirement("tier", NOT_IN, "batch")]),
        ("site in (a,b)", [requirement("site", IN, "a", "b")]),
        ("site notin (b, a, b)", [requirement("site", NOT_IN, "a", "b")]),
        ("gpu", [requirement("gpu", EXISTS)]),
        ("!spot", [requirement("spot", DOES_NOT_EXIST)]),
        ("example.com/zone=a", [requirement("example.com/zone", IN, "a")]),
        # A comma is AND; requirements come ordered by key, as apimachinery sorts them.
        (
            "z,!y,x=1",
            [requirement("x", IN, "1"), requirement("y", DOES_NOT_EXIST), requirement("z", EXISTS)],
        ),
        # apimachinery's own cases (labels/selector_test.go, TestSetSelectorParser).
        ("\rx", [requirement("x", EXISTS)]),
        ("foo  in\t (abc)", [requirement("foo", IN, "abc")]),
        ("x notin\n (abc)", [requirement("x", NOT_IN, "abc")]),
        ("x in (abc,)", [requirement("x", IN, "", "abc")]),
        ("x in ()", [requirement("x", IN, "")]),
        ("x in (a,,a,,a,,a,,)", [requirement("x", IN, "", "a")]),
        ("x notin (, a)", [requirement("x", NOT_IN, "", "a")]),
        ("x=", [requirement("x", IN, "")]),
        ("x= ,z= ", [requirement("x", IN, ""), requirement("z", IN, "")]),
        ("a in (x,y,notin, z,in)", [requirement("a", IN, "in", "notin", "x", "y", "z")]),
        ("in in (in)", [requirement("in", IN, "in")]),
        (
            "0.1.2.domain/99 notin (10.10.100.1, tick.tack.clock)",
            [requirement("0.1.2.domain/99", NOT_IN, "10.10.100.1", "tick.tack.clock")],
        ),
    ],
)
def test_each_selector_form_becomes_node_selector_requirements(
    selector: str, requirements: list[SelectorRequirement]
) -> None:
    assert parse_selector(selector) == tuple(requirements)
    spec = parse(CLUSTER_SEAT + f"nodes = {toml_string(selector)}\n").resources["example.com/seat"]
    assert spec.nodes == NodeSelection(selector, tuple(requirements))


def toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r") + '"'


# Every refusal, with its file, line and key


def located(line: int, key: str, reason: str) -> str:
    return f"{MAIN}, line {line}, key {SEAT}.{key}: {reason}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[resources."example.com/seat"]\ncount = 2\nscope = "region"\n',
            located(3, "scope", 'scope must be "node" or "cluster", got "region"'),
        ),
        (
            '[resources."example.com/seat"]\ncount = 2\nscope = true\n',
            located(3, "scope", 'scope must be "node" or "cluster", got true'),
        ),
        (
            '[resources."example.com/seat"]\ncount = 2\nscope = "cluster"\n',
            located(
                3,
                "scope",
                'scope = "cluster" needs advertise = "dra" (a cluster pool is published as '
                'ResourceSlices), got advertise = "device-plugin" (the default)',
            ),
        ),
        (
            '[resources."example.com/seat"]\ncount = 2\nadvertise = "node-status"\n'
            'scope = "cluster"\n',
            located(
                4,
                "scope",
                'scope = "cluster" needs advertise = "dra" (a cluster pool is published as '
                f'ResourceSlices), got advertise = "node-status" ({MAIN})',
            ),
        ),
        (
            '[resources."example.com/seat"]\ncount = 2\nadvertise = "dra"\nnodes = "a=b"\n',
            located(
                4,
                "nodes",
                'nodes only applies to a cluster-scoped resource (scope = "cluster"): a '
                "node-scoped resource's tokens are on the node that serves them",
            ),
        ),
        (
            CLUSTER_SEAT.replace("cluster", "node") + 'nodes = "a=b"\n',
            located(5, "nodes", "nodes only applies to a cluster-scoped resource"),
        ),
        (
            CLUSTER_SEAT + "nodes = 3\n",
            located(
                5,
                "nodes",
                'nodes must be a label selector (e.g. "license-zone=a" or "site in (a,b),!spot"),'
                " got 3",
            ),
        ),
        (
            CLUSTER_SEAT + 'nodes = " \\t"\n',
            located(
                5, "nodes", "nodes is empty: leave nodes out for a pool that every node may use"
            ),
        ),
        (
            CLUSTER_SEAT + f'[{SEAT}.probe]\npath = "/run/seat-{{index}}"\n',
            located(
                5,
                "probe",
                "a path probe checks files on one node, and a cluster pool's publisher runs on "
                "no particular node: use a command (printing the number of free seats), tcp or "
                "http probe",
            ),
        ),
    ],
)
def test_bad_cluster_resources_are_refused_with_file_line_and_key(text: str, message: str) -> None:
    assert str(parse_error(text)).startswith(message)


BAD_SELECTOR = "nodes is not a valid label selector: "


@pytest.mark.parametrize(
    ("selector", "problem"),
    [
        ("site in (a", "at the end: expected ',' or ')'"),
        ("site in (a b)", "at character 12: found \"b\", expected ',' or ')'"),
        ("site in a", "at character 9: found \"a\", expected '('"),
        ("a notin(", "at the end: expected a value, ',' or ')'"),
        ("site a", 'at character 6: found "a", expected one of in, notin, =, == or !='),
        ("a (", 'at character 3: found "(", expected one of in, notin, =, == or !='),
        ("(", "at character 1: found \"(\", expected a label key or '!'"),
        ("x,,y", "at character 3: found \",\", expected a label key or '!' after ','"),
        ("a in (xyz),", "at the end: expected a label key or '!' after ','"),
        ("a in (xyz)b notin ()", "at character 11: found \"b\", expected ',' or the end"),
        ("!x=a", "at character 3: found \"=\", expected ',' or the end"),
        ("x==a==b", "at character 5: found \"==\", expected ',' or the end"),
        ("x=(a)", 'at character 3: found "(", expected a value'),
        ("!!x", 'at character 2: found "!", expected a label key'),
        (
            "x>1",
            'at character 2: ">" (a numeric comparison) is not supported in nodes: use in, '
            "notin, =, == or !=",
        ),
        ("x<7", 'at character 2: "<" (a numeric comparison) is not supported in nodes'),
        (
            "zone=a,-zone",
            "at character 8: the name of label key \"-zone\" must be letters, digits, '-', '_'"
            " and '.', starting and ending with a letter or digit, at most 63 characters",
        ),
        (f"{'k' * 64}", f'at character 1: the name of label key "{"k" * 64}" must be'),
        ("a/b/c", "at character 1: label key \"a/b/c\" has more than one '/'"),
        ("/zone", "at character 1: label key \"/zone\" has an empty prefix before '/'"),
        ("zone/", 'at character 1: label key "zone/" has an empty name'),
        ("Example.com/zone", 'at character 1: the prefix of label key "Example.com/zone" must be'),
        (
            "x=a||y=b",
            "at character 3: label value \"a||y\" must be empty or letters, digits, '-', '_' "
            "and '.', starting and ending with a letter or digit, at most 63 characters",
        ),
        (f"x in (a, {'v' * 64})", 'at character 10: label value "vvv'),
        ("zone=a\\u0000", 'at character 6: label value "a\\u0000" must be'),
    ],
)
def test_a_bad_selector_says_what_is_wrong_and_at_which_character(
    selector: str, problem: str
) -> None:
    text = CLUSTER_SEAT + f'nodes = "{selector}"\n'
    assert str(parse_error(text)).startswith(located(5, "nodes", BAD_SELECTOR + problem))


def test_a_selector_error_carries_its_position() -> None:
    with pytest.raises(SelectorError) as caught:
        parse_selector("zone in (a,b), tier=-x")
    assert (caught.value.position, str(caught.value)) == (
        20,
        "at character 21: label value \"-x\" must be empty or letters, digits, '-', '_' and"
        " '.', starting and ending with a letter or digit, at most 63 characters",
    )
    # Empty text is no requirement at all, as apimachinery answers; `nodes` refuses it.
    assert parse_selector(" \t") == ()


# Drop-ins


def test_a_drop_in_makes_a_resource_cluster_scoped_and_narrows_its_nodes() -> None:
    main = '[resources."example.com/seat"]\ncount = 20\nadvertise = "dra"\n'
    config = parse(
        main,
        f'[{SEAT}]\nscope = "cluster"\n',
        f'[{SEAT}]\nnodes = "license-zone=a"\n',
    )
    spec = config.resources["example.com/seat"]
    assert (spec.scope, spec.count) == (CLUSTER_SCOPE, 20)
    assert spec.nodes == NodeSelection("license-zone=a", (requirement("license-zone", IN, "a"),))
    assert (spec.origin("count"), spec.origin("scope"), spec.origin("nodes")) == (
        MAIN,
        dropin(1),
        dropin(2),
    )
    # A later drop-in replaces the selector whole.
    wider = parse(main + 'scope = "cluster"\nnodes = "a"\n', f'[{SEAT}]\nnodes = "b,c"\n')
    assert wider.resources["example.com/seat"].nodes == NodeSelection(
        "b,c", (requirement("b", EXISTS), requirement("c", EXISTS))
    )


def test_the_merged_resource_is_checked_naming_the_file_that_set_the_offending_key() -> None:
    # nodes in a drop-in for a resource the main file left node-scoped: the drop-in's line.
    error = parse_error(
        '[resources."example.com/seat"]\ncount = 2\nadvertise = "dra"\n',
        f'# zone a only\n[{SEAT}]\nnodes = "zone=a"\n',
    )
    assert str(error).startswith(
        f"{dropin(1)}, line 3, key {SEAT}.nodes: nodes only applies to a cluster-scoped resource"
    )
    # A drop-in that takes DRA away from a cluster pool: the scope's line, naming the drop-in.
    error = parse_error(CLUSTER_SEAT, f'[{SEAT}]\nadvertise = "device-plugin"\n')
    assert str(error) == (
        f'{MAIN}, line 4, key {SEAT}.scope: scope = "cluster" needs advertise = "dra" (a '
        f'cluster pool is published as ResourceSlices), got advertise = "device-plugin" '
        f"({dropin(1)})"
    )
    # A path probe set for the node-scoped resource, which a drop-in makes cluster-scoped.
    error = parse_error(
        CLUSTER_SEAT.replace("cluster", "node") + f'[{SEAT}.probe]\npath = "/run/seat"\n',
        f'[{SEAT}]\nscope = "cluster"\n',
    )
    assert str(error).startswith(f"{MAIN}, line 5, key {SEAT}.probe: a path probe checks")
    # A bad selector in a drop-in is that drop-in's error, whatever the main file says.
    error = parse_error(CLUSTER_SEAT, f'[{SEAT}]\nnodes = "zone in ()x"\n')
    assert str(error) == (
        f'{dropin(1)}, line 2, key {SEAT}.nodes: {BAD_SELECTOR}at character 11: found "x",'
        " expected ',' or the end"
    )


def test_removing_a_cluster_pool_and_making_it_node_scoped_again() -> None:
    selected = CLUSTER_SEAT + 'nodes = "zone=a"\n'
    assert "example.com/seat" not in parse(selected, f"[{SEAT}]\nremove = true\n").resources
    # Back to the node's scope, the selector must go too: a drop-in cannot unset a key.
    error = parse_error(selected, f'[{SEAT}]\nscope = "node"\n')
    assert str(error).startswith(f"{MAIN}, line 5, key {SEAT}.nodes: nodes only applies")


# A reload's view: a change of scope or nodes is a change of the resource


def test_a_change_of_scope_or_nodes_is_a_change_of_the_resource() -> None:
    node = parse(CLUSTER_SEAT.replace("cluster", "node"))
    everywhere = parse(CLUSTER_SEAT)
    zone_a = parse(CLUSTER_SEAT + 'nodes = "zone=a"\n')
    zone_b = parse(CLUSTER_SEAT + 'nodes = "zone=b"\n')
    for old, new, described in (
        (node, everywhere, "scope node → cluster"),
        (everywhere, zone_a, 'nodes all → "zone=a"'),
        (zone_a, zone_b, 'nodes "zone=a" → "zone=b"'),
        (zone_b, node, 'scope cluster → node, nodes "zone=b" → all'),
    ):
        diff = diff_configs(old, new)
        assert diff.changed == (
            (old.resources["example.com/seat"], new.resources["example.com/seat"]),
        )
        assert (diff.added, diff.removed, diff.unchanged) == ((), (), ())
        assert describe_change(*diff.changed[0]) == described
    # The same selection written in another file is no change.
    moved = parse(CLUSTER_SEAT, f'[{SEAT}]\nnodes = "zone=a"\n')
    assert diff_configs(zone_a, moved).empty


# Leader election


def test_the_lease_settings_default_to_client_gos_and_can_be_set() -> None:
    assert parse(CLUSTER_SEAT).kubernetes == KubernetesSettings()
    assert (DEFAULT_LEASE_DURATION, DEFAULT_RENEW_DEADLINE, DEFAULT_RETRY_PERIOD) == (15, 10, 2)
    config = parse(
        "[kubernetes]\nlease_duration_seconds = 60\nrenew_deadline_seconds = 40.5\n"
        'retry_period_seconds = 5\nlease_namespace = "licenses"\n' + CLUSTER_SEAT
    )
    settings = config.kubernetes
    assert (settings.lease_duration, settings.renew_deadline, settings.retry_period) == (
        60.0,
        40.5,
        5.0,
    )
    assert settings.lease_namespace == "licenses"
    # A drop-in overrides one key and keeps the others.
    config = parse(
        '[kubernetes]\nlease_duration_seconds = 60\nlease_namespace = "licenses"\n' + CLUSTER_SEAT,
        "[kubernetes]\nlease_duration_seconds = 30\n",
    )
    assert (config.kubernetes.lease_duration, config.kubernetes.lease_namespace) == (
        30.0,
        "licenses",
    )


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        *(
            (f"{key} = {value}", f"{key} must be a number of seconds above 0 to 3600, got {shown}")
            for key in ("lease_duration_seconds", "renew_deadline_seconds", "retry_period_seconds")
            for value, shown in (("0", "0"), ("-1", "-1"), ('"15"', '"15"'), ("true", "true"))
        ),
        ("retry_period_seconds = nan", "retry_period_seconds must be a number of seconds above"),
        ("lease_duration_seconds = inf", "lease_duration_seconds must be a number of seconds"),
        ("lease_duration_seconds = 3601", "lease_duration_seconds must be a number of seconds"),
        *(
            (
                f"lease_namespace = {value}",
                "lease_namespace must be a namespace name (a DNS label: lowercase letters, "
                "digits and '-', starting and ending with a letter or digit, at most 63 "
                f"characters), got {value}",
            )
            for value in ('"Licenses"', '"token.resource"', '"-x"', '""', f'"{"n" * 64}"', "1")
        ),
    ],
)
def test_bad_lease_settings_are_refused_with_file_line_and_key(setting: str, message: str) -> None:
    key = setting.split(" = ", maxsplit=1)[0]
    error = parse_error(f"[kubernetes]\n{setting}\n" + CLUSTER_SEAT)
    assert str(error).startswith(f"{MAIN}, line 2, key kubernetes.{key}: {message}")


@pytest.mark.parametrize(
    ("main", "later", "refused"),
    [
        # lease duration > renew deadline
        (
            "lease_duration_seconds = 10\n",
            None,
            f"{MAIN}, line 2, key kubernetes.lease_duration_seconds: lease_duration_seconds (10)"
            " must be greater than renew_deadline_seconds (10): a leader that fails to renew "
            "must give up before another may take the lease",
        ),
        (
            "lease_duration_seconds = 20\n",
            "renew_deadline_seconds = 25\n",
            f"{dropin(1)}, line 2, key kubernetes.renew_deadline_seconds: lease_duration_seconds "
            "(20) must be greater than renew_deadline_seconds (25)",
        ),
        # renew deadline > 1.2 times the retry period, compared as client-go's time.Durations
        (
            "retry_period_seconds = 5\nrenew_deadline_seconds = 6\n",
            None,
            f"{MAIN}, line 3, key kubernetes.renew_deadline_seconds: renew_deadline_seconds (6) "
            "must be greater than 1.2 times retry_period_seconds (5, making 6): a leader must "
            "have time to retry its renewal (every retry period, jittered by up to 1.2 times) "
            "before the deadline",
        ),
        (
            "renew_deadline_seconds = 6\n",
            "retry_period_seconds = 5\n",
            f"{dropin(1)}, line 2, key kubernetes.retry_period_seconds: renew_deadline_seconds",
        ),
        (
            "retry_period_seconds = 9\n",
            None,
            f"{MAIN}, line 2, key kubernetes.retry_period_seconds: renew_deadline_seconds (10) "
            "must be greater than 1.2 times retry_period_seconds (9, making 10.8)",
        ),
    ],
)
def test_the_lease_timing_follows_client_gos_rule(
    main: str, later: str | None, refused: str
) -> None:
    documents = [f"[kubernetes]\n{main}" + CLUSTER_SEAT]
    if later is not None:
        documents.append(f"[kubernetes]\n{later}")
    assert str(parse_error(*documents)).startswith(refused)


def test_the_lease_timing_just_inside_client_gos_rule_is_taken() -> None:
    settings = parse(
        "[kubernetes]\nlease_duration_seconds = 6.002\nrenew_deadline_seconds = 6.001\n"
        "retry_period_seconds = 5\n" + CLUSTER_SEAT
    ).kubernetes
    assert (settings.lease_duration, settings.renew_deadline, settings.retry_period) == (
        6.002,
        6.001,
        5.0,
    )


# Properties


_LABEL_CHARACTERS = st.sampled_from("abcxyzABZ019-_.")
_NAMES = st.text(_LABEL_CHARACTERS, min_size=1, max_size=63).filter(
    lambda name: label_value_problem(name) is None
)
_PREFIXES = st.from_regex(
    r"[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?(\.[a-z0-9]{1,5}){0,3}", fullmatch=True
)
_KEYS = st.one_of(_NAMES, st.builds(lambda prefix, name: f"{prefix}/{name}", _PREFIXES, _NAMES))
_VALUES = st.one_of(st.just(""), _NAMES)
_REQUIREMENTS = st.one_of(
    st.builds(SelectorRequirement, _KEYS, st.sampled_from([EXISTS, DOES_NOT_EXIST])),
    st.builds(
        lambda key, operator, values: SelectorRequirement(key, operator, tuple(sorted(values))),
        _KEYS,
        st.sampled_from([IN, NOT_IN]),
        st.frozensets(_VALUES, min_size=1, max_size=4),
    ),
)
_SPACES = st.text(st.sampled_from(" \t\n"), max_size=2)


def render(requirement: SelectorRequirement, spaces: str, set_form: bool) -> str:
    """A requirement in selector text, independently of the parser: the set form
    (``in (a,b)``) or, for one value, the exact form (``=a``, ``==a``, ``!=a``)."""
    key, values = requirement.key, requirement.values
    if requirement.operator == EXISTS:
        return f"{spaces}{key}"
    if requirement.operator == DOES_NOT_EXIST:
        return f"!{spaces}{key}"
    if len(values) == 1 and not set_form:
        operator = "!=" if requirement.operator == NOT_IN else "=="
        return f"{key}{spaces}{operator}{spaces}{values[0]}"
    word = "in" if requirement.operator == IN else "notin"
    return f"{key} {word}{spaces}({spaces}{f'{spaces},'.join(values)})"


@pytest.mark.timeout(600)  # CPU-bound Hypothesis run: minutes under load
@BOUNDED
@given(st.lists(st.tuples(_REQUIREMENTS, _SPACES, st.booleans()), min_size=1, max_size=5))
def test_a_rendered_selector_parses_back_to_its_requirements(
    written: list[tuple[SelectorRequirement, str, bool]],
) -> None:
    text = ",".join(render(*parts) for parts in written)
    requirements = [written_requirement for written_requirement, _, _ in written]
    assert parse_selector(text) == tuple(sorted(requirements, key=lambda r: r.key)), text


@BOUNDED
@given(st.text(st.sampled_from("aZ09-_./éx\0 "), max_size=70))
def test_label_keys_and_values_are_checked_as_apimachinery_does(text: str) -> None:
    # The API-server stand-in's IsLabelKey and IsLabelValue (in apimachinery's words) agree.
    assert (label_key_problem(text) is None) == (not label_key_errors(text))
    assert (label_value_problem(text) is None) == (not label_value_errors(text))


@BOUNDED
@given(st.text(st.sampled_from("a=!(),<> in notin\t/.-"), max_size=30))
def test_any_text_parses_or_is_refused_at_a_character_within_it(text: str) -> None:
    position: int | None = None
    requirements: tuple[SelectorRequirement, ...] = ()
    try:
        requirements = parse_selector(text)
    except SelectorError as error:
        position = error.position
    assert position is None or 0 <= position <= len(text)
    assert all(r.operator in (IN, NOT_IN, EXISTS, DOES_NOT_EXIST) for r in requirements)
    assert all(bool(r.values) == (r.operator in (IN, NOT_IN)) for r in requirements)
