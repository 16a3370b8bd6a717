"""License servers' free seats, read from their vendors' status tools: pure functions of the
output, so that every variant is a recorded text in a test.

- FlexNet (``lmutil lmstat -c SERVER -f FEATURE``): the feature's line
  ``Users of FEATURE:  (Total of N licenses issued;  Total of M licenses in use)`` (``license``
  for one) gives N - M free. Reserved seats (the ``RESERVATIONs for ...`` lines below it) are
  counted among those in use by lmstat itself. Several servers (``port@h1:port@h2``) each list
  the feature: their free seats add up. ``(Uncounted, node-locked)`` is no floating seat and
  ``(Error: ...)`` no count: both fail the check, as a feature not listed at all does.
- RLM (``rlmutil rlmstat -c SERVER -a``): each pool of the product (one per version, expiry
  or license line), a ``PRODUCT vVERSION[, pool: N]`` line followed by
  ``count: N, # reservations: R, inuse: U, exp: ...``, has N - U - R free (``count:
  uncounted`` has none to count and fails the check): a reserved seat is
  held for the users, hosts or groups the ISV options file names, which a pod's check-out
  need not be. The pools add up, whatever their version and whichever ISV server's section
  (``ISV license pool status on ...``, up to its ``-----`` rule) lists them: the probe cannot
  know which version the pods' programs ask for. Only those sections name pools: rlmstat's
  header (``rlmutil v15.2``) has the shape of a pool's name line too.

Free seats are never negative. A failure names the offending line of the output; when the
asked-for name is missing, the servers' own error (a server of a triad down, a vendor daemon
down, no connection), else that the server does not serve it. The features' and products' own
lines never give that error: another feature's ``(Error: ...)`` is that feature's, and a user
or host named ``failover`` is no failure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from token_resource.config.model import FLEXLM, ProbeSpec

_FLEXLM_USERS = re.compile(r"Users of (?P<feature>\S+?):\s+\((?P<detail>.*)\)")
_FLEXLM_COUNTED = re.compile(
    r"Total of (?P<issued>\d+) licenses? issued;\s+Total of (?P<used>\d+) licenses? in use"
)
_RLM_POOLS = re.compile(r"\S+ license pool status on .*")
# What rlmstat says of an ISV server's products and users, up to its "-----" rule or the next
# server's status: no server-level line.
_RLM_PRODUCTS = re.compile(r"\S+ license (pool|usage) status on .*")
_RLM_SERVER = re.compile(r"\S+ ISV server status on .*")
_RLM_PRODUCT = re.compile(r"(?P<product>\S+) v\S+?(?:, pool: \d+)?")
_RLM_POOL = re.compile(
    r"count: (?P<count>\d+), # reservations: (?P<reserved>\d+), inuse: (?P<used>\d+), exp: .*"
)
# What a vendor's tool prints when it cannot get a status: FlexNet's "(-15,570:115 ...)" codes,
# "Cannot connect to license server system", RLM's "Error connecting to ..." and the like.
_ERROR = re.compile(r"error|cannot|can't|unable|fail|refused|not running|\(-\d+[,:)]", re.I)


@dataclass(frozen=True)
class Seats:
    free: int
    issued: int


@dataclass(frozen=True)
class Unreadable:
    """Why the output gives no count, with the line that says so."""

    problem: str


def argv(probe: ProbeSpec) -> tuple[str, ...]:
    """The vendor tool's command line for one check."""
    tool = probe.tool or probe.kind
    if probe.kind == FLEXLM:
        return (tool, "lmstat", "-c", str(probe.target), "-f", str(probe.feature))
    return (tool, "rlmstat", "-c", str(probe.target), "-a")


def free_seats(probe: ProbeSpec, output: str) -> Seats | Unreadable:
    lines = [line.strip() for line in output.splitlines()]
    name, server = str(probe.feature), str(probe.target)
    if probe.kind == FLEXLM:
        return flexlm_seats(lines, name, server)
    return rlm_seats(lines, name, server)


def flexlm_seats(lines: Sequence[str], feature: str, server: str) -> Seats | Unreadable:
    seats = []
    for line in lines:
        users = _FLEXLM_USERS.fullmatch(line)
        if users is None or users["feature"] != feature:
            continue
        detail = users["detail"]
        counted = _FLEXLM_COUNTED.fullmatch(detail)
        if counted is not None:
            seats.append(_seats(int(counted["issued"]), int(counted["used"])))
        elif "uncounted" in detail.lower() or "node-locked" in detail.lower():
            return Unreadable(f"{feature} is not a floating license (no seats to count): {line}")
        elif detail.startswith("Error"):
            return Unreadable(f"lmstat gives no count of {feature}: {line}")
        else:
            return Unreadable(f"cannot read lmstat's line: {line}")
    if not seats:
        return _missing(f"feature {feature}", flexlm_server_lines(lines), "lmstat", server)
    return Seats(sum(s.free for s in seats), sum(s.issued for s in seats))


def flexlm_server_lines(lines: Sequence[str]) -> list[str]:
    """lmstat's lines on its servers and vendor daemons: each server's, up to its ``Feature
    usage info:``, where its features' lines begin."""
    return _outside(
        lines,
        opens=lambda line: line == "Feature usage info:",
        closes=lambda line: line.startswith("License server status:"),
    )


def rlm_seats(lines: Sequence[str], product: str, server: str) -> Seats | Unreadable:
    seats = []
    current: str | None = None  # the product of the pool lines that follow
    in_pools = False  # within an ISV server's pool section
    for line in lines:
        if _RLM_POOLS.fullmatch(line):
            in_pools = True
        elif line.startswith("-----"):
            in_pools, current = False, None
        if not in_pools:
            continue
        named = _RLM_PRODUCT.fullmatch(line)
        if named is not None:
            current = named["product"]
        elif line.startswith("count:") and current == product:
            pool = _RLM_POOL.fullmatch(line)
            if "uncounted" in line:
                return Unreadable(
                    f"{product} is not a floating license (no seats to count): {line}"
                )
            if pool is None:
                return Unreadable(f"cannot read rlmstat's pool of {product}: {line}")
            used = int(pool["used"]) + int(pool["reserved"])
            seats.append(_seats(int(pool["count"]), used))
    if not seats:
        return _missing(f"product {product}", rlm_server_lines(lines), "rlmstat", server)
    return Seats(sum(s.free for s in seats), sum(s.issued for s in seats))


def rlm_server_lines(lines: Sequence[str]) -> list[str]:
    """rlmstat's lines on its servers: all but each ISV server's pool and usage sections."""
    return _outside(
        lines,
        opens=lambda line: _RLM_PRODUCTS.fullmatch(line) is not None,
        closes=lambda line: line.startswith("-----") or _RLM_SERVER.fullmatch(line) is not None,
    )


def _outside(
    lines: Sequence[str], opens: Callable[[str], bool], closes: Callable[[str], bool]
) -> list[str]:
    """``lines`` but the sections from a line that ``opens`` one to the line that ``closes``
    it (that line kept: it begins what follows)."""
    kept, inside = [], False
    for line in lines:
        if opens(line):
            inside = True
        elif closes(line):
            inside = False
        if not inside:
            kept.append(line)
    return kept


def _seats(issued: int, used: int) -> Seats:
    return Seats(max(issued - used, 0), issued)


def _missing(named: str, server_lines: Sequence[str], tool: str, server: str) -> Unreadable:
    """``named`` (``feature X``) is not in the output: the servers' error, if they printed one."""
    errors = _errors(server_lines)
    why = errors[0] if errors else f"{server} does not serve it"
    return Unreadable(f"no {named} in {tool}'s output: {why}")


def _errors(lines: Sequence[str]) -> list[str]:
    """The lines that read as a tool's or a server's error, in order."""
    return [line for line in lines if _ERROR.search(line)]


def telling_line(lines: Sequence[str]) -> str:
    """The tool's own error if it printed one, else its last line: what a failure shows."""
    printed = [line.strip() for line in lines if line.strip()]
    errors = _errors(printed)
    return errors[0] if errors else printed[-1] if printed else ""
