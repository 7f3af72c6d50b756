#!/usr/bin/env python3
"""Does a traced run stay inside a systemd unit's SystemCallFilter= and
RestrictAddressFamilies=? Reads the unit, expands its filter with `systemd-analyze
syscall-filter` (groups nest), and checks every system call and socket family in an
`strace -f` log against it. Prints what was used outside; exit 1 if anything was.
Usage: unit_syscalls.py UNIT_FILE STRACE_LOG
       unit_syscalls.py --dump UNIT_FILE OUT    the allowed calls and families, one a line,
                                                 for a host without systemd-analyze
       unit_syscalls.py --allowed LIST STRACE_LOG   check against such a list"""
import re
import subprocess
import sys


def filter_groups():
    out = subprocess.run(["systemd-analyze", "syscall-filter"], capture_output=True,
                         text=True, check=True).stdout
    groups, cur = {}, None
    for line in out.splitlines():
        if line.startswith("@"):
            cur = line.split()[0]
            groups[cur] = set()
        elif cur and line.strip() and not line.strip().startswith("#"):
            groups[cur].add(line.split()[0])
    return groups


def expand(groups, name):
    if not name.startswith("@"):
        return {name}
    names = set()
    for member in groups.get(name, ()):
        names |= expand(groups, member)
    return names


def unit_values(unit, key):
    with open(unit) as f:
        return [ln.split("=", 1)[1].strip() for ln in f if ln.startswith(key + "=")]


def unit_allowed(unit):
    """The unit's allowed system calls (None: no filter) and socket families (empty: any)."""
    groups = filter_groups()
    allowed = None
    for value in unit_values(unit, "SystemCallFilter"):
        deny = value.startswith("~")
        names = set()
        for word in value.lstrip("~").split():
            names |= expand(groups, word)
        if allowed is None:  # the first line decides: an allow list here
            allowed = set() if deny else names
        elif deny:
            allowed -= names
        else:
            allowed |= names
    families = set(" ".join(unit_values(unit, "RestrictAddressFamilies")).split())
    return allowed, families


def main():
    if sys.argv[1] == "--dump":
        allowed, families = unit_allowed(sys.argv[2])
        with open(sys.argv[3], "w") as f:
            f.write("".join(n + "\n" for n in sorted(allowed | families)))
        return 0
    if sys.argv[1] == "--allowed":
        with open(sys.argv[2]) as f:
            names = set(f.read().split())
        allowed = {n for n in names if not n.startswith("AF_")}
        families = names - allowed
        log = sys.argv[3]
    else:
        allowed, families = unit_allowed(sys.argv[1])
        log = sys.argv[2]
    used, used_families = set(), set()
    call = re.compile(r"^\d+\s+(?:\d+:\d+:\d+\.\d+\s+)?([a-z0-9_]+)\((.*)")
    with open(log) as f:
        for line in f:
            m = call.match(line)
            if not m:
                continue
            used.add(m.group(1))
            if m.group(1) == "socket":
                used_families.add(m.group(2).split(",")[0])
    bad = sorted(used - allowed) if allowed is not None else []
    bad_families = sorted(used_families - families) if families else []
    print("%d system calls used, %d outside SystemCallFilter%s; socket families %s%s" % (
        len(used), len(bad), (": " + " ".join(bad)) if bad else "",
        " ".join(sorted(used_families)),
        (", outside RestrictAddressFamilies: " + " ".join(bad_families)) if bad_families else ""))
    return 1 if bad or bad_families else 0


if __name__ == "__main__":
    sys.exit(main())
