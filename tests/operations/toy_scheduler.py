"""The test app's scheduler: the second runtime behind the platform's jobs and nodes routes (Slurm's gateway,
roles/slurm_gateway, is the first), serving the scheduler protocol of docs/scheduler.md on loopback. Its jobs
never run: they wait as `pending` until cancelled. It checks what every gateway must check (the token's
signature, audience and age; the claimed accounts; node_operate; accounting), so the API tests prove the platform
signs and scopes its calls, without test hosts.

The platform's reads of accounting answer from memory: `GET /v1/accounting` the `accounts` and `associations` a test
sets, `GET /v1/usage` the ended jobs, those cancelled through it and those `seed_ended_jobs` adds (100,000 in well
under a second, answered in one response in well under a second: each is JSON text from the moment it ends).

    with ToyScheduler(key, instance_id, nodes=["n1", "n2"]) as toy:
        toy.port  # point the instance's scheduler at 127.0.0.1:toy.port
        toy.accounts = [{"name": "research", "description": "gpuaas project 6c1f", "parent": "root"}]
        toy.associations = [{"account": "research", "user": "alice-3f9a"}]
        toy.seed_ended_jobs(100_000, ["research"], ["alice-3f9a"], start, end, gpus=1)
"""

from __future__ import annotations

import bisect
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import jwt

MAX_TOKEN_AGE = 300
USAGE_WINDOW_MAX = 31 * 86400  # the gateway protocol's longest /v1/usage window


class Refused(Exception):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class ToyScheduler:
    def __init__(self, key: str, instance_id: str, nodes: list[str], users: set[str] | None = None):
        self.key, self.instance_id = key, instance_id
        # None: every identity is known (as if the access sync had run); a set: only these Unix users exist
        self.users = users
        self.jobs: dict[int, dict] = {}
        self.nodes = {n: {"name": n, "state": "idle", "runtime_state": "IDLE", "reason": None, "cpus": 4,
                          "memory_mb": 8192, "gpus": 1, "features": [], "partitions": ["main"]} for n in nodes}
        self.requests: list[tuple[str, str, dict]] = []  # method, path, verified claims
        self.bodies: list[dict] = []  # the request bodies, in order
        # False: answer every account's jobs, as a faulty gateway would (the platform must still show none of them)
        self.filter_accounts = True
        # GET /v1/accounting: what slurmdbd would hold ({"name", "description", "parent"}; {"account", "user"})
        self.accounts: list[dict] = []
        self.associations: list[dict] = []
        # GET /v1/usage: ended jobs as ((end_time, id), their JSON text), in that order
        self._ended: list[tuple[tuple[int, int], str]] = []
        self._submitted: dict[int, int] = {}  # job id -> submit time (unix seconds), for its usage once it ends
        self._next_id = 1000
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.port = self._server.server_address[1]

    def __enter__(self) -> ToyScheduler:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _claims(self, header: str) -> dict:
        if not header.startswith("Bearer "):
            raise Refused(401, "unauthenticated", "no bearer token")
        try:
            claims = jwt.decode(header[7:], self.key, algorithms=["HS256"], audience=self.instance_id,
                                options={"require": ["exp", "iat", "aud"]})
        except jwt.PyJWTError as exc:
            raise Refused(401, "unauthenticated", f"bad token: {exc}") from None
        if time.time() - claims["iat"] > MAX_TOKEN_AGE:
            raise Refused(401, "unauthenticated", "token too old")
        return claims

    def seed_ended_jobs(self, n: int, accounts: list[str], users: list[str], start: int, end: int, *,
                        cpus: int = 1, gpus: int = 0, memory_mb: int = 0, nodes: int = 1,
                        state: str = "COMPLETED") -> list[str]:
        """Adds ``n`` ended jobs (their ids returned) whose end times spread evenly over [start, end); job i runs in
        accounts[i % len] as users[i % len] for 60 to 3599 seconds (deterministic), submitted 5 s before it
        started."""
        with self._lock:
            first, self._next_id = self._next_id + 1, self._next_id + n
        account_texts = [json.dumps(a) for a in accounts]
        user_texts = [json.dumps(u) for u in users]
        fixed = f'"state":{json.dumps(state)},"cpus":{cpus},"gpus":{gpus},"memory_mb":{memory_mb},"nodes":{nodes}'
        span, records = end - start, []
        for i in range(n):
            job_id, ended = first + i, start + span * i // n
            elapsed = 60 + (i * 7919) % 3540
            records.append(((ended, job_id), (
                f'{{"id":"{job_id}","account":{account_texts[i % len(accounts)]},"user":{user_texts[i % len(users)]},'
                f'"submit_time":{ended - elapsed - 5},"start_time":{ended - elapsed},"end_time":{ended},'
                f'"elapsed_seconds":{elapsed},{fixed}}}')))
        with self._lock:
            self._ended.extend(records)
            self._ended.sort(key=lambda record: record[0])  # already in order, or two runs of it: linear
        return [str(first + i) for i in range(n)]

    def _end(self, job: dict, state: str) -> None:
        """Records the usage of a job that just ended (it never ran: these jobs only wait)."""
        now, job_id = int(time.time()), int(job["id"])
        item = {"id": job["id"], "account": job["account"], "user": job["user"], "state": state,
                "submit_time": self._submitted.pop(job_id, now), "start_time": None, "end_time": now,
                "elapsed_seconds": 0, "cpus": 0, "gpus": 0, "memory_mb": 0, "nodes": 0}
        bisect.insort(self._ended, ((now, job_id), json.dumps(item, separators=(",", ":"))), key=lambda r: r[0])

    def _usage(self, query: dict) -> bytes:
        """GET /v1/usage's answer, joined from the ended jobs' JSON texts."""
        start, end = query.get("start", ""), query.get("end", "")
        if not (start.isdigit() and end.isdigit()) or not 0 < int(end) - int(start) <= USAGE_WINDOW_MAX:
            raise Refused(400, "bad_request", "start and end must be unix seconds, end after start, within 31 days")
        start, end = int(start), int(end)
        first = bisect.bisect_left(self._ended, (start, 0), key=lambda r: r[0])
        last = bisect.bisect_left(self._ended, (end, 0), key=lambda r: r[0])
        items = ",".join(record[1] for record in self._ended[first:last])
        return f'{{"items":[{items}],"start":{start},"end":{end}}}'.encode()

    def _job(self, claims: dict, job_id: str) -> dict:
        job = self.jobs.get(int(job_id)) if job_id.isdigit() else None
        if job is None or (self.filter_accounts and job["account"] not in claims["accounts"]):
            raise Refused(404, "not_found", f"no job {job_id}")
        return job

    def handle(self, method: str, path: str, query: dict, claims: dict, body: dict) -> tuple[int, dict | bytes]:
        """(status, answer): a document, or JSON text made already (GET /v1/usage)."""
        parts = path.strip("/").split("/")
        with self._lock:
            if (method, parts) == ("POST", ["v1", "jobs"]):
                if self.users is not None and claims.get("sub") not in self.users:
                    raise Refused(403, "unknown_identity", f"no user {claims.get('sub')}")
                if body.get("account") not in claims["accounts"]:
                    raise Refused(403, "account_refused", f"Invalid account {body.get('account')}")
                self._next_id += 1
                job = {"id": str(self._next_id), "name": body["name"], "state": "pending", "runtime_state": "PENDING",
                       "user": claims["sub"], "account": body["account"], "submitted_at": "2026-11-25T10:00:00Z",
                       "started_at": None, "ended_at": None, "resources": body.get("resources") or {},
                       "exit_code": None, "reason": "Resources"}
                self.jobs[self._next_id] = job
                self._submitted[self._next_id] = int(time.time())
                return 201, job
            if (method, parts) == ("GET", ["v1", "jobs"]):
                limit, before = int(query.get("limit", 50)), int(query.get("before", 2**62))
                mine = [j for i, j in sorted(self.jobs.items(), reverse=True) if i < before
                        and (j["account"] in claims["accounts"] or not self.filter_accounts)
                        and j["state"] in query.get("state", j["state"]).split(",")
                        and query.get("user", j["user"]) == j["user"]]
                page = mine[:limit]
                return 200, {"items": page, "next": page[-1]["id"] if len(mine) > limit else None}
            if method == "GET" and parts[:2] == ["v1", "jobs"] and len(parts) == 3:
                return 200, self._job(claims, parts[2])
            if method == "DELETE" and parts[:2] == ["v1", "jobs"] and len(parts) == 3:
                job = self._job(claims, parts[2])
                if job["state"] != "cancelled":
                    self._end(job, "CANCELLED")
                job |= {"state": "cancelled", "runtime_state": "CANCELLED", "ended_at": "2026-11-25T10:01:00Z"}
                return 202, job
            if method == "GET" and parts in (["v1", "accounting"], ["v1", "usage"]):
                if claims.get("accounting") is not True:
                    raise Refused(403, "forbidden", "the token does not allow reading accounting")
                if parts[1] == "usage":
                    return 200, self._usage(query)
                return 200, {"accounts": sorted(self.accounts, key=lambda a: a["name"]),
                             "associations": sorted(self.associations, key=lambda a: (a["account"], a["user"]))}
            if (method, parts) == ("GET", ["v1", "nodes"]):
                return 200, {"items": list(self.nodes.values())}
            if method == "POST" and parts[:2] == ["v1", "nodes"] and len(parts) == 3:
                if not claims.get("node_operate"):
                    raise Refused(403, "forbidden", "node_operate not granted")
                node = self.nodes.get(parts[2])
                if node is None:
                    raise Refused(404, "not_found", f"no node {parts[2]}")
                if body.get("action") == "drain":
                    node |= {"state": "drained", "runtime_state": "IDLE+DRAIN", "reason": f"gpuaas: {body['reason']}"}
                elif body.get("action") == "resume":
                    node |= {"state": "idle", "runtime_state": "IDLE", "reason": None}
                elif body.get("action") == "features":
                    node["features"] = body["features"]
                else:
                    raise Refused(400, "bad_request", f"unknown action {body.get('action')}")
                return 200, node
        raise Refused(404, "not_found", f"no route {method} {path}")

    def _handler(self):
        toy = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self, method: str) -> None:
                url = urlparse(self.path)
                try:
                    claims = toy._claims(self.headers.get("Authorization", ""))
                    length = int(self.headers.get("Content-Length") or 0)
                    body = json.loads(self.rfile.read(length)) if length else {}
                    toy.requests.append((method, url.path, claims))
                    toy.bodies.append(body)
                    status, answer = toy.handle(method, url.path, {k: v[0] for k, v in parse_qs(url.query).items()},
                                                claims, body)
                except Refused as exc:
                    status, answer = exc.status, {"error": {"code": exc.code, "message": exc.message}}
                data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802 (http.server's names)
                self._serve("GET")

            def do_POST(self):  # noqa: N802
                self._serve("POST")

            def do_DELETE(self):  # noqa: N802
                self._serve("DELETE")

            def log_message(self, *args):
                pass

        return Handler


def point_at(sql, instance_id: str, port: int) -> None:
    """Serve the instance's scheduler from the toy on 127.0.0.1:port: its version's scheduler port and the address
    of its controller's host, set in the database where no tenant can reach."""
    sql("""UPDATE app_versions SET adapter = jsonb_set(adapter, '{scheduler,port}', to_jsonb(%s::int))
            WHERE id = (SELECT app_version_id FROM app_instances WHERE id = %s) RETURNING id""", (port, instance_id))
    sql("""UPDATE allocations al SET hosts = (
               SELECT jsonb_agg(CASE WHEN h->>'name' = m.host_name THEN h || '{"address": "127.0.0.1"}' ELSE h END)
                 FROM jsonb_array_elements(al.hosts) h)
             FROM app_instance_members m
            WHERE m.instance_id = %s AND m.role = 'controller' AND m.allocation_id = al.id RETURNING al.id""",
        (instance_id,))
