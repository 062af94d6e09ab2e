#!/usr/bin/env bash
# Runs every fuzz target of the decoders briefly (a fixed count of inputs,
# not a duration: see go.dev/issue/75804). FUZZ_COUNT overrides the count.
set -euo pipefail
# One module at a time, as its users get it: the repository's go.work is
# for commands typed at the root (see the Makefile).
export GOWORK=off
cd "$(dirname "$0")/.."
COUNT=${FUZZ_COUNT:-3000x}
# Every package with a fuzz target (a test file declaring func FuzzX).
pkgs=$(git ls-files '*_test.go' | xargs grep -l '^func Fuzz' | xargs -n1 dirname | sort -u | sed 's|^|./|')
# A package of the client module (client/, its own go.mod) is fuzzed from
# that module's directory.
for pkg in $pkgs; do
  dir=. name=$pkg
  case "$pkg" in
    ./client|./client/*) dir=client; pkg=".${pkg#./client}"; [ "$pkg" = . ] && pkg=./ ;;
  esac
  for target in $(cd "$dir" && go test -list '^Fuzz' "$pkg" | grep '^Fuzz'); do
    echo "fuzz $name $target"
    (cd "$dir" && go test -run '^$' -fuzz "^${target}\$" -fuzztime "$COUNT" "$pkg") > /tmp/fuzz.$$.log 2>&1 || { cat /tmp/fuzz.$$.log; exit 1; }
  done
done
rm -f /tmp/fuzz.$$.log
echo "fuzz: all targets ran $COUNT clean"
