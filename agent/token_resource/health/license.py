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

Free seats are never negative. A failure names the offending line of the output, or the most
telling one (the tool's own error) when the asked-for name is missing; another feature's
``Users of`` line is never that: its error is that feature's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from token_resource.config.model import FLEXLM, ProbeSpec

_FLEXLM_USERS = re.compile(r"Users of (?P<feature>\S+?):\s+\((?P<detail>.*)\)")
_FLEXLM_COUNTED = re.compile(
    r"Total of (?P<issued>\d+) licenses? issued;\s+Total of (?P<used>\d+) licenses? in use"
)
_RLM_POOLS = re.compile(r"\S+ license pool status on .*")
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
    name = str(probe.feature)
    return flexlm_seats(lines, name) if probe.kind == FLEXLM else rlm_seats(lines, name)


def flexlm_seats(lines: Sequence[str], feature: str) -> Seats | Unreadable:
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
        others = [line for line in lines if _FLEXLM_USERS.fullmatch(line) is None]
        return _missing("feature", feature, others, "lmstat")
    return Seats(sum(s.free for s in seats), sum(s.issued for s in seats))


def rlm_seats(lines: Sequence[str], product: str) -> Seats | Unreadable:
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
        return _missing("product", product, lines, "rlmstat")
    return Seats(sum(s.free for s in seats), sum(s.issued for s in seats))


def _seats(issued: int, used: int) -> Seats:
    return Seats(max(issued - used, 0), issued)


def _missing(what: str, name: str, lines: Sequence[str], tool: str) -> Unreadable:
    said = telling_line(lines)
    return Unreadable(f"no {what} {name} in {tool}'s output" + (f": {said}" if said else ""))


def telling_line(lines: Sequence[str]) -> str:
    """The tool's own error if it printed one, else its last line: what a failure shows."""
    printed = [line.strip() for line in lines if line.strip()]
    errors = [line for line in printed if _ERROR.search(line)]
    return errors[0] if errors else printed[-1] if printed else ""
