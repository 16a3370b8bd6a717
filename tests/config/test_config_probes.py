"""The probe table: every bad value named with its file, line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from token_resource.config.errors import ConfigError
from token_resource.config.load import parse_config
from token_resource.config.model import ProbeSpec

MAIN = Path("/etc/token-resource.toml")
HEAD = '[resources."example.com/a"]\ncount = 2\n[resources."example.com/a".probe]\n'
KEY = 'resources."example.com/a".probe'


def probe_of(text: str) -> ProbeSpec | None:
    return parse_config([(MAIN, HEAD + text)]).resources["example.com/a"].probe


def test_each_kind_with_kubernetes_probes_defaults() -> None:
    assert probe_of('command = ["/usr/bin/lmstat", "-a"]\n') == ProbeSpec(
        "command", ("/usr/bin/lmstat", "-a"), 10.0, 1.0, 3, 1
    )
    assert probe_of('tcp = "[::1]:27000"\ninterval = 30\ntimeout = 2.5\n') == ProbeSpec(
        "tcp", "[::1]:27000", 30.0, 2.5
    )
    http = probe_of('http = "https://lic.example:8443/health?x=1"\nsuccess_threshold = 2\n')
    assert http is not None
    assert (http.kind, http.success_threshold) == ("http", 2)
    path = probe_of('path = "/dev/ttyUSB{index}"\nfailure_threshold = 1\n')
    assert path is not None
    assert path.per_token
    assert path.failure_threshold == 1
    assert probe_of('path = "/dev/hidraw0"\n') == ProbeSpec("path", "/dev/hidraw0")


@pytest.mark.parametrize(
    ("text", "line", "key", "reason"),
    [
        ("", 3, "", "a probe needs exactly one of command, tcp, http, path, flexlm or rlm"),
        ('tcp = "a:1"\npath = "/x"\n', 3, "", "got tcp and path"),
        ('command = "lmstat -a"\n', 4, ".command", "command must be a non-empty array"),
        ("command = []\n", 4, ".command", "command must be a non-empty array"),
        ('tcp = "license-server"\n', 4, ".tcp", 'tcp must be "HOST:PORT"'),
        ('tcp = "a:70000"\n', 4, ".tcp", 'tcp must be "HOST:PORT"'),
        ('http = "ftp://x/"\n', 4, ".http", "http must be an http:// or https:// URL"),
        ('http = "http://:80/"\n', 4, ".http", "http must be an http:// or https:// URL"),
        ('path = "dev/x"\n', 4, ".path", "path must be an absolute path"),
        ('path = "/dev/x{n}"\n', 4, ".path", "no other braces"),
        ('path = "/x"\ninterval = 0.5\n', 5, ".interval", "from 1 to 86400, got 0.5"),
        ('path = "/x"\ntimeout = 0\n', 5, ".timeout", "above 0 to 3600, got 0"),
        ('path = "/x"\ntimeout = true\n', 5, ".timeout", "got true"),
        ('path = "/x"\nfailure_threshold = 0\n', 5, ".failure_threshold", "from 1 to 100"),
        ('path = "/x"\nsuccess_threshold = 1.5\n', 5, ".success_threshold", "from 1 to 100"),
        ('path = "/x"\ntaint_effect = "Evict"\n', 5, ".taint_effect", '"NoSchedule" or'),
        ('path = "/x"\nperiod = 3\n', 5, ".period", 'unknown key "period"'),
    ],
)
def test_bad_probes_name_the_file_line_and_key(text: str, line: int, key: str, reason: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config([(MAIN, HEAD + text)])
    assert str(error.value).startswith(f"{MAIN}, line {line}, key {KEY}{key}: ")
    assert reason in str(error.value)


def test_a_drop_in_replaces_the_whole_probe() -> None:
    dropin = Path("/etc/token-resource.d/50-probe.toml")
    config = parse_config(
        [
            (MAIN, HEAD + 'path = "/dev/x"\ninterval = 30\n'),
            (dropin, '[resources."example.com/a".probe]\ntcp = "127.0.0.1:27000"\n'),
        ]
    )
    spec = config.resources["example.com/a"]
    assert spec.probe == ProbeSpec("tcp", "127.0.0.1:27000")
    assert spec.origin("probe") == dropin


def test_a_drop_in_that_sets_other_keys_keeps_the_probe() -> None:
    dropin = Path("/etc/token-resource.d/50-count.toml")
    config = parse_config(
        [
            (MAIN, HEAD + 'path = "/dev/x"\ninterval = 30\n'),
            (dropin, '[resources."example.com/a"]\ncount = 7\n'),
        ]
    )
    spec = config.resources["example.com/a"]
    assert (spec.count, spec.probe) == (7, ProbeSpec("path", "/dev/x", interval=30.0))
    assert (spec.origin("count"), spec.origin("probe")) == (dropin, MAIN)


# --- the license servers' kinds ----------------------------------------------------------------


def test_the_license_kinds_with_their_defaults_and_their_tools() -> None:
    assert probe_of('flexlm = "27000@licsrv"\nfeature = "MATLAB"\n') == ProbeSpec(
        "flexlm", "27000@licsrv", timeout=10.0, feature="MATLAB", tool="lmutil"
    )
    rlm = probe_of(
        'rlm = "5053@lic-a.example.com:5053@lic-b"\nproduct = "solver_pro"\n'
        'rlmutil = "/opt/rlm/rlmutil"\ntimeout = 4\ninterval = 30\n'
    )
    assert rlm == ProbeSpec(
        "rlm",
        "5053@lic-a.example.com:5053@lic-b",
        interval=30.0,
        timeout=4.0,
        feature="solver_pro",
        tool="/opt/rlm/rlmutil",
    )
    servers = ("@licsrv", "27000@h1,27000@h2,27000@h3", "/opt/flexlm/license.dat", "1@10.0.0.7")
    for server in servers:
        flexlm = probe_of(f'flexlm = "{server}"\nfeature = "a-b.c+d_1"\nlmutil = "lmutil11"\n')
        assert flexlm is not None
        assert (flexlm.target, flexlm.feature, flexlm.tool) == (server, "a-b.c+d_1", "lmutil11")


@pytest.mark.parametrize(
    ("text", "line", "key", "reason"),
    [
        ('feature = "MATLAB"\n', 4, ".feature", "feature belongs to a flexlm probe, which needs"),
        ('product = "x"\n', 4, ".product", "product belongs to a rlm probe, which needs rlm ="),
        ('lmutil = "/x"\n', 4, ".lmutil", "lmutil belongs to a flexlm probe"),
        ('tcp = "a:1"\nfeature = "M"\n', 5, ".feature", "(this probe is tcp)"),
        ('rlm = "1@a"\nproduct = "x"\nlmutil = "/x"\n', 6, ".lmutil", "(this probe is rlm)"),
        ('flexlm = "1@a"\nproduct = "x"\n', 5, ".product", "(this probe is flexlm)"),
        ('flexlm = "1@a"\nrlm = "1@a"\n', 3, "", "got flexlm and rlm"),
        ('flexlm = "1@a"\n', 4, ".flexlm", 'a flexlm probe needs feature = "NAME"'),
        ('rlm = "1@a"\n', 4, ".rlm", 'a rlm probe needs product = "NAME"'),
        ('flexlm = "licsrv"\nfeature = "M"\n', 4, ".flexlm", 'got "licsrv"'),
        ('flexlm = "70000@a"\nfeature = "M"\n', 4, ".flexlm", "port 1 to 65535"),
        ('flexlm = "0@a"\nfeature = "M"\n', 4, ".flexlm", 'got "0@a"'),
        ('flexlm = "1@a:"\nfeature = "M"\n', 4, ".flexlm", 'several joined by ":"'),
        ('flexlm = "1@a b"\nfeature = "M"\n', 4, ".flexlm", "must be the license server"),
        ('flexlm = "x@a"\nfeature = "M"\n', 4, ".flexlm", 'or "@HOST" (its default ports)'),
        ('flexlm = "lic.dat"\nfeature = "M"\n', 4, ".flexlm", "absolute path of a license"),
        ('flexlm = 27000\nfeature = "M"\n', 4, ".flexlm", "got 27000"),
        ('rlm = "@a"\nproduct = "x"\n', 4, ".rlm", 'rlm must be the license server as "PORT'),
        ('rlm = "1@a,1@b"\nproduct = "x"\n', 4, ".rlm", 'got "1@a,1@b"'),
        ('flexlm = "1@a"\nfeature = "MAT LAB"\n', 5, ".feature", "feature must be a name of"),
        ('flexlm = "1@a"\nfeature = "A:B"\n', 5, ".feature", 'got "A:B"'),
        ('flexlm = "1@a"\nfeature = ""\n', 5, ".feature", "feature must be a name of"),
        ('flexlm = "1@a"\nfeature = 3\n', 5, ".feature", "got 3"),
        (f'flexlm = "1@a"\nfeature = "{"x" * 65}"\n', 5, ".feature", "at most 64"),
        ('rlm = "1@a"\nproduct = "(x)"\n', 5, ".product", "product must be a name of"),
        ('flexlm = "1@a"\nfeature = "M"\nlmutil = "bin/lmutil"\n', 6, ".lmutil", "absolute"),
        ('flexlm = "1@a"\nfeature = "M"\nlmutil = ""\n', 6, ".lmutil", 'got ""'),
        ('rlm = "1@a"\nproduct = "x"\nrlmutil = ["rlmutil"]\n', 6, ".rlmutil", "found on PATH"),
        ('flexlm = "1@a"\nfeature = "M"\ntimeout = 0\n', 6, ".timeout", "above 0 to 3600"),
    ],
)
def test_bad_license_probes_name_the_file_line_and_key(
    text: str, line: int, key: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config([(MAIN, HEAD + text)])
    assert str(error.value).startswith(f"{MAIN}, line {line}, key {KEY}{key}: "), error.value
    assert reason in str(error.value), error.value


def test_a_license_probe_may_serve_a_cluster_pool() -> None:
    text = (
        '[resources."example.com/a"]\ncount = 2\nadvertise = "dra"\nscope = "cluster"\n'
        'probe = { rlm = "5053@licsrv", product = "solver" }\n'
    )
    spec = parse_config([(MAIN, text)]).resources["example.com/a"]
    assert spec.cluster_scoped
    assert spec.probe == ProbeSpec(
        "rlm", "5053@licsrv", timeout=10.0, feature="solver", tool="rlmutil"
    )
