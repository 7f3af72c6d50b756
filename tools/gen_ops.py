#!/usr/bin/env python3
"""Generate rgpu's op code from proto/ops.def (the one table of wire operations).

    gen_ops.py --def proto/ops.def --out-dir BUILD      writes BUILD/proto/ops_gen.{h,c} and
                                                        BUILD/server/op_dispatch.{h,c}
    gen_ops.py --def proto/ops.def --check SRC_ROOT     checks the sources against the table
                                                        (the op_table ctest); exit 1 on a finding

The table's format is described at the top of proto/ops.def.
"""
import argparse
import os
import re
import sys

FLAGS = {  # name in ops.def -> C flag
    "noreply": "PROTO_OPF_NOREPLY",
    "stream": "PROTO_OPF_STREAM",
    "lane": "PROTO_OPF_LANE",
    "device": "PROTO_OPF_DEVICE",
    "prehandshake": "PROTO_OPF_PREHANDSHAKE",
    "synchronizing": "PROTO_OPF_SYNCHRONIZING",
}
MAX_ARGS = 16  # CLI_CALL_MAX_ARGS: the fixed part of every op must fit in the client's call
IDENT = re.compile(r"^[a-z_][a-z0-9_]*$")
# Client files that forward calls whose op is chosen by their caller (the NCCL shim hands an op
# number and argument words to rgpuNcclCall): they fill call.a.words, which CLI_ARGS cannot
# check, so they must check each call against proto_ops[] at run time (argument count, flags).
# No other client file may write argument words by position.
GENERIC_FORWARDERS = {"api/nccl_ext.c"}  # paths under client/


class Op:
    def __init__(self, num, name, since, handler, flags, args, out, data, doc, line):
        self.num, self.name, self.since, self.handler = num, name, since, handler
        self.flags, self.out, self.data, self.doc, self.line = flags, out, data, doc, line
        self.args = args  # [(name, words, optional)]
        self.variadic = None
        if args and args[-1][0].endswith("..."):
            self.variadic = args.pop()[0][:-3]

    @property
    def nargs(self):
        return sum(w for _, w, _ in self.args)

    @property
    def min_args(self):
        return sum(w for _, w, opt in self.args if not opt)


def fail(path, line, msg):
    sys.exit(f"{path}:{line}: {msg}")


def parse_args(path, line, text):
    args, optional, seen = [], False, set()
    for tok in text.split():
        if tok == "?":
            optional = True
            continue
        m = re.match(r"^([a-z_][a-z0-9_]*)(?:\[(\d+)\])?(\.\.\.)?$", tok)
        if not m:
            fail(path, line, f"bad argument '{tok}'")
        name, words, rest = m.group(1), int(m.group(2) or 1), m.group(3)
        if name in seen:
            fail(path, line, f"argument '{name}' twice")
        seen.add(name)
        args.append((name + ("..." if rest else ""), words, optional))
    if any(a[0].endswith("...") for a in args[:-1]):
        fail(path, line, "only the last argument may be variable ('name...')")
    return args


def parse(path):
    ops, doc = [], []
    with open(path) as f:
        for no, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if line.startswith("#"):
                doc.append(line[1:].strip())
                continue
            if not line.strip():
                doc = []
                continue
            cols = [c.strip() for c in line.split("|")]
            if len(cols) != 7:
                fail(path, no, f"{len(cols)} columns, want 7")
            name, since, handler, flags, args, out, data = cols
            if not re.match(r"^[A-Z][A-Z0-9_]*$", name):
                fail(path, no, f"bad op name '{name}'")
            m = re.match(r"^(\d+)\.(\d+)$", since)
            if not m:
                fail(path, no, f"bad since '{since}' (MAJOR.MINOR)")
            if not re.match(r"^srv_op_[a-z0-9_]+$", handler):
                fail(path, no, f"handler '{handler}' is not named srv_op_*")
            for fl in flags.split():
                if fl not in FLAGS:
                    fail(path, no, f"unknown flag '{fl}'")
            op = Op(len(ops), name, (int(m.group(1)), int(m.group(2))), handler, flags.split(),
                    parse_args(path, no, args), out, data, doc, no)
            if op.nargs > MAX_ARGS:
                fail(path, no, f"{op.nargs} argument words, at most {MAX_ARGS}")
            ops.append(op)
            doc = []
    check_table(path, ops)
    return ops


def check_table(path, ops):
    names, by_handler = set(), {}
    for op in ops:
        if op.name in names:
            fail(path, op.line, f"op {op.name} twice")
        names.add(op.name)
        by_handler.setdefault(op.handler, []).append(op)
    # Ops that share a handler are read through one argument struct: their arguments must agree
    # (the same names and widths, one list a prefix of the other).
    for handler, group in by_handler.items():
        for other in group[1:]:
            a = [(n, w) for n, w, _ in group[0].args]
            b = [(n, w) for n, w, _ in other.args]
            n = min(len(a), len(b))
            if a[:n] != b[:n] or group[0].variadic != other.variadic:
                fail(path, other.line, f"{other.name} shares {handler} with {group[0].name} "
                     "but their arguments differ")
    # Versions only grow down the table: an op of an older minor never follows a newer one
    # (the enum value is the wire number, so new ops go at the end).
    for prev, op in zip(ops, ops[1:]):
        if op.since < prev.since:
            fail(path, op.line, f"{op.name} since {op.since} follows {prev.name} since "
                 f"{prev.since}: new ops go at the end")


def c_comment(lines, indent=""):
    lines = [l for l in lines if l]
    if not lines:
        return ""
    body = ("\n" + indent + " * ").join(l.replace("*/", "* /") for l in lines)
    return f"{indent}/* {body} */\n"


def struct_body(op):
    if not op.args and op.variadic is None:
        return "    uint64_t none_; /* no arguments (never sent) */\n"
    out = []
    for name, words, opt in op.args:
        arr = f"[{words}]" if words > 1 else ""
        out.append(f"    uint64_t {name}{arr};{' /* optional: 0 when absent */' if opt else ''}\n")
    if op.variadic:  # not a member: the struct also lives in union proto_args
        out.append(f"    /* then {op.variadic}: the rest of the words (SRV_ARGS_REST) */\n")
    return "".join(out)


def gen_ops_h(ops):
    o = ["/* Generated by tools/gen_ops.py from proto/ops.def: do not edit. */\n",
         "#ifndef RGPU_PROTO_OPS_GEN_H\n#define RGPU_PROTO_OPS_GEN_H\n\n",
         "#include <stdint.h>\n\n"]
    o.append("enum proto_op {\n")
    for op in ops:
        o.append(f"    PROTO_OP_{op.name} = {op.num},\n")
    o.append("    PROTO_OP_COUNT\n};\n\n")
    o.append(f"#define PROTO_CALL_MAX_ARGS {MAX_ARGS}\n\n")
    o.append("/* Op flags (proto/ops.def). */\n")
    for i, (fl, c) in enumerate(FLAGS.items()):
        o.append(f"#define {c} 0x{1 << i:x}u\n")
    o.append("\n/* The arguments of each op by name: Call.args seen as a struct. */\n")
    for op in ops:
        sig = " ".join(n + (f"[{w}]" if w > 1 else "") for n, w, _ in op.args)
        o.append(c_comment([f"{op.name} ({'.'.join(map(str, op.since))}): [{sig}"
                            f"{' ' + op.variadic + '...' if op.variadic else ''}]"
                            + (f" -> out[{op.out}]" if op.out else "")
                            + (f"  data: {op.data}" if op.data else "")] + op.doc))
        o.append(f"struct proto_args_{op.name} {{\n{struct_body(op)}}};\n")
        o.append(f"#define PROTO_NARGS_{op.name} {op.nargs}\n")
        if op.nargs:
            o.append(f"_Static_assert(sizeof(struct proto_args_{op.name}) == {op.nargs} * 8, "
                     f"\"{op.name}: arguments are words\");\n")
    o.append("\n/* Every op's arguments (the client's call holds one). */\n")
    o.append("union proto_args {\n    uint64_t words[PROTO_CALL_MAX_ARGS];\n")
    for op in ops:
        o.append(f"    struct proto_args_{op.name} {op.name};\n")
    o.append("};\n\n")
    o.append("""struct proto_op_info {
    const char *name;
    uint8_t nargs;     /* argument words of the fixed part */
    uint8_t min_args;  /* fewer is a malformed call (optional ones read as 0) */
    uint8_t variadic;  /* more than nargs may follow */
    uint8_t major, minor; /* the protocol version the op appeared in */
    unsigned flags;    /* PROTO_OPF_* */
};
extern const struct proto_op_info proto_ops[PROTO_OP_COUNT];

#endif
""")
    return "".join(o)


def gen_ops_c(ops):
    o = ["/* Generated by tools/gen_ops.py from proto/ops.def: do not edit. */\n",
         "#include \"proto/ops.h\"\n\n",
         "const struct proto_op_info proto_ops[PROTO_OP_COUNT] = {\n"]
    for op in ops:
        flags = " | ".join(FLAGS[f] for f in op.flags) or "0"
        o.append(f"    [PROTO_OP_{op.name}] = {{\"{op.name}\", {op.nargs}, {op.min_args}, "
                 f"{1 if op.variadic else 0}, {op.since[0]}, {op.since[1]}, {flags}}},\n")
    o.append("};\n")
    return "".join(o)


def handlers(ops):
    seen = []
    for op in ops:
        if op.handler not in seen:
            seen.append(op.handler)
    return seen


def gen_dispatch_h(ops):
    o = ["/* Generated by tools/gen_ops.py from proto/ops.def: do not edit. */\n",
         "#ifndef RGPU_SERVER_OP_DISPATCH_H\n#define RGPU_SERVER_OP_DISPATCH_H\n\n",
         "#include <cuda.h>\n\n#include \"proto/ops.h\"\n\n",
         "struct srv_session;\nstruct srv_call;\n",
         "typedef CUresult (*srv_handler_fn)(struct srv_session *s, struct srv_call *call);\n\n",
         "/* The handler of each op, indexed by op (every slot is filled). */\n",
         "extern const srv_handler_fn srv_dispatch[PROTO_OP_COUNT];\n\n",
         "/* The handlers, each defined once in server/. */\n"]
    for h in handlers(ops):
        names = ", ".join(op.name for op in ops if op.handler == h)
        o.append(f"CUresult {h}(struct srv_session *s, struct srv_call *call); /* {names} */\n")
    o.append("\n#endif\n")
    return "".join(o)


def gen_dispatch_c(ops):
    o = ["/* Generated by tools/gen_ops.py from proto/ops.def: do not edit. */\n",
         "#include \"server/op_dispatch.h\"\n\n",
         "const srv_handler_fn srv_dispatch[PROTO_OP_COUNT] = {\n"]
    for op in ops:
        o.append(f"    [PROTO_OP_{op.name}] = {op.handler},\n")
    o.append("};\n")
    return "".join(o)


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        with open(path) as f:
            if f.read() == text:
                return  # unchanged: keep the timestamp (no needless rebuilds)
    except OSError:
        pass
    with open(path, "w") as f:
        f.write(text)


# ---- --check: the sources against the table ----------------------------------------------

def strip_comments(text):
    return re.sub(r"/\*.*?\*/|//[^\n]*", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text,
                  flags=re.S)


def check_sources(ops, root):
    findings = []
    by_name = {op.name: op for op in ops}
    server = {}
    for fn in sorted(os.listdir(os.path.join(root, "server"))):
        if fn.endswith(".c"):
            server[fn] = strip_comments(open(os.path.join(root, "server", fn)).read())
    # Every handler defined exactly once, and no srv_op_* defined that the table does not name.
    defined = {}
    for fn, text in server.items():
        for m in re.finditer(r"^CUresult\s+(srv_op_\w+)\s*\(\s*struct srv_session", text, re.M):
            defined.setdefault(m.group(1), []).append(fn)
    for h in handlers(ops):
        where = defined.get(h, [])
        if len(where) != 1:
            findings.append(f"handler {h} ({', '.join(o.name for o in ops if o.handler == h)})"
                            f" is defined {len(where)} times in server/ {where}")
    for h, where in defined.items():
        if h not in handlers(ops):
            findings.append(f"server/{where[0]}: {h} is not the handler of any op in ops.def")
    # No positional argument reads left in the server: arguments are read by name.
    for fn, text in server.items():
        for m in re.finditer(r"\bARG\s*\(|msg->args\s*\[", text):
            line = text.count("\n", 0, m.start()) + 1
            findings.append(f"server/{fn}:{line}: positional argument read (use SRV_ARGS)")
    # Client: every call names its op's arguments through CLI_ARGS / cli_args, with all of its
    # required ones; no positional args.
    cdir = os.path.join(root, "client")
    texts = {}
    for dirpath, dirnames, filenames in os.walk(cdir):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(".c"):
                path = os.path.join(dirpath, name)
                texts[os.path.relpath(path, cdir)] = strip_comments(open(path).read())
    # Arguments named after the initializer, in any file (a helper may fill a call it is
    # handed): call.a.OP.name = v, &call.a.OP.name... A name set through another op's struct
    # counts where both ops begin with the same arguments up to it (ops sharing a layout).
    later = {}
    for text in texts.values():
        for m in re.finditer(r"\ba\.([A-Z][A-Z0-9_]*)\.([a-z_][a-z0-9_]*)", text):
            if m.group(1) in by_name:
                later.setdefault(m.group(1), set()).add(m.group(2))

    def set_later(op, name):
        mine = [n for n, _, _ in op.args]
        pos = mine.index(name)
        for other, names in later.items():
            args = [n for n, _, _ in by_name[other].args]
            if name in names and args[:pos + 1] == mine[:pos + 1]:
                return True
        return False

    for fn, text in texts.items():
        for m in re.finditer(r"\.args\s*=\s*\{|\bcall(->|\.)args\b|\buint64_t args\[", text):
            line = text.count("\n", 0, m.start()) + 1
            findings.append(f"client/{fn}:{line}: positional call arguments (use CLI_ARGS)")
        if fn in GENERIC_FORWARDERS:
            if "proto_ops[" not in text:
                findings.append(f"client/{fn}: a generic forwarder that does not check its "
                                "calls against proto_ops[]")
        else:
            for m in re.finditer(r"\ba\.words\s*\[[^\]]*\]\s*=(?!=)", text):
                line = text.count("\n", 0, m.start()) + 1
                findings.append(f"client/{fn}:{line}: positional argument write (use CLI_ARGS)")
        for m in re.finditer(r"\bCLI_ARGS(_AS)?\s*\(", text):
            line = text.count("\n", 0, m.start()) + 1
            parts = split_top(balanced(text, m.end()))
            if m.group(1):
                parts = parts[1:]  # CLI_ARGS_AS(op_expr, OP, ...)
            name = parts[0] if parts else ""
            op = by_name.get(name)
            if op is None:
                findings.append(f"client/{fn}:{line}: CLI_ARGS of unknown op {name}")
                continue
            given = set()
            for p in parts[1:]:
                g = re.match(r"^\.\s*([a-z_][a-z0-9_]*)\s*=", p)
                if not g:
                    findings.append(f"client/{fn}:{line}: {name}: '{p}' is not `.name = value`")
                    continue
                given.add(g.group(1))
            names = {n for n, _, _ in op.args}
            missing = [n for n, _, opt in op.args
                       if not opt and n not in given and not set_later(op, n)]
            unknown = sorted(given - names)
            if missing:
                findings.append(f"client/{fn}:{line}: {name} without {', '.join(missing)}")
            if unknown:
                findings.append(f"client/{fn}:{line}: {name} has no argument {unknown}")
        # An op sent without waiting (cli_call_async, cli_handle_destroy) must be flagged
        # noreply in the table: it gets no Reply, its failure comes as an AsyncError.
        for m in re.finditer(r"\n\{\n(.*?)\n\}\n", text, re.S):
            body = m.group(1)
            named = set(re.findall(r"cli_handle_destroy\([^;]*PROTO_OP_(\w+)", body))
            if "cli_call_async" in body:
                for a, b in re.findall(r"PROTO_OP_(\w+)|CLI_ARGS(?:_AS\([^,]*,)?\(?\s*(\w+)",
                                       body):
                    named.add(a or b)
            for name in sorted(named):
                op = by_name.get(name)
                if op is not None and "noreply" not in op.flags:
                    line = text.count("\n", 0, m.start()) + 2
                    findings.append(f"client/{fn}:{line}: {name} is sent without waiting but "
                                    "is not flagged noreply in ops.def")
        for m in re.finditer(r"PROTO_OP_(\w+)", text):
            if m.group(1) not in by_name and m.group(1) != "COUNT":
                line = text.count("\n", 0, m.start()) + 1
                findings.append(f"client/{fn}:{line}: unknown op {m.group(1)}")
    return findings


# ---- --check: the tests that speak the wire name their calls' arguments ---------------------

WIRE_MARK = "positional:"  # the comment on a call a test packs by position on purpose
# A helper that sends a call: (unsigned op, const uint64_t *args, size_t nargs) among its
# parameters, filled with WIRE_OP(OP, .name = v, ...) (tests/wire/wire_client.h) by its callers.
HELPER_PARAMS = re.compile(r"\bunsigned\s+op\s*,\s*const\s+uint64_t\s*\*\s*args\s*,\s*"
                           r"size_t\s+nargs\b")
WIRE_MACRO = re.compile(r"\bWIRE_OP(_N|_REST)?\s*\(")
WIRE_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(\([^)]*\))?[ \t]*(?:\\\n)?\s*"
                         r"WIRE_OP(?:_N|_REST)?\s*\(", re.M)


def test_files(root):
    files = {}
    tdir = os.path.join(root, "tests")
    for dirpath, dirnames, filenames in os.walk(tdir):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith((".c", ".h")):
                path = os.path.join(dirpath, name)
                raw = open(path, errors="replace").read()
                files[os.path.relpath(path, root)] = (raw, strip_comments(raw))
    return files


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def check_wire_op(ops_by_name, where, kind, parts, params):
    """One WIRE_OP / WIRE_OP_N / WIRE_OP_REST: a known op, its arguments by name."""
    findings = []
    macro = "WIRE_OP" + (kind or "")
    fixed = 2 if kind in ("_N", "_REST") else 1
    parts = [re.sub(r"\\\n", " ", p).strip() for p in parts]  # a #define's continuations
    name = parts[0] if parts else ""
    op = ops_by_name.get(name)
    if op is None:
        if name not in params:  # a parameter of the macro that wraps it
            findings.append(f"{where}: {macro} of unknown op {name}")
        return findings
    offset, words = {}, 0
    for n, w, _ in op.args:
        offset[n] = (words, w)
        words += w
    named = []
    for p in parts[fixed:]:
        g = re.match(r"^\.\s*([a-z_][a-z0-9_]*)\s*(\[[^\]]*\])?\s*=", p)
        if not g:
            findings.append(f"{where}: {macro}({name}): '{p}' is not `.name = value` "
                            "(arguments are named, never placed by position)")
            continue
        if g.group(1) not in offset:
            findings.append(f"{where}: {name} has no argument {g.group(1)}")
            continue
        named.append(g.group(1))
    if kind == "_REST" and op.variadic is None:
        findings.append(f"{where}: WIRE_OP_REST of {name}, whose last argument is not variable")
    if kind == "_N":
        n = parts[1] if len(parts) > 1 else ""
        if not re.match(r"^\d+$", n):
            findings.append(f"{where}: WIRE_OP_N({name}, {n}): the count must be a number")
        else:
            n = int(n)
            if n < op.min_args or n >= op.nargs:
                findings.append(f"{where}: WIRE_OP_N({name}, {n}): {name} takes {op.min_args} "
                                f"required and {op.nargs} words in all (a call short of its "
                                f"required ones goes by position, marked '{WIRE_MARK}')")
            for a in named:
                if sum(offset[a]) > n:
                    findings.append(f"{where}: WIRE_OP_N({name}, {n}) names {a}, which lies "
                                    f"past its {n} words")
    return findings


def sending_helpers(files):
    """Per file: the helpers it defines that send a call (name -> index of their op parameter),
    the macros it defines over WIRE_OP, and the test headers it includes."""
    includes, helpers, wrappers = {}, {}, {}
    for fn, (raw, text) in files.items():
        includes[fn] = [m.group(1) for m in re.finditer(r'#\s*include\s+"(tests/[^"]+)"', raw)]
        helpers[fn] = {}
        for m in HELPER_PARAMS.finditer(text):
            depth, i = 0, m.start() - 1
            while i >= 0:  # back to the '(' of its parameter list
                if text[i] == ")":
                    depth += 1
                elif text[i] == "(":
                    if depth == 0:
                        break
                    depth -= 1
                i -= 1
            head = re.search(r"(\w+)\s*$", text[:max(i, 0)])
            if head:
                params = split_top(text[i + 1:m.start()] + "op")
                helpers[fn][head.group(1)] = len(params) - 1  # where its op goes
        wrappers[fn] = dict.fromkeys(m.group(1) for m in WIRE_DEFINE.finditer(text))
    return includes, helpers, wrappers


def seen(fn, files, includes, table, done=None):
    """What fn sees of table (name -> value): its own entries and its included headers'."""
    done = done if done is not None else set()
    if fn in done or fn not in files:
        return {}
    done.add(fn)
    out = {}
    for inc in includes[fn]:
        out.update(seen(inc, files, includes, table, done))
    out.update(table[fn])
    return out


def marked(raw_lines, text, start, end):
    """A 'positional:' comment on the lines of text[start:end] or on the line above."""
    lo, hi = line_of(text, start), line_of(text, end)
    return any(WIRE_MARK in raw_lines[k - 1] for k in range(max(1, lo - 1), hi + 1))


def check_wire_macros(by_name, fn, text):
    """Every WIRE_OP* of fn names a known op and its arguments (inside a #define, the macro's
    own parameters may stand for the op)."""
    findings = []
    defines = [(m.start(), m.end(), m.group(1) or "") for m in
               re.finditer(r"^[ \t]*#[ \t]*define[ \t]+\w+(\([^)]*\))?(?:[^\n]*\\\n)*[^\n]*",
                           text, re.M)]
    for m in WIRE_MACRO.finditer(text):
        params = set()
        for a, b, plist in defines:
            if a <= m.start() < b:
                params = {x.strip() for x in plist.strip("()").split(",")}
        parts = split_top(balanced(text, m.end()))
        findings += check_wire_op(by_name, f"{fn}:{line_of(text, m.start())}", m.group(1),
                                  parts, params)
    return findings


def check_helper_calls(fn, raw_lines, text, helpers, wrappers):
    """Every call of a sending helper in fn: WIRE_OP (or a macro over it), its caller's own
    op, args, nargs passed on, or marked."""
    findings = []
    for name, idx in helpers.items():
        for m in re.finditer(r"(?<![\w.>])" + re.escape(name) + r"\s*\(", text):
            body = balanced(text, m.end())
            if HELPER_PARAMS.search(body):
                continue  # its definition or prototype
            parts = split_top(body)
            group = parts[idx] if idx < len(parts) else ""
            word = re.match(r"^(\w+)\b", group)
            if WIRE_MACRO.match(group) or (word and word.group(1) in wrappers):
                continue
            if parts[idx:idx + 3] == ["op", "args", "nargs"]:
                continue  # a helper passing on its caller's op and words
            if not marked(raw_lines, text, m.start(), m.end() + len(body)):
                findings.append(f"{fn}:{line_of(text, m.start())}: {name}() sends '{group}' "
                                "with argument words by position: name them with WIRE_OP "
                                f"(tests/wire/wire_client.h), or mark a call malformed on "
                                f"purpose with a '/* {WIRE_MARK} why */' comment")
    return findings


def check_tests(ops, root):
    """The tests that drive a worker over the wire pack no argument words by position: every
    call of a sending helper names its op and arguments through WIRE_OP (or passes on its own
    caller's op, args, nargs); a call malformed on purpose says so with a comment holding
    'positional:' on its lines or the line above."""
    findings = []
    by_name = {op.name: op for op in ops}
    files = test_files(root)
    includes, helpers, wrappers = sending_helpers(files)
    for fn, (raw, text) in files.items():
        raw_lines = raw.split("\n")
        findings += check_wire_macros(by_name, fn, text)
        findings += check_helper_calls(fn, raw_lines, text, seen(fn, files, includes, helpers),
                                       seen(fn, files, includes, wrappers))
        # a Call's words set by hand (a frame test, the wire client itself)
        for m in re.finditer(r"(\.|->)n_args\s*=(?!=)", text):
            if not marked(raw_lines, text, m.start(), m.end()):
                findings.append(f"{fn}:{line_of(text, m.start())}: a Call's argument words set by "
                                f"position without a '/* {WIRE_MARK} why */' comment")
    return findings


def split_top(s):
    """Split a macro argument list at its top-level commas."""
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def balanced(text, pos):
    """The text of a parenthesized macro argument list that starts before pos."""
    depth = 1
    i = pos
    while i < len(text) and depth:
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
        i += 1
    return text[pos:i - 1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--def", dest="deffile", required=True)
    ap.add_argument("--out-dir")
    ap.add_argument("--check", metavar="SRC_ROOT")
    a = ap.parse_args()
    ops = parse(a.deffile)
    if a.out_dir:
        write(os.path.join(a.out_dir, "proto", "ops_gen.h"), gen_ops_h(ops))
        write(os.path.join(a.out_dir, "proto", "ops_gen.c"), gen_ops_c(ops))
        write(os.path.join(a.out_dir, "server", "op_dispatch.h"), gen_dispatch_h(ops))
        write(os.path.join(a.out_dir, "server", "op_dispatch.c"), gen_dispatch_c(ops))
    if a.check:
        findings = check_sources(ops, a.check) + check_tests(ops, a.check)
        for f in findings:
            print(f)
        print(f"op table: {len(ops)} ops, {len(handlers(ops))} handlers, "
              f"{len(findings)} findings")
        return 1 if findings else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
