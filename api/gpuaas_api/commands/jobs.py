"""`gpuaas jobs submit|list|show|cancel`: batch jobs on an instance's scheduler (docs/scheduler.md), as your
runtime identity, charged to your project's account."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from ..client.cli import command, emit, output_option, project_option, project_ref, runtime_name, structured

JOB_STATES = ("pending", "running", "succeeded", "failed", "cancelled")
DEFAULT_PAGE = 50  # the service's own default page size
# The submit flags and the JobResources field each one sets.
RESOURCES = (("nodes", "nodes", "nodes (default 1)"), ("tasks", "tasks", "tasks (default 1)"),
             ("cpus_per_task", "cpus-per-task", "CPUs per task (default 1)"),
             ("gpus", "gpus", "GPUs per node (default 0)"), ("memory_mb", "mem-mb", "memory per node, in MB"),
             ("time_limit_minutes", "time", "time limit, in minutes"))


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("jobs", help="batch jobs on an instance's scheduler: submit, list, show, cancel")
    jsub = p.add_subparsers(dest="jobs_command", metavar="ACTION", required=True)

    submit = jsub.add_parser("submit", help="submit a batch script; it runs as your runtime identity, charged to "
                                            "your project's account")
    _instance_argument(submit)
    submit.add_argument("script", metavar="SCRIPT_FILE", help="the batch script (starting with #!); - reads it "
                                                             "from standard input")
    submit.add_argument("--name", help="the job's name (default: the script's file name without its suffix; "
                                       "`stdin` for -)")
    for field, flag, text in RESOURCES:
        submit.add_argument(f"--{flag}", dest=field, type=_count if field == "gpus" else _positive,
                            metavar="N" if flag != "time" else "MINUTES", help=text)
    submit.add_argument("--partition", metavar="P", help="the partition (queue) to run in")
    submit.add_argument("--workdir", metavar="D", help="the job's working directory on the cluster (an absolute path)")
    project_option(submit)
    output_option(submit)
    submit.set_defaults(func=submit_job)

    ls = jsub.add_parser("list", help="your project's jobs, newest first")
    _instance_argument(ls)
    ls.add_argument("--state", choices=JOB_STATES, help="only jobs in this state (an ended state also reads the "
                                                        "last 7 days of accounting)")
    ls.add_argument("--mine", action="store_true", help="only the jobs you submitted")
    ls.add_argument("--limit", type=_page_size, default=DEFAULT_PAGE, metavar="N",
                    help=f"at most N jobs (1-500, default {DEFAULT_PAGE}); with --all, the page size")
    ls.add_argument("--all", action="store_true", help="every job, page after page")
    project_option(ls)
    output_option(ls)
    ls.set_defaults(func=list_jobs)

    for action, text, func in (("show", "one job: state, times, resources, exit code", show_job),
                               ("cancel", "cancel a job of your project", cancel_job)):
        one = jsub.add_parser(action, help=text)
        _instance_argument(one)
        one.add_argument("job", metavar="JOB_ID", type=runtime_name,
                         help="the job's id on the scheduler (as `gpuaas jobs list` shows)")
        project_option(one)
        output_option(one)
        one.set_defaults(func=func)


def _instance_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("instance", metavar="INSTANCE", help="the instance's id or name")


def _positive(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of 1 or more")
    return int(value)


def _count(value: str) -> int:
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of 0 or more")
    return int(value)


def _page_size(value: str) -> int:
    size = _positive(value)
    if size > 500:
        raise argparse.ArgumentTypeError(f"{value} is more than 500")
    return size


def default_name(script: str) -> str:
    """A job name from the script's file name: its stem, with what a job name may not hold made a dash."""
    stem = "stdin" if script == "-" else Path(script).stem
    return re.sub(r"[^A-Za-z0-9._-]+", "-", stem).lstrip("._-")[:64] or "job"


def read_script(script: str) -> str:
    from ..client.errors import ClientError

    if script == "-":
        return sys.stdin.read()
    try:
        return Path(script).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ClientError(f"{script} is not a UTF-8 text file") from None
    except OSError as exc:
        raise ClientError(f"cannot read {script}: {exc.strerror}") from None


def submit_body(args: argparse.Namespace) -> dict:
    """The JobSubmit body of `gpuaas jobs submit`: the resources given, the service's defaults for the rest."""
    resources = {field: getattr(args, field) for field, _, _ in RESOURCES if getattr(args, field) is not None}
    if args.partition:
        resources["partition"] = args.partition
    body = {"name": args.name or default_name(args.script), "script": read_script(args.script),
            "resources": resources}
    return body | ({"working_directory": args.workdir} if args.workdir else {})


def resources_line(resources: dict) -> str:
    return " ".join(f"{key}={value}" for key, value in resources.items() if value is not None) or "-"


def job_state(job: dict) -> str:
    from ..client.render import runtime_word

    return runtime_word(job["state"], job.get("runtime_state"))


def describe_job(job: dict) -> list[str]:
    from ..client.render import when

    owner = job.get("owner")
    rows = [("state", job_state(job)), ("reason", job.get("reason") or "-"),
            ("user", job["runtime_user"] + (f" ({owner['kind'].replace('_', ' ')} {owner['id']})" if owner else "")),
            ("account", job["account"]), ("submitted", when(job.get("submitted_at"))),
            ("started", when(job.get("started_at"))), ("ended", when(job.get("ended_at"))),
            ("resources", resources_line(job.get("resources") or {})),
            ("exit code", "-" if job.get("exit_code") is None else job["exit_code"])]
    return [f"job {job['id']}  {job['name']}"] + [f"  {name:<10} {value}" for name, value in rows]


def jobs_table(jobs: list[dict]) -> str:
    from ..client.render import table, when

    return table(["ID", "NAME", "STATE", "USER", "ACCOUNT", "SUBMITTED", "STARTED", "ENDED", "REASON"],
                 [[j["id"], j["name"], job_state(j), j["runtime_user"], j["account"], when(j.get("submitted_at")),
                   when(j.get("started_at")), when(j.get("ended_at")), j.get("reason")] for j in jobs])


def _show(args: argparse.Namespace, job: dict, heading: str | None = None) -> int:

    if structured(args):
        emit(args, job)
        return 0
    if heading:
        print(heading)
    print("\n".join(describe_job(job)))
    return 0


@command("jobs_submit")
def submit_job(args, client) -> int:
    from ..client import lookup

    body = submit_body(args)  # the script is read before anything is asked of the service
    instance = lookup.instance(client, args.instance, project_ref(args))
    job = client.post(f"/v1/instances/{instance['id']}/jobs", body)
    return _show(args, job, f"submitted to {instance['name']}:")


@command("jobs_list")
def list_jobs(args, client) -> int:
    from ..client import lookup

    instance = lookup.instance(client, args.instance, project_ref(args))
    path, query = f"/v1/instances/{instance['id']}/jobs", {"state": args.state, "mine": args.mine or None}
    if args.all:
        jobs, more = list(client.pages(path, **query, limit=args.limit)), None
    else:
        page = client.get(path, **query, limit=args.limit)
        jobs, more = page["items"], page.get("next_cursor")
    if structured(args):
        emit(args, jobs)
    else:
        print(jobs_table(jobs))
    if more:
        print(f"gpuaas: there are more jobs than the {args.limit} shown: --all lists every page", file=sys.stderr)
    return 0


@command("jobs_get")
def show_job(args, client) -> int:
    from ..client import lookup

    instance = lookup.instance(client, args.instance, project_ref(args))
    return _show(args, client.get(f"/v1/instances/{instance['id']}/jobs/{args.job}"))


@command("jobs_cancel")
def cancel_job(args, client) -> int:
    from ..client import lookup

    instance = lookup.instance(client, args.instance, project_ref(args))
    job = client.post(f"/v1/instances/{instance['id']}/jobs/{args.job}/cancel")
    if structured(args):
        emit(args, job)
    else:
        print(f"job {job['id']} ({job['name']}): cancel requested; now {job_state(job)}")
    return 0
