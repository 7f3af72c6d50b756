#!/bin/sh
# Run a command on tests/fakeverbs: run_fakeverbs.sh FAKE_LIB_DIR COMMAND ARGS...
# The fake libibverbs.so.1/librdmacm.so.1 come first in the library path and get a fresh
# rendezvous directory, removed afterwards.
set -u
LIB=$1
shift
FAKEVERBS_DIR=$(mktemp -d /tmp/fakeverbs.XXXXXX)
export FAKEVERBS_DIR
export LD_LIBRARY_PATH="$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$@"
rc=$?
rm -rf "$FAKEVERBS_DIR"
exit $rc
