"""airlock: the Python SDK of airlockd's REST API, using only the standard library.

    import airlock
    client = airlock.Client()                  # AIRLOCK_URL, AIRLOCK_API_KEY
    with client.create(template="R1") as sb:   # destroyed on leaving the block
        result = sb.exec(["python3", "-c", "print(6 * 7)"])
        print(result.exit_code, result.stdout)
        for event in sb.exec_stream(["make", "test"]):
            if event.kind == "stdout":
                print(event.text, end="")
        sb.files.write("notes.txt", "hello\\n")
        sb.exec(["sh", "-c", "echo done > /sandbox/artifacts/report.txt"])
        collection = sb.collect_artifacts()  # through the release gate
    session = client.interpreters.create(tools=["human_approval"])
    run = session.eval("await tools.call('human_approval', {q: 'ship?'})")

Errors from the server are ApiError(status, code, message, request_id); a server that cannot
be reached is ApiError with status 0 and code "unavailable".
"""

from airlock.client import (
    ApiError,
    Client,
    Command,
    Event,
    ExecResult,
    Files,
    Image,
    Images,
    Interpreter,
    Interpreters,
    Sandbox,
)

__all__ = [
    "ApiError",
    "Client",
    "Command",
    "Event",
    "ExecResult",
    "Files",
    "Image",
    "Images",
    "Interpreter",
    "Interpreters",
    "Sandbox",
]
