"""Following an operation: its progress rebuilt from the instance's events that carry its correlation id,
read from the event stream until the operation ends.

Ansible decides while a playbook runs which tasks run on which hosts (conditions, includes, loops), so
no run knows its total ahead: the total shown is the task starts seen so far (one per task and host),
and done counts the starts that ended (ok, failed, unreachable, or skipped: a host starting its next
task has left the one before). When the run ends every start is done.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

from .errors import ClientError

if TYPE_CHECKING:
    from .http import Client

TERMINAL = ("succeeded", "failed", "canceled")
# The command's exit status for each result (documented in docs/cli.md).
EXIT_STATUS = {"succeeded": 0, "failed": 1, "canceled": 3}
TASK_ENDS = {"run.task_ok": "ok", "run.task_failed": "failed", "run.host_unreachable": "unreachable"}
# A finished operation's last events are written in the same transaction as its status; the grace
# covers a stream that is a poll behind.
END_GRACE_SECONDS = 3.0


def timestamp(value: str | None) -> datetime | None:
    if not value:
        return None
    moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


# The payload keys a reader needs, in the order shown: an operation's, a run's, a member's node, a health
# check's (what it ran: module, hosts, members, seconds) and a host cleanup's (the console's progress.js
# shows the same).
DESCRIBED = ("kind", "attempt", "node_name", "host_name", "host", "task", "status", "code", "module", "hosts",
             "members", "seconds", "attempts", "reason", "message")


def describe(event: dict) -> str:
    """One event as `type key=value ...` (the payload keys a reader needs)."""
    payload = event.get("payload") or {}
    parts = [event["type"]]
    for key in DESCRIBED:
        if payload.get(key) not in (None, ""):
            parts.append(f"{key}={payload[key]}")
    return " ".join(parts)


@dataclass
class Progress:
    """What the events of one operation tell so far."""

    op: dict
    started: int = 0
    done: int = 0
    failed: int = 0
    running: dict[str, str] = field(default_factory=dict)  # host -> the task it runs
    hosts: set[str] = field(default_factory=set)
    failure: dict | None = None  # the first failed task that was not ignored
    last_task: str | None = None
    ended: bool = False  # the operation's own terminal event was seen
    started_at: datetime | None = None
    seen: set[int] = field(default_factory=set)

    @property
    def status(self) -> str:
        return self.op["status"]

    @property
    def finished(self) -> bool:
        return self.op["status"] in TERMINAL

    def update(self, op: dict) -> None:
        self.op = op
        self.started_at = timestamp(op.get("started_at")) or self.started_at

    def elapsed(self) -> float:
        begin = self.started_at or timestamp(self.op.get("created_at"))
        end = timestamp(self.op.get("finished_at")) if self.finished else None
        if begin is None:
            return 0.0
        return max(0.0, ((end or datetime.now(UTC)) - begin).total_seconds())

    def apply(self, event: dict) -> str | None:
        """Takes in one event; returns the line it is worth (None: counted only, or not this operation's)."""
        if event["id"] in self.seen or event.get("correlation_id") != self.op["correlation_id"]:
            return None
        self.seen.add(event["id"])
        kind, payload = event["type"], event.get("payload") or {}
        ours = payload.get("operation_id") == str(self.op["id"])
        if kind == "operation.started" and ours:
            if int(payload.get("attempt") or 1) > 1:  # a new attempt runs the playbook again from the start
                self.started = self.done = self.failed = 0
                self.running.clear()
                self.failure = None
            self.started_at = timestamp(event.get("occurred_at"))
            return f"started (attempt {payload.get('attempt')}, {payload.get('worker')})"
        if kind == "run.task_started":
            host = payload.get("host") or "-"
            if host in self.running:
                self.done += 1  # its previous task was skipped (skips have no event of their own)
            self.running[host] = payload.get("task") or ""
            self.hosts.add(host)
            self.started += 1
            return None
        if kind in TASK_ENDS:
            host, task = payload.get("host") or "-", payload.get("task") or ""
            if self.running.pop(host, None) is None:
                self.started += 1
            self.hosts.add(host)
            self.done += 1
            outcome = TASK_ENDS[kind]
            if outcome != "ok":
                if payload.get("ignored"):
                    outcome += " (ignored)"
                else:
                    self.failed += 1
                    self.failure = self.failure or {"host": host, "task": task, "message": payload.get("message")}
            self.last_task = f"{outcome} {host}: {task}"
            line = f"[{self.done}/{self.started}] {self.last_task}"
            message = str(payload.get("message") or "").strip()
            return line + (f": {message}" if outcome != "ok" and message else "")
        if kind == "run.play_started":
            # A play starts once the one before ended on every host: a task still open there was skipped.
            self.done += len(self.running)
            self.running.clear()
            return f"play {payload.get('play')}"
        if kind == "run.playbook_stats":
            self.done += len(self.running)
            self.running.clear()
            return None
        if kind.startswith("run."):
            return None
        if kind.startswith("operation.") and ours:
            if kind.removeprefix("operation.") in TERMINAL:
                self.ended = True
                self.running.clear()  # a stopped run's tasks did not end; none runs any more
            reason = f": {str(payload['reason']).strip()}" if payload.get("reason") else ""
            return kind.removeprefix("operation.") + reason
        return describe(event)

    def summary(self) -> str:
        op = self.op
        head = f"{op['kind']} {op['status']} in {duration(self.elapsed())}"
        tasks = f"{self.done}/{self.started} tasks on {len(self.hosts)} host{'s' if len(self.hosts) != 1 else ''}"
        if op["status"] == "succeeded":
            return f"{head}: {tasks}"
        if op["status"] in TERMINAL:
            error = op.get("error") or {}
            message = str(error.get("message") or op["status"]).strip()
            return (f"{head}: {message} ({error.get('code', op['status'])}, "
                    f"correlation_id {op['correlation_id']})")
        return f"{op['kind']} {op['status']} for {duration(self.elapsed())}: {tasks}"


def duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    return f"{minutes}m{seconds:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


class View(Protocol):
    def start(self, progress: Progress) -> None: ...
    def line(self, progress: Progress, text: str, event: dict) -> None: ...
    def tick(self, progress: Progress) -> None: ...
    def stop(self, progress: Progress) -> None: ...


def history(client: Client, op: dict) -> Progress:
    """The operation's progress from its recorded events (no stream): what `ops show` reports."""
    progress = Progress(op)
    progress.update(op)
    for event in client.pages(f"/v1/instances/{op['instance_id']}/events", correlation_id=op["correlation_id"]):
        progress.apply(event)
    return progress


def follow(client: Client, op: dict, view: View, *, poll_seconds: float = 2.0,
           timeout: float | None = None) -> Progress:
    """Shows the operation's events through `view` as they arrive, from its first event on, until it
    ends; returns its progress with the finished operation. KeyboardInterrupt, or `timeout` seconds
    (a ClientError), leave it running."""
    progress = Progress(op)
    progress.update(op)
    first = client.get(f"/v1/instances/{op['instance_id']}/events", correlation_id=op["correlation_id"],
                       limit=1)["items"]
    stream = client.event_stream(op["instance_id"], after=first[0]["id"] - 1 if first else 0)
    inbox: queue.Queue = queue.Queue()

    def read() -> None:
        try:
            for event in stream:
                inbox.put(event)
        except Exception as exc:  # noqa: BLE001 - handed to the main thread, which raises it
            inbox.put(exc)

    reader = threading.Thread(target=read, name="gpuaas-event-stream", daemon=True)
    reader.start()
    view.start(progress)
    next_poll, ended_at = time.monotonic() + poll_seconds, None
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while True:
            if deadline is not None and time.monotonic() > deadline:
                raise ClientError(f"{op['kind']} {op['id']} did not finish in {timeout:.0f}s; it goes on")
            try:
                item = inbox.get(timeout=0.25)
            except queue.Empty:
                item = None
            if isinstance(item, Exception):
                if stream.closed.is_set():
                    break
                raise item
            if item is not None:
                text = progress.apply(item)
                if text is not None:
                    view.line(progress, text, item)
            if (progress.ended and not progress.finished) or time.monotonic() >= next_poll:
                progress.update(client.get(f"/v1/operations/{op['id']}"))
                next_poll = time.monotonic() + poll_seconds
            if progress.finished:
                ended_at = ended_at or time.monotonic()
                if (progress.ended and inbox.empty()) or time.monotonic() - ended_at > END_GRACE_SECONDS:
                    break
            view.tick(progress)
    finally:
        stream.close()
        view.stop(progress)
        reader.join(timeout=5)
    return progress
