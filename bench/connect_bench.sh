#!/bin/bash
# What a connect costs inside a sandbox (the connect observer routes every one to the engine's
# thread; docs/network.md, "Direct attempts"), against the same loop on the host in the same run.
#
#   bench/connect_bench.sh [ROUNDS] [CONNECTS]       (root; run from the repository, after a build)
#   OLD=/path/to/other/airlock bench/connect_bench.sh  (adds another build's `airlock`, alternated)
#
# Each round runs, in turn: a loop of CONNECTS loopback TCP connect+accept pairs in python3 on the
# host, the same loop in an `airlock run` sandbox (level 2, network none), and `airlock run --
# /bin/true` (wall time); with OLD, the same two with that build. Prints medians over the rounds.
set -euo pipefail
ROUNDS=${1:-15}
CONNECTS=${2:-2000}
NEW=${NEW:-build/bin/airlock}
OLD=${OLD:-}
LOOP='
import socket, sys, time
n = int(sys.argv[1])
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(128)
addr = srv.getsockname()
t = time.perf_counter()
for _ in range(n):
    c = socket.socket(); c.connect(addr); a, _ = srv.accept(); a.close(); c.close()
print(f"{(time.perf_counter() - t) / n * 1e6:.1f}")'

median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }
start_ms() {  # wall time of `$1 run -- /bin/true`, in ms
  local t0 t1
  t0=$(date +%s%N); "$1" run -- /bin/true >/dev/null 2>&1; t1=$(date +%s%N)
  awk -v d=$((t1 - t0)) 'BEGIN {printf "%.2f", d / 1e6}'
}

declare -a host=() sandbox=() start=() old_sandbox=() old_start=()
for ((i = 0; i < ROUNDS; i++)); do
  host+=("$(python3 -c "$LOOP" "$CONNECTS")")
  sandbox+=("$("$NEW" run -- python3 -c "$LOOP" "$CONNECTS" 2>/dev/null)")
  start+=("$(start_ms "$NEW")")
  if [[ -n $OLD ]]; then
    old_sandbox+=("$("$OLD" run -- python3 -c "$LOOP" "$CONNECTS" 2>/dev/null)")
    old_start+=("$(start_ms "$OLD")")
  fi
done
echo "connect+accept, us per connection (median of $ROUNDS rounds of $CONNECTS):"
echo "  host                 $(median "${host[@]}")"
echo "  sandbox ($NEW)  $(median "${sandbox[@]}")"
[[ -n $OLD ]] && echo "  sandbox ($OLD)  $(median "${old_sandbox[@]}")"
echo "airlock run -- /bin/true, ms (median of $ROUNDS):"
echo "  $NEW  $(median "${start[@]}")"
[[ -n $OLD ]] && echo "  $OLD  $(median "${old_start[@]}")"
exit 0
