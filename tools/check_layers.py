#!/usr/bin/env python3
"""Check that the client's layers include only downwards (the layers ctest).

    check_layers.py SRC_ROOT        exit 1, naming file:line, on each finding

client/ (libcuda.so.1) is split into folders, one per layer, from the top:

    api/      the driver entry points and what only they share
    bulk/     the bulk paths beside the call API: data lanes, RDMA copies, host mirrors
    objects/  handles, contexts, the call in its context, address ranges
    session/  the wire: sessions, handshake, call stream, configuration, pool

A file may include the headers of its own layer and of the layers below it, never of one above
(where a lower layer must tell a higher one something, it calls a hook the higher one
registered). Every .c and .h of client/ lies in a layer folder, except the library's public
headers (PUBLIC). A layer's private headers (PRIVATE) are included only inside that layer, and
the parts outside client/ (the shims, the rgpu tool, the server) include only the public ones
(EXTERNAL); tests may include anything.
"""
import os
import re
import sys

LAYERS = ["session", "objects", "bulk", "api"]  # bottom first
PUBLIC = {"rgpu_ext.h"}  # in client/ itself: the extension API of the NVML and NCCL shims
PRIVATE = {"session/session.h"}  # the session's state: its own files only
EXTERNAL = {"rgpu_ext.h", "session/config.h", "session/pool.h"}  # for nvml/, nccl/, tools/...
OUTSIDE = ["nvml", "nccl", "tools", "server", "bench", "proto", "transport", "common",
           "scheduler"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def includes(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    for m in INCLUDE.finditer(text):
        yield text.count("\n", 0, m.start()) + 1, m.group(1)


def client_target(root, src, name):
    """The header of client/ that `#include "name"` in src names (relative to client/), or
    None when it is not one of client/'s."""
    cdir = os.path.join(root, "client")
    if name.startswith("client/"):
        return name[len("client/"):]
    here = os.path.join(os.path.dirname(src), name)
    if os.path.exists(here) and os.path.abspath(here).startswith(os.path.abspath(cdir) + os.sep):
        return os.path.relpath(here, cdir)
    return None


def layer_of(rel):
    top = rel.split(os.sep)[0] if os.sep in rel else None
    return top if top in LAYERS else None


def check(root):
    findings = []
    cdir = os.path.join(root, "client")
    for dirpath, dirnames, filenames in os.walk(cdir):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, cdir)
        if rel_dir != "." and rel_dir.split(os.sep)[0] not in LAYERS:
            findings.append(f"client/{rel_dir}/: not a layer (layers: {', '.join(LAYERS)}; "
                            "add a new one to tools/check_layers.py)")
            dirnames[:] = []
            continue
        for name in sorted(filenames):
            if not name.endswith((".c", ".h")):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, cdir)
            mine = layer_of(rel)
            if mine is None:
                if rel not in PUBLIC:
                    findings.append(f"client/{rel}: in no layer folder ({', '.join(LAYERS)})")
                    continue
            for line, inc in includes(path):
                target = client_target(root, path, inc)
                if target is None:
                    continue
                theirs = layer_of(target)
                where = f"client/{rel}:{line}"
                if theirs is None:
                    if target not in PUBLIC:
                        findings.append(f"{where}: includes client/{target}, which is in no "
                                        "layer")
                    elif mine != "api":
                        findings.append(f"{where}: includes client/{target}, the library's "
                                        "public header, which only the entry points (api/) use")
                    continue
                if mine is not None and LAYERS.index(theirs) > LAYERS.index(mine):
                    findings.append(f"{where}: {mine}/ includes client/{target} of the higher "
                                    f"layer {theirs}/ (a lower layer calls up only through a "
                                    "hook the higher one registers)")
                if target in PRIVATE and mine != theirs:
                    findings.append(f"{where}: includes client/{target}, private to {theirs}/")
    for part in OUTSIDE:
        pdir = os.path.join(root, part)
        for dirpath, dirnames, filenames in os.walk(pdir):
            dirnames.sort()
            for name in sorted(filenames):
                if not name.endswith((".c", ".h")):
                    continue
                path = os.path.join(dirpath, name)
                for line, inc in includes(path):
                    if inc.startswith("client/") and inc[len("client/"):] not in EXTERNAL:
                        findings.append(f"{os.path.relpath(path, root)}:{line}: includes {inc};"
                                        " outside client/ only "
                                        f"{', '.join('client/' + e for e in sorted(EXTERNAL))}")
    return findings


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    findings = check(sys.argv[1])
    for f in findings:
        print(f)
    print(f"client layers ({' < '.join(LAYERS)}): {len(findings)} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
