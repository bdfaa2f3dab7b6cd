"""Test support: a real airlockd started for a test class, and small OCI image tarballs."""

import gzip
import hashlib
import io
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
import unittest

BIN_DIR = os.environ.get("AIRLOCK_BIN_DIR", "")


def require_daemon(test_case):
    if os.geteuid() != 0:
        raise unittest.SkipTest("needs root: airlockd's sandboxes map host uid ranges")
    if not BIN_DIR or not os.access(os.path.join(BIN_DIR, "airlockd"), os.X_OK):
        raise unittest.SkipTest("set AIRLOCK_BIN_DIR to the build's bin directory (ctest does)")


class Daemon:
    """airlockd on a free loopback port with its own data directory and API key."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="airlock-py-", dir="/tmp")
        airlockd = os.path.join(BIN_DIR, "airlockd")
        self.key = subprocess.run(
            [airlockd, "admin", "create-key", "--data-dir", self.dir, "--name", "python-test"],
            check=True, capture_output=True, text=True).stdout.split()[-1]
        self.log_path = os.path.join(self.dir, "airlockd.log")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [airlockd, "--data-dir", self.dir, "--listen", "127.0.0.1:0", "--reap-interval", "2"],
            stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        port = None
        while port is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("airlockd did not start: " + self.log())
            m = re.search(r"listening on port (\d+)", self.log())
            if m:
                port = int(m.group(1))
            else:
                time.sleep(0.05)
        self.url = f"http://127.0.0.1:{port}"

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def env(self):
        return dict(os.environ, AIRLOCK_URL=self.url, AIRLOCK_API_KEY=self.key,
                    PATH=BIN_DIR + os.pathsep + os.environ.get("PATH", ""))

    def stop(self):
        """Destroys every live sandbox, stops the daemon and removes everything it made."""
        if self.proc.poll() is None:
            try:
                import airlock
                c = airlock.Client(self.url, self.key)
                for sb in c.list(state=["Running", "Paused"]):
                    sb.destroy()
            except Exception as e:  # the daemon may be the thing under test
                print("cleanup:", e)
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)
        self._log.close()
        log = self.log()
        node = ""
        try:
            with open(os.path.join(self.dir, "node-id")) as f:
                node = f.read().strip()
        except OSError:
            pass
        if node:
            # The node's cgroup parent in every hierarchy: the v2 tree, and each v1 controller's.
            roots = ["/sys/fs/cgroup"] + [os.path.join("/sys/fs/cgroup", d)
                                          for d in os.listdir("/sys/fs/cgroup")]
            for root in roots:
                try:
                    os.rmdir(os.path.join(root, "airlock", node))
                except OSError:
                    pass
        shutil.rmtree(self.dir, ignore_errors=True)
        # In the sanitizer build, a report from the daemon fails the test class.
        for marker in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"):
            if marker in log:
                raise AssertionError("airlockd: " + log[log.index(marker):][:4000])


def _tar(entries):
    """An uncompressed tar of (path, kind, data_or_target, mode) entries."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for path, kind, data, mode in entries:
            info = tarfile.TarInfo(path)
            info.mtime = 1700000000
            info.mode = mode
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                t.addfile(info)
            elif kind == "symlink":
                info.type = tarfile.SYMTYPE
                info.linkname = data
                t.addfile(info)
            else:
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def busybox_image(path, marker="from-the-image"):
    """Writes an OCI layout tarball of a busybox image (one gzip layer) to `path`."""
    with open("/bin/busybox", "rb") as f:
        busybox = f.read()
    entries = [("bin", "dir", b"", 0o755), ("bin/busybox", "file", busybox, 0o755),
               ("etc", "dir", b"", 0o755), ("etc/marker", "file", marker.encode(), 0o644)]
    for applet in ("sh", "cat", "echo", "sleep", "ls"):
        entries.append((f"bin/{applet}", "symlink", "busybox", 0o777))
    layer = _tar(entries)
    gz = gzip.compress(layer, mtime=0)
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    config = json.dumps({
        "architecture": arch, "os": "linux", "config": {"Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]},
    }).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": "sha256:" + hashlib.sha256(config).hexdigest(), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": "sha256:" + hashlib.sha256(gz).hexdigest(), "size": len(gz)}],
    }).encode()
    digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    index = json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest,
         "size": len(manifest)}]}).encode()
    files = [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", index)]
    for blob in (config, manifest, gz):
        files.append(("blobs/sha256/" + hashlib.sha256(blob).hexdigest(), blob))
    with tarfile.open(path, "w") as t:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return digest
