#!/usr/bin/env python3
"""Checks airlockd against docs/api/openapi.yaml.

1. Routes both ways: every route the router serves (the r.Add calls in daemon.cc) is described,
   and every described operation is served.
2. Runs the API tests (daemon_api_test, which start their own airlockd) with AIRLOCK_API_RECORD
   set, then checks every answer they saw: its status is one the operation describes, its
   content type is one described for that status, and a JSON body (or a streamed event's data)
   validates against the described schema.
3. Every described operation was seen answering with a 2xx at least once (so it is served and
   the tests cover it).

Exit status 0 when all holds; otherwise each problem is printed and the status is 1.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.parse

import jsonschema
import yaml

METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}


def router_routes(src_dir):
    """The routes added with r.Add in the daemon's sources (daemon.cc and its route files)."""
    routes = set()
    for name in sorted(os.listdir(src_dir)):
        if not name.endswith(".cc") or name.endswith("_test.cc"):
            continue
        text = open(os.path.join(src_dir, name), encoding="utf-8").read()
        for m in re.finditer(r'r\.Add\(\s*Verb::(\w+?)_?\s*,\s*"([^"]+)"', text):
            routes.add((m.group(1).upper(), m.group(2)))
        # Routes added under a computed pattern are declared in a comment beside the loop.
        for m in re.finditer(r'// route: ([A-Z]+) (\S+)', text):
            routes.add((m.group(1), m.group(2)))
    return routes


# Routes whose successful answers are tested by another suite, which does not record its answers
# for this check (their error answers share the recorded components).
TESTED_ELSEWHERE = {"/v1/interpreters": "interp_api_test",
                    "/v1/images": "client_test and python_sdk_and_cli_test"}


def described_routes(spec):
    out = set()
    for path, item in spec["paths"].items():
        for method in item:
            if method in METHODS:
                out.add((method.upper(), path))
    return out


def match_path(spec, path):
    """The spec's path template for a concrete path, or None."""
    segs = path.split("/")
    for template in spec["paths"]:
        tsegs = template.split("/")
        if len(tsegs) != len(segs):
            continue
        if all(t == s or (t.startswith("{") and t.endswith("}")) for t, s in zip(tsegs, segs)):
            return template
    return None


class Checker:
    def __init__(self, spec):
        self.spec = spec
        self.resolver = jsonschema.RefResolver.from_schema(spec)
        self.problems = []
        self.seen_2xx = set()
        self.checked = 0

    def validate(self, schema, value, where):
        validator = jsonschema.Draft4Validator(schema, resolver=self.resolver)
        errors = sorted(validator.iter_errors(value), key=lambda e: list(e.path))
        for e in errors[:3]:
            self.problems.append(
                f"{where}: {'/'.join(map(str, e.path)) or '(root)'}: {e.message[:300]}")
        self.checked += 1

    def resolve(self, node):
        while isinstance(node, dict) and "$ref" in node:
            _, node = self.resolver.resolve(node["$ref"])
        return node

    def check(self, rec):
        method = rec["method"].lower()
        url = urllib.parse.urlsplit(rec["target"])
        path = urllib.parse.unquote(url.path)
        status = str(rec["status"])
        where = f"{rec['method']} {rec['target'][:120]} -> {status}"
        template = match_path(self.spec, path)
        if template is None:
            # Unrouted paths: only the error body is described.
            if int(status) >= 400 and rec.get("body") is not None:
                self.validate({"$ref": "#/components/schemas/Error"}, rec["body"], where)
            return
        op = self.spec["paths"][template].get(method)
        if op is None:
            if status != "405":
                self.problems.append(f"{where}: {method.upper()} is not described for {template}")
            elif rec.get("body") is not None:
                self.validate({"$ref": "#/components/schemas/Error"}, rec["body"], where)
            return
        responses = op["responses"]
        response = responses.get(status) or responses.get("default")
        if response is None:
            if status == "401" and op.get("security") == []:
                pass
            self.problems.append(
                f"{where}: status {status} is not described for {method.upper()} {template}")
            return
        response = self.resolve(response)
        ctype = (rec.get("content_type") or "").split(";")[0].strip()
        content = response.get("content", {})
        if ctype not in content:
            self.problems.append(
                f"{where}: content type {ctype!r} not described (described: {sorted(content)})")
            return
        if status.startswith("2"):
            self.seen_2xx.add((method.upper(), template))
        schema = content[ctype].get("schema", {})
        if "event" in rec:
            events = self.resolve(schema).get("x-sse-events", {})
            if rec["event"] not in events:
                self.problems.append(f"{where}: server-sent event {rec['event']!r} not described")
                return
            self.validate(events[rec["event"]], rec["body"], f"{where} event {rec['event']}")
        elif ctype == "application/json":
            self.validate(schema, rec["body"], where)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", required=True)
    ap.add_argument("--routes", required=True, help="src/daemon (its .cc files hold the routes)")
    ap.add_argument("--api-test", required=True, help="the daemon_api_test binary")
    ap.add_argument("--records", help="check these records instead of running the API tests")
    args = ap.parse_args()

    if os.geteuid() != 0:
        print("SKIP: needs root (the API tests run sandboxes)")
        return 77  # ctest's SKIP_RETURN_CODE
    spec = yaml.safe_load(open(args.spec, encoding="utf-8"))
    jsonschema.Draft4Validator.check_schema({"$ref": "#/components/schemas/Error"})
    problems = []

    served = router_routes(args.routes)
    described = described_routes(spec)
    if len(served) < 10:
        problems.append(f"found only {len(served)} routes in {args.routes}: the pattern is stale")
    for m, p in sorted(served - described):
        problems.append(f"served but not described: {m} {p}")
    for m, p in sorted(described - served):
        problems.append(f"described but not served: {m} {p}")

    records_path = args.records
    if records_path is None:
        fd, records_path = tempfile.mkstemp(prefix="airlock-api-records-", suffix=".jsonl")
        os.close(fd)
        env = dict(os.environ, AIRLOCK_API_RECORD=records_path)
        run = subprocess.run([args.api_test], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        if run.returncode != 0:
            print(run.stdout[-4000:])
            problems.append(f"daemon_api_test failed (status {run.returncode}); see above")
    records = [json.loads(line) for line in open(records_path, encoding="utf-8") if line.strip()]
    if args.records is None:
        os.unlink(records_path)
    if len(records) < 100:
        problems.append(f"only {len(records)} answers recorded: the API tests did not run")

    checker = Checker(spec)
    for rec in records:
        checker.check(rec)
    problems += checker.problems
    for m, p in sorted(described - checker.seen_2xx):
        elsewhere = [t for prefix, t in TESTED_ELSEWHERE.items() if p.startswith(prefix)]
        if elsewhere:
            print(f"note: {m} {p} answers 2xx in {elsewhere[0]}, not recorded here")
            continue
        problems.append(f"never seen answering 2xx in the API tests: {m} {p}")

    print(f"{len(served)} routes served, {len(described)} described; {len(records)} answers, "
          f"{checker.checked} bodies validated")
    for p in problems:
        print("FAIL:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
