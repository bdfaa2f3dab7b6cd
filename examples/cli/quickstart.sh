#!/usr/bin/env bash
# The airlock CLI against a running airlockd: create a sandbox, run commands, copy files both
# ways, look at its workspace, remove it.
#
#   export AIRLOCK_URL=http://127.0.0.1:7878 AIRLOCK_API_KEY=ak_...
#   examples/cli/quickstart.sh
set -euo pipefail

id=$(airlock sandbox create --template R1 --ttl 300 --metadata example=cli --json |
       python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')
trap 'airlock sandbox rm "$id" >/dev/null' EXIT
echo "sandbox $id"

airlock sandbox exec "$id" -- sh -c 'echo hello from $(uname -s); echo result > answer.txt'
work=$(mktemp -d)
echo 'print("copied in")' > "$work/in.py"
airlock sandbox cp "$work/in.py" "$id:/sandbox/workspace/in.py"
airlock sandbox exec "$id" -- python3 in.py
airlock sandbox cp "$id:/sandbox/workspace/answer.txt" "$work/answer.txt"
echo "copied out: $(cat "$work/answer.txt")"
rm -r "$work"
airlock sandbox ls "$id"
airlock sandbox list
