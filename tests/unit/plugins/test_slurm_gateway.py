"""The scheduler gateway's pure parts (roles/slurm_gateway/files/gpuaas_scheduler_gateway.py): token checks, Slurm's
words as the protocol's, request validation and paging, and its HTTP layer's refusals (which answer before any
Slurm command runs). The Slurm outputs below are real 22.05.8 output captured from the live_slurm cluster with
the gateway's own formats. test_slurm_gateway_live.py drives it against real Slurm."""

import base64
import hashlib
import hmac
import http.client
import importlib.util
import json
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest
from ansible_collections.gpuaas.apps.plugins.module_utils.slurm import owned_reason

PROGRAM = Path(__file__).resolve().parents[3] / "roles/slurm_gateway/files/gpuaas_scheduler_gateway.py"
_spec = importlib.util.spec_from_file_location("gpuaas_scheduler_gateway", PROGRAM)
gw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gw)

KEY = b"k" * 43
AUD = "6c1f0000-instance"
NOW = 1_800_000_000


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def make_token(key=KEY, header=None, **claims):
    """An HS256 JWT as the platform signs it, with a jti of its own (claims override the defaults; None drops one)."""
    body = {"iss": "gpuaas", "aud": AUD, "iat": NOW, "exp": NOW + 60, "jti": uuid.uuid4().hex, "sub": "alice-3f9a",
            "accounts": ["research"]}
    body.update(claims)
    body = {k: v for k, v in body.items() if v is not None}
    head = b64(json.dumps(header or {"alg": "HS256", "typ": "JWT"}).encode())
    payload = b64(json.dumps(body).encode())
    signature = b64(hmac.new(key, f"{head}.{payload}".encode(), hashlib.sha256).digest())
    return f"{head}.{payload}.{signature}"


# ---- tokens ---------------------------------------------------------------------------------------------------


def test_a_valid_token_gives_its_normalised_claims():
    claims = gw.verify_token(make_token(accounts=["Research", "ops"], node_operate=True, jti="j1"), KEY, AUD, NOW + 10)
    assert claims == {"sub": "alice-3f9a", "accounts": ["research", "ops"], "node_operate": True, "accounting": False,
                      "jti": "j1", "until": NOW + 60 + gw.CLOCK_SKEW}
    platform_read = gw.verify_token(make_token(sub=None, accounts=None, jti="j2"), KEY, AUD, NOW)
    assert platform_read == {"sub": None, "accounts": [], "node_operate": False, "accounting": False, "jti": "j2",
                             "until": NOW + 60 + gw.CLOCK_SKEW}
    assert gw.verify_token(make_token(sub=None, accounting=True), KEY, AUD, NOW)["accounting"] is True
    # a long exp does not outlive the age limit on iat: the jti is remembered as long as the token is accepted
    long_lived = gw.verify_token(make_token(exp=NOW + 3600), KEY, AUD, NOW)
    assert long_lived["until"] == NOW + gw.TOKEN_MAX_AGE + gw.CLOCK_SKEW
    with pytest.raises(gw.TokenError):
        gw.verify_token(make_token(exp=NOW + 3600), KEY, AUD, long_lived["until"] + 1)
    assert gw.verify_token(make_token(aud=["other", AUD]), KEY, AUD, NOW)["sub"] == "alice-3f9a"


@pytest.mark.parametrize(
    "token, now, why",
    [
        (make_token(key=b"another key"), NOW, "bad signature"),
        (make_token(header={"alg": "none"}), NOW, "not HS256"),
        (make_token(header={"alg": "HS512"}), NOW, "not HS256"),
        (make_token().rsplit(".", 1)[0] + ".", NOW, "bad signature"),
        (make_token().rsplit(".", 1)[0], NOW, "not a JWT"),
        ("", NOW, "no token"),
        ("a.b.c.d", NOW, "not a JWT"),
        ("!!!.e30.x", NOW, "not base64url"),
        (make_token(), NOW + 60 + gw.CLOCK_SKEW, "expired"),
        (make_token(iat=NOW - 400, exp=NOW + 600), NOW, "not issued in the last 300 s"),
        (make_token(iat=NOW + 120, exp=NOW + 180), NOW, "not issued in the last 300 s"),
        (make_token(exp=None), NOW, "no exp"),
        (make_token(exp="soon"), NOW, "no exp"),
        (make_token(aud="another-instance"), NOW, "another instance"),
        (make_token(aud=None), NOW, "another instance"),
        (make_token(iss="someone"), NOW, "not issued by gpuaas"),
        (make_token(sub="root; rm -rf /"), NOW, "sub"),
        (make_token(accounts="research"), NOW, "accounts"),
        (make_token(accounts=["re search"]), NOW, "accounts"),
        (make_token(node_operate="yes"), NOW, "node_operate"),
        (make_token(accounting="true"), NOW, "accounting"),
        (make_token(accounting=1), NOW, "accounting"),
        (make_token(jti=None), NOW, "no jti"),
        (make_token(jti=""), NOW, "no jti"),
        (make_token(jti=7), NOW, "no jti"),
        (make_token(jti="a b"), NOW, "no jti"),
        (make_token(jti="x" * 129), NOW, "no jti"),
    ],
)
def test_tokens_the_gateway_refuses(token, now, why):
    with pytest.raises(gw.TokenError, match=why):
        gw.verify_token(token, KEY, AUD, now)


def test_a_jti_is_accepted_once_until_its_token_expires():
    replays = gw.Replays(limit=3)
    replays.admit("a", NOW + 90, NOW)
    with pytest.raises(gw.TokenError, match="used before"):
        replays.admit("a", NOW + 90, NOW + 89)
    replays.admit("b", NOW + 10, NOW)
    replays.admit("c", NOW + 90, NOW)
    # full of live jtis: a new token waits rather than an older jti being forgotten (and replayable)
    with pytest.raises(gw.ApiError) as busy:
        replays.admit("d", NOW + 90, NOW + 5)
    assert busy.value.status == 503
    with pytest.raises(gw.TokenError):
        replays.admit("a", NOW + 90, NOW + 5)
    # b expired: it is forgotten (its token is refused as expired anyway), which makes room
    replays.admit("d", NOW + 90, NOW + 11)
    assert len(replays) == 3
    with pytest.raises(gw.TokenError):
        replays.admit("c", NOW + 90, NOW + 11)
    replays.admit("e", NOW + 200, NOW + 91)  # a, c and d expired
    assert len(replays) == 1


def test_a_payload_changed_after_signing_is_refused():
    head, payload, signature = make_token(accounts=["research"]).split(".")
    forged = b64(json.dumps({**json.loads(base64.urlsafe_b64decode(payload + "==")), "accounts": ["ops"]}).encode())
    with pytest.raises(gw.TokenError, match="bad signature"):
        gw.verify_token(f"{head}.{forged}.{signature}", KEY, AUD, NOW)


# ---- Slurm's words --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "slurm, generic",
    [("PENDING", "pending"), ("REQUEUE_HOLD", "pending"), ("RUNNING", "running"), ("COMPLETING", "running"),
     ("CONFIGURING", "running"), ("SUSPENDED", "running"), ("COMPLETED", "succeeded"), ("CANCELLED", "cancelled"),
     ("CANCELLED by 0", "cancelled"), ("FAILED", "failed"), ("TIMEOUT", "failed"), ("NODE_FAIL", "failed"),
     ("OUT_OF_MEMORY", "failed"), ("PREEMPTED", "failed"), ("BOOT_FAIL", "failed"), ("DEADLINE", "failed")],
)
def test_job_states(slurm, generic):
    assert gw.job_state(slurm) == generic


@pytest.mark.parametrize(
    "slurm, generic, runtime",
    [("idle", "idle", "IDLE"), ("allocated", "allocated", "ALLOCATED"), ("mixed", "mixed", "MIXED"),
     ("completing", "allocated", "COMPLETING"), ("idle+drain", "drained", "IDLE+DRAIN"),
     ("allocated+drain", "draining", "ALLOCATED+DRAIN"), ("mixed+drain", "draining", "MIXED+DRAIN"),
     ("down", "down", "DOWN"), ("down+drain", "down", "DOWN+DRAIN"), ("idle*", "down", "IDLE+NOT_RESPONDING"),
     ("idle+not_responding", "down", "IDLE+NOT_RESPONDING"), ("unknown", "down", "UNKNOWN"),
     ("drained", "drained", "DRAINED"), ("draining", "draining", "DRAINING")],
)
def test_node_states(slurm, generic, runtime):
    assert gw.node_state(slurm) == (generic, runtime)


def test_slurm_values():
    assert [gw.time_limit_minutes(t) for t in ("1-00:00:00", "1:30:00", "5:00", "00:05:00", "0:30", "45",
                                               "UNLIMITED", "Partition_Limit", "N/A")] == [
        1440, 90, 5, 5, 1, 45, None, None, None]
    sizes = ("100M", "2G", "1000Mn", "0", "1T", "N/A")
    assert [gw.memory_mb(m) for m in sizes] == [100, 2048, 1000, None, 1048576, None]
    assert [gw.gpu_count(g) for g in ("gres:gpu:1", "gres:gpu:a100:2", "gpu:2", "gpu:a100:2(S:0-1),gpu:t4:1",
                                      "N/A", "(null)")] == [1, 2, 2, 3, 0, 0]
    # TRES strings (sacct's ReqTRES, AllocTRES): gres/gpu=N is the job's total; a typed entry, recorded beside it
    # when AccountingStorageTRES names the type, counts the same GPUs again
    assert [gw.tres_gpus(t) for t in ("billing=2,cpu=2,gres/gpu=2,mem=2G,node=1",
                                      "billing=4,cpu=4,gres/gpu=4,gres/gpu:a100=4,node=1", "gres/gpu:a100=2,node=1",
                                      "billing=1,cpu=1,node=1", "", "gres/gpumem=4000,cpu=1")] == [2, 4, 2, 0, 0, 0]
    assert [gw.tres_memory_mb(t) for t in ("cpu=1,mem=2000M,node=1", "mem=2G", "cpu=2,mem=1.5G", "mem=1T",
                                           "mem=512K", "cpu=1,node=1", "")] == [2000, 2048, 1536, 1048576, 0, 0, 0]
    # squeue's raw wait status and sacct's code:signal: 3 for exit 3, 128+15 for SIGTERM
    assert [gw.exit_code(status=s) for s in ("0", "768", "15")] == [0, 3, 143]
    assert [gw.exit_code(code_signal=s) for s in ("0:0", "3:0", "0:15")] == [0, 3, 143]


# squeue -h -t all -O SQUEUE_FORMAT (a name holding the separator, a pending job, a finished one)
SQUEUE = (
    "3|PENDING|bob|other|2026-11-25T23:59:55|2026-11-26T23:59:56|2026-11-27T00:04:56|1||1|1|gres:gpu:1|N/A|100M|"
    "5:00|gpu|0|Resources|wrap|\n"
    "1|RUNNING|alice|acme|2026-11-25T23:59:55|2026-11-25T23:59:56|2026-11-26T23:59:56|1|gpu01|1|1|N/A|N/A|0|"
    "1-00:00:00|gpu|0|None|a|b c|\n"
    "7|COMPLETED|alice|acme|2026-11-26T00:05:33|2026-11-26T00:05:34|2026-11-26T00:06:04|1|gpu01|1|1|gres:gpu:1|N/A|"
    "100M|5:00|debug|0|None|t1|\n"
    "5|CANCELLED|alice|acme|2026-11-26T00:01:21|2026-11-26T00:01:32|2026-11-26T00:01:32|1||2|1|N/A|gres:gpu:2|2G|"
    "1:30:00|debug|0|PartitionTimeLimit|wrap|\n"
)
# sacct -X -P -n -a --format=SACCT_FORMAT
SACCT = (
    "1|CANCELLED by 0|alice|acme|2026-11-25T23:59:55|2026-11-25T23:59:56|2026-11-26T00:01:32|1|gpu01|"
    "billing=1,cpu=1,mem=1000M,node=1|1000M|1-00:00:00|gpu|0:15|None|a|b c\n"
    "5|CANCELLED|alice|acme|2026-11-26T00:01:21|None|2026-11-26T00:01:32|1|None assigned|"
    "billing=2,cpu=2,gres/gpu=2,mem=2G,node=1|2G|01:30:00|debug|0:0|PartitionTimeLimit|wrap\n"
    "6|FAILED|alice|acme|2026-11-26T00:01:33|2026-11-26T00:01:35|2026-11-26T00:01:35|1|gpu01|"
    "billing=1,cpu=1,mem=1000M,node=1|1000M|1-00:00:00|gpu|3:0|None|wrap\n"
)


def test_squeue_jobs():
    pending, running, done, cancelled = gw.parse_squeue(SQUEUE)
    assert pending == {
        "id": "3", "name": "wrap", "state": "pending", "runtime_state": "PENDING", "user": "bob", "account": "other",
        "submitted_at": "2026-11-25T23:59:55Z", "started_at": None, "ended_at": None,
        "resources": {"nodes": 1, "tasks": 1, "cpus_per_task": 1, "gpus": 1, "memory_mb": 100,
                      "time_limit_minutes": 5, "partition": "gpu"},
        "exit_code": None, "reason": "Resources",
    }
    assert running["name"] == "a|b c" and running["state"] == "running" and running["reason"] is None
    assert running["started_at"] == "2026-11-25T23:59:56Z" and running["ended_at"] is None
    assert running["resources"]["memory_mb"] is None and running["resources"]["time_limit_minutes"] == 1440
    assert done["state"] == "succeeded" and done["exit_code"] == 0 and done["ended_at"] == "2026-11-26T00:06:04Z"
    # cancelled while it waited: it never started
    assert cancelled["state"] == "cancelled" and cancelled["started_at"] is None
    assert cancelled["resources"]["gpus"] == 2 and cancelled["resources"]["tasks"] == 2


def test_sacct_jobs():
    cancelled_running, cancelled_pending, failed = gw.parse_sacct(SACCT)
    assert cancelled_running["name"] == "a|b c" and cancelled_running["runtime_state"] == "CANCELLED"
    assert cancelled_running["state"] == "cancelled" and cancelled_running["exit_code"] == 143
    assert cancelled_running["started_at"] == "2026-11-25T23:59:56Z"
    assert cancelled_pending["started_at"] is None and cancelled_pending["resources"]["gpus"] == 2
    assert failed["state"] == "failed" and failed["exit_code"] == 3
    assert failed["resources"] == {"nodes": 1, "tasks": None, "cpus_per_task": None, "gpus": 0, "memory_mb": 1000,
                                   "time_limit_minutes": 1440, "partition": "gpu"}


# env SLURM_TIME_FORMAT=%s sacct -X -a -P -n --noconvert --format=USAGE_FORMAT --state=SACCT_ENDED_STATES -S .. -E ..:
# a job that completed with a GPU, one that failed at once (its node configuration refused), one cancelled while
# held (never started), one cancelled while it ran on 2 CPUs and 2 GPUs
USAGE = (
    "1|COMPLETED|u1|ra|1795663804|1795663804|1795663806|2|1|billing=1,cpu=1,gres/gpu=1,node=1|1\n"
    "2|FAILED|u1|rb|1795663804|1795663804|1795663804|0|2||1\n"
    "3|CANCELLED by 0|u1|rb|1795663804|None|1795663806|0|1||1\n"
    "4|CANCELLED by 0|u1|ra|1795663878|1795663879|1795663882|3|2|billing=2,cpu=2,gres/gpu=2,node=1|1\n"
)


def test_usage_items_are_the_jobs_that_ended_in_the_window_in_end_time_order():
    items = gw.parse_usage(USAGE, 1795663800, 1795663900)
    assert [item["id"] for item in items] == ["2", "1", "3", "4"]  # by end time, then numeric id
    failed, completed, never_started, cancelled = items
    assert completed == {"id": "1", "account": "ra", "user": "u1", "state": "COMPLETED", "submit_time": 1795663804,
                         "start_time": 1795663804, "end_time": 1795663806, "elapsed_seconds": 2, "cpus": 1, "gpus": 1,
                         "memory_mb": 0, "nodes": 1}
    assert failed["state"] == "FAILED" and failed["elapsed_seconds"] == 0 and failed["gpus"] == 0
    # cancelled before it started: kept, costing nothing
    assert never_started["state"] == "CANCELLED" and never_started["start_time"] is None
    assert never_started["elapsed_seconds"] == 0 and never_started["end_time"] == 1795663806
    assert (cancelled["cpus"], cancelled["gpus"], cancelled["elapsed_seconds"]) == (2, 2, 3)
    # [start, end): sacct's own window includes its end
    assert [i["id"] for i in gw.parse_usage(USAGE, 1795663805, 1795663806)] == []
    assert [i["id"] for i in gw.parse_usage(USAGE, 1795663806, 1795663882)] == ["1", "3"]
    assert [i["id"] for i in gw.parse_usage(USAGE, 1795663882, 1795663883)] == ["4"]


def test_usage_of_a_job_still_running_or_of_a_step_is_left_out_and_memory_is_read():
    output = (USAGE + "5|RUNNING|u1|ra|1795663880|1795663881|Unknown|20|1|cpu=1,node=1|1\n"
              "6.batch|COMPLETED|u1|ra|1795663880|1795663881|1795663885|4|1|cpu=1,mem=100M,node=1|1\n"
              "7|TIMEOUT|u1|ra|1795663880|1795663881|1795663885|4|8|billing=8,cpu=8,gres/gpu=4,gres/gpu:a100=4,"
              "mem=64G,node=2|2\n")
    items = gw.parse_usage(output, 1795663800, 1795663900)
    assert [i["id"] for i in items] == ["2", "1", "3", "4", "7"]
    assert {k: items[-1][k] for k in ("state", "cpus", "gpus", "memory_mb", "nodes")} == {
        "state": "TIMEOUT", "cpus": 8, "gpus": 4, "memory_mb": 65536, "nodes": 2}


def test_sacct_selects_ended_jobs_by_their_state():
    assert gw.SACCT_ENDED_STATES == ("BOOT_FAIL,CANCELLED,COMPLETED,DEADLINE,FAILED,NODE_FAIL,OUT_OF_MEMORY,"
                                     "PREEMPTED,REVOKED,TIMEOUT")
    assert gw.sacct_time(1795663806) == "2026-11-26T03:30:06"


# sacctmgr -n -P show account format=Account,Description; sacctmgr -n -P show assoc format=Account,User,ParentName
# (two user associations of the same account and user, on two partitions, are one)
ACCOUNTS = "ra|gpuaas project 1\nrb|gpuaas project 2\nroot|default root account\nsite|ours | theirs\n"
ASSOCS = "root||\nroot|root|\nra||root\nra|u1|\nrb||root\nrb|u2|\nrb|u1|\nrb|u1|\nsite||rb\n"


def test_accounting_is_every_account_but_root_and_every_user_association():
    assert gw.parse_accounting(ACCOUNTS, ASSOCS) == {
        "accounts": [{"name": "ra", "description": "gpuaas project 1", "parent": "root"},
                     {"name": "rb", "description": "gpuaas project 2", "parent": "root"},
                     {"name": "site", "description": "ours | theirs", "parent": "rb"}],
        "associations": [{"account": "ra", "user": "u1"}, {"account": "rb", "user": "u1"},
                         {"account": "rb", "user": "u2"}],
    }
    # an account without any association has no parent
    assert gw.parse_accounting("lone|x\n", "") == {"accounts": [{"name": "lone", "description": "x", "parent": None}],
                                                   "associations": []}


def test_usage_queries():
    assert gw.usage_query("start=1795663800&end=1795663900") == (1795663800, 1795663900)
    assert gw.usage_query(f"start=0&end={31 * 86400}") == (0, 31 * 86400)
    for bad, why in (("", "start must be"), ("start=1", "end must be"), ("start=x&end=2", "start must be"),
                     ("start=-1&end=2", "start must be"), ("start=1.5&end=2", "start must be"),
                     ("start=5&end=5", "after start"), ("start=6&end=5", "after start"),
                     (f"start=0&end={31 * 86400 + 1}", "at most 31 days"), ("start=1&end=2&user=u1", "unknown"),
                     ("start=1&start=2&end=3", "once"), ("start=1&end=" + "9" * 12, "end must be")):
        with pytest.raises(gw.ApiError, match=why) as refused:
            gw.usage_query(bad)
        assert refused.value.status == 400, bad


def test_sinfo_nodes_merge_partitions():
    output = ("gpu01|mixed+drain|2|1000|gpu:2|a100,test|gpu*|root(0)|gpuaas: disk check|\n"
              "gpu01|mixed+drain|2|1000|gpu:2|a100,test|debug|root(0)|gpuaas: disk check|\n"
              "gpu02|idle|64|512000|gpu:a100:8(S:0-1)|(null)|gpu*|Unknown|none|\n")
    (one, two) = map(gw.public_node, gw.parse_sinfo(output))
    assert one == {"name": "gpu01", "state": "draining", "runtime_state": "MIXED+DRAIN",
                   "reason": "gpuaas: disk check", "cpus": 2, "memory_mb": 1000, "gpus": 2,
                   "features": ["a100", "test"], "partitions": ["gpu", "debug"]}
    assert two["state"] == "idle" and two["reason"] is None and two["gpus"] == 8 and two["features"] == []


def entries_of(output):
    return {int(v[0]): (gw.squeue_job, v, gw.job_state(v[gw.Q_STATE]), v[gw.Q_USER], v[gw.Q_ACCOUNT])
            for v in gw.rows(output, len(gw.SQUEUE_NAMES), trailing=True)}


def test_pages_are_newest_first_and_only_of_the_callers_accounts():
    entries = entries_of(SQUEUE)
    items, after = gw.select(entries, {"acme"}, None, None, None, 2)
    assert [j["id"] for j in items] == ["7", "5"] and after == "5"
    items, after = gw.select(entries, {"acme"}, None, None, 5, 2)
    assert [j["id"] for j in items] == ["1"] and after is None
    assert [j["id"] for j in gw.select(entries, {"acme", "other"}, {"pending"}, None, None, 50)[0]] == ["3"]
    assert [j["id"] for j in gw.select(entries, {"acme", "other"}, None, "bob", None, 50)[0]] == ["3"]
    assert gw.select(entries, {"nobody"}, None, None, None, 50) == ([], None)


# ---- requests -------------------------------------------------------------------------------------------------

SCRIPT = "#!/bin/bash\nsrun hostname\n"


def test_a_submission_becomes_sbatch_options():
    body = {"name": "train", "script": SCRIPT, "account": "Research", "working_directory": "/home/alice-3f9a/run",
            "resources": {"nodes": 2, "tasks": 4, "cpus_per_task": 8, "gpus": 2, "memory_mb": 4096,
                          "time_limit_minutes": 90, "partition": "gpu"}}
    account, options, script, directory = gw.submission(body, ["research"])
    assert account == "Research" and script == SCRIPT and directory == "/home/alice-3f9a/run"
    assert options == ["--account=Research", "--job-name=train", "--nodes=2", "--ntasks=4", "--cpus-per-task=8",
                       "--gres=gpu:2", "--mem=4096M", "--time=90", "--partition=gpu"]
    minimal = gw.submission({"name": "t", "script": SCRIPT, "account": "research", "resources": {"gpus": 0}},
                            ["research"])
    assert minimal == ("research", ["--account=research", "--job-name=t"], SCRIPT, None)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"name": "--wrap=id"}, "name"),
        ({"name": ""}, "name"),
        ({"name": "a" * 129}, "name"),
        ({"script": "echo hi"}, "script"),
        ({"script": "#!/bin/sh\n" + "x" * 65536}, "64 KiB"),
        ({"script": 7}, "script"),
        ({"account": "a,b"}, "account"),
        ({"resources": {"nodes": 0}}, "resources.nodes"),
        ({"resources": {"nodes": True}}, "resources.nodes"),
        ({"resources": {"tasks": "4"}}, "resources.tasks"),
        ({"resources": {"gpus": -1}}, "resources.gpus"),
        ({"resources": {"memory_mb": 1.5}}, "resources.memory_mb"),
        ({"resources": {"time_limit_minutes": 10**9}}, "resources.time_limit_minutes"),
        ({"resources": {"partition": "gpu,debug"}}, "partition"),
        ({"resources": {"qos": "high"}}, "unknown resource: qos"),
        ({"resources": []}, "resources"),
        ({"working_directory": "relative/dir"}, "working_directory"),
        ({"working_directory": "/tmp/a\nb"}, "working_directory"),
        ({"extra": 1}, "unknown field: extra"),
    ],
)
def test_submissions_the_gateway_refuses(change, message):
    body = {"name": "train", "script": SCRIPT, "account": "research", **change}
    with pytest.raises(gw.ApiError, match=message) as refused:
        gw.submission(body, ["research"])
    assert refused.value.status == 400 and refused.value.code == "bad_request"


def test_an_account_outside_the_claims_is_forbidden():
    with pytest.raises(gw.ApiError) as refused:
        gw.submission({"name": "t", "script": SCRIPT, "account": "ops"}, ["research"])
    assert refused.value.status == 403


def test_list_queries():
    assert gw.list_query("") == (None, None, 50, None)
    assert gw.list_query("state=failed,succeeded&user=alice-3f9a&limit=500&before=4711") == (
        {"failed", "succeeded"}, "alice-3f9a", 500, 4711)
    for bad in ("state=done", "limit=0", "limit=501", "limit=x", "before=12a", "user=Alice", "page=2",
                "limit=1&limit=2"):
        with pytest.raises(gw.ApiError) as refused:
            gw.list_query(bad)
        assert refused.value.status == 400, bad


def test_node_operation_values():
    prefix = gw.TENANT_PREFIX
    assert gw.drain_reason("disk check", prefix) == "gpuaas-tenant: disk check"
    assert gw.drain_reason("gpuaas-tenant: disk check", prefix) == "gpuaas-tenant: disk check"
    assert gw.drain_reason("gpuaas-tenant:disk check", prefix) == "gpuaas-tenant: disk check"
    assert gw.drain_reason("gpuaas: disk check", prefix) == "gpuaas-tenant: gpuaas: disk check"
    assert gw.drain_reason(None, prefix).startswith("gpuaas-tenant: ")
    assert gw.feature_list(["a100", "nvlink", "a100"]) == ["a100", "nvlink"]
    assert gw.feature_list([]) == []
    for bad_reason in ("", "   ", "two\nlines", "x" * 257, 5):
        with pytest.raises(gw.ApiError):
            gw.drain_reason(bad_reason, prefix)
    for bad_features in ("a100", ["a,b"], ["a100&b"], [1], ["x"] * 65):
        with pytest.raises(gw.ApiError):
            gw.feature_list(bad_features)


# The platform's own lifecycle reasons, as slurm_node (module_utils/slurm.py) writes them.
PLATFORM_REASONS = [owned_reason("gpuaas", "drained by gpuaas.apps"), owned_reason("gpuaas", "removed by gpuaas.apps")]


def test_no_platform_reason_can_match_the_tenant_prefix():
    assert gw.tenant_prefix(gw.TENANT_PREFIX) == "gpuaas-tenant:"
    assert PLATFORM_REASONS == ["gpuaas: drained by gpuaas.apps", "gpuaas: removed by gpuaas.apps"]
    assert not any(reason.startswith(gw.TENANT_PREFIX) for reason in PLATFORM_REASONS)
    # a prefix any "gpuaas: ..." reason could start with is refused, and so the gateway does not start with it
    for bad in ("gpuaas:", "gpuaas", "gpu", "", "gpuaas: ", "gpuaas: drained", "tenant", "a b:", None):
        with pytest.raises(ValueError, match="drain_prefix"):
            gw.tenant_prefix(bad)
        if isinstance(bad, str):
            with pytest.raises(ValueError):
                gw.Gateway({"instance_id": AUD, "drain_prefix": bad})
    assert gw.Gateway({"instance_id": AUD}).prefix == "gpuaas-tenant:"


def sinfo_node(state, reason, by="root(0)"):
    """One node as sinfo -N -O SINFO_FORMAT shows it (the words of real 22.05.8 output)."""
    (node,) = gw.parse_sinfo(f"gpu01|{state}|2|1000|gpu:2|a100,test|gpu*|{by}|{reason}|\n")
    return node


@pytest.mark.parametrize(
    "state, reason, by, owner",
    [
        ("idle+drain", PLATFORM_REASONS[0], "root(0)", "the platform's own lifecycle (gpuaas), set by root(0)"),
        ("mixed+drain", PLATFORM_REASONS[0], "root(0)", "the platform's own lifecycle (gpuaas)"),
        ("down+drain", PLATFORM_REASONS[1], "root(0)", "the platform's own lifecycle (gpuaas)"),
        ("idle*+drain", PLATFORM_REASONS[1], "root(0)", "the platform's own lifecycle (gpuaas)"),
        ("idle+drain", "admin: firmware", "root(0)", "admin, set by root(0)"),
        ("down", "Not responding", "slurm(64030)", "slurm(64030)"),
        ("idle*", "none", "Unknown", "Slurm"),
        ("down", "none", "Unknown", "Slurm"),
        ("idle", "admin: watch this one", "root(0)", "admin"),  # a reason on a node in service is still theirs
    ],
)
def test_a_reason_of_anyone_else_is_not_the_tenants_to_drain_or_resume(state, reason, by, owner):
    node = sinfo_node(state, reason, by)
    conflict = gw.held_by_another(node, gw.TENANT_PREFIX)
    assert conflict and owner in conflict and "gpu01" in conflict, conflict
    assert (reason in conflict) == (reason != "none")


@pytest.mark.parametrize("state", ["idle+drain", "mixed+drain", "down+drain", "idle*+drain", "down", "idle"])
def test_the_tenants_own_reason_and_a_node_in_service_are_theirs(state):
    assert gw.held_by_another(sinfo_node(state, "gpuaas-tenant: swap a DIMM"), gw.TENANT_PREFIX) is None
    if gw.node_state(state)[0] not in gw.OUT_OF_SERVICE:
        assert gw.held_by_another(sinfo_node(state, "none", "Unknown"), gw.TENANT_PREFIX) is None


def test_slurm_refusal_words():
    stderr = ("sbatch: error: Batch job submission failed: Invalid account or account/partition combination "
              "specified\n")
    assert gw.refusal_message(stderr) == ("Batch job submission failed: Invalid account or account/partition "
                                          "combination specified")


# ---- HTTP: what answers before any Slurm command runs -----------------------------------------------------------


@pytest.fixture(scope="module")
def server():
    """The gateway's own HTTP server on a loopback port of this machine (no Slurm here: only refusals are asked)."""
    srv = gw.make_server({"instance_id": AUD, "listen": "127.0.0.1", "port": 0}, KEY)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def call(port, method, path, token=None, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        sent = dict(headers or {})
        if token:
            sent["Authorization"] = f"Bearer {token}"
        conn.request(method, path, body=body, headers=sent)
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        conn.close()


def fresh_token(**claims):
    now = int(time.time())
    return make_token(iat=now, exp=now + 60, **claims)


def test_every_refusal_answers_the_error_shape(server, capfd):
    cases = [
        (("GET", "/v1/jobs"), 401),
        (("GET", "/v1/jobs", "not-a-token"), 401),
        (("GET", "/v1/jobs", make_token()), 401),  # not issued in the last 300 s
        (("GET", "/v1/nowhere", None), 404),
        (("GET", "/v2/jobs", None), 404),
        (("PUT", "/v1/jobs", None), 405),
        (("GET", "/v1/jobs?limit=0", None), 400),
        (("POST", "/v1/jobs", None, "{not json"), 400),
        (("POST", "/v1/jobs", None, json.dumps({"name": "x", "script": "no shebang", "account": "research"})), 400),
        (("POST", "/v1/jobs", fresh_token(sub=None), json.dumps({"name": "x"})), 403),
        (("POST", "/v1/jobs", None, json.dumps({"name": "x", "script": SCRIPT, "account": "ops"})), 403),
        (("POST", "/v1/nodes/gpu01", None, json.dumps({"action": "drain"})), 403),
        (("POST", "/v1/nodes/gpu01", fresh_token(node_operate=True), json.dumps({"action": "reboot"})), 400),
        (("GET", "/v1/jobs/4711x", None), 404),
        # the platform's reads of accounting need the accounting claim, whatever else the token holds
        (("GET", "/v1/accounting", None), 403),
        (("GET", "/v1/accounting", fresh_token(sub=None, node_operate=True, accounting=False)), 403),
        (("GET", "/v1/usage?start=0&end=60", None), 403),
        (("GET", "/v1/usage?start=0", fresh_token(sub=None, accounting=True)), 400),
        (("GET", "/v1/usage?start=0&end=9999999999", fresh_token(sub=None, accounting=True)), 400),
        (("POST", "/v1/usage?start=0&end=60", fresh_token(sub=None, accounting=True)), 405),
    ]
    for args, status in cases:
        if args[2:3] == (None,):  # a fresh token for each call: each is used once
            args = (*args[:2], fresh_token(), *args[3:])
        got, document = call(server, *args)
        assert got == status, (args[:2], document)
        assert set(document) == {"error"} and set(document["error"]) == {"code", "message"}, document
    # one line per request, never the token
    token = fresh_token()
    assert call(server, "GET", "/v1/nowhere", token)[0] == 404
    log = capfd.readouterr().err
    assert "GET /v1/jobs 401" in log and "sub=alice-3f9a" in log
    assert token not in log and token.split(".")[2] not in log


def test_a_token_is_accepted_once_and_one_without_a_jti_never(server):
    token = fresh_token()
    assert call(server, "GET", "/v1/nowhere", token)[0] == 404  # accepted (answered past the token check)
    for attempt in (2, 3):
        status, document = call(server, "GET", "/v1/nowhere", token)
        assert status == 401 and "used before" in document["error"]["message"], (attempt, document)
    status, document = call(server, "GET", "/v1/nowhere", fresh_token(jti=None))
    assert status == 401 and "no jti" in document["error"]["message"]
    # a token refused for another reason is not remembered: its signed twin is not taken for a replay
    jti = uuid.uuid4().hex
    assert call(server, "GET", "/v1/nowhere", make_token(jti=jti))[0] == 401  # not issued in the last 300 s
    assert call(server, "GET", "/v1/nowhere", fresh_token(jti=jti))[0] == 404


def test_a_sub_that_is_no_platform_identity_is_an_unknown_identity(server):
    """No such Unix user, or one below the platform's uids (root): 403 unknown_identity, before sbatch is run
    (core answers its 409 identity_not_synced)."""
    body = json.dumps({"name": "x", "script": SCRIPT, "account": "research"})
    for sub in (f"gw-nobody-{uuid.uuid4().hex[:6]}", "root"):
        status, document = call(server, "POST", "/v1/jobs", fresh_token(sub=sub), body)
        assert status == 403 and document["error"]["code"] == "unknown_identity", (sub, document)
        assert sub in document["error"]["message"]
    status, document = call(server, "POST", "/v1/jobs", fresh_token(sub=None), body)
    assert status == 403 and document["error"]["code"] == "forbidden"


def test_a_body_too_large_is_refused_before_it_is_read(server):
    conn = http.client.HTTPConnection("127.0.0.1", server, timeout=10)
    try:
        conn.putrequest("POST", "/v1/jobs")
        conn.putheader("Authorization", f"Bearer {fresh_token()}")
        conn.putheader("Content-Length", str(gw.BODY_MAX_BYTES + 1))
        conn.endheaders()
        response = conn.getresponse()
        assert response.status == 413 and "error" in json.loads(response.read())
    finally:
        conn.close()


def test_a_request_http_server_cannot_parse_answers_json(server):
    conn = http.client.HTTPConnection("127.0.0.1", server, timeout=10)
    try:
        conn.putrequest("BREW", "/v1/jobs")
        conn.endheaders()
        response = conn.getresponse()
        assert response.status in (405, 501)
        assert "error" in json.loads(response.read())
    finally:
        conn.close()


def test_a_request_line_http_server_cannot_read_answers_json(server):
    with socket.create_connection(("127.0.0.1", server), timeout=10) as sock:
        sock.sendall(b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n")  # longer than http.server reads
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    head, body = answer.partition(b"\r\n\r\n")[::2]
    assert head.startswith(b"HTTP/1.1 414") and "error" in json.loads(body)
