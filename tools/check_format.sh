#!/bin/sh
# Formatting is mechanical: every C source and header of the repository is as clang-format
# (.clang-format at the root) writes it. Exit 0 when so; 1 naming each file that differs (the
# fix: clang-format -i FILE). CUDA test programs (.cu) are left to their authors.
# Usage: tools/check_format.sh [ROOT]
ROOT=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$ROOT" || exit 1
command -v clang-format >/dev/null || { echo "check_format: clang-format is not installed"; exit 1; }
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    files=$(git ls-files '*.c' '*.h')
else
    files=$(find . -path ./build -prune -o -path './build-*' -prune -o \( -name '*.c' -o -name '*.h' \) -print)
fi
bad=""
for f in $files; do
    clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad="$bad $f"
done
if [ -n "$bad" ]; then
    echo "not as clang-format writes them (clang-format -i FILE):"
    for f in $bad; do echo "  $f"; done
    exit 1
fi
echo "PASS: $(echo $files | wc -w) files as clang-format writes them"
