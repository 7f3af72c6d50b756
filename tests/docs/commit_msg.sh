#!/bin/sh
# .githooks/commit-msg takes a short subject with a body and refuses a long subject, a missing
# blank line and a missing body. Usage: commit_msg.sh ROOT
set -u
HOOK=$1/.githooks/commit-msg
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
check() { # expected-exit message-text
    printf '%b' "$2" >"$T/msg"
    sh "$HOOK" "$T/msg" 2>/dev/null
    rc=$?
    if [ "$rc" -ne "$1" ]; then
        echo "FAIL: exit $rc, expected $1, for: $(head -1 "$T/msg")"
        fail=1
    fi
}
long=$(printf '%073d' 0)
check 0 'server: one owner for the quota\n\nWhy: three paths wrote mem_used.\n'
check 0 '# a comment line first\nclient: a subject\n\nand a body\n'
check 0 'Merge branch sec\n'
check 1 "$long\n\nbody\n"
check 1 'a subject\nno blank line\n'
check 1 'a subject without a body\n'
check 1 'a subject\n\n\n'
[ $fail -eq 0 ] && echo "PASS: the commit-msg hook keeps the rule"
exit $fail
