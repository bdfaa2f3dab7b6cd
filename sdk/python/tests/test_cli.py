"""The `airlock sandbox` and `airlock image` commands driven as a user runs them, against a real
airlockd started by the test; and the examples in examples/ (ctest: python_sdk_test)."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import support  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


class CliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        support.require_daemon(cls)
        cls.daemon = support.Daemon()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def airlock(self, *args, env=None, input=None):
        return subprocess.run([os.path.join(support.BIN_DIR, "airlock"), *args],
                              env=env or self.daemon.env(), capture_output=True, text=True,
                              input=input, timeout=120)

    def ok(self, *args):
        r = self.airlock(*args)
        self.assertEqual(r.returncode, 0, f"airlock {' '.join(args)}: {r.stderr}")
        return r.stdout

    def test_clear_errors_without_server_or_with_a_bad_key(self):
        env = dict(self.daemon.env(), AIRLOCK_URL="http://127.0.0.1:1")
        r = self.airlock("sandbox", "list", env=env)
        self.assertEqual(r.returncode, 1)
        self.assertIn("is airlockd running?", r.stderr)
        self.assertIn("http://127.0.0.1:1", r.stderr)
        r = self.airlock("sandbox", "list", "--api-key", "ak_nope")
        self.assertEqual(r.returncode, 1)
        self.assertIn("API key is unknown", r.stderr)
        self.assertIn("AIRLOCK_API_KEY", r.stderr)
        env = dict(self.daemon.env(), AIRLOCK_API_KEY="")
        r = self.airlock("sandbox", "list", env=env)
        self.assertEqual(r.returncode, 2)
        self.assertIn("no API key", r.stderr)
        r = self.airlock("sandbox", "get", "sb-000000000000")
        self.assertEqual(r.returncode, 1)
        self.assertTrue(r.stderr.startswith("airlock: get sb-000000000000: "), r.stderr)

    def test_sandbox_commands(self):
        created = json.loads(self.ok("sandbox", "create", "--ttl", "600", "--metadata", "who=cli",
                                     "--json"))
        sid = created["id"]
        self.assertEqual(created["state"], "Running")
        # --server and --api-key instead of the environment, after the subcommand.
        env = dict(os.environ, AIRLOCK_URL="", AIRLOCK_API_KEY="")
        r = self.airlock("sandbox", "list", "--server", self.daemon.url, "--api-key",
                         self.daemon.key, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(sid, r.stdout)
        self.assertTrue(r.stdout.startswith("ID "), r.stdout)
        self.assertIn("who=cli", r.stdout)
        listed = json.loads(self.ok("sandbox", "list", "--json", "--metadata", "who=cli"))
        self.assertEqual([s["id"] for s in listed], [sid])
        self.assertIn("state:                Running", self.ok("sandbox", "get", sid))

        r = self.airlock("sandbox", "exec", sid, "--", "sh", "-c", "echo out; echo err >&2; exit 4")
        self.assertEqual((r.returncode, r.stdout), (4, "out\n"))
        self.assertIn("err\n", r.stderr)
        result = json.loads(self.airlock("sandbox", "exec", "--json", sid, "--", "echo", "x").stdout)
        self.assertEqual(result["stdout_preview"], "x\n")

        cid = self.ok("sandbox", "exec", "--background", sid, "--", "sh", "-c",
                      "echo first; sleep 0.3; echo second").strip()
        self.assertTrue(cid.startswith("cmd-"), cid)
        r = self.airlock("sandbox", "logs", sid, cid)
        self.assertEqual((r.returncode, r.stdout), (0, "first\nsecond\n"), r.stderr)
        self.assertEqual(self.ok("sandbox", "logs", sid), "first\nsecond\n")  # the last command

        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "in.bin")
            data = os.urandom(2 << 20)
            with open(src, "wb") as f:
                f.write(data)
            self.ok("sandbox", "cp", src, f"{sid}:/sandbox/workspace/in.bin")
            self.ok("sandbox", "cp", src, f"{sid}:sub/")  # into a directory: keeps the name
            self.ok("sandbox", "cp", f"{sid}:/sandbox/workspace/in.bin", os.path.join(tmp, "out"))
            with open(os.path.join(tmp, "out"), "rb") as f:
                self.assertTrue(f.read() == data)
            self.ok("sandbox", "cp", f"{sid}:sub/in.bin", tmp + "/")
            self.assertEqual(sorted(os.listdir(tmp)), ["in.bin", "out"])
            r = self.airlock("sandbox", "cp", f"{sid}:nope.txt", os.path.join(tmp, "x"))
            self.assertEqual(r.returncode, 1)
            self.assertFalse(os.path.exists(os.path.join(tmp, "x")))
            self.assertFalse(os.path.exists(os.path.join(tmp, "x.airlock-part")))
            r = self.airlock("sandbox", "cp", src, os.path.join(tmp, "y"))
            self.assertEqual(r.returncode, 2)
        ls = self.ok("sandbox", "ls", sid)
        self.assertRegex(ls, r"\nfile +2097152 +0644 +in.bin\n")
        self.assertIn("in.bin", ls)
        names = sorted(e["name"] for e in json.loads(self.ok("sandbox", "ls", sid, "--json")))
        self.assertEqual(names, ["in.bin", "sub"])

        self.assertIn("Paused", self.ok("sandbox", "pause", sid))
        self.assertIn("Running", self.ok("sandbox", "resume", sid))
        self.assertEqual(self.ok("sandbox", "rm", sid), f"{sid} Gone\n")
        self.assertNotIn(sid, self.ok("sandbox", "list"))
        self.assertIn(sid, self.ok("sandbox", "list", "--all"))

    def test_artifact_and_network_commands(self):
        sid = json.loads(self.ok("sandbox", "create", "--template", "R2", "--json"))["id"]
        self.ok("sandbox", "exec", sid, "--", "sh", "-c",
                "echo done > /sandbox/artifacts/report.txt; "
                "echo 'key cli-secret-value' > /sandbox/artifacts/leak.txt")
        out = self.ok("sandbox", "collect", sid, "/sandbox/artifacts/report.txt")
        self.assertRegex(out, r"/sandbox/artifacts/report.txt +released +- +art-[0-9a-f]+\n")
        [art] = [a for a in json.loads(self.ok("sandbox", "artifacts", sid, "--json"))]
        self.assertEqual((art["status"], art["size"]), ("released", 5))
        self.assertEqual(self.ok("sandbox", "artifact", sid, art["id"]), "done\n")
        with tempfile.TemporaryDirectory() as tmp:
            dest = os.path.join(tmp, "report.txt")
            self.ok("sandbox", "artifact", sid, art["id"], "-o", dest)
            with open(dest) as f:
                self.assertEqual(f.read(), "done\n")

        # A secret blocks the collection: exit 3, the secret never printed, nothing to download.
        r = self.airlock("sandbox", "collect", sid, "/sandbox/artifacts/leak.txt",
                         "--secret", "cli-secret-value")
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("quarantined", r.stdout)
        self.assertNotIn("cli-secret-value", r.stdout + r.stderr)
        quarantined = [a for a in json.loads(self.ok("sandbox", "artifacts", sid, "--json"))
                       if a["status"] == "quarantined"]
        self.assertEqual(len(quarantined), 1)
        r = self.airlock("sandbox", "artifact", sid, quarantined[0]["id"])
        self.assertEqual((r.returncode, r.stdout), (1, ""))
        self.assertIn("quarantined", r.stderr)

        r = self.airlock("sandbox", "diff", sid)
        self.assertEqual(r.returncode, 1)
        self.assertIn("no git workspace", r.stderr)

        self.assertIn('"profile":"none"', self.ok("sandbox", "network", sid, '{"profile": "none"}'))
        r = self.airlock("sandbox", "network", sid, '{"profile": "dependency-egress"}')
        self.assertEqual(r.returncode, 1)
        self.assertIn("loosen", r.stderr)
        self.assertIn('"profile":"dependency-egress"',
                      self.ok("sandbox", "network", sid, '{"profile": "dependency-egress"}',
                              "--loosen"))
        r = self.airlock("sandbox", "network", sid, "not json")
        self.assertEqual(r.returncode, 2)
        self.ok("sandbox", "rm", sid)

    def test_image_commands(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "busybox.oci.tar")
            digest = support.busybox_image(path, marker="cli-image")
            r = self.airlock("image", "import", path, "--tag", "cli/busybox:1")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout, f"{digest} cli/busybox:1\n")
            self.assertIn("uploading", r.stderr)
            self.assertIn("(100%)", r.stderr)
            self.assertIn("\nunpacking\n", r.stderr)
        listing = self.ok("image", "list")
        self.assertIn(digest[:19], listing)
        self.assertIn("cli/busybox:1", listing)
        self.assertEqual([i["digest"] for i in json.loads(self.ok("image", "list", "--json"))],
                         [digest])
        sb = json.loads(self.ok("sandbox", "create", "--image", "cli/busybox:1", "--json"))
        self.assertEqual(sb["image_digest"], digest)
        r = self.airlock("sandbox", "exec", sb["id"], "--", "cat", "/etc/marker")
        self.assertEqual(r.stdout, "cli-image")
        r = self.airlock("image", "rm", "cli/busybox:1")
        self.assertEqual(r.returncode, 1)
        self.assertIn("in use", r.stderr)
        self.ok("sandbox", "rm", sb["id"])
        self.assertEqual(self.ok("image", "rm", "cli/busybox:1"), "removed cli/busybox:1\n")
        self.assertEqual(self.ok("image", "list"), "DIGEST  TAGS  OWNER  SIZE  LAYERS  IMPORTED\n")

    def test_node_images_are_listed_as_the_nodes_and_removed_only_on_the_node(self):
        airlockd = os.path.join(support.BIN_DIR, "airlockd")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "busybox.oci.tar")
            digest = support.busybox_image(path, marker="node-image")
            r = subprocess.run([airlockd, "admin", "import-image", "--data-dir", self.daemon.dir,
                                path, "--tag", "node/busybox:1"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(json.loads(r.stdout)["digest"], digest)
        row = [line for line in self.ok("image", "list").splitlines() if "node/busybox:1" in line]
        self.assertEqual(len(row), 1)
        self.assertEqual(row[0].split()[2], "node")
        r = self.airlock("image", "rm", "node/busybox:1")
        self.assertEqual(r.returncode, 1)
        self.assertIn("only the node's operator removes", r.stderr)
        r = subprocess.run([airlockd, "admin", "remove-image", "--data-dir", self.daemon.dir,
                            "node/busybox:1"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("node/busybox:1", self.ok("image", "list"))

    def test_examples_run(self):
        env = self.daemon.env()
        env["PYTHONPATH"] = os.path.join(ROOT, "sdk", "python")
        r = subprocess.run([sys.executable, os.path.join(ROOT, "examples/python/quickstart.py")],
                           env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("exit 0 stdout: hello from linux", r.stdout)
        self.assertIn("streamed output:\nline 1\nline 2\nline 3\n", r.stdout)
        self.assertIn("destroyed: Gone", r.stdout)
        r = subprocess.run(["bash", os.path.join(ROOT, "examples/cli/quickstart.sh")], env=env,
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("copied in", r.stdout)
        self.assertIn("copied out: result", r.stdout)


if __name__ == "__main__":
    unittest.main()
