# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Running Slurm's command line tools and parsing their machine-readable output.

Written against Slurm 22.05 (Debian 12) and 24.11 (Debian 13). From 24.11 nodes and jobs are read as JSON
(``scontrol show node --json``, ``squeue --json``: data_parser v0.0.42), turned into the same shape the text
formats give, so that the modules' logic is one for both releases. Partitions and the configuration stay text:
24.11's partition JSON leaves out the Default flag, and ``scontrol show config`` has no JSON. The text formats:

* ``scontrol show -o <entity>``: one entity per line, ``Key=Value`` pairs separated by spaces, where a
  value may itself contain spaces (``OS=Linux 6.1.0 #1 SMP``) or ``=`` (``CfgTRES=cpu=2,mem=1000M``).
  A node's ``Reason=`` is free text and ends with a ``[user@timestamp]`` stamp.
* ``scontrol show config``: ``Key = Value`` lines.
* ``sacctmgr -P -n show ...``: ``|``-separated rows without a header, fields in the ``format=`` order.
* Slurm host lists (``gpu[01-03,07],login1``), as printed by squeue's ``%N``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import itertools
import json
import os
import re

# A field of a `scontrol show -o` line starts with a capitalised key directly followed by "=", at the
# start of the line or after whitespace. Free text (Reason) is handled separately: it may contain this.
_KEY_RE = re.compile(r"(?:^|(?<=\s))([A-Z][A-Za-z0-9_]*)=")
# "Reason=<text> [<user>@<time>]" -- the stamp ends the free text, wherever the field sits on the line.
_REASON_RE = re.compile(r"(?:^|\s)Reason=(?P<text>.*?) \[(?P<user>[^\]@\s]*)@(?P<time>[^\]\s]+)\](?=\s|$)")
# "<owner>: <text>" -- how the platform (and systems like Slinky) mark the reasons they set.
_OWNER_RE = re.compile(r"^(?P<owner>[A-Za-z0-9_.-]+): ")

BASE_STATES_BUSY = ("ALLOCATED", "MIXED", "COMPLETING")
RUNNING_JOB_STATES = "RUNNING,COMPLETING,SUSPENDED"
# The first release whose JSON output the readers below know (data_parser v0.0.42).
JSON_SINCE = (24, 11)
_VERSION_RE = re.compile(r"(\d+)\.(\d+)")

# Slurm's state words behind a member's state in the platform's words (see member_state()). scontrol
# spells FAIL on an allocated node FAILING.
_STATES_FAILED = frozenset(("DOWN", "FAIL", "FAILING", "NOT_RESPONDING"))
_STATES_ACTIVE = frozenset(("IDLE", "MIXED", "ALLOCATED", "COMPLETING"))


class SlurmError(Exception):
    """A Slurm command failed; str() is a message fit for fail_json."""

    def __init__(self, cmd, rc, stdout, stderr):
        self.cmd = cmd
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        detail = (stderr or stdout or "").strip()
        super(SlurmError, self).__init__("'%s' failed (rc=%s): %s" % (" ".join(cmd), rc, detail))


class SlurmRunner:
    """Runs scontrol/sacctmgr/squeue/sinfo through AnsibleModule.run_command.

    ``slurm_conf`` (optional) is exported as SLURM_CONF so a cluster whose slurm.conf is not at the
    default path can be reached. Output is read in the C locale.
    """

    def __init__(self, module, slurm_conf=None):
        self.module = module
        self.environ = {"LC_ALL": "C", "LANG": "C"}
        if slurm_conf:
            self.environ["SLURM_CONF"] = slurm_conf
        self._bins = {}
        self._version = None

    def _bin(self, name):
        if name not in self._bins:
            self._bins[name] = self.module.get_bin_path(name, required=True)
        return self._bins[name]

    def run(self, tool, args, check=True):
        """Run ``tool args``; returns (rc, stdout, stderr); raises SlurmError on rc != 0 when check."""
        cmd = [self._bin(tool)] + [str(a) for a in args]
        rc, out, err = self.module.run_command(cmd, environ_update=self.environ, check_rc=False)
        if check and rc != 0:
            raise SlurmError([tool] + cmd[1:], rc, out, err)
        return rc, out, err

    def version(self):
        """The Slurm release of the tools here, as (major, minor): `scontrol --version` says 'slurm-wlm 24.11.5'."""
        if self._version is None:
            match = _VERSION_RE.search(self.run("scontrol", ["--version"])[1])
            self._version = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
        return self._version

    def reads_json(self):
        return self.version() >= JSON_SINCE

    # ---- reads used by more than one module ---------------------------------------------------------
    def nodes(self, name=None):
        """Every node (or the one named) as parse_node_line() gives it; [] when Slurm does not know the name."""
        which = ["node"] + ([name] if name else [])
        if self.reads_json():
            return [json_node(n) for n in self.read_json("scontrol", ["show"] + which + ["--json"]).get("nodes", [])]
        args = ["show", "-o"] + which
        rc, out, err = self.run("scontrol", args, check=False)
        if rc != 0:
            if name and node_not_found(out, err):
                return []
            raise SlurmError(["scontrol"] + args, rc, out, err)
        return parse_nodes(out)

    def show_node(self, name):
        """The parsed node, or None when Slurm does not know it."""
        return next((n for n in self.nodes(name) if n.get("NodeName") == name), None)

    def running_jobs(self):
        """Jobs running, completing or suspended, as [{'job_id', 'nodes'}] (``nodes`` a Slurm host list)."""
        if self.reads_json():
            data = self.read_json("squeue", ["--json", "-t", RUNNING_JOB_STATES])
            return [{"job_id": str(j["job_id"]), "nodes": j.get("nodes") or ""} for j in data.get("jobs", [])]
        return parse_parsable(self.run("squeue", ["-h", "-t", RUNNING_JOB_STATES, "-o", "%i|%N"])[1],
                              ("job_id", "nodes"))

    def running_job_ids(self, node=None):
        """Ids of jobs running, completing or suspended (on ``node`` when given)."""
        if self.reads_json():
            return [j["job_id"] for j in self.running_jobs() if node is None or node in expand_hostlist(j["nodes"])]
        return parse_lines(self.run("squeue", ["-h", "-t", RUNNING_JOB_STATES, "-o", "%i"]
                                    + (["-w", node] if node else []))[1])

    def read_json(self, tool, args):
        """The JSON a Slurm tool prints with --json (among ``args``)."""
        rc, out, err = self.run(tool, args)
        try:
            return json.loads(out)
        except ValueError:
            raise SlurmError([tool] + args, rc, out, "its output is not JSON: " + (err or out)[:200]) from None


def node_not_found(stdout, stderr):
    text = (stdout or "") + (stderr or "")
    return " not found" in text or "Invalid node name" in text


# ---- scontrol -------------------------------------------------------------------------------------
def parse_kv_line(line):
    """One `scontrol show -o` line to an ordered dict of its fields (values stripped, never None)."""
    fields = {}
    matches = list(_KEY_RE.finditer(line))
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        fields[match.group(1)] = line[match.end():end].strip()
    return fields


def parse_node_line(line):
    """A node line: its fields plus ``Reason`` (text only), ``ReasonUser`` and ``ReasonTime``."""
    reason = _REASON_RE.search(line)
    if reason:
        line = line[:reason.start()] + " " + line[reason.end():]
    fields = parse_kv_line(line)
    # A reason without a stamp (not seen in 22.05, kept for safety) is parsed as a normal field.
    fields.setdefault("Reason", "")
    if reason:
        fields["Reason"] = reason.group("text").strip()
        fields["ReasonUser"] = reason.group("user")
        fields["ReasonTime"] = reason.group("time")
    return fields


def json_node(node):
    """One node of `scontrol show node --json` (24.11) in parse_node_line()'s shape."""
    changed = node.get("reason_changed_at") or {}
    fields = {
        "NodeName": node.get("name", ""),
        "State": "+".join(node.get("state") or []),
        "Reason": node.get("reason") or "",
        "CPUTot": str(node.get("cpus", "")),
        "RealMemory": str(node.get("real_memory", "")),
        "Gres": node.get("gres") or "",
        "AvailableFeatures": ",".join(node.get("features") or []),
        "Partitions": ",".join(node.get("partitions") or []),
    }
    if fields["Reason"]:
        fields["ReasonUser"] = node.get("reason_set_by_user") or ""
        fields["ReasonTime"] = str(changed.get("number", "")) if changed.get("set") else ""
    return fields


def parse_nodes(text):
    return [parse_node_line(line) for line in text.splitlines() if line.startswith("NodeName=")]


def parse_partitions(text):
    return [parse_kv_line(line) for line in text.splitlines() if line.startswith("PartitionName=")]


def parse_config(text):
    """`scontrol show config` to a dict; the header line and section titles are skipped."""
    config = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            config[key.strip()] = value.strip()
    return config


def split_state(state):
    """'MIXED+DRAIN' -> ('MIXED', ['DRAIN']). scontrol spells sinfo's 'idle*' as IDLE+NOT_RESPONDING."""
    parts = [p for p in (state or "").split("+") if p]
    if not parts:
        return "UNKNOWN", []
    return parts[0], parts[1:]


def join_state(base, flags):
    return "+".join([base] + list(flags))


def node_summary(fields, job_ids):
    """The facts modules report about a node, from parse_node_line() and its running job ids."""
    base, flags = split_state(fields.get("State"))
    busy = base in BASE_STATES_BUSY or "COMPLETING" in flags or bool(job_ids)
    return {
        "node": fields.get("NodeName"),
        "state": fields.get("State", ""),
        "base_state": base,
        "flags": flags,
        "drain": "DRAIN" in flags,
        "drained": "DRAIN" in flags and not busy,
        "down": base == "DOWN",
        "responding": "NOT_RESPONDING" not in flags,
        "reason": fields.get("Reason", ""),
        "reason_owner": reason_owner(fields.get("Reason", "")),
        "running_jobs": len(job_ids),
        "job_ids": list(job_ids),
    }


def wait_timed_out_message(timeout, node, what, facts):
    """Why a wait for ``node`` to ``what`` (e.g. 'drain') failed after ``timeout`` seconds, naming the jobs
    still running; shared by the slurm_node module and its action plugin."""
    return "timed out after %ss waiting for node %s to %s: state %s, %d running job(s) (ids: %s)" % (
        timeout, node, what, facts["state"], facts["running_jobs"], ", ".join(facts["job_ids"]) or "none")


def member_state(state, running_jobs=0):
    """A node's Slurm state (scontrol's ``State``, e.g. 'MIXED+DRAIN'; None for a node Slurm does not
    know) in the platform's words. First match wins:

    * DOWN, FAIL or NOT_RESPONDING (sinfo's ``*`` suffix), or a node Slurm does not know -> 'failed'
    * DRAIN while IDLE with nothing running -> 'drained'; DRAIN otherwise -> 'draining'
    * IDLE, MIXED, ALLOCATED, COMPLETING -> 'active'
    * anything else -> 'failed'
    """
    if state is None:
        return "failed"
    base, flags = split_state(state.upper())
    if base.endswith("*"):
        base, flags = base.rstrip("*"), flags + ["NOT_RESPONDING"]
    words = set([base] + flags)
    if words & _STATES_FAILED:
        return "failed"
    if "DRAIN" in words:
        idle = base == "IDLE" and "COMPLETING" not in words and not running_jobs
        return "drained" if idle else "draining"
    return "active" if base in _STATES_ACTIVE else "failed"


def node_name_of(host):
    """The Slurm node name the roles give an inventory host by default: its name up to the first dot."""
    return host.split(".", 1)[0]


def owned_reason(owner, reason):
    return "%s: %s" % (owner, reason)


def reason_owner(reason):
    """'gpuaas: maintenance' -> 'gpuaas'; a reason without an owner prefix -> None."""
    match = _OWNER_RE.match(reason or "")
    return match.group("owner") if match else None


# ---- sacctmgr -------------------------------------------------------------------------------------
def parse_parsable(text, fields):
    """`sacctmgr -P -n` rows to dicts keyed by ``fields`` (the format= order)."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = line.split("|")
        if len(values) != len(fields):
            raise ValueError("expected %d '|'-separated fields, got %d in %r"
                             % (len(fields), len(values), line))
        rows.append(dict(zip(fields, values)))  # noqa: B905 - lengths checked; strict= needs Python 3.10
    return rows


def parse_lines(text):
    return [line.strip() for line in text.splitlines() if line.strip()]


# ---- host lists -----------------------------------------------------------------------------------
def _split_top_level(text):
    """Split on commas outside brackets."""
    parts, depth, current = [], 0, []
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p for p in parts if p]


def _expand_range(spec):
    names = []
    for item in spec.split(","):
        low, sep, high = item.partition("-")
        if not sep:
            names.append(low)
            continue
        width = len(low) if low.startswith("0") else 0
        names.extend(str(n).zfill(width) for n in range(int(low), int(high) + 1))
    return names


def expand_hostlist(hostlist):
    """'gpu[01-03,07],login1' -> ['gpu01', 'gpu02', 'gpu03', 'gpu07', 'login1'] (Slurm's syntax)."""
    hosts = []
    for expr in _split_top_level((hostlist or "").strip()):
        pieces = re.split(r"\[([^\]]*)\]", expr)
        # pieces alternate literal text and bracket contents: expand every bracket, keep the literals.
        choices = [[p] if i % 2 == 0 else _expand_range(p) for i, p in enumerate(pieces)]
        hosts.extend("".join(combo) for combo in itertools.product(*choices))
    return hosts


# ---- this host's daemons --------------------------------------------------------------------------
def running_daemons(names, proc_root="/proc"):
    """{name: [pids]} of the processes of ``names`` (their ``comm``) alive on this host, read from /proc:
    no systemd, no controller. A zombie (state Z) or a process that ends while it is read does not count."""
    found = dict((name, []) for name in names)
    try:
        entries = os.listdir(proc_root)
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(os.path.join(proc_root, entry, "stat")) as stat:
                line = stat.read()
        except (IOError, OSError):
            continue  # ended meanwhile
        # "<pid> (<comm>) <state> ...": comm may hold spaces and parentheses, so split at the last ')'.
        head, _paren, tail = line.rpartition(")")
        comm = head.partition("(")[2]
        if comm in found and tail.split()[:1] != ["Z"]:
            found[comm].append(int(entry))
    return found
