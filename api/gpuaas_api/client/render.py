"""What the client prints: aligned tables, event lines, and the two views of a running operation: a
live panel (rich) on a terminal, plain timestamped lines elsewhere (logs, CI, pipes)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from datetime import UTC
from typing import IO, Any

from .follow import Progress, describe, duration, timestamp

STATUS_STYLE = {"succeeded": "green", "running": "cyan", "queued": "yellow", "failed": "red", "canceled": "magenta"}


def when(value: str | None) -> str:
    """A timestamp as UTC to the second (the service's REST and stream forms alike)."""
    moment = timestamp(value)
    return "-" if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def table(headers: list[str], rows: Iterable[Iterable[Any]]) -> str:
    """Columns aligned with two spaces between them; no borders, so grep and awk read it."""
    cells = [headers] + [["-" if v is None or v == "" else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def plural(count: Any, one: str) -> str:
    """"1 host", "3 hosts" (as the console's plural())."""
    return f"{count} {one}" + ("" if count == 1 else "s")


def short_id(value: Any) -> str:
    """An id's first 8 characters: enough for any command that takes an id (a unique prefix works)."""
    return str(value)[:8]


def word(value: Any) -> str:
    """A scalar as a key=value line shows it: booleans as true/false, a value with spaces or quotes quoted."""
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return json.dumps(text) if not text or any(c.isspace() or c in "\"=" for c in text) else text


def runtime_word(state: str, runtime_state: str | None) -> str:
    """A job's or node's state with the runtime's own word for it where that says more: `drained (IDLE+DRAIN)`,
    but `pending`, not `pending (PENDING)`."""
    return state + (f" ({runtime_state})" if runtime_state and runtime_state.lower() != state else "")


def read_line(runtime: dict) -> str:
    """What the last health check read of a member, on one line: its reason, then the app's details as
    key=value (by key; empty ones left out, and a detail `reason` that only repeats the reason)."""
    reason = runtime.get("reason") or ""
    details = [f"{key}={word(value)}" for key, value in sorted((runtime.get("details") or {}).items())
               if value not in (None, "") and not (key == "reason" and value == reason)]
    return "; ".join(part for part in (reason, " ".join(details)) if part)


def last_operation(op: dict | None) -> str | None:
    """A member's last operation in one cell: kind, status and short id."""
    return f"{op['kind']} {op['status']} {short_id(op['id'])}" if op else None


def event_line(event: dict) -> str:
    return f"{when(event['occurred_at'])}  {event['id']:>6}  {describe(event)}  [{event['correlation_id']}]"


def dump(value: Any, out: IO[str] | None = None, fmt: str = "json") -> None:
    """JSON (indented: one document) or YAML for scripts."""
    if fmt == "yaml":
        import yaml

        # Through JSON first: what YAML prints is what JSON would (ids and times as strings).
        text = yaml.safe_dump(json.loads(json.dumps(value, default=str)), sort_keys=False, allow_unicode=True)
        print(text, end="", file=out or sys.stdout)
    else:
        print(json.dumps(value, indent=2, default=str), file=out or sys.stdout)


def json_line(value: Any, out: IO[str] | None = None) -> None:
    print(json.dumps(value, separators=(",", ":"), default=str), file=out or sys.stdout, flush=True)


def cell(key: str, value: Any) -> Any:
    """A field in a table cell or a `fields` line: times (the API's `*_at`) to the second, booleans as yes/no,
    lists of words joined, objects as compact JSON."""
    if value is None or value == "" or value == [] or value == {}:
        return None
    if key.endswith("_at"):
        return when(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
        return ", ".join(str(v) for v in value)
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), default=str)
    return value


def fields(obj: dict) -> str:
    """One object, a field a line (`kubectl describe`'s shape): every field of the API's object."""
    width = max((len(k) for k in obj), default=0)
    return "\n".join(f"{key:<{width}}  {'-' if (shown := cell(key, value)) is None else shown}"
                     for key, value in obj.items())


class PlainView:
    """One line per event worth a line, prefixed with the operation's elapsed time."""

    def __init__(self, write: Callable[[str], None]):
        self.write = write

    def start(self, progress: Progress) -> None:
        pass

    def line(self, progress: Progress, text: str, event: dict) -> None:
        self.write(f"  {duration(progress.elapsed()):>6}  {text}")

    def tick(self, progress: Progress) -> None:
        pass

    def stop(self, progress: Progress) -> None:
        pass


class LiveView:
    """A panel redrawn in place: status and elapsed time, tasks done of started with a bar, the hosts
    running a task now, the last task, the failing task's message and the correlation id. Events
    other than finished tasks are printed above it, so the scrollback keeps the timeline."""

    def __init__(self, file: IO[str]):
        from rich.console import Console

        self.console = Console(file=file, highlight=False)
        self.live = None

    def start(self, progress: Progress) -> None:
        from rich.live import Live

        self.live = Live(self.render(progress), console=self.console, refresh_per_second=4, transient=True)
        self.live.start()

    def line(self, progress: Progress, text: str, event: dict) -> None:
        if event["type"] != "run.task_ok":
            self.console.print(f"  {duration(progress.elapsed()):>6}  {text}", markup=False)

    def tick(self, progress: Progress) -> None:
        if self.live is not None:
            self.live.update(self.render(progress))

    def stop(self, progress: Progress) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None

    def render(self, progress: Progress):
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        op = progress.op
        grid = Table.grid(padding=(0, 1))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column()
        status = Text(op["status"], style=STATUS_STYLE.get(op["status"], ""))
        grid.add_row(op["kind"], Text.assemble(f"{str(op['id'])[:8]}  ", status, f"  {duration(progress.elapsed())}"))
        bar = Table.grid(padding=(0, 1))
        bar.add_row(f"{progress.done}/{progress.started}",
                    ProgressBar(total=max(progress.started, 1), completed=progress.done, width=30))
        grid.add_row("tasks", bar)
        running = sorted(progress.running.items())
        hosts = "\n".join(f"{host}  {task}" for host, task in running[:8])
        if len(running) > 8:
            hosts += f"\n… and {len(running) - 8} more"
        grid.add_row("hosts", Text(hosts or "-"))
        if progress.last_task:
            grid.add_row("last", Text(progress.last_task))
        if progress.failure:
            f = progress.failure
            grid.add_row("failed", Text(f"{f['task']!r} on {f['host']}: {f['message']}", style="red"))
        grid.add_row("correlation", Text(op["correlation_id"], style="dim"))
        return grid


def operation_view(out: IO[str]) -> PlainView | LiveView:
    """The live panel where `out` is a terminal, plain lines elsewhere."""
    if out.isatty():
        return LiveView(out)
    return PlainView(lambda text: print(text, file=out, flush=True))
