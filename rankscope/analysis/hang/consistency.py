"""Do the ranks describe the same process groups, with the same recorder format?

torch's analyzer stops on these (``build_groups_memberships``: "mismatch in desc", ``check_version``);
here each is a problem with the ranks that disagree with the majority, and the analysis goes on:
- a group's description differs between its members' ``pg_config``;
- a member lists a group with other members than the others do (a rank in its own list only);
- a rank records entries in a group its own ``pg_config`` does not list (when it lists any);
- the dumps' format versions differ (dumps from different torch builds).
"""
from __future__ import annotations

from collections import Counter, defaultdict

from rankscope.analysis.hang.findings import Problem
from rankscope.model.readers.frdump import FrDump


def check(dumps: list[FrDump]) -> list[Problem]:
    return _versions(dumps) + _descriptions(dumps) + _members(dumps) + _unlisted(dumps)


def _minority(by_rank: dict[int, str]) -> tuple[str, list[int], dict[str, list[int]]]:
    """The most common value (lowest rank on ties), and the ranks with each other value."""
    count = Counter(by_rank.values())
    major = by_rank[min(by_rank, key=lambda r: (-count[by_rank[r]], r))]
    odd: dict[str, list[int]] = defaultdict(list)
    for r, v in sorted(by_rank.items()):
        if v != major:
            odd[v].append(r)
    return major, [r for rs in odd.values() for r in rs], dict(odd)


def _problem(what: str, group: str, desc: str, by_rank: dict[int, str]) -> Problem | None:
    if not by_rank:
        return None
    major, culprits, odd = _minority(by_rank)
    if not culprits:
        return None
    return Problem("pg_inconsistent", group, desc, None, "", sorted(culprits), [],
                   {"what": what, "expected": major,
                    "expected_ranks": [r for r in sorted(by_rank) if r not in culprits], "odd": odd})


def _versions(dumps: list[FrDump]) -> list[Problem]:
    p = _problem("version", "", "", {d.rank: d.version for d in dumps if d.version})
    return [p] if p else []


def _descriptions(dumps: list[FrDump]) -> list[Problem]:
    by: dict[tuple[str, tuple[int, ...]], dict[int, str]] = defaultdict(dict)
    for d in dumps:
        for name, (desc, ranks) in d.groups.items():
            if d.rank in ranks:
                by[(name, ranks)][d.rank] = desc
    out = [_problem("desc", name, "", v) for (name, _), v in sorted(by.items())]
    return [p for p in out if p]


def _members(dumps: list[FrDump]) -> list[Problem]:
    """Members of one group that list it with other members: for each (name, members) a rank lists, every
    other listed member that has a dump and lists that name with itself in it must list the same members."""
    views = {d.rank: d.groups for d in dumps}
    out: list[Problem] = []
    seen: set[tuple[str, tuple[int, ...]]] = set()
    for d in dumps:
        for name, (desc, ranks) in sorted(d.groups.items()):
            if d.rank not in ranks or (name, ranks) in seen:
                continue
            seen.add((name, ranks))
            by = {r: str(list(views[r][name][1])) for r in ranks if r in views and name in views[r]
                  and r in views[r][name][1]}
            if len(set(by.values())) > 1:
                p = _problem("members", name, desc, by)
                if p and all((q.group, q.culprits) != (p.group, p.culprits) for q in out):
                    out.append(p)
    return out


def _unlisted(dumps: list[FrDump]) -> list[Problem]:
    out = []
    for d in dumps:
        if not d.groups:
            continue
        missing = sorted({e.pg for e in d.entries} - set(d.groups))
        for name in missing:
            out.append(Problem("pg_inconsistent", name, "", None, "", [d.rank], [],
                               {"what": "unlisted", "expected": "", "expected_ranks": [], "odd": {}}))
    return out
