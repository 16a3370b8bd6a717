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
        ("", 3, "", "a probe needs exactly one of command, tcp, http or path"),
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
