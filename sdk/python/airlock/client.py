"""The client, its sandboxes, files and images (see the package docstring and docs/clients.md)."""

import http.client
import json
import os
import socket
import urllib.parse

DEFAULT_URL = "http://127.0.0.1:7878"
_CHUNK = 1 << 20
# The longest command timeout a spec allows: a command's result may come that late.
_MAX_COMMAND_SECONDS = 7 * 24 * 3600
# How long the answer to a call the server runs as long work may take to begin: a create with a
# workspace clone, an artifact collection, an interpreter's evaluation.
_LONG_WORK_SECONDS = 30 * 60


class ApiError(Exception):
    """An error answer of airlockd: the HTTP status, the body's code and message, the request id.

    status is 0 when the server could not be reached (code "unavailable"), or when the error came
    inside a stream that had already begun.
    """

    def __init__(self, status, code, message, request_id=""):
        super().__init__(f"{message} (HTTP {status}, {code}"
                         + (f", request {request_id})" if request_id else ")"))
        self.status = status
        self.code = code
        self.message = message
        self.request_id = request_id


def _error_from(status, body):
    try:
        doc = json.loads(body)
    except (ValueError, TypeError):
        doc = None
    if isinstance(doc, dict) and "message" in doc:
        return ApiError(status, doc.get("code", ""), doc["message"], doc.get("request_id", ""))
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
    return ApiError(status, "http_error", f"HTTP {status}: {text[:200]}")


class Event:
    """One event of a command's stream: kind is "stdout", "stderr", "event", "result" or "error".

    text holds an output chunk (stdout/stderr); data the event's JSON; result the ExecResult of
    the final "result" event.
    """

    def __init__(self, kind, data):
        self.kind = kind
        self.data = data
        self.text = data.get("text", "") if isinstance(data, dict) else ""
        self.result = ExecResult(data) if kind == "result" and isinstance(data, dict) else None

    def __repr__(self):
        return f"Event({self.kind!r}, {self.text or self.data!r})"


class ExecResult:
    """A command's CommandResult (the engine's field names), with short names for common ones."""

    def __init__(self, raw):
        self.raw = raw
        self.exit_code = raw.get("exit_code")
        self.signal = raw.get("signal", 0)
        self.classification = raw.get("classification", "")
        self.stdout = raw.get("stdout_preview", "")
        self.stderr = raw.get("stderr_preview", "")
        self.duration_ms = raw.get("duration_ms", 0)
        self.timed_out = raw.get("timed_out", False)
        self.command_id = raw.get("command_id", "")

    @property
    def ok(self):
        return self.classification == "OK"

    def __getitem__(self, key):
        return self.raw[key]

    def __repr__(self):
        return f"ExecResult(exit_code={self.exit_code}, classification={self.classification!r})"


class _Transport:
    def __init__(self, url, api_key, timeout):
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme != "http" or not parsed.hostname:
            raise ValueError(f"server URL {url}: expected http://HOST:PORT")
        self.url = url
        self.host = parsed.hostname
        self.port = parsed.port or 80
        self.prefix = parsed.path.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    def longer(self, seconds):
        """A socket timeout for a call whose answer may take `seconds` to begin (never shorter
        than the client's; None, no timeout, stays None)."""
        return None if self.timeout is None else max(self.timeout, seconds)

    def open(self, method, target, body=None, headers=None, chunked=False, timeout=None):
        """Sends a request; returns the open response (the caller reads and closes it).

        Each socket operation must finish within `timeout` (default: the client's). TCP
        keep-alive probes find a server host that is gone within about a minute even when the
        call waits longer (a command's result)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout or self.timeout)
        hdrs = {"Authorization": f"Bearer {self.api_key}", "User-Agent": "airlock-python/0.1"}
        hdrs.update(headers or {})
        try:
            conn.connect()
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            for option, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
                if hasattr(socket, option):
                    conn.sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)
            conn.request(method, self.prefix + target, body=body, headers=hdrs,
                         encode_chunked=chunked)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise ApiError(0, "unavailable",
                           f"cannot reach airlockd at {self.url}: {e}") from None
        resp._airlock_conn = conn  # closed with the response
        return resp

    def call(self, method, target, payload=None, timeout=None):
        body = None if payload is None else json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"} if body is not None else {}
        resp = self.open(method, target, body, headers, timeout=timeout)
        try:
            data = resp.read()
        finally:
            resp.close()
            resp._airlock_conn.close()
        if resp.status >= 300:
            raise _error_from(resp.status, data)
        return json.loads(data)

    def chunks(self, target):
        """Yields the body of a GET in pieces as it arrives (an error answer raises ApiError)."""
        resp = self.open("GET", target)
        try:
            if resp.status >= 300:
                raise _error_from(resp.status, resp.read())
            while chunk := resp.read(_CHUNK):
                yield chunk
        finally:
            resp.close()
            resp._airlock_conn.close()

    def events(self, method, target, payload=None, headers=None, body=None, chunked=False):
        """Yields (event, data) of a text/event-stream answer."""
        if payload is not None:
            body = json.dumps(payload).encode()
            headers = dict(headers or {}, **{"Content-Type": "application/json"})
        resp = self.open(method, target, body, headers, chunked)
        try:
            if resp.status >= 300:
                raise _error_from(resp.status, resp.read())
            event, data = "message", []
            while True:
                line = resp.readline()
                if not line:
                    return
                line = line.decode("utf-8", "replace").rstrip("\r\n")
                if not line:
                    if data:
                        yield event, json.loads("\n".join(data))
                    event, data = "message", []
                elif line.startswith(":"):
                    continue
                else:
                    field, _, value = line.partition(":")
                    value = value[1:] if value.startswith(" ") else value
                    if field == "event":
                        event = value
                    elif field == "data":
                        data.append(value)
        finally:
            resp.close()
            resp._airlock_conn.close()


def _q(value):
    return urllib.parse.quote(str(value), safe="")


def _exec_body(argv, timeout_seconds, env, workdir, stdin, secrets):
    if isinstance(argv, str):
        raise TypeError("argv: give a list of strings, e.g. ['sh', '-c', 'echo hi']")
    body = {"argv": list(argv)}
    if timeout_seconds is not None:
        body["timeout_seconds"] = timeout_seconds
    if env:
        body["env"] = dict(env)
    if workdir:
        body["workdir"] = workdir
    if stdin:
        body["stdin"] = stdin
    if secrets:
        body["secrets"] = list(secrets)
    return body


class Command:
    """A background command: poll it, stream its output, kill it."""

    def __init__(self, sandbox, raw):
        self.sandbox = sandbox
        self.raw = raw
        self.id = raw["command_id"]
        self.state = raw.get("state", "")

    def poll(self):
        """Refreshes and returns the state ("running", "finished", "killed")."""
        self.raw = self.sandbox._call("GET", f"/commands/{_q(self.id)}")
        self.state = self.raw.get("state", "")
        return self.state

    @property
    def result(self):
        r = self.raw.get("result")
        return ExecResult(r) if isinstance(r, dict) else None

    def stream(self):
        """Yields Events of its output (from what the sandbox still holds) until it ends."""
        t = self.sandbox._transport
        for kind, data in t.events("GET", f"{self.sandbox._path}/commands/{_q(self.id)}/stream"):
            if kind == "error":
                raise ApiError(0, data.get("code", ""), data.get("message", ""),
                               data.get("request_id", ""))
            yield Event(kind, data)

    def kill(self, signal="KILL"):
        self.sandbox._call("POST", f"/commands/{_q(self.id)}/kill", {"signal": signal})


class Files:
    """File operations in a sandbox. Paths are absolute, or relative to /sandbox/workspace."""

    def __init__(self, sandbox):
        self._sb = sandbox

    def _target(self, op, path, **extra):
        q = "&".join([f"path={_q(path)}"] + [f"{k}={_q(v)}" for k, v in extra.items()])
        return f"{self._sb._path}/files{op}?{q}"

    def write(self, path, data, mode=0o644):
        """Writes bytes, str (UTF-8) or the content of a binary file object (streamed)."""
        if isinstance(data, str):
            data = data.encode()
        if isinstance(data, (bytes, bytearray)):
            body = bytes(data)
            chunked = False
        else:
            body = iter(lambda: data.read(_CHUNK), b"")
            chunked = True
        resp = self._sb._transport.open(
            "PUT", self._target("", path, mode=format(mode, "o")), body,
            {"Content-Type": "application/octet-stream"}, chunked=chunked)
        try:
            out = resp.read()
        finally:
            resp.close()
            resp._airlock_conn.close()
        if resp.status >= 300:
            raise _error_from(resp.status, out)
        return json.loads(out)

    def upload(self, local_path, path, mode=0o644):
        with open(local_path, "rb") as f:
            return self.write(path, f, mode)

    def read_chunks(self, path):
        """Yields the file's content in pieces as it arrives."""
        info = self.stat(path)
        if info.get("type") != "file":
            raise ApiError(409, "failed_precondition", f"{path} is a {info.get('type')}, not a file")
        yield from self._sb._transport.chunks(self._target("", path))

    def read(self, path):
        return b"".join(self.read_chunks(path))

    def read_text(self, path, encoding="utf-8"):
        return self.read(path).decode(encoding)

    def download(self, path, local_path):
        with open(local_path, "wb") as f:
            for chunk in self.read_chunks(path):
                f.write(chunk)

    def list(self, path="/sandbox/workspace"):
        return self._sb._transport.call("GET", self._target(":list", path))["entries"]

    def stat(self, path):
        return self._sb._transport.call("GET", self._target(":stat", path))

    def exists(self, path):
        try:
            self.stat(path)
            return True
        except ApiError as e:
            if e.status == 404:
                return False
            raise

    def mkdir(self, path, parents=False):
        extra = {"parents": "true"} if parents else {}
        self._sb._transport.call("POST", self._target(":mkdir", path, **extra))

    def remove(self, path, recursive=False):
        extra = {"recursive": "true"} if recursive else {}
        self._sb._transport.call("DELETE", self._target("", path, **extra))


class Sandbox:
    """A sandbox of airlockd. As a context manager, it is destroyed on leaving the block."""

    def __init__(self, client, raw):
        self._client = client
        self._transport = client._transport
        self.raw = raw
        self.id = raw["id"]
        self._path = f"/v1/sandboxes/{_q(self.id)}"
        self.files = Files(self)

    @property
    def state(self):
        return self.raw.get("state", "")

    @property
    def image_digest(self):
        return self.raw.get("image_digest", "")

    @property
    def metadata(self):
        return self.raw.get("metadata", {})

    def _call(self, method, suffix, payload=None, timeout=None):
        return self._transport.call(method, self._path + suffix, payload, timeout=timeout)

    def refresh(self):
        self.raw = self._call("GET", "")
        return self

    def exec(self, argv, timeout_seconds=None, env=None, workdir=None, stdin=None, secrets=None):
        """Runs a command to its end; returns its ExecResult (output previews included)."""
        body = _exec_body(argv, timeout_seconds, env, workdir, stdin, secrets)
        # The answer comes when the command ends: wait as long as it may run, plus a minute.
        runs_for = timeout_seconds if timeout_seconds is not None else _MAX_COMMAND_SECONDS
        return ExecResult(self._transport.call("POST", self._path + "/exec", body,
                                               timeout=self._transport.longer(runs_for + 60)))

    def exec_stream(self, argv, timeout_seconds=None, env=None, workdir=None, stdin=None,
                    secrets=None):
        """Yields Events as the command runs: stdout/stderr chunks, events, then the result."""
        body = _exec_body(argv, timeout_seconds, env, workdir, stdin, secrets)
        body["stream"] = True
        for kind, data in self._transport.events("POST", self._path + "/exec", body):
            if kind == "error":
                raise ApiError(0, data.get("code", ""), data.get("message", ""),
                               data.get("request_id", ""))
            yield Event(kind, data)

    def exec_background(self, argv, timeout_seconds=None, env=None, workdir=None, secrets=None):
        body = _exec_body(argv, timeout_seconds, env, workdir, None, secrets)
        body["background"] = True
        return Command(self, self._call("POST", "/exec", body))

    def commands(self):
        return [Command(self, c) for c in self._call("GET", "/commands")["commands"]]

    def pause(self):
        self.raw = self._call("POST", "/pause")
        return self

    def resume(self):
        self.raw = self._call("POST", "/resume")
        return self

    def extend_ttl(self, ttl_seconds):
        self.raw = self._call("POST", "/ttl", {"ttl_seconds": ttl_seconds})
        return self

    def events(self, after=0):
        return self._call("GET", f"/events?after={int(after)}")["events"]

    def set_network(self, network, loosen=False):
        """Replaces the running sandbox's network policy (the spec's network section).

        A looser policy than the current one needs loosen=True; either way the change is an audit
        event. Returns the sandbox with its new effective spec.
        """
        self.raw = self._call("PUT", "/network", {"network": dict(network), "loosen": loosen})
        return self

    def collect_artifacts(self, paths=None, secrets=None):
        """Runs paths (default the spec's artifacts.paths) through the release gate.

        Returns the collection: blocked, policy_blocked, released_bytes, summary and one verdict
        per file (outcome released / withheld / refused / quarantined; artifact_id when recorded).
        """
        body = {}
        if paths:
            body["paths"] = list(paths)
        if secrets:
            body["secrets"] = list(secrets)
        return self._call("POST", "/artifacts:collect", body,
                          timeout=self._transport.longer(_LONG_WORK_SECONDS))

    def workspace_diff(self):
        """The git workspace's diff against its pinned commit, collected as an artifact.

        Returns the collection (as collect_artifacts) plus base_commit; the diff itself is the
        released artifact at /sandbox/artifacts/workspace.diff (download_artifact).
        """
        return self._call("POST", "/workspace:diff",
                          timeout=self._transport.longer(_LONG_WORK_SECONDS))

    def artifacts(self):
        """The run's recorded artifacts (released and quarantined)."""
        return self._call("GET", "/artifacts")["artifacts"]

    def download_artifact(self, artifact_id, local_path=None):
        """A released artifact's bytes, or written to local_path (then its size is returned)."""
        chunks = self._transport.chunks(f"{self._path}/artifacts/{_q(artifact_id)}")
        if local_path is None:
            return b"".join(chunks)
        first = next(chunks, b"")  # an error answer raises here, before the file is made
        size = len(first)
        with open(local_path, "wb") as f:
            f.write(first)
            for chunk in chunks:
                f.write(chunk)
                size += len(chunk)
        return size

    def destroy(self):
        self.raw = self._call("DELETE", "")
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.destroy()
        except ApiError as e:
            if exc[0] is None:
                raise
            del e  # the block's own exception matters more
        return False

    def __repr__(self):
        return f"Sandbox({self.id!r}, state={self.state!r})"


class Image:
    def __init__(self, raw):
        self.raw = raw
        self.digest = raw["digest"]
        self.tags = raw.get("tags", [])
        self.unpacked_bytes = raw.get("unpacked_bytes", 0)

    def __repr__(self):
        return f"Image({self.digest[:19]!r}, tags={self.tags!r})"


class Images:
    """The node's images: import (OCI layout or docker save tarballs), list, get, remove."""

    def __init__(self, client):
        self._t = client._transport

    def import_file(self, path, tags=(), progress=None):
        """Uploads the archive (streamed) and imports it; progress(dict) gets the server's stages."""
        target = "/v1/images"
        if tags:
            target += "?" + "&".join(f"tag={_q(t)}" for t in tags)
        with open(path, "rb") as f:
            body = iter(lambda: f.read(_CHUNK), b"")
            for kind, data in self._t.events(
                    "POST", target, body=body, chunked=True,
                    headers={"Content-Type": "application/octet-stream",
                             "Accept": "text/event-stream"}):
                if kind == "progress" and progress is not None:
                    progress(data)
                elif kind == "result":
                    return [Image(i) for i in data["images"]]
                elif kind == "error":
                    raise ApiError(0, data.get("code", ""), data.get("message", ""),
                                   data.get("request_id", ""))
        raise ApiError(0, "unavailable", "the import's answer ended without a result")

    def list(self):
        return [Image(i) for i in self._t.call("GET", "/v1/images")["images"]]

    def get(self, reference):
        return Image(self._t.call("GET", "/v1/images/" + "/".join(
            _q(p) for p in reference.split("/"))))

    def remove(self, reference):
        self._t.call("DELETE", "/v1/images/" + "/".join(_q(p) for p in reference.split("/")))


class Interpreter:
    """A level-0 interpreter session (docs/interp.md): one script, its tool calls, durable pauses.

    eval and resume return the run's result: outcome ("completed", "paused", "error", ...), result,
    error, pending calls [{call_id, tool, args}], console.
    """

    def __init__(self, client, raw):
        self._t = client._transport
        self.raw = raw
        self.id = raw["id"]
        self._path = f"/v1/interpreters/{_q(self.id)}"

    @property
    def state(self):
        return self.raw.get("state", "")

    def eval(self, script):
        run = self._t.call("POST", self._path + "/eval", {"script": script},
                           timeout=self._t.longer(_LONG_WORK_SECONDS))
        self.raw["state"] = run.get("state", self.state)
        return run

    def resume(self, call_id, result=None, error=None):
        """Answers a pending call with result (any JSON value) or error (a message)."""
        body = {"call_id": call_id}
        if error is not None:
            body["error"] = error
        else:
            body["result"] = result
        run = self._t.call("POST", self._path + "/resume", body,
                           timeout=self._t.longer(_LONG_WORK_SECONDS))
        self.raw["state"] = run.get("state", self.state)
        return run

    def refresh(self):
        """The session's state, pending calls, journal and (once finished) result."""
        self.raw = self._t.call("GET", self._path)
        return self

    def console(self):
        return self._t.call("GET", self._path + "/console")["console"]

    def delete(self):
        self.raw = self._t.call("DELETE", self._path)
        return self

    def __repr__(self):
        return f"Interpreter({self.id!r}, state={self.state!r})"


class Interpreters:
    """Interpreter sessions: create one with its limits, tool allowlist and declarations."""

    def __init__(self, client):
        self._client = client

    def create(self, tools=(), limits=None, declared=()):
        body = {}
        if tools:
            body["tools"] = list(tools)
        if limits:
            body["limits"] = dict(limits)
        if declared:
            body["declared"] = list(declared)
        return Interpreter(self._client,
                           self._client._transport.call("POST", "/v1/interpreters", body))

    def get(self, session_id):
        return Interpreter(self._client, self._client._transport.call(
            "GET", f"/v1/interpreters/{_q(session_id)}"))


class Client:
    """airlockd at url (default $AIRLOCK_URL) with api_key (default $AIRLOCK_API_KEY)."""

    def __init__(self, url=None, api_key=None, timeout=300):
        url = url or os.environ.get("AIRLOCK_URL") or DEFAULT_URL
        api_key = api_key if api_key is not None else os.environ.get("AIRLOCK_API_KEY", "")
        if not api_key:
            raise ValueError("no API key: pass api_key or set AIRLOCK_API_KEY "
                             "(airlockd admin create-key makes one)")
        self._transport = _Transport(url, api_key, timeout)
        self.images = Images(self)
        self.interpreters = Interpreters(self)

    @property
    def url(self):
        return self._transport.url

    def create(self, spec=None, template=None, ttl_seconds=None, idle_timeout_seconds=None,
               metadata=None, idempotency_key=None, workspace=None):
        """Creates a sandbox (from a spec dict or a template name) and returns it Running.

        workspace: {"repo": ..., "commit": ...} for a fresh clone at a pinned commit.
        """
        body = {}
        if spec is not None:
            body["spec"] = spec
        if template is not None:
            body["template"] = template
        if spec is None and template is None:
            body["spec"] = {}
        if ttl_seconds is not None:
            body["ttl_seconds"] = ttl_seconds
        if idle_timeout_seconds is not None:
            body["idle_timeout_seconds"] = idle_timeout_seconds
        if metadata:
            body["metadata"] = dict(metadata)
        if idempotency_key:
            body["idempotency_key"] = idempotency_key
        if workspace:
            body["workspace"] = {"git": dict(workspace)}
        return Sandbox(self, self._transport.call("POST", "/v1/sandboxes", body,
                                                  timeout=self._transport.longer(_LONG_WORK_SECONDS)))

    def get(self, sandbox_id):
        return Sandbox(self, self._transport.call("GET", f"/v1/sandboxes/{_q(sandbox_id)}"))

    def list(self, state=None, metadata=None):
        """Every sandbox of this key (pages followed), optionally by state(s) and metadata."""
        params = []
        if state:
            params.append(("state", state if isinstance(state, str) else ",".join(state)))
        for k, v in (metadata or {}).items():
            params.append((f"metadata.{k}", v))
        out, cursor = [], ""
        while True:
            q = params + ([("cursor", cursor)] if cursor else [])
            target = "/v1/sandboxes" + ("?" + urllib.parse.urlencode(q) if q else "")
            page = self._transport.call("GET", target)
            out += [Sandbox(self, s) for s in page["sandboxes"]]
            cursor = page.get("next_cursor", "")
            if not cursor:
                return out
