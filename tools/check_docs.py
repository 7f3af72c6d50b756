#!/usr/bin/env python3
"""The map is checked: every repository path and every backquoted identifier that a document
names must exist.

    check_docs.py ROOT DOC.md [DOC.md ...]

A path is a token that starts with one of the repository's top-level folders (client/, server/,
...) or names a top-level file; it must exist (a trailing '/' names a folder; `{a,b}` braces and
a trailing ':NN' line number are expanded / dropped). A backquoted identifier (`cli_call_sync`,
`SRV_ARGS`, `RGPU_SERVER`) must occur in some source file of the tree (C, headers, Python, shell,
CMake, ops.def, .proto). Backquoted text that is neither (a command line, a config line) is not
checked. A backquoted file name (`lanes.c`) must name a file somewhere in the tree, and a
`struct.member` both of its words. Exit 0 when all exist; 1 with one line per missing name, naming the document and line."""
import os
import re
import sys

SOURCE_EXT = ('.c', '.h', '.cu', '.py', '.sh', '.txt', '.def', '.proto', '.cmake', '.map',
              '.js', '.yaml', '.conf', '.service', '.in')
FILE = re.compile(r'^[A-Za-z0-9_-]+\.(c|h|cu|py|sh|md|def|proto|txt|js|yaml|conf)$')
MEMBER = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$')
IDENT = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*(\(\))?$')
# Backquoted words that are English, C keywords or tool names rather than identifiers of ours.
NOT_OURS = {'auto', 'rdma', 'tcp', 'spread', 'pack', 'first', 'on', 'off', 'yes', 'no',
            'noreply', 'stream', 'lane', 'device', 'since', 'void', 'int', 'const', 'static'}


def top_level(root):
    return {n for n in os.listdir(root) if not n.startswith('.') and not n.startswith('build')}


def source_text(root):
    chunks = []
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith('.') and not x.startswith('build')]
        for f in files:
            if f.endswith(SOURCE_EXT) or f == 'CMakeLists.txt':
                try:
                    with open(os.path.join(d, f), encoding='utf-8', errors='replace') as fh:
                        chunks.append(fh.read())
                except OSError:
                    pass
    return '\n'.join(chunks)


def expand(path):
    m = re.search(r'\{([^}]*)\}', path)
    if not m:
        return [path]
    out = []
    for alt in m.group(1).split(','):
        out += expand(path[:m.start()] + alt + path[m.end():])
    return out


def paths_in(line, tops):
    for tok in re.findall(r'[A-Za-z0-9_.{},/*-]+', line):
        tok = re.sub(r':\d+(-\d+)?$', '', tok).rstrip('.,;')
        first = tok.split('/')[0]
        if first in tops and ('/' in tok or '.' in tok) and '*' not in tok:
            yield tok


def main():
    root, docs = sys.argv[1], sys.argv[2:]
    tops = top_level(root)
    text = source_text(root)
    words = set(re.findall(r'[A-Za-z_][A-Za-z0-9_]*', text))
    files = {f for _, _, fs in os.walk(root) for f in fs}
    missing = []
    for doc in docs:
        in_code = False
        with open(doc, encoding='utf-8') as fh:
            for n, line in enumerate(fh, 1):
                if line.startswith('```'):
                    in_code = not in_code
                for p in paths_in(line, tops):
                    for q in expand(p):
                        if not os.path.exists(os.path.join(root, q)):
                            missing.append(f'{doc}:{n}: no such path: {q}')
                for tick in re.findall(r'`([^`]+)`', line):
                    t = tick.strip()
                    if FILE.match(t):
                        if t not in files:
                            missing.append(f'{doc}:{n}: no such file anywhere: {t}')
                        continue
                    if MEMBER.match(t):
                        for part in t.split('.'):
                            if part not in words:
                                missing.append(f'{doc}:{n}: no such identifier: {part} (of {t})')
                        continue
                    if IDENT.match(t) and t not in NOT_OURS and ('_' in t or t.isupper()
                                                                  or t.endswith('()')):
                        if t.rstrip('()') not in words:
                            missing.append(f'{doc}:{n}: no such identifier: {t}')
    for m in missing:
        print(m)
    return 1 if missing else 0


if __name__ == '__main__':
    sys.exit(main())
