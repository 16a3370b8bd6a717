"""The configuration written the way real tools write it: the agent reloads once the write is
complete and never removes, even for a moment, a resource that is in the final file.

Each test changes one count with one tool, while the kubelet stand-in counts registrations and
ListAndWatch updates per resource: a resource taken away and given back would register again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.harness import AgentProcess
from tests.standin.kubelet import KubeletStandin, KubeletView, serves_exactly

BEFORE = {"example.com/a": 2, "example.com/b": 3, "acme/c": 1}
AFTER = {**BEFORE, "example.com/b": 5}
DROPIN_BEFORE = {"example.com/d": 4}
DROPIN_AFTER = {"example.com/d": 6}
# A tool that takes longer than this to save is broken, not slow.
TOOL_TIMEOUT = 60.0


def main_text(counts: dict[str, int]) -> str:
    # acme/c in the long form, with an env of its own: a reload that lost it would show.
    return (
        "[resources]\n"
        + "".join(f'"{name}" = {count}\n' for name, count in counts.items() if name != "acme/c")
        + f'\n[resources."acme/c"]\ncount = {counts["acme/c"]}\nenv = "C_SEATS"\n'
    )


def dropin_text(counts: dict[str, int]) -> str:
    return "[resources]\n" + "".join(f'"{name}" = {count}\n' for name, count in counts.items())


def run(command: list[str], stdin_text: str = "") -> None:
    subprocess.run(
        command, input=stdin_text.encode(), check=True, timeout=TOOL_TIMEOUT, capture_output=True
    )


# The writers. Each turns the file at `path` from its current text into `text`.


def ansible_template(path: Path, text: str) -> None:
    """Ansible's atomic_move: a temporary file in the same directory, renamed over the old."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".ansible_tmp", suffix=path.name)
    with os.fdopen(fd, "w") as file:
        file.write(text)
    os.rename(temporary, path)


def sed_in_place(path: Path, text: str) -> None:
    """`sed -i`: writes a temporary file and renames it over the old one."""
    old, new = _changed_line(path.read_text(), text)
    run(["sed", "-i", f"s|^{old}$|{new}|", str(path)])


def vim(backupcopy: str) -> Callable[[Path, str], None]:
    """Real vim in Ex mode: `auto` renames the old file away and writes a new one; `yes`
    writes in place after copying a backup."""

    def write(path: Path, text: str) -> None:
        old, new = _changed_line(path.read_text(), text)
        run(
            [
                "vim", "-Es", "-u", "NONE", "-i", "NONE", "-N",
                "-c", f"set backupcopy={backupcopy} writebackup nobackup",
                "-c", f"%s#^{old}$#{new}#",
                "-c", "wq",
                str(path),
            ]
        )  # fmt: skip

    return write


def nano(path: Path, text: str) -> None:
    """Real nano in a tmux terminal: cut the line, type the new one, write out, exit."""
    old, new = _changed_line(path.read_text(), text)
    line = path.read_text().split("\n").index(old) + 1
    session = f"tr-nano-{os.getpid()}"
    run(["tmux", "new-session", "-d", "-s", session, "-x", "100", "-y", "30",
         "nano", "--ignorercfiles", f"+{line}", str(path)])  # fmt: skip
    try:
        _wait_for_screen(session, path.name)
        run(["tmux", "send-keys", "-t", session, "C-k"])
        # Enter as a key: a literal newline is ^J, which nano reads as "justify".
        run(["tmux", "send-keys", "-t", session, "-l", new])
        run(["tmux", "send-keys", "-t", session, "Enter"])
        run(["tmux", "send-keys", "-t", session, "C-o"])
        _wait_for_screen(session, "File Name to Write")
        run(["tmux", "send-keys", "-t", session, "Enter"])
        _wait_for_screen(session, "Wrote")
        run(["tmux", "send-keys", "-t", session, "C-x"])
        deadline = time.monotonic() + TOOL_TIMEOUT
        while (
            subprocess.run(
                ["tmux", "has-session", "-t", session], check=False, capture_output=True
            ).returncode
            == 0
        ):
            assert time.monotonic() < deadline, "nano did not exit"
            time.sleep(0.05)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False, capture_output=True)
    # On the last line nano keeps the line break after the one typed: one blank line more.
    assert path.read_text().rstrip("\n") == text.rstrip("\n")


def cat_redirect(path: Path, text: str) -> None:
    """`cat > file` in a shell: truncated on open, then written."""
    run(["sh", "-c", 'cat > "$1"', "sh", str(path)], stdin_text=text)


def tee(path: Path, text: str) -> None:
    run(["tee", str(path)], stdin_text=text)


def slow_writer(path: Path, text: str) -> None:
    """Truncates, pauses, then writes in chunks with pauses: a slow disk, or a slow program."""
    with path.open("r+") as file:
        file.truncate(0)
        file.flush()
        time.sleep(0.3)
        for start in range(0, len(text), 16):
            file.write(text[start : start + 16])
            file.flush()
            time.sleep(0.05)


def _changed_line(old_text: str, new_text: str) -> tuple[str, str]:
    changed = [
        (old, new) for old, new in zip(old_text.split("\n"), new_text.split("\n")) if old != new
    ]
    assert len(changed) == 1, changed
    return changed[0]


def _wait_for_screen(session: str, text: str) -> None:
    deadline = time.monotonic() + TOOL_TIMEOUT
    while True:
        screen = subprocess.run(
            ["tmux", "capture-pane", "-p", "-t", session],
            check=False,
            capture_output=True,
            text=True,
        ).stdout
        if text in screen:
            return
        assert time.monotonic() < deadline, f"tmux never showed {text!r}:\n{screen}"
        time.sleep(0.05)


WRITERS: dict[str, Callable[[Path, str], None]] = {
    "ansible template (rename)": ansible_template,
    "sed -i (rename)": sed_in_place,
    "vim, backupcopy=auto (rename away, write new)": vim("auto"),
    "vim, backupcopy=yes (in place)": vim("yes"),
    "nano (in place)": nano,
    "cat > file": cat_redirect,
    "tee": tee,
    "truncate, pause, write in chunks": slow_writer,
}


def registrations(view: KubeletView) -> dict[str, int]:
    return {name: resource.registrations for name, resource in view.resources.items()}


def lists(view: KubeletView) -> dict[str, int]:
    return {name: resource.lists_received for name, resource in view.resources.items()}


@pytest.mark.parametrize("target", ["main file", "drop-in"])
@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_tool_writing_the_file_never_removes_a_resource_that_stays(
    agent: AgentProcess, kubelet: KubeletStandin, writer: str, target: str
) -> None:
    for tool in ("vim", "nano", "tmux", "sed", "tee"):
        assert shutil.which(tool), f"{tool} is needed for this test (.ci/run installs it)"
    dropin = agent.dropin_dir / "50-tools.toml"
    dropin.parent.mkdir()
    # [agent] in a drop-in of its own, so that every state of the main file during a write
    # (empty, half-written) would be a valid configuration were it read.
    (agent.dropin_dir / "00-agent.toml").write_text(agent.agent_section())
    agent.config_path.write_text(main_text(BEFORE))
    dropin.write_text(dropin_text(DROPIN_BEFORE))
    agent.start()
    before = kubelet.wait_for(serves_exactly({**BEFORE, **DROPIN_BEFORE}))
    assert set(registrations(before).values()) == {1}
    log_mark = len(agent.log())

    if target == "main file":
        WRITERS[writer](agent.config_path, main_text(AFTER))
        final = {**AFTER, **DROPIN_BEFORE}
        changed = "example.com/b"
    else:
        WRITERS[writer](dropin, dropin_text(DROPIN_AFTER))
        final = {**BEFORE, **DROPIN_AFTER}
        changed = "example.com/d"

    after = kubelet.wait_for(serves_exactly(final))
    log = agent.log()[log_mark:]
    reloads = log.count("reload (file changed)")
    print(f"{writer}, {target}: {reloads} reload(s), registrations {registrations(after)}")
    # Registered once and never again: no resource went away, not even for a moment.
    assert registrations(after) == registrations(before), log
    # The resources that did not change got no update at all; the changed one, its new list.
    unchanged = {name: count for name, count in lists(before).items() if name != changed}
    assert {name: lists(after)[name] for name in unchanged} == unchanged, log
    assert lists(after)[changed] > lists(before)[changed]
    assert "Traceback" not in log
