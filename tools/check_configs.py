#!/usr/bin/env python3
"""Every config file the repository ships, checked by gpu-server --check-config (CI).

  check_configs.py GPU_SERVER [ROOT]

What is checked, each with the parser the programs use (server or client, by its sections):
  - deploy/*.conf (the packages' /etc/rgpu files);
  - every *.conf under tests/;
  - each fenced code block of docs/*.md and README.md that holds a config (a [server],
    [tenant NAME] or [client] header, or key = value lines under an ini/conf fence);
  - the files of the ConfigMaps and Secrets in deploy/kubernetes/*.yaml (block scalars named
    *.conf), and server.conf with tokens.conf concatenated as the DaemonSet assembles them.
A file that sets require_tenants = yes and has no tenant (the packaged server.conf) must fail
with exactly that error, and pass once a tenant is added: that is what an operator meets.
Exit 0 when all are as they should be, else 1 with each failure's errors.
"""
import glob
import os
import re
import subprocess
import sys
import tempfile

SECTION = re.compile(r"^\s*\[(server|tenant [^\]]*|client)\]\s*$")
CLIENT = re.compile(r"^\s*\[client\]\s*$")
CLIENT_KEYS = re.compile(r"^\s*(pool|server|policy|token_file|gpus|lanes)\s*=")
REQUIRE = "require_tenants = yes and no [tenant NAME] section"
EXAMPLE_TENANT = "\n[tenant ci-example]\ntoken_sha256 = " + "0" * 64 + "\n"


def markdown_blocks(path):
    """(line, text) of each fenced block that looks like a config."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out, block, start, fence = [], None, 0, ""
    for i, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            if block is None:
                block, start, fence = [], i + 1, stripped[3:].strip()
            else:
                text = "\n".join(block) + "\n"
                if any(SECTION.match(b) for b in block) or (
                        fence in ("ini", "conf", "cfg") and "=" in text):
                    out.append((start, text))
                block = None
            continue
        if block is not None:
            block.append(line)
    return out


def yaml_conf_files(path):
    """{name: text} of block scalars 'NAME.conf: |' in a YAML file (no YAML library needed:
    the block is every following line indented deeper than its key, blank lines included)."""
    lines = open(path, encoding="utf-8").read().split("\n")
    files, i = {}, 0
    while i < len(lines):
        m = re.match(r"^(\s*)([\w.-]+\.conf):\s*\|[-+]?\s*$", lines[i])
        i += 1
        if not m:
            continue
        indent, body, strip = len(m.group(1)), [], None
        while i < len(lines) and (lines[i].strip() == "" or
                                  len(lines[i]) - len(lines[i].lstrip()) > indent):
            if lines[i].strip() and strip is None:
                strip = len(lines[i]) - len(lines[i].lstrip())
            body.append(lines[i])
            i += 1
        files[m.group(2)] = "\n".join(b[strip:] if strip else b.strip() for b in body).rstrip() + "\n"
    return files


def is_client(text):
    return any(CLIENT.match(l) for l in text.split("\n")) or (
        not any(SECTION.match(l) for l in text.split("\n")) and
        any(CLIENT_KEYS.match(l) for l in text.split("\n")))


def check(server_bin, name, text, workdir):
    """None when valid (or valid but for require_tenants, with a tenant added); else the
    errors."""
    path = os.path.join(workdir, re.sub(r"[^\w.-]", "_", name))
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    client = is_client(text)
    cmd = [server_bin, "--check-config"] + (["--client"] if client else []) + [path]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    errors = [l for l in r.stderr.split("\n") if path in l and " warn: " not in l]
    if r.returncode == 0:
        return None, "valid " + ("client" if client else "server") + " config"
    if not client and len(errors) == 1 and REQUIRE in errors[0]:
        with open(path, "a", encoding="utf-8") as f:
            f.write(EXAMPLE_TENANT)
        r2 = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        if r2.returncode == 0:
            return None, "refuses to start without a tenant (require_tenants), valid with one"
        return r2.stderr.replace(path, name), None
    return (r.stderr + r.stdout).replace(path, name), None


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    server_bin = os.path.abspath(sys.argv[1])
    root = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else
                           os.path.join(os.path.dirname(__file__), ".."))
    os.chdir(root)
    configs = []  # (name, text)
    for f in sorted(glob.glob("deploy/*.conf")) + sorted(
            glob.glob("tests/**/*.conf", recursive=True)):
        configs.append((f, open(f, encoding="utf-8").read()))
    for f in sorted(glob.glob("docs/*.md")) + ["README.md"]:
        for line, text in markdown_blocks(f):
            configs.append(("%s:%d" % (f, line), text))
    for f in sorted(glob.glob("deploy/kubernetes/*.yaml")):
        for name, text in yaml_conf_files(f).items():
            configs.append(("%s (%s)" % (f, name), text))
    k8s = {}
    for f in sorted(glob.glob("deploy/kubernetes/*.yaml")):
        k8s.update(yaml_conf_files(f))
    if "server.conf" in k8s and "tokens.conf" in k8s:  # daemonset.yaml's cat
        configs.append(("deploy/kubernetes: server.conf + tokens.conf, as the DaemonSet "
                        "assembles them", k8s["server.conf"] + k8s["tokens.conf"]))
    failed = 0
    with tempfile.TemporaryDirectory() as work:
        for name, text in configs:
            errors, what = check(server_bin, name, text, work)
            if errors is None:
                print("ok   %s: %s" % (name, what))
            else:
                failed += 1
                print("FAIL %s:\n%s" % (name, "\n".join("     " + l for l in
                                                        errors.strip().split("\n"))))
    print("%d config(s) checked, %d failed" % (len(configs), failed))
    return 1 if failed or not configs else 0


if __name__ == "__main__":
    sys.exit(main())
