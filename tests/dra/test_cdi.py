"""CDI specs: the version each spec declares, and what a runtime's CDI reading makes of them.

The agent's minimum_version follows the CDI library's rules; the runtime's side
(tests/standin/cdi.py, written from the same rules, separately) reads every spec the agent
writes, for claim UIDs beginning with each hex digit. tests/system/test_cdi_containerd.py runs
the real library (Debian 13's containerd).
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.standin.cdi import CdiRuntime, UnresolvableDevices, read_spec
from token_resource.dra.cdi import device_id, minimum_version, write_spec

DRIVER = "tokens.example.com"
ENV = "TOKEN_RESOURCE_EXAMPLE_COM_TOKEN"


def spec_with(**changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "kind": f"{DRIVER}/claim",
        "devices": [{"name": "claim-0", "containerEdits": {"env": ["A=1"]}}],
    }
    return {**spec, **changes}


def device(**changes: Any) -> dict[str, Any]:
    return {"name": "claim-0", "containerEdits": {"env": ["A=1"]}, **changes}


@pytest.mark.parametrize(
    ("spec", "version"),
    [
        (spec_with(), "0.3.0"),
        (spec_with(devices=[device(name="Z9")]), "0.3.0"),
        (spec_with(devices=[device(name="8ec1876b-0")]), "0.5.0"),
        (spec_with(devices=[device(), device(name="0-1")]), "0.5.0"),
        (spec_with(devices=[device(name="_x")]), "0.5.0"),
        (spec_with(devices=[device(name="é")]), "0.5.0"),
        (spec_with(containerEdits={"mounts": [{"hostPath": "/a", "type": "bind"}]}), "0.4.0"),
        (
            spec_with(devices=[device(containerEdits={"deviceNodes": [{"hostPath": "/d"}]})]),
            "0.5.0",
        ),
        (spec_with(annotations={"a": "b"}), "0.6.0"),
        (spec_with(devices=[device(annotations={"a": "b"})]), "0.6.0"),
        (spec_with(kind=f"{DRIVER}/claim.v2"), "0.6.0"),
        (spec_with(containerEdits={"additionalGids": [5]}), "0.7.0"),
        (spec_with(containerEdits={"intelRdt": {"closID": "c"}}), "0.7.0"),
        (spec_with(containerEdits={"intelRdt": {"schemata": ["L3:0=f"]}}), "1.1.0"),
        (spec_with(devices=[device(containerEdits={"netDevices": [{"name": "x"}]})]), "1.1.0"),
    ],
)
def test_each_spec_declares_the_lowest_version_whose_rules_it_meets(
    spec: dict[str, Any], version: str
) -> None:
    assert minimum_version(spec) == version


@pytest.mark.parametrize("first", "0123456789abcdef")
def test_every_spec_the_agent_writes_is_read_by_the_runtime(tmp_path: Path, first: str) -> None:
    """Claim UIDs beginning with each hex digit; two requests, two resources in one."""
    uid = first + str(uuid.uuid4())[1:]
    environments = [{ENV: "token-0,token-3"}, {ENV: "token-1", "OTHER_TOKEN": "token-5"}]
    ids = write_spec(tmp_path, DRIVER, uid, environments)
    assert ids == [device_id(DRIVER, uid, 0), device_id(DRIVER, uid, 1)]
    runtime = CdiRuntime([tmp_path])
    assert runtime.environment(ids[:1]) == {ENV: "token-0,token-3"}
    assert runtime.environment(ids[1:]) == {ENV: "token-1", "OTHER_TOKEN": "token-5"}
    assert runtime.specs()[1] == {}
    spec = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert spec["cdiVersion"] == ("0.5.0" if first.isdigit() else "0.3.0")


# --- the runtime's side (the stand-in) ------------------------------------------------------


def write(path: Path, spec: dict[str, Any]) -> Path:
    path.write_text(json.dumps(spec))
    return path


def test_the_runtime_refuses_a_spec_below_the_version_it_needs(tmp_path: Path) -> None:
    # What earlier builds (up to 68301fc) wrote for a claim whose UID begins with a digit.
    name = "8ec1876b-170f-42d6-8eed-6a902ceca2ec-0"
    path = write(tmp_path / "old.json", spec_with(cdiVersion="0.3.0", devices=[device(name=name)]))
    message = "the spec version must be at least v0.5.0"
    with pytest.raises(ValueError, match=re.escape(message)):
        read_spec(path)
    with pytest.raises(UnresolvableDevices, match=re.escape(f"{DRIVER}/claim={name}")):
        CdiRuntime([tmp_path]).environment([f"{DRIVER}/claim={name}"])
    write(path, spec_with(cdiVersion="0.5.0", devices=[device(name=name)]))
    assert CdiRuntime([tmp_path]).environment([f"{DRIVER}/claim={name}"]) == {"A": "1"}


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        (spec_with(cdiVersion="9.0.0"), "invalid version"),
        (spec_with(cdiVersion="0.5.0", kind="claim"), "invalid kind"),
        (spec_with(cdiVersion="0.5.0", kind="-bad.example/claim"), "invalid kind"),
        (spec_with(cdiVersion="0.5.0", devices=[device(name="a/b")]), "invalid device name"),
        (spec_with(cdiVersion="0.5.0", devices=[device(), device()]), "duplicate device"),
        (spec_with(cdiVersion="0.5.0", devices=[]), "no devices"),
        (spec_with(cdiVersion="0.5.0", annotations={"a": "b"}), "at least v0.6.0"),
        (
            spec_with(cdiVersion="0.5.0", containerEdits={"mounts": []}),
            "not modelled here",
        ),
    ],
)
def test_the_runtime_refuses_what_the_library_refuses(
    tmp_path: Path, spec: dict[str, Any], reason: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(reason)):
        read_spec(write(tmp_path / "spec.json", spec))


def test_a_runtime_that_knows_only_older_versions_refuses_newer_ones(tmp_path: Path) -> None:
    path = write(tmp_path / "spec.json", spec_with(cdiVersion="0.5.0"))
    with pytest.raises(ValueError, match="invalid version"):
        read_spec(path, known_versions=("0.3.0", "0.4.0"))


def test_later_directories_win_and_one_directorys_duplicates_conflict(tmp_path: Path) -> None:
    etc, run = tmp_path / "etc", tmp_path / "run"
    etc.mkdir()
    run.mkdir()
    write(etc / "a.json", spec_with(cdiVersion="0.3.0"))
    write(
        run / "a.json",
        spec_with(cdiVersion="0.3.0", devices=[device(containerEdits={"env": ["A=2"]})]),
    )
    assert CdiRuntime([etc, run]).environment([f"{DRIVER}/claim=claim-0"]) == {"A": "2"}
    write(run / "b.yaml", spec_with(cdiVersion="0.3.0"))
    with pytest.raises(UnresolvableDevices, match="conflicting"):
        CdiRuntime([etc, run]).environment([f"{DRIVER}/claim=claim-0"])
