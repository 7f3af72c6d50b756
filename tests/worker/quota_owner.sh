#!/bin/sh
# One owner for the quota (server/quota.h): no file but server/quota.c writes a session's
# mem_used (assigns, adds, subtracts, increments). Usage: quota_owner.sh SOURCE_DIR
cd "$1" || exit 2
found=$(grep -rnE '(->|\.)mem_used[[:space:]]*([-+*/|&]?=[^=]|\+\+|--)|(\+\+|--)[[:space:]]*[a-z_]+(->|\.)mem_used' \
        server --include='*.c' --include='*.h' | grep -v '^server/quota\.c:')
if [ -n "$found" ]; then
    echo "mem_used written outside server/quota.c (charge and release through server/quota.h):"
    echo "$found"
    exit 1
fi
echo "mem_used is written only by server/quota.c"
