"""Every ``token-resource ...`` command line in the READMEs and the man pages parses.

The command lines are taken from where the documents show commands: in README.md, docs/**/*.md and
packaging/ansible/README.md the code blocks, table cells and inline code that start with
``token-resource``, and in the man pages the
SYNOPSIS, bold text and no-fill (``.nf``) blocks. A synopsis such as
``token-resource node-status [--config PATH] show | set NAME=COUNT...`` is expanded into
every combination of its optional parts and alternatives, placeholders replaced by real
values, and each result goes through the command's own argument parser.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from token_resource import cli

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
ANSIBLE_README = REPO / "packaging/ansible/README.md"
TOPICS = sorted((REPO / "docs").rglob("*.md"))  # docs/evidence/ too
MAN_PAGES = sorted((REPO / "packaging/man").glob("*.[58]"))
PROGRAM = "token-resource"

# A command line starts with the program's name and a space; "token-resource:" (a message),
# "token-resource.toml" and "token-resource(8)" are not commands.
COMMAND = re.compile(rf"^(?:\$ |Exec\w+=(?:/usr/bin/)?)?({PROGRAM}\s.*)$")

# Placeholders, by the option they follow, else by their own name.
OPTION_VALUES = {
    "--config": "/etc/token-resource.toml",
    "--control-socket": "/run/token-resource/control.sock",
    "--kubeconfig": "/etc/kubernetes/kubelet.conf",
    "--node": "node-1",
    "--timeout": "30",
    "--role": "publisher",
}
POSITIONAL_VALUES = {"NAME=COUNT": "example.com/token=2", "NAME": "example.com/token"}


# --- the README (Markdown) ---------------------------------------------------------------------


def markdown_commands(path: Path) -> list[tuple[str, str]]:
    """(where, command line) for each command in fenced code blocks, table cells, inline code."""
    found = []
    in_code = False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        where = f"{path.relative_to(REPO)}:{number}"
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            match = COMMAND.match(line.strip())
            if match:
                found.append((where, strip_shell(strip_comment(match.group(1)))))
            continue
        # Inline code, table cells included: `...` spans (a table escapes its | as \|).
        for span in re.findall(r"`([^`]+)`", line):
            match = COMMAND.match(span.strip())
            if match:
                found.append((where, match.group(1).replace("\\|", "|")))
    assert not in_code, f"{path}: unterminated code block"
    return found


def strip_comment(line: str) -> str:
    return re.sub(r"\s+#.*$", "", line).strip()


def strip_shell(line: str) -> str:
    """A shell line in a code block: the command up to a redirection or a pipe (in a code
    block, a shell session; in a synopsis, "|" separates alternatives)."""
    return re.split(r"\s+(?:\||>|<|2>)\s+", line, maxsplit=1)[0]


# --- the man pages (roff, man macros) ----------------------------------------------------------

# .B and .I set their arguments as one phrase; the alternating-font ones (.BR, .IR...) set
# theirs without spaces between them.
ONE_FONT = {"B", "I", "SM", "SB"}
ALTERNATING = {"BR", "RB", "BI", "IB", "IR", "RI"}
BREAKS = {"br", "PP", "P", "LP", "SH", "SS", "TP", "TQ", "IP", "HP", "RS", "RE", "EX", "EE"}


def unescape(text: str) -> str:
    text = re.sub(r"\\f(?:\[[^]]*\]|\(..|.)", "", text)  # font changes
    text = text.replace("\\-", "-").replace("\\&", "").replace("\\:", "").replace("\\ ", " ")
    return text.replace("\\(lq", '"').replace("\\(rq", '"').replace("\\(dq", '"')


def macro_arguments(rest: str) -> list[str]:
    """A request's arguments: separated by spaces, or in double quotes ("" is a quote)."""
    return [
        unescape(quoted.replace('""', '"') if quoted or not plain else plain)
        for quoted, plain in re.findall(r'"((?:[^"]|"")*)"?|(\S+)', rest)
    ]


def man_commands(path: Path) -> list[tuple[str, str]]:
    """(where, command line) for the SYNOPSIS lines, bold phrases and no-fill lines."""
    found = []
    section = ""
    synopsis: list[tuple[int, str]] = []  # (line number, text) of the synopsis line so far
    no_fill = False
    # A last .SH ends the last section, so a synopsis line at the very end is seen too.
    for number, line in enumerate([*path.read_text().splitlines(), ".SH END"], 1):
        where = f"{path.relative_to(REPO)}:{number}"
        if line.startswith(('.\\"', "'\\\"")):
            continue
        request = re.match(r"^\.(\w+)\s*(.*)$", line)
        name, rest = (request.group(1), request.group(2)) if request else ("", line)
        no_fill = {"nf": True, "EX": True, "fi": False, "EE": False}.get(name, no_fill)
        if section == "SYNOPSIS" and (name in BREAKS or name == "SH") and synopsis:
            text = " ".join(" ".join(text for _, text in synopsis).split())
            if COMMAND.match(text):
                found.append((f"{path.relative_to(REPO)}:{synopsis[0][0]} (SYNOPSIS)", text))
            synopsis.clear()
        if name == "SH":
            section = " ".join(macro_arguments(rest))
        elif section == "SYNOPSIS" and name not in BREAKS:
            synopsis.append((number, roff_text(name, rest)))
        elif no_fill and not name:
            match = COMMAND.match(unescape(line).strip())
            if match:
                found.append((where, strip_comment(match.group(1))))
        else:
            for phrase in bold_phrases(name, rest):
                match = COMMAND.match(phrase.strip())
                if match:
                    found.append((where, match.group(1)))
    return found


def roff_text(name: str, rest: str) -> str:
    """The text a line sets: a font macro's arguments, or the line itself."""
    if name in ONE_FONT:
        return " ".join(macro_arguments(rest))
    if name in ALTERNATING:
        return "".join(macro_arguments(rest))
    return "" if name else unescape(rest)


def bold_phrases(name: str, rest: str) -> list[str]:
    """.B's whole text, the bold arguments of .BR/.BI (the first, third...) and of .RB/.IB
    (the second, fourth...), and \\fB...\\fR in running text."""
    if name == "B":
        return [" ".join(macro_arguments(rest))]
    if name in ("BR", "BI"):
        return macro_arguments(rest)[0::2]
    if name in ("RB", "IB"):
        return macro_arguments(rest)[1::2]
    return [unescape(bold) for bold in re.findall(r"\\fB(.*?)\\f[RPI]", rest)]


# --- synopses to command lines -----------------------------------------------------------------


def tokens(synopsis: str) -> list[str]:
    spaced = re.sub(r"([\[\]|])", r" \1 ", synopsis)
    return spaced.split()


def expand(synopsis: str) -> list[list[str]]:
    """Every argument list a synopsis allows (options in or out, each alternative), filled in."""
    words = tokens(synopsis)
    assert words[0] == PROGRAM, synopsis
    prefix, alternatives = split_alternatives(words[1:])
    results = []
    for alternative in alternatives:
        for variant in optional_variants(prefix + alternative):
            results.append(fill_in(variant))
    return results


def split_alternatives(words: list[str]) -> tuple[list[str], list[list[str]]]:
    """``A [B] x | y Z | w`` -> (``A [B]``, [``x``, ``y Z``, ``w``]): the alternatives start
    at the last plain lower-case word (a command) before the first top-level ``|``."""
    depth, bars = 0, []
    for index, word in enumerate(words):
        depth += {"[": 1, "]": -1}.get(word, 0)
        if word == "|" and depth == 0:
            bars.append(index)
    if not bars:
        return words, [[]]
    start = max(index for index in range(bars[0]) if re.fullmatch(r"[a-z][a-z-]*", words[index]))
    edges = [start - 1, *bars, len(words)]
    alternatives = [words[a + 1 : b] for a, b in zip(edges, edges[1:])]
    return words[:start], alternatives


def optional_variants(words: list[str]) -> Iterator[list[str]]:
    """Each choice of the top-level ``[...]`` groups in or out (groups do not nest here)."""
    parts: list[list[str] | tuple[str, ...]] = []  # a tuple is an optional group
    group: list[str] | None = None
    for word in words:
        if word == "[":
            assert group is None, f"nested [ in {words}"
            group = []
        elif word == "]":
            assert group is not None, f"unbalanced ] in {words}"
            parts.append(tuple(group))
            group = None
        elif group is not None:
            group.append(word)
        else:
            parts.append([word])
    assert group is None, f"unbalanced [ in {words}"
    optional = [index for index, part in enumerate(parts) if isinstance(part, tuple)]
    for choice in itertools.product((False, True), repeat=len(optional)):
        chosen = dict(zip(optional, choice))
        yield [word for i, part in enumerate(parts) if chosen.get(i, True) for word in part]


def fill_in(words: list[str]) -> list[str]:
    argv: list[str] = []
    for word in words:
        if word in ("...", "|"):
            continue
        bare = word.removesuffix("...")
        if argv and argv[-1] in OPTION_VALUES and is_placeholder(bare):
            argv.append(OPTION_VALUES[argv[-1]])
        elif is_placeholder(bare):
            assert bare in POSITIONAL_VALUES, f"no value for the placeholder {bare}"
            argv.append(POSITIONAL_VALUES[bare])
        else:
            argv.append(bare)
    return argv


def is_placeholder(word: str) -> bool:
    return bool(re.fullmatch(r"[A-Z][A-Z_=]*|<[^>]+>", word))


def documented() -> list[tuple[str, str]]:
    found = markdown_commands(README) + markdown_commands(ANSIBLE_README)
    for topic in TOPICS:
        found += markdown_commands(topic)
    for page in MAN_PAGES:
        found += man_commands(page)
    return found


DOCUMENTED = documented()


def test_the_extraction_finds_the_documented_commands() -> None:
    # Strict enough that a change in how the documents are written cannot go unnoticed as
    # "no commands found, nothing failed".
    files = [place.split(":")[0] for place, _ in DOCUMENTED]
    assert files.count("README.md") >= 3, DOCUMENTED
    assert sum(file.startswith("docs/") for file in files) >= 16, DOCUMENTED
    assert files.count("packaging/ansible/README.md") >= 3, DOCUMENTED
    assert files.count("packaging/man/token-resource.8") >= 9, DOCUMENTED
    assert files.count("packaging/man/token-resource.toml.5") >= 2, DOCUMENTED
    synopsis = [command for place, command in DOCUMENTED if place.endswith("(SYNOPSIS)")]
    assert len(synopsis) == 9, synopsis
    commands = {
        next(word for word in argv if word != "-v")
        for _, command in DOCUMENTED
        for argv in expand_angle(command)
    }
    assert commands == {
        "run",
        "check",
        "reload",
        "status",
        "handover",
        "node-status",
        "device-classes",
        "--version",
    }


def expand_angle(command: str) -> list[list[str]]:
    """``<new file>``-style placeholders made one word before expanding."""
    return expand(re.sub(r"<([^>]+)>", lambda m: "<" + m.group(1).replace(" ", "_") + ">", command))


@pytest.mark.parametrize(("where", "command"), DOCUMENTED, ids=[w for w, _ in DOCUMENTED])
def test_every_documented_command_line_parses(where: str, command: str) -> None:
    for argv in expand_angle(command):
        shown = f"{where}: `{PROGRAM} {' '.join(argv)}`"
        if {"--version", "--help", "-h"} & set(argv):
            # They end the parse early, with success (a usage error exits 2).
            with pytest.raises(SystemExit) as ended:
                cli._parser().parse_args(argv)
            assert ended.value.code == 0, f"{shown} exits {ended.value.code}"
        else:
            try:
                args = cli._parser().parse_args(argv)
            except SystemExit as error:
                pytest.fail(f"{shown} is a usage error (exit {error.code})")
            assert args.command == next(word for word in argv if not word.startswith("-")), shown
