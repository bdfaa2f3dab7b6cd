#!/usr/bin/env python3
"""Create a sandbox, run a command (plain and streamed), move a file in and out, clean up.

    export AIRLOCK_URL=http://127.0.0.1:7878 AIRLOCK_API_KEY=ak_...
    PYTHONPATH=sdk/python python3 examples/python/quickstart.py
"""

import airlock

client = airlock.Client()  # AIRLOCK_URL, AIRLOCK_API_KEY
with client.create(template="R1", ttl_seconds=300, metadata={"example": "quickstart"}) as sb:
    print("sandbox", sb.id, sb.state)

    sb.files.write("hello.py", "import sys\nprint('hello from', sys.platform)\n")
    result = sb.exec(["python3", "hello.py"])
    print("exit", result.exit_code, "stdout:", result.stdout.strip())

    print("streamed output:")
    for event in sb.exec_stream(["sh", "-c", "for i in 1 2 3; do echo line $i; done"]):
        if event.kind == "stdout":
            print(event.text, end="")
        elif event.kind == "result":
            print("streamed command ended:", event.result.classification)

    sb.files.write("out/report.txt", "all good\n")
    print("report:", sb.files.read_text("out/report.txt").strip())
    print("workspace:", sorted(entry["name"] for entry in sb.files.list()))
# Leaving the block destroyed the sandbox.
print("destroyed:", client.get(sb.id).state)
