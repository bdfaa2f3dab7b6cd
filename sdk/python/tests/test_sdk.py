"""The Python SDK against a real airlockd started by the test (ctest: python_sdk_test)."""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import airlock  # noqa: E402
import support  # noqa: E402


class SdkTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        support.require_daemon(cls)
        cls.daemon = support.Daemon()
        cls.client = airlock.Client(cls.daemon.url, cls.daemon.key)

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def test_errors_carry_status_code_message_and_request_id(self):
        bad = airlock.Client(self.daemon.url, "ak_wrong")
        with self.assertRaises(airlock.ApiError) as e:
            bad.list()
        self.assertEqual(e.exception.status, 401)
        self.assertEqual(e.exception.code, "unauthenticated")
        self.assertTrue(e.exception.request_id.startswith("req-"), e.exception.request_id)
        self.assertIn("API key", e.exception.message)
        with self.assertRaises(airlock.ApiError) as e:
            self.client.get("sb-000000000000")
        self.assertEqual((e.exception.status, e.exception.code), (404, "not_found"))
        with self.assertRaises(airlock.ApiError) as e:
            self.client.create(spec={}, ttl_seconds=0)
        self.assertEqual(e.exception.status, 422)
        self.assertIn("ttl_seconds", e.exception.message)
        with self.assertRaises(airlock.ApiError) as e:
            airlock.Client("http://127.0.0.1:1", "k").list()
        self.assertEqual((e.exception.status, e.exception.code), (0, "unavailable"))

    def test_defaults_come_from_the_environment(self):
        old = dict(os.environ)
        try:
            os.environ["AIRLOCK_URL"] = self.daemon.url
            os.environ["AIRLOCK_API_KEY"] = self.daemon.key
            self.assertIsInstance(airlock.Client().list(), list)
            del os.environ["AIRLOCK_API_KEY"]
            with self.assertRaises(ValueError):
                airlock.Client()
        finally:
            os.environ.clear()
            os.environ.update(old)

    def test_exec_waits_for_a_quiet_command_longer_than_the_read_timeout(self):
        with self.client.create(spec={}) as sb:
            quick = airlock.Client(self.daemon.url, self.daemon.key, timeout=1)
            mine = quick.get(sb.id)
            for limit in (30, None):
                r = mine.exec(["sh", "-c", "sleep 2.5; echo done"], timeout_seconds=limit)
                self.assertEqual((r.exit_code, r.stdout), (0, "done\n"))
            # A client without a timeout waits as long as it takes.
            patient = airlock.Client(self.daemon.url, self.daemon.key, timeout=None)
            self.assertEqual(patient.get(sb.id).exec(["echo", "hi"]).stdout, "hi\n")

    def test_sandbox_lifecycle_exec_and_files(self):
        with self.client.create(spec={}, ttl_seconds=600, metadata={"suite": "python"},
                                idempotency_key="py-1") as sb:
            self.assertEqual(sb.state, "Running")
            self.assertEqual(self.client.create(spec={}, idempotency_key="py-1").id, sb.id)
            self.assertEqual([s.id for s in self.client.list(metadata={"suite": "python"})],
                             [sb.id])

            r = sb.exec(["sh", "-c", "echo hi; echo err >&2; exit 3"])
            self.assertEqual((r.exit_code, r.stdout, r.stderr), (3, "hi\n", "err\n"))
            self.assertEqual(r.classification, "EXIT_NONZERO")
            self.assertFalse(r.ok)

            events = list(sb.exec_stream(["sh", "-c", "echo one; echo two >&2; echo three"]))
            out = "".join(e.text for e in events if e.kind == "stdout")
            err = "".join(e.text for e in events if e.kind == "stderr")
            self.assertEqual((out, err), ("one\nthree\n", "two\n"))
            self.assertEqual(events[-1].kind, "result")
            self.assertEqual(events[-1].result.exit_code, 0)

            cmd = sb.exec_background(["sleep", "300"])
            self.assertEqual(cmd.poll(), "running")
            cmd.kill("KILL")
            final = list(cmd.stream())[-1]
            self.assertEqual(final.kind, "result")
            self.assertEqual(final.data.get("signal"), 9)
            self.assertNotEqual(cmd.poll(), "running")

            sb.files.mkdir("a/b", parents=True)
            sb.files.write("a/b/c.txt", "héllo\n")
            self.assertEqual(sb.files.read_text("/sandbox/workspace/a/b/c.txt"), "héllo\n")
            self.assertEqual(sb.files.stat("a/b/c.txt")["size"], len("héllo\n".encode()))
            big = os.urandom(3 << 20)
            with tempfile.TemporaryDirectory() as tmp:
                src = os.path.join(tmp, "big.bin")
                with open(src, "wb") as f:
                    f.write(big)
                sb.files.upload(src, "big.bin")
                sb.files.download("big.bin", os.path.join(tmp, "back.bin"))
                with open(os.path.join(tmp, "back.bin"), "rb") as f:
                    self.assertTrue(f.read() == big)
            self.assertEqual(sorted(e["name"] for e in sb.files.list()), ["a", "big.bin"])
            with self.assertRaises(airlock.ApiError) as e:
                sb.files.write("../../etc/x", "no")
            self.assertEqual(e.exception.status, 403)
            sb.files.remove("a", recursive=True)
            self.assertFalse(sb.files.exists("a"))

            self.assertEqual(sb.pause().state, "Paused")
            with self.assertRaises(airlock.ApiError) as e:
                sb.exec(["true"])
            self.assertEqual(e.exception.status, 409)
            self.assertEqual(sb.resume().state, "Running")
            before = sb.raw["expires_at"]
            ttl = sb.extend_ttl(1200).raw["ttl_seconds"]  # from now: the age plus 1200 s
            self.assertTrue(1200 <= ttl < 1260, ttl)
            self.assertGreater(sb.raw["expires_at"], before)
        # Leaving the block destroyed it.
        self.assertEqual(self.client.get(sb.id).state, "Gone")

    def test_images_import_run_and_remove(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "busybox.oci.tar")
            digest = support.busybox_image(path)
            stages = []
            images = self.client.images.import_file(path, tags=["py/busybox:1"],
                                                    progress=lambda p: stages.append(p["stage"]))
        self.assertEqual([i.digest for i in images], [digest])
        self.assertEqual(stages[-1], "done")
        self.assertIn("unpacking", stages)
        self.assertEqual(self.client.images.get("py/busybox:1").digest, digest)
        with self.client.create(spec={"image": "py/busybox:1"}) as sb:
            self.assertEqual(sb.image_digest, digest)
            self.assertEqual(sb.exec(["cat", "/etc/marker"]).stdout, "from-the-image")
            with self.assertRaises(airlock.ApiError) as e:
                self.client.images.remove(digest)
            self.assertEqual(e.exception.status, 409)
        self.client.images.remove("py/busybox:1")
        self.assertEqual(self.client.images.list(), [])

    def test_artifacts_through_the_release_gate(self):
        with self.client.create(spec={}) as sb:
            sb.exec(["sh", "-c", "echo done > /sandbox/artifacts/report.txt; "
                     "echo 'token hunter2-py-secret' > /sandbox/artifacts/leak.txt"])
            ok = sb.collect_artifacts(paths=["/sandbox/artifacts/report.txt"])
            self.assertFalse(ok["policy_blocked"], ok)
            [verdict] = ok["files"]
            self.assertEqual(verdict["outcome"], "released", verdict)
            self.assertEqual(sb.download_artifact(verdict["artifact_id"]), b"done\n")
            with tempfile.TemporaryDirectory() as tmp:
                local = os.path.join(tmp, "report.txt")
                self.assertEqual(sb.download_artifact(verdict["artifact_id"], local), 5)
                with open(local, "rb") as f:
                    self.assertEqual(f.read(), b"done\n")

            # A secret the caller names quarantines the file and blocks the collection; its
            # content is never kept, so it cannot be downloaded.
            bad = sb.collect_artifacts(paths=["/sandbox/artifacts/leak.txt"],
                                       secrets=["hunter2-py-secret"])
            self.assertTrue(bad["policy_blocked"], bad)
            [quarantined] = bad["files"]
            self.assertEqual(quarantined["outcome"], "quarantined", quarantined)
            self.assertNotIn("hunter2-py-secret", str(bad))
            with self.assertRaises(airlock.ApiError) as e:
                sb.download_artifact(quarantined["artifact_id"])
            self.assertEqual(e.exception.status, 409)
            self.assertEqual(sorted(a["status"] for a in sb.artifacts()),
                             ["quarantined", "released"])

            # A sandbox without a git workspace has nothing to diff against.
            with self.assertRaises(airlock.ApiError) as e:
                sb.workspace_diff()
            self.assertEqual((e.exception.status, e.exception.code), (409, "failed_precondition"))

    def test_network_policy_of_a_running_sandbox(self):
        with self.client.create(template="R2") as sb:
            self.assertEqual(sb.raw["spec"]["network"]["profile"], "dependency-egress")
            sb.set_network({"profile": "none"})
            self.assertEqual(sb.raw["spec"]["network"]["profile"], "none")
            # Opening it again is a loosening: refused without the caller's say-so.
            with self.assertRaises(airlock.ApiError) as e:
                sb.set_network({"profile": "dependency-egress"})
            self.assertEqual(e.exception.status, 403, e.exception)
            sb.set_network({"profile": "dependency-egress"}, loosen=True)
            self.assertEqual(sb.raw["spec"]["network"]["profile"], "dependency-egress")
            kinds = [e["kind"] for e in sb.events()]
            self.assertEqual(kinds.count("network_policy_changed"), 2, kinds)

    def test_interpreter_session_pauses_and_resumes(self):
        session = self.client.interpreters.create(tools=["human_approval"])
        self.assertEqual(session.state, "new")
        run = session.eval("console.log('asking');\n"
                           "const ok = await tools.call('human_approval', {action: 'ship'});\n"
                           "return ok.approved ? 'shipped' : 'held';")
        self.assertEqual(run["outcome"], "paused", run)
        [call] = run["pending"]
        self.assertEqual((call["tool"], call["args"]), ("human_approval", {"action": "ship"}))
        self.assertEqual(self.client.interpreters.get(session.id).state, "paused")
        done = session.resume(call["call_id"], {"approved": True})
        self.assertEqual((done["outcome"], done["result"]), ("completed", "shipped"), done)
        self.assertEqual(session.console(), "asking\n")
        self.assertEqual(session.refresh().raw["journal"][0]["tool"], "human_approval")
        with self.assertRaises(airlock.ApiError) as e:
            session.resume(call["call_id"], error="too late")
        self.assertEqual(e.exception.status, 409)
        self.assertEqual(session.delete().state, "deleted")
        with self.assertRaises(airlock.ApiError) as e:
            self.client.interpreters.get(session.id)
        self.assertEqual(e.exception.status, 404)


if __name__ == "__main__":
    unittest.main()
