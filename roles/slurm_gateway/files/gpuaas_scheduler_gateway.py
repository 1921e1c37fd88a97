# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The platform's scheduler gateway for Slurm: the gateway protocol of docs/scheduler.md over HTTP and JSON.

Runs as root on the Slurm controller (the role gpuaas.apps.slurm_gateway keeps it as the systemd unit
gpuaas-scheduler-gateway): `python3 gpuaas_scheduler_gateway.py /etc/gpuaas/scheduler-gateway.json`.
Standard library only, so that it runs on any Debian host with python3.

Every request carries an HS256 JWT signed with the instance's key, used once (its jti is remembered until it
expires). Jobs are submitted with sbatch as the
token's `sub` (a platform identity: a Unix user with uid >= min_uid), so that Slurm's munge authentication and
enforced associations decide what that user may do; the gateway itself only ever lets a caller see and act on
jobs of the accounts its token names (any other job is answered 404). Reads and cancels run as root. The platform's
own reads of slurmdbd (accounts and associations, ended jobs' usage) need the token's `accounting` claim. Nothing
runs through a shell. Each request logs one line (method, path, status, duration, sub) to stderr; never the
token or the key.
"""

import base64
import hashlib
import heapq
import hmac
import json
import os
import pwd
import re
import socket
import stat
import subprocess
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"
TOKEN_MAX_AGE = 300  # seconds since iat (docs/scheduler.md)
CLOCK_SKEW = 30  # seconds the platform's clock may be ahead of or behind this host's
TOKEN_MAX_LENGTH = 8192
BODY_MAX_BYTES = 256 * 1024  # a 64 KiB script, JSON-escaped
SCRIPT_MAX_BYTES = 64 * 1024
COMMAND_TIMEOUT = 30
CANCEL_SETTLE = 2.0  # seconds a cancel waits for a running job to leave COMPLETING
RESUME_SETTLE = 5.0  # seconds a resume waits for slurmctld to hear from the node again
LIMIT_DEFAULT, LIMIT_MAX = 50, 500
REPLAY_MAX = 100_000  # jtis remembered at once: about 300 tokens a second, each live for at most 330 s
ACCOUNTING_WINDOW = "now-7days"
USAGE_WINDOW_MAX = 31 * 86400  # seconds of ended jobs one GET /v1/usage may ask for

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}")  # job names
SLURM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # partitions, nodes, features
ACCOUNT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
JOB_ID = re.compile(r"[0-9]{1,10}")
B64URL = re.compile(r"[A-Za-z0-9_-]*")
PRINTABLE = re.compile(r"[^\x00-\x1f\x7f]*")
JTI = re.compile(r"[\x21-\x7e]{1,128}")
UNIX_TIME = re.compile(r"[0-9]{1,11}")

# A node's reason starts with its owner's word and a colon. The platform's own lifecycle (slurm_node, owner gpuaas)
# drains and removes nodes as "gpuaas: <reason>"; tenants' drains through the gateway carry a prefix of their own,
# "gpuaas-tenant:", so that neither can ever be taken for the other.
REASON_OWNER = re.compile(r"([A-Za-z0-9_.-]+):")
PLATFORM_OWNER = "gpuaas"
TENANT_PREFIX = "gpuaas-tenant:"
OUT_OF_SERVICE = frozenset(("drained", "draining", "down"))

# Slurm's job states (squeue's State, sacct's first word of State) as the protocol's five.
JOB_STATES = {
    "PENDING": "pending", "REQUEUED": "pending", "REQUEUE_HOLD": "pending", "REQUEUE_FED": "pending",
    "RESV_DEL_HOLD": "pending", "SPECIAL_EXIT": "pending",
    "RUNNING": "running", "COMPLETING": "running", "CONFIGURING": "running", "SUSPENDED": "running",
    "RESIZING": "running", "SIGNALING": "running", "STAGE_OUT": "running", "STOPPED": "running",
    "COMPLETED": "succeeded",
    "CANCELLED": "cancelled",
    "FAILED": "failed", "TIMEOUT": "failed", "NODE_FAIL": "failed", "OUT_OF_MEMORY": "failed",
    "PREEMPTED": "failed", "BOOT_FAIL": "failed", "DEADLINE": "failed", "REVOKED": "failed",
}
ENDED = frozenset(("succeeded", "failed", "cancelled"))
GENERIC_STATES = frozenset(("pending", "running")) | ENDED
# sacct --state: with states, sacct selects the jobs that ENDED in its window (-S to -E, both included); without,
# those eligible in it, and a job cancelled while held (never eligible) would be missed.
SACCT_ENDED_STATES = ",".join(sorted(word for word, state in JOB_STATES.items() if state in ENDED))

# squeue -O, sacct --format and sinfo -O fields, as (Slurm's name, ours), the name last: it may hold the separator.
SQUEUE_FIELDS = (("JobID", "id"), ("State", "state"), ("UserName", "user"), ("Account", "account"),
                 ("SubmitTime", "submit"), ("StartTime", "start"), ("EndTime", "end"), ("NumNodes", "nodes"),
                 ("NodeList", "nodelist"), ("NumTasks", "tasks"), ("cpus-per-task", "cpus_per_task"),
                 ("tres-per-node", "tres_per_node"), ("tres-per-job", "tres_per_job"), ("MinMemory", "memory"),
                 ("TimeLimit", "time_limit"), ("Partition", "partition"), ("exit_code", "exit_code"),
                 ("Reason", "reason"), ("Name", "name"))
SACCT_FIELDS = (("JobIDRaw", "id"), ("State", "state"), ("User", "user"), ("Account", "account"),
                ("Submit", "submit"), ("Start", "start"), ("End", "end"), ("NNodes", "nodes"),
                ("NodeList", "nodelist"), ("ReqTRES", "tres"), ("ReqMem", "memory"), ("Timelimit", "time_limit"),
                ("Partition", "partition"), ("ExitCode", "exit_code"), ("Reason", "reason"), ("JobName", "name"))
SINFO_FIELDS = (("NodeList", "name"), ("StateComplete", "state"), ("CPUs", "cpus"), ("Memory", "memory"),
                ("Gres", "gres"), ("Features", "features"), ("Partition", "partition"), ("UserLong", "reason_by"),
                ("Reason", "reason"))
# GET /v1/usage: what metering needs of each ended job allocation; times as unix seconds (SLURM_TIME_FORMAT=%s).
USAGE_FIELDS = (("JobIDRaw", "id"), ("State", "state"), ("User", "user"), ("Account", "account"),
                ("Submit", "submit_time"), ("Start", "start_time"), ("End", "end_time"),
                ("ElapsedRaw", "elapsed_seconds"), ("AllocCPUS", "cpus"), ("AllocTRES", "tres"), ("NNodes", "nodes"))
SQUEUE_FORMAT = ",".join(pair[0] + ":|" for pair in SQUEUE_FIELDS)
SACCT_FORMAT = ",".join(pair[0] for pair in SACCT_FIELDS)
SINFO_FORMAT = ",".join(pair[0] + ":|" for pair in SINFO_FIELDS)
USAGE_FORMAT = ",".join(pair[0] for pair in USAGE_FIELDS)
SQUEUE_NAMES, SACCT_NAMES, SINFO_NAMES, USAGE_NAMES = ([pair[1] for pair in fields] for fields in (
    SQUEUE_FIELDS, SACCT_FIELDS, SINFO_FIELDS, USAGE_FIELDS))
Q_STATE, Q_USER, Q_ACCOUNT = (SQUEUE_NAMES.index(name) for name in ("state", "user", "account"))
A_STATE, A_USER, A_ACCOUNT = (SACCT_NAMES.index(name) for name in ("state", "user", "account"))

# What sbatch says when the association (user, account, partition, QOS) does not allow the job: the caller's
# claims do not allow it (403), not a scheduler failure (502).
ASSOCIATION_REFUSALS = ("invalid account", "invalid qos", "association", "access/permission denied",
                        "not permitted", "accounting/qos policy")
GPU_COUNT = re.compile(r"(?:^|,)(?:gres[:/])?gpu(?::[^:,=()]+)?[:=](\d+)")
TRES_GPUS = re.compile(r"(?:^|,)gres/gpu=(\d+)")  # all of a job's GPUs; gres/gpu:<type>=N counts them again
TRES_TYPED_GPUS = re.compile(r"(?:^|,)gres/gpu:[^=,]+=(\d+)")
TRES_MEMORY = re.compile(r"(?:^|,)mem=([^,]+)")
NO_VALUE = frozenset(("", "N/A", "n/a", "None", "none", "None assigned", "Unknown", "(null)", "UNLIMITED",
                      "Partition_Limit", "INVALID", "NOT_SET"))


class ApiError(Exception):
    """An answer in the protocol's error shape."""

    def __init__(self, status, code, message):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def bad_request(message):
    return ApiError(400, "bad_request", message)


# ---- tokens -------------------------------------------------------------------------------------------------


class TokenError(Exception):
    pass


def _b64url_decode(text):
    if not B64URL.fullmatch(text) or len(text) % 4 == 1:
        raise TokenError("the token is not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _json_object(raw):
    try:
        value = json.loads(raw)
    except ValueError as error:
        raise TokenError("the token is not JSON") from error
    if not isinstance(value, dict):
        raise TokenError("the token is not a JSON object")
    return value


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def verify_token(token, key, audience, now):
    """The claims of an HS256 JWT signed with ``key`` (bytes) for ``audience``, checked at time ``now``.

    Raises TokenError for anything but a well-formed, well-signed token within its lifetime (and issued at most
    TOKEN_MAX_AGE seconds ago) whose iss is gpuaas, whose aud names this instance and that has a jti. The returned
    claims are normalised: sub (str or None), accounts (list of str), node_operate and accounting (bool), jti (str)
    and until (the last moment this function accepts the token: the jti need not be remembered after it).
    """
    if not token or len(token) > TOKEN_MAX_LENGTH:
        raise TokenError("no token")
    parts = token.split(".")
    if len(parts) != 3:
        raise TokenError("the token is not a JWT")
    header = _json_object(_b64url_decode(parts[0]))
    if header.get("alg") != "HS256":
        raise TokenError("the token is not HS256-signed")
    signature = _b64url_decode(parts[2])
    expected = hmac.new(key, (parts[0] + "." + parts[1]).encode("ascii"), hashlib.sha256).digest()
    if not hmac.compare_digest(expected, signature):
        raise TokenError("bad signature")
    claims = _json_object(_b64url_decode(parts[1]))
    if claims.get("iss") != "gpuaas":
        raise TokenError("the token was not issued by gpuaas")
    aud = claims.get("aud")
    if not (aud == audience or (isinstance(aud, list) and audience in aud)):
        raise TokenError("the token is for another instance")
    exp, iat = claims.get("exp"), claims.get("iat")
    if not (_number(exp) and _number(iat)):
        raise TokenError("the token has no exp or iat")
    if now >= exp + CLOCK_SKEW:
        raise TokenError("the token has expired")
    if iat > now + CLOCK_SKEW or now - iat > TOKEN_MAX_AGE + CLOCK_SKEW:
        raise TokenError(f"the token was not issued in the last {TOKEN_MAX_AGE} s")
    jti = claims.get("jti")
    if not (isinstance(jti, str) and JTI.fullmatch(jti)):
        raise TokenError("the token has no jti")
    sub = claims.get("sub")
    if sub is not None and not (isinstance(sub, str) and USER.fullmatch(sub)):
        raise TokenError("the token's sub is not a user name")
    accounts = claims.get("accounts", [])
    if not (isinstance(accounts, list) and all(isinstance(a, str) and ACCOUNT.fullmatch(a) for a in accounts)):
        raise TokenError("the token's accounts are not a list of account names")
    flags = {name: claims.get(name, False) for name in ("node_operate", "accounting")}
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise TokenError(f"the token's {name} is not a boolean")
    return {"sub": sub, "accounts": [a.lower() for a in accounts], **flags, "jti": jti,
            "until": min(exp, iat + TOKEN_MAX_AGE) + CLOCK_SKEW}


class Replays:
    """The jti of every token accepted, each until its token would be refused as expired anyway: a second use of a
    jti is refused. In memory (a restart forgets them) and bounded: with REPLAY_MAX live ones, new tokens are
    refused (503) rather than an older jti forgotten, which would let its token be replayed."""

    def __init__(self, limit=REPLAY_MAX):
        self.limit = limit
        self._lock = threading.Lock()
        self._seen = set()
        self._expiries = []  # (until, jti), a heap: the soonest to expire first

    def admit(self, jti, until, now):
        with self._lock:
            while self._expiries and self._expiries[0][0] < now:
                self._seen.discard(heapq.heappop(self._expiries)[1])
            if jti in self._seen:
                raise TokenError("the token was used before (its jti is replayed)")
            if len(self._seen) >= self.limit:
                raise ApiError(503, "busy", "too many tokens in flight; retry in a minute")
            self._seen.add(jti)
            heapq.heappush(self._expiries, (until, jti))

    def __len__(self):
        return len(self._seen)


# ---- Slurm's words --------------------------------------------------------------------------------------------


def job_state(runtime_state):
    """The protocol's state for a Slurm job state (sacct's "CANCELLED by 0" included)."""
    word = runtime_state.split(" ", 1)[0].rstrip("+")
    return JOB_STATES.get(word, "running")


def node_state(state_complete):
    """(state, runtime_state) for sinfo's StateComplete (such as idle, mixed+drain, idle*, down+not_responding)."""
    words = state_complete.upper().replace("*", "+NOT_RESPONDING").replace("~", "+POWERED_DOWN")
    words = words.replace("#", "+POWERING_UP").replace("%", "+POWERING_DOWN").replace("$", "+MAINTENANCE")
    words = words.replace("@", "+REBOOT_REQUESTED").replace("!", "+POWER_DOWN").replace("^", "+REBOOT_ISSUED")
    words = words.replace("-", "+PLANNED")
    parts = [p for p in words.split("+") if p]
    base, flags = (parts[0], set(parts[1:])) if parts else ("UNKNOWN", set())
    if base in ("DOWN", "UNKNOWN", "FUTURE") or flags & {"NOT_RESPONDING", "FAIL"}:
        state = "down"
    elif base == "DRAINED" or ("DRAIN" in flags and base == "IDLE"):
        state = "drained"
    elif base == "DRAINING" or "DRAIN" in flags:
        state = "draining"
    elif base in ("ALLOCATED", "COMPLETING"):
        state = "allocated"
    elif base == "MIXED":
        state = "mixed"
    elif base in ("IDLE", "PLANNED"):
        state = "idle"
    else:
        state = "down"
    return state, "+".join(parts)


def _value(text):
    return None if text in NO_VALUE else text


def _int(text):
    """A count, or None for none (and for Slurm's NO_VAL and INFINITE, 0xfffffffe and up)."""
    text = _value(text)
    return int(text) if text is not None and text.isdigit() and int(text) < 0xFFFFFFFE else None


def _time(text):
    """Slurm's time stamp (local time, which the gateway sets to UTC) as ISO 8601 UTC, or None."""
    text = _value(text)
    return text + "Z" if text and text[:1].isdigit() else None


def time_limit_minutes(text):
    """Slurm's time limit ([days-]hours:minutes:seconds, minutes:seconds, or minutes) in whole minutes, rounded up."""
    text = _value(text)
    if text is None:
        return None
    days, clock = text.rpartition("-")[::2]
    try:
        parts = [int(p) for p in clock.split(":")]
        days = int(days) if days else 0
    except ValueError:
        return None
    if len(parts) == 3:
        hours, minutes, seconds = parts
    elif len(parts) == 2:
        hours, (minutes, seconds) = 0, parts
    elif len(parts) == 1:
        hours, minutes, seconds = 0, parts[0], 0
    else:
        return None
    return days * 1440 + hours * 60 + minutes + (1 if seconds else 0)


def memory_mb(text):
    """Slurm's memory size (100M, 2G, 1000Mn, 0) in MiB, or None when none was asked for."""
    text = _value(text)
    if not text:
        return None
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGTP]?)[nc]?", text)
    if not match:
        return None
    size = float(match.group(1)) * {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}[
        match.group(2)]
    return int(size) or None


def gpu_count(text):
    """GPUs in a GRES string (gres:gpu:2, gpu:a100:2(S:0-1),gpu:t4:1, ...), or 0."""
    return sum(int(m.group(1)) for m in GPU_COUNT.finditer(_value(text) or ""))


def tres_gpus(text):
    """GPUs in a TRES string (billing=2,cpu=2,gres/gpu=2,gres/gpu:a100=2,mem=2G,node=1), or 0: gres/gpu=N, which
    accounting records whenever it records a typed gres/gpu:<type>=N of the same GPUs; else the typed ones."""
    text = _value(text) or ""
    total = TRES_GPUS.search(text)
    return int(total.group(1)) if total else sum(int(m.group(1)) for m in TRES_TYPED_GPUS.finditer(text))


def tres_memory_mb(text):
    """The mem= of a TRES string in MiB (sacct --noconvert prints M; G and T are read too), or 0."""
    found = TRES_MEMORY.search(_value(text) or "")
    return (memory_mb(found.group(1)) or 0) if found else 0


def _epoch(text):
    """A time printed with SLURM_TIME_FORMAT=%s as unix seconds, or None (None, Unknown)."""
    return int(text) if text.isdigit() else None


def exit_code(status=None, code_signal=None):
    """The job's exit code: squeue's raw wait status (768) or sacct's code:signal (3:0); 128+N for signal N."""
    if code_signal is not None:
        code, sig = code_signal.partition(":")[::2]
        code, sig = _int(code) or 0, _int(sig) or 0
    else:
        raw = _int(status)
        if raw is None:
            return None
        code, sig = raw >> 8, raw & 0x7F
    return 128 + sig if sig else code


def _job(v, runtime_state, ran, tasks, cpus_per_task, gpus, memory, time_limit, code):
    """The protocol's job from the fields ``v`` (id, name, user, account, submit, start, end, nodes, partition,
    reason) and what each source words its own way."""
    state = job_state(runtime_state)
    ended = state in ENDED
    return {
        "id": v["id"],
        "name": v["name"],
        "state": state,
        "runtime_state": runtime_state,
        "user": v["user"],
        "account": v["account"],
        "submitted_at": _time(v["submit"]),
        # a job cancelled while it waited has a start time (its end) but never ran
        "started_at": _time(v["start"]) if state != "pending" and ran else None,
        "ended_at": _time(v["end"]) if ended else None,
        "resources": {"nodes": _int(v["nodes"]), "tasks": tasks, "cpus_per_task": cpus_per_task, "gpus": gpus,
                      "memory_mb": memory, "time_limit_minutes": time_limit, "partition": _value(v["partition"])},
        "exit_code": code if ended else None,
        "reason": _value(v["reason"]) if state != "running" else None,
    }


def rows(output, width, trailing=False):
    """The ``width`` fields of each line of `|`-separated output; the last field may hold `|` itself.
    ``trailing``: every field, the last one too, ends with the separator (squeue -O, sinfo -O)."""
    result = []
    for line in output.splitlines():
        if trailing and line.endswith("|"):
            line = line[:-1]
        values = line.split("|", width - 1)
        if len(values) == width:
            result.append(values)
    return result


def squeue_job(values):
    v = dict(zip(SQUEUE_NAMES, values, strict=True))
    return _job(v, v["state"], bool(_value(v["nodelist"])), _int(v["tasks"]), _int(v["cpus_per_task"]),
                gpu_count(v["tres_per_node"]) or gpu_count(v["tres_per_job"]), memory_mb(v["memory"]),
                time_limit_minutes(v["time_limit"]), exit_code(status=v["exit_code"]))


def sacct_job(values):
    v = dict(zip(SACCT_NAMES, values, strict=True))
    # accounting keeps the job's totals, not its layout: tasks and cpus per task are not known there.
    return _job(v, v["state"].split(" ", 1)[0], bool(_value(v["nodelist"])), None, None, tres_gpus(v["tres"]),
                memory_mb(v["memory"]), time_limit_minutes(v["time_limit"]), exit_code(code_signal=v["exit_code"]))


def parse_squeue(output):
    """Jobs from `squeue -h -O SQUEUE_FORMAT` output."""
    return [squeue_job(v) for v in rows(output, len(SQUEUE_NAMES), trailing=True) if v[0].isdigit()]


def parse_sacct(output):
    """Jobs from `sacct -X -P -n --format SACCT_FORMAT` output."""
    return [sacct_job(v) for v in rows(output, len(SACCT_NAMES)) if v[0].isdigit()]


def parse_usage(output, start, end):
    """The usage items of `sacct -X -P -n --noconvert --format=USAGE_FORMAT` output printed with SLURM_TIME_FORMAT=%s:
    every job allocation that ended in [start, end), by (end_time, numeric id). A job cancelled before it started has
    elapsed_seconds 0, and start_time null or its end (as accounting recorded it)."""
    items = []
    for values in rows(output, len(USAGE_NAMES)):
        v = dict(zip(USAGE_NAMES, values, strict=True))
        end_time = _epoch(v["end_time"])
        if not v["id"].isdigit() or end_time is None or not start <= end_time < end:
            continue  # sacct's window includes its end; a job still running has no end
        items.append({
            "id": v["id"],
            "account": v["account"],
            "user": v["user"],
            "state": v["state"].split(" ", 1)[0],  # "CANCELLED by 0"
            "submit_time": _epoch(v["submit_time"]),
            "start_time": _epoch(v["start_time"]),
            "end_time": end_time,
            "elapsed_seconds": _int(v["elapsed_seconds"]) or 0,
            "cpus": _int(v["cpus"]) or 0,
            "gpus": tres_gpus(v["tres"]),
            "memory_mb": tres_memory_mb(v["tres"]),
            "nodes": _int(v["nodes"]) or 0,
        })
    items.sort(key=lambda item: (item["end_time"], int(item["id"])))
    return items


def parse_accounting(accounts_output, assocs_output):
    """GET /v1/accounting's answer from `sacctmgr -n -P show account format=Account,Description` and `show assoc
    format=Account,User,ParentName`: every account but root, its parent that of its account association (null
    when it has none), and every user association of those accounts (one per account and user, whatever its
    cluster or partition), each sorted."""
    parents, associations = {}, set()
    for account, user, parent in rows(assocs_output, 3):
        if user:
            associations.add((account, user))
        else:
            parents.setdefault(account, parent or None)
    accounts = [{"name": name, "description": description, "parent": parents.get(name)}
                for name, description in sorted(rows(accounts_output, 2)) if name != "root"]
    names = {account["name"] for account in accounts}
    return {"accounts": accounts,
            "associations": [{"account": a, "user": u} for a, u in sorted(associations) if a in names]}


def select(entries, accounts, states, user, before, limit):
    """One page of a job list: (its jobs, the next page's ``before`` or None).

    ``entries`` maps each job id (an int) to (build, values, state, user, account): the page is chosen on those
    few raw fields, newest first by id, and only its own jobs are built, so that a queue of 10,000 jobs costs
    milliseconds here."""
    ids = sorted((job_id for job_id, (build, values, state, owner, account) in entries.items()
                  if (before is None or job_id < before) and account.lower() in accounts
                  and (states is None or state in states) and (user is None or owner == user)), reverse=True)
    items = [entries[job_id][0](entries[job_id][1]) for job_id in ids[:limit]]
    return items, (items[-1]["id"] if len(ids) > limit else None)


def parse_sinfo(output):
    """Nodes from `sinfo -h -N -O SINFO_FORMAT` output: one line per node and partition, merged per node."""
    nodes = {}
    for values in rows(output, len(SINFO_NAMES), trailing=True):
        v = dict(zip(SINFO_NAMES, values, strict=True))
        partition = v["partition"].rstrip("*")  # the default partition's mark
        node = nodes.get(v["name"])
        if node is None:
            state, runtime_state = node_state(v["state"])
            node = nodes[v["name"]] = {
                "name": v["name"],
                "state": state,
                "runtime_state": runtime_state,
                "reason": _value(v["reason"]),
                "cpus": _int(v["cpus"]),
                "memory_mb": _int(v["memory"]),
                "gpus": gpu_count(v["gres"]),
                "features": [f for f in (_value(v["features"]) or "").split(",") if f],
                "partitions": [],
                "_reason_by": _value(v["reason_by"]),  # not the protocol's: the resume rule names who drained it
            }
        if partition and partition not in node["partitions"]:
            node["partitions"].append(partition)
    return list(nodes.values())


def public_node(node):
    return {k: v for k, v in node.items() if not k.startswith("_")}


def refusal_message(output):
    """Slurm's words from a command's error output, without its program prefixes."""
    lines = []
    for line in output.splitlines():
        line = re.sub(r"^(sbatch|squeue|sacct|scancel|scontrol|sinfo): (error|fatal): ", "", line.strip())
        if line:
            lines.append(line)
    return "; ".join(lines)[:2000] or "no output"


# ---- requests -------------------------------------------------------------------------------------------------


def _positive(resources, name, maximum, minimum=1):
    value = resources.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
        raise bad_request(f"resources.{name} must be a whole number from {minimum} to {maximum}")
    return value


def submission(body, accounts):
    """(account, sbatch options, script, working directory or None) for a POST /v1/jobs body; ApiError 400 when a
    field is missing or out of range, 403 when the account is not among the caller's."""
    if not isinstance(body, dict):
        raise bad_request("the body must be a JSON object")
    unknown = set(body) - {"name", "script", "account", "resources", "working_directory"}
    if unknown:
        raise bad_request("unknown field: " + ", ".join(sorted(unknown)))
    name, script, account = body.get("name"), body.get("script"), body.get("account")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise bad_request("name must be 1-128 letters, digits, '.', '_', '+' or '-', starting with a letter or digit")
    if not isinstance(script, str) or not script.startswith("#!"):
        raise bad_request("script must be a batch script starting with #!")
    if len(script.encode("utf-8")) > SCRIPT_MAX_BYTES or "\0" in script:
        raise bad_request("script must be at most 64 KiB of text")
    if not isinstance(account, str) or not ACCOUNT.fullmatch(account):
        raise bad_request("account must be an account name")
    if account.lower() not in accounts:
        raise ApiError(403, "forbidden", f"the token does not allow account {account}")
    resources = {} if body.get("resources") is None else body["resources"]
    if not isinstance(resources, dict):
        raise bad_request("resources must be a JSON object")
    unknown = set(resources) - {"nodes", "tasks", "cpus_per_task", "gpus", "memory_mb", "time_limit_minutes",
                                "partition"}
    if unknown:
        raise bad_request("unknown resource: " + ", ".join(sorted(unknown)))
    options = ["--account=" + account, "--job-name=" + name]
    for field, option, maximum in (("nodes", "--nodes", 10000), ("tasks", "--ntasks", 1000000),
                                   ("cpus_per_task", "--cpus-per-task", 4096)):
        value = _positive(resources, field, maximum)
        if value is not None:
            options.append(f"{option}={value}")
    gpus = _positive(resources, "gpus", 1024, minimum=0)
    if gpus:
        options.append(f"--gres=gpu:{gpus}")  # per node; --gpus is not safe on 22.05 with every GRES setup
    memory = _positive(resources, "memory_mb", 2**31)
    if memory is not None:
        options.append(f"--mem={memory}M")
    minutes = _positive(resources, "time_limit_minutes", 366 * 1440)
    if minutes is not None:
        options.append(f"--time={minutes}")
    partition = resources.get("partition")
    if partition is not None:
        if not isinstance(partition, str) or not SLURM_NAME.fullmatch(partition):
            raise bad_request("resources.partition must be a partition name")
        options.append("--partition=" + partition)
    directory = body.get("working_directory")
    if directory is not None and not (isinstance(directory, str) and directory.startswith("/")
                                      and len(directory) <= 4096 and PRINTABLE.fullmatch(directory)):
        raise bad_request("working_directory must be an absolute path")
    return account, options, script, directory


def query_parameters(query, known):
    """A query string's parameters as a dict; 400 for one not in ``known`` or one given twice."""
    params = parse_qs(query, keep_blank_values=True)
    unknown = set(params) - set(known)
    if unknown:
        raise bad_request("unknown query parameter: " + ", ".join(sorted(unknown)))
    if any(len(values) > 1 for values in params.values()):
        raise bad_request("each query parameter may be given once")
    return {k: v[0] for k, v in params.items()}


def list_query(query):
    """(states or None, user or None, limit, before or None) of GET /v1/jobs's query string."""
    one = query_parameters(query, ("state", "user", "limit", "before"))
    states = None
    if one.get("state"):
        states = set(one["state"].split(","))
        if not states <= GENERIC_STATES:
            raise bad_request("state must be a comma-separated list of " + ", ".join(sorted(GENERIC_STATES)))
    user = one.get("user") or None
    if user is not None and not USER.fullmatch(user):
        raise bad_request("user must be a user name")
    limit = LIMIT_DEFAULT
    if one.get("limit"):
        if not one["limit"].isdigit() or not 1 <= int(one["limit"]) <= LIMIT_MAX:
            raise bad_request(f"limit must be a whole number from 1 to {LIMIT_MAX}")
        limit = int(one["limit"])
    before = one.get("before") or None
    if before is not None and not JOB_ID.fullmatch(before):
        raise bad_request("before must be a job id")
    return states, user, limit, int(before) if before else None


def usage_query(query):
    """(start, end) of GET /v1/usage's query string: unix seconds, end after start, at most 31 days apart."""
    one = query_parameters(query, ("start", "end"))
    for name in ("start", "end"):
        if not UNIX_TIME.fullmatch(one.get(name, "")):
            raise bad_request(f"{name} must be a time in unix seconds")
    start, end = int(one["start"]), int(one["end"])
    if end <= start:
        raise bad_request("end must be after start")
    if end - start > USAGE_WINDOW_MAX:
        raise bad_request(f"end - start must be at most {USAGE_WINDOW_MAX // 86400} days")
    return start, end


def require_accounting(claims):
    if not claims["accounting"]:
        raise ApiError(403, "forbidden", "the token does not allow reading accounting")


def sacct_time(seconds):
    """Unix seconds as sacct's -S/-E take them, in the gateway commands' time zone (UTC)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))


def tenant_prefix(prefix):
    """The prefix of tenants' drain reasons: an owner word and a colon, never the platform's own (whose lifecycle
    reasons, "gpuaas: ...", could otherwise start with it). ValueError otherwise."""
    match = REASON_OWNER.fullmatch(prefix) if isinstance(prefix, str) else None
    if not match or match.group(1) == PLATFORM_OWNER:
        raise ValueError(f"drain_prefix must be an owner word and a colon (such as {TENANT_PREFIX}) other than "
                         f"{PLATFORM_OWNER}:, the platform's own lifecycle drains: {prefix!r}")
    return prefix


def drain_reason(reason, prefix):
    if reason is None:
        reason = "drained through the platform"
    if not isinstance(reason, str) or not reason.strip() or len(reason) > 256 or not PRINTABLE.fullmatch(reason):
        raise bad_request("reason must be 1-256 printable characters")
    reason = reason.strip()
    if reason.startswith(prefix):
        reason = reason[len(prefix):].strip() or "drained through the platform"
    return f"{prefix} {reason}"


def held_by_another(node, prefix):
    """Why ``node`` is someone else's to put back into service (a 409's message), or None: None when its reason is
    the tenants' own (``prefix``) or when it has no reason and is in service. Any other reason, whatever the state,
    and any drain or down without a reason (such as Slurm's not responding) belong to someone else."""
    reason = node["reason"]
    if reason and reason.startswith(prefix):
        return None  # the tenants' own
    if not reason and node["state"] not in OUT_OF_SERVICE:
        return None  # in service
    match = REASON_OWNER.match(reason or "")
    word = match.group(1) if match else None
    owner = f"the platform's own lifecycle ({PLATFORM_OWNER})" if word == PLATFORM_OWNER else (
        word or node["_reason_by"] or "Slurm")
    by = f", set by {node['_reason_by']}" if word and node["_reason_by"] else ""
    why = f"the reason {reason!r}" if reason else "no reason"
    return (f"{node['name']} is {node['state']} ({node['runtime_state']}) with {why}, owned by {owner}{by}; only "
            f"drains and downs whose reason starts with {prefix} are the tenants' to drain again or resume")


def feature_list(features):
    if not isinstance(features, list) or len(features) > 64:
        raise bad_request("features must be a list of at most 64 feature names")
    for feature in features:
        if not isinstance(feature, str) or not SLURM_NAME.fullmatch(feature):
            raise bad_request("a feature must be a name of letters, digits, '.', '_' or '-'")
    return list(dict.fromkeys(features))


# ---- the gateway ----------------------------------------------------------------------------------------------


class Gateway:
    """What each endpoint does, given verified claims; Slurm's commands run through ``run``."""

    def __init__(self, config):
        self.instance_id = config["instance_id"]
        self.prefix = tenant_prefix(config.get("drain_prefix", TENANT_PREFIX))
        self.min_uid = int(config.get("min_uid", 200000))
        self.timeout = int(config.get("command_timeout", COMMAND_TIMEOUT))
        self.path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        self.slurm_conf = config.get("slurm_conf") or ""
        # Slurm prints local time; the gateway's commands run in UTC so that its stamps need no conversion.
        self.env = {"PATH": self.path, "LANG": "C.UTF-8", "TZ": "UTC"}
        if self.slurm_conf:
            self.env["SLURM_CONF"] = self.slurm_conf

    # -- commands --
    def run(self, args, stdin=None, env=None, user=None):
        extra = {}
        if user is not None:
            extra = {"user": user.pw_uid, "group": user.pw_gid,
                     "extra_groups": os.getgrouplist(user.pw_name, user.pw_gid)}
        try:
            return subprocess.run(args, input=stdin, capture_output=True, encoding="utf-8", errors="replace",
                                  env=env or self.env, cwd="/", timeout=self.timeout, check=False, **extra)
        except subprocess.TimeoutExpired as error:
            raise ApiError(502, "scheduler_unavailable", f"{args[0]} did not answer within {self.timeout} s") \
                from error
        except OSError as error:
            raise ApiError(502, "scheduler_unavailable", f"{args[0]} could not run: {error.strerror}") \
                from error

    def checked(self, args, **kw):
        proc = self.run(args, **kw)
        if proc.returncode != 0:
            raise ApiError(502, "scheduler_refused", refusal_message(proc.stderr or proc.stdout))
        return proc.stdout

    # -- jobs --
    def queued(self, job_id):
        """The job as squeue knows it (in every state, so also a while after it ended), or None."""
        proc = self.run(["squeue", "-h", "-t", "all", "-O", SQUEUE_FORMAT, "-j", job_id])
        if proc.returncode != 0 and "Invalid job id" not in proc.stderr:
            raise ApiError(502, "scheduler_refused", refusal_message(proc.stderr or proc.stdout))
        return next((job for job in parse_squeue(proc.stdout) if job["id"] == job_id), None)

    def accounted(self, job_id):
        """The job as accounting knows it, or None."""
        output = self.checked(["sacct", "-X", "-P", "-n", "-a", "--format=" + SACCT_FORMAT, "-j", job_id])
        return next((job for job in parse_sacct(output) if job["id"] == job_id), None)

    def find_job(self, job_id, claims):
        if not JOB_ID.fullmatch(job_id):
            raise ApiError(404, "not_found", f"no job {job_id[:40]}")
        job = self.queued(job_id) or self.accounted(job_id)
        if job is None or job["account"].lower() not in claims["accounts"]:
            raise ApiError(404, "not_found", f"no job {job_id}")
        return job

    def list_jobs(self, claims, query):
        states, user, limit, before = list_query(query)
        if not claims["accounts"]:
            return 200, {"items": [], "next": None}
        accounts = ",".join(claims["accounts"])
        with ThreadPoolExecutor(1) as pool:
            # accounting (slurmdbd) answers in parallel with the queue (slurmctld)
            accounted = pool.submit(self.checked, [
                "sacct", "-X", "-P", "-n", "-a", "--format=" + SACCT_FORMAT, "-S", ACCOUNTING_WINDOW, "-E", "now",
                "--accounts=" + accounts]) if states and states & ENDED else None
            queued = self.checked(["squeue", "-h", "-t", "all", "-O", SQUEUE_FORMAT, "--account=" + accounts])
            accounted = accounted.result() if accounted else ""
        entries = {}
        for v in rows(queued, len(SQUEUE_NAMES), trailing=True):
            if v[0].isdigit():
                entries[int(v[0])] = (squeue_job, v, job_state(v[Q_STATE]), v[Q_USER], v[Q_ACCOUNT])
        if accounted:
            for v in rows(accounted, len(SACCT_NAMES)):
                state = job_state(v[A_STATE])
                if v[0].isdigit() and state in ENDED:
                    entries.setdefault(int(v[0]), (sacct_job, v, state, v[A_USER], v[A_ACCOUNT]))
        items, next_before = select(entries, set(claims["accounts"]), states, user, before, limit)
        return 200, {"items": items, "next": next_before}

    def submit(self, claims, body):
        if not claims["sub"]:
            raise ApiError(403, "forbidden", "the token names no user (sub) to submit as")
        account, options, script, directory = submission(body, claims["accounts"])
        try:
            user = pwd.getpwnam(claims["sub"])
        except KeyError:
            user = None
        if user is None or user.pw_uid < self.min_uid:  # core answers 409 identity_not_synced: the access sync is due
            raise ApiError(403, "unknown_identity", f"{claims['sub']} is not a platform identity on this cluster (no "
                           f"such user, or a uid below {self.min_uid})")
        if directory is None:
            directory = user.pw_dir if os.path.isdir(user.pw_dir) else "/tmp"  # noqa: S108 - the job's cwd
        # The job inherits this environment (sbatch's --export=ALL): the user's own, not the gateway's.
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": user.pw_dir, "USER": user.pw_name,
               "LOGNAME": user.pw_name, "SHELL": user.pw_shell or "/bin/sh", "LANG": "C.UTF-8"}
        if self.slurm_conf and self.slurm_conf != DEFAULT_SLURM_CONF:
            env["SLURM_CONF"] = self.slurm_conf  # a worker reads its own (configless) copy otherwise
        proc = self.run(["sbatch", "--parsable", *options, "--chdir=" + directory], stdin=script, env=env, user=user)
        if proc.returncode != 0:
            message = refusal_message(proc.stderr or proc.stdout)
            if any(word in message.lower() for word in ASSOCIATION_REFUSALS):
                raise ApiError(403, "scheduler_refused", message)
            raise ApiError(502, "scheduler_refused", message)
        job_id = proc.stdout.strip().split(";", 1)[0]
        if not JOB_ID.fullmatch(job_id):
            raise ApiError(502, "scheduler_refused", f"sbatch answered no job id: {proc.stdout.strip()[:200]}")
        job = self.queued(job_id) or self.accounted(job_id)  # accounting, when it ended and is purged already
        return 201, job or {"id": job_id, "name": body["name"], "account": account, "user": user.pw_name}

    def cancel(self, claims, job_id):
        job = self.find_job(job_id, claims)
        if job["state"] in ENDED:
            return 202, job
        proc = self.run(["scancel", job_id])
        if proc.returncode != 0 and "already completing or completed" not in proc.stderr:
            raise ApiError(502, "scheduler_refused", refusal_message(proc.stderr or proc.stdout))
        # A running job shows COMPLETING until its processes are gone (milliseconds, usually), then CANCELLED.
        deadline = time.monotonic() + CANCEL_SETTLE
        job = self.find_job(job_id, claims)
        while job["runtime_state"] == "COMPLETING" and time.monotonic() < deadline:
            time.sleep(0.05)
            job = self.find_job(job_id, claims)
        return 202, job

    # -- nodes --
    def nodes(self, name=None):
        args = ["sinfo", "-h", "-N", "-O", SINFO_FORMAT]
        if name is not None:
            args += ["-n", name]
        nodes = parse_sinfo(self.checked(args))
        return nodes if name is None else [n for n in nodes if n["name"] == name]

    def node(self, name):
        if not SLURM_NAME.fullmatch(name):
            raise ApiError(404, "not_found", f"no node {name[:64]}")
        found = self.nodes(name)
        if not found:
            raise ApiError(404, "not_found", f"no node {name}")
        return found[0]

    def operate(self, claims, name, body):
        if not claims["node_operate"]:
            raise ApiError(403, "forbidden", "the token does not allow operating nodes")
        if not isinstance(body, dict) or body.get("action") not in ("drain", "resume", "features"):
            raise bad_request("action must be drain, resume or features")
        action = body["action"]
        allowed = {"drain": {"action", "reason"}, "resume": {"action"}, "features": {"action", "features"}}[action]
        if set(body) - allowed:
            raise bad_request(f"unknown field for {action}: " + ", ".join(sorted(set(body) - allowed)))
        node = self.node(name)
        update = ["scontrol", "update", "nodename=" + name]
        if action in ("drain", "resume"):
            conflict = held_by_another(node, self.prefix)
            if conflict:  # never overwrite or clear someone else's reason: the platform's, an admin's, Slurm's
                raise ApiError(409, "conflict", conflict)
        if action == "drain":
            self.checked(update + ["state=drain", "reason=" + drain_reason(body.get("reason"), self.prefix)])
        elif action == "resume":
            if node["state"] not in OUT_OF_SERVICE:
                return 200, public_node(node)  # in service, no reason: nothing to resume
            self.checked(update + ["state=resume"])
        else:
            features = ",".join(feature_list(body.get("features")))
            self.checked(update + ["AvailableFeatures=" + features, "ActiveFeatures=" + features])
        node = self.node(name)
        # slurmctld marks a node it resumes not responding until the node answers its ping (about a second).
        deadline = time.monotonic() + RESUME_SETTLE
        while action == "resume" and "NOT_RESPONDING" in node["runtime_state"] and time.monotonic() < deadline:
            time.sleep(0.1)
            node = self.node(name)
        return 200, public_node(node)

    # -- the platform's reads of accounting --
    def accounting(self, claims):
        require_accounting(claims)
        accounts = self.checked(["sacctmgr", "-n", "-P", "show", "account", "format=Account,Description"])
        assocs = self.checked(["sacctmgr", "-n", "-P", "show", "assoc", "format=Account,User,ParentName"])
        return 200, parse_accounting(accounts, assocs)

    def usage(self, claims, query):
        require_accounting(claims)
        start, end = usage_query(query)
        output = self.checked(["sacct", "-X", "-a", "-P", "-n", "--noconvert", "--format=" + USAGE_FORMAT,
                               "--state=" + SACCT_ENDED_STATES, "-S", sacct_time(start), "-E", sacct_time(end)],
                              env={**self.env, "SLURM_TIME_FORMAT": "%s"})
        return 200, {"items": parse_usage(output, start, end), "start": start, "end": end}

    def health(self):
        version = self.checked(["sinfo", "--version"]).split()
        return 200, {"ok": True, "runtime": "slurm", "version": version[-1] if version else None}

    # -- routing --
    def handle(self, method, path, query, claims, body):
        parts = path.strip("/").split("/")
        if parts[:1] != ["v1"] or len(parts) < 2 or len(parts) > 3:
            raise ApiError(404, "not_found", "no such endpoint")
        resource, item = parts[1], (parts[2] if len(parts) == 3 else None)
        routes = {
            ("health", False): {"GET": self.health},
            ("accounting", False): {"GET": lambda: self.accounting(claims)},
            ("usage", False): {"GET": lambda: self.usage(claims, query)},
            ("jobs", False): {"GET": lambda: self.list_jobs(claims, query),
                              "POST": lambda: self.submit(claims, body())},
            ("jobs", True): {"GET": lambda: (200, self.find_job(item, claims)),
                             "DELETE": lambda: self.cancel(claims, item)},
            ("nodes", False): {"GET": lambda: (200, {"items": [public_node(n) for n in self.nodes()]})},
            ("nodes", True): {"POST": lambda: self.operate(claims, item, body())},
        }
        methods = routes.get((resource, item is not None))
        if methods is None or item == "":
            raise ApiError(404, "not_found", "no such endpoint")
        if method not in methods:
            raise ApiError(405, "method_not_allowed", f"{method} is not allowed here")
        return methods[method]()


# ---- HTTP -----------------------------------------------------------------------------------------------------


def log(line):
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _printable(text):
    return re.sub(r"[^\x20-\x7e]", "?", text)[:300]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "gpuaas-scheduler-gateway"
    sys_version = ""
    timeout = 60  # seconds an idle keep-alive connection is held

    gateway = None  # set by make_server()
    key = b""
    replays = None  # a Replays, set by make_server()

    def log_message(self, format, *args):  # noqa: A002 - BaseHTTPRequestHandler's signature
        pass  # one line per request is written by answer()

    def send_error(self, code, message=None, explain=None):
        # http.server's own refusals (a malformed request line, too long headers): the protocol's shape too.
        self.close_connection = True
        self._started = self._sub = None
        self.answer(code, {"error": {"code": "bad_request" if code < 500 else "unsupported",
                                     "message": message or HTTPStatus(code).phrase}})

    def answer(self, status, document):
        data = json.dumps(document, separators=(",", ":")).encode("utf-8")
        started = getattr(self, "_started", None)
        duration = (time.monotonic() - started) * 1000 if started else 0.0
        path = _printable(urlsplit(getattr(self, "path", "") or "").path)  # unset when the request line was not
        log(f"{self.command or '-'} {path} {status} {duration:.0f}ms sub={getattr(self, '_sub', None) or '-'}")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _body(self):
        if self._raw_body is None:
            raise bad_request("this request needs a JSON body")
        try:
            return json.loads(self._raw_body)
        except ValueError as error:
            raise bad_request("the body is not JSON") from error

    def _read_body(self):
        self._raw_body = None
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            raise bad_request("send the body with a Content-Length")
        length = self.headers.get("Content-Length")
        if length is None:
            return
        if not length.isdigit():
            self.close_connection = True
            raise bad_request("bad Content-Length")
        if int(length) > BODY_MAX_BYTES:
            self.close_connection = True
            raise ApiError(413, "bad_request", f"the body is larger than {BODY_MAX_BYTES} bytes")
        self._raw_body = self.rfile.read(int(length))

    def _claims(self):
        authorization = self.headers.get("Authorization", "")
        scheme, token = authorization.partition(" ")[::2]
        if scheme.lower() != "bearer":
            raise ApiError(401, "unauthorized", "a Bearer token is required")
        now = time.time()
        try:
            claims = verify_token(token.strip(), self.key, self.gateway.instance_id, now)
            self.replays.admit(claims["jti"], claims["until"], now)  # only a verified token's jti is remembered
            return claims
        except TokenError as error:
            raise ApiError(401, "unauthorized", str(error)) from error

    def _dispatch(self):
        self._started = time.monotonic()
        self._sub = None
        try:
            self._read_body()
            claims = self._claims()
            self._sub = claims["sub"]
            url = urlsplit(self.path)
            status, document = self.gateway.handle(self.command, url.path, url.query, claims, self._body)
        except ApiError as error:
            status, document = error.status, {"error": {"code": error.code, "message": error.message}}
        except Exception:  # an answer, not a dropped connection; the trace goes to the journal
            log(traceback.format_exc().rstrip())
            status, document = 500, {"error": {"code": "internal", "message": "the gateway failed; see its log"}}
        self.answer(status, document)

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = do_HEAD = do_OPTIONS = _dispatch


def load_config(path):
    with open(path, encoding="utf-8") as stream:
        config = json.load(stream)
    if not isinstance(config.get("instance_id"), str) or not config["instance_id"]:
        raise SystemExit(f"{path}: instance_id is missing")
    return config


def read_key(path):
    """The key file's text (UTF-8, without a trailing newline); refused when others may read or write it."""
    info = os.stat(path)
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO) or info.st_uid != os.geteuid():
        raise SystemExit(f"{path} must be owned by the gateway's user and mode 0600")
    with open(path, encoding="utf-8") as stream:
        key = stream.read().rstrip("\r\n")
    if not key:
        raise SystemExit(f"{path} is empty")
    return key.encode("utf-8")


def notify_ready():
    """Tells systemd (Type=notify) that the port answers, so that `systemctl start` returns only then."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.connect(address)
        sock.sendall(b"READY=1")


def make_server(config, key):
    listen, port = config.get("listen", "0.0.0.0"), int(config.get("port", 6830))  # noqa: S104 - the gateway port
    handler = type("GatewayHandler", (Handler,), {"gateway": Gateway(config), "key": key, "replays": Replays()})
    server_class = ThreadingHTTPServer
    if ":" in listen:
        server_class = type("GatewayServer6", (ThreadingHTTPServer,), {"address_family": socket.AF_INET6})
    server = server_class((listen, port), handler)
    server.daemon_threads = True
    return server


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(f"usage: {argv[0]} CONFIG.json\n")
        return 2
    config = load_config(argv[1])
    key = read_key(config.get("key_file", "/etc/gpuaas/scheduler.key"))
    try:
        server = make_server(config, key)
    except ValueError as error:  # a setting the gateway refuses (drain_prefix)
        raise SystemExit(f"{argv[1]}: {error}") from None
    address, port = server.server_address[:2]
    log(f"gpuaas scheduler gateway for instance {config['instance_id']} listening on {address} port {port}")
    notify_ready()
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
