"""Runtime secrets of purpose `operator_access`: a credential the app's adapter declares (its `credentials`,
catalog/adapter.py CredentialSpec, e.g. a cluster's admin configuration), read from a serving member of the
instance when a caller holding `apps.instance.credentials.issue` asks for it
(POST /v1/instances/{id}/credentials/{name}).

The read takes the status read-back's path (executor/plan.py and runner.py, as health/checker.py runs
them): the module runs ad hoc from the version's collection build pinned by digest, in a scratch directory
removed at the end, with no event of the run recorded, on one member at a time until one answers. The
content goes from the run's memory (module_results) to the response: the run keeps no stdout file and no
job events (runner.run keep_output=False), though ansible-runner's callback writes each event's partial
file into the scratch directory while the run lasts; that directory is removed when the read ends, and
one a killed process left is swept when serve or a worker starts (runner.sweep_scratch). The audit row
and the timeline's `runtime_secret.issued` event say who got which credential from which member, never
what it holds."""

from __future__ import annotations

import shutil
import time
import uuid
from dataclasses import replace
from pathlib import Path
from uuid import UUID

from .. import correlation
from ..audit import service as audit
from ..config import OperationSettings
from ..db import Database
from ..errors import ApiError, conflict
from ..executor import plan as planner
from ..executor import runner
from ..executor.content import ContentRefused, run_content
from ..iam.auth import Principal
from . import service

PERMISSION = "apps.instance.credentials.issue"
# A credential is read from the cluster the instance runs: a degraded one still has a control plane.
ISSUABLE = ("running", "degraded")


def unavailable(message: str, **details) -> ApiError:
    return ApiError(502, "credential_unavailable", message, details)


def issue(db: Database, settings: OperationSettings, caller: Principal, instance_id: UUID, name: str) -> dict:
    """The credential `name` of the instance, read from the first serving member of its role that answers,
    with the issuance audited; the body of the route's answer."""
    with db.transaction() as conn:
        instance = service.get_instance(conn, instance_id)
        caller.require(PERMISSION, tenant_id=instance["tenant_id"], project_id=instance["project_id"])
        plan, credential = planner.credential_plan(conn, settings, instance, name)
        if instance["status"] not in ISSUABLE:
            raise conflict("instance_not_operable", f"the instance is {instance['status']}; credentials are read "
                           "from a running or degraded instance", status=instance["status"])
    # The runs happen outside any transaction: they take seconds and hold no row.
    try:
        collections_path = run_content(settings, db, plan)
    except ContentRefused as exc:
        raise unavailable(str(exc), reason=exc.code) from None
    attempts = []
    for node in plan.checked_hosts:
        content, why_not = _ask(settings, plan, collections_path, node, credential.result_key)
        if content is not None:
            issued_at = _record(db, caller, instance, name, credential.module, UUID(plan.node_members[node]))
            return {"name": name, "media_type": credential.media_type, "filename": credential.filename,
                    "content": content, "node_name": node, "issued_at": issued_at}
        attempts.append({"node_name": node, "reason": why_not})
    if not attempts:
        raise unavailable(f"no serving member of role {credential.role} to read credential {name} from",
                          role=credential.role, attempts=[])
    raise unavailable(f"no serving member of role {credential.role} answered for credential {name}",
                      role=credential.role, attempts=attempts)


def _ask(settings: OperationSettings, plan: planner.RunPlan, collections_path: Path, node: str,
         result_key: str) -> tuple[str | None, str]:
    """One member's answer: (content, "") or (None, why not). Bounded like a health check."""
    deadline = time.monotonic() + settings.health_timeout_seconds
    run_dir = Path(runner.scratch_dir("credential"))
    # A fresh id per run: it marks the run's processes (runner.kill_leftovers), and two issuances may overlap.
    op = {"id": f"credential-{uuid.uuid4().hex}", "attempt": 1, "correlation_id": correlation.current(),
          "kind": "credential"}
    try:
        result = runner.run(settings, op, replace(plan, host_pattern=node), collections_path,
                            on_event=lambda *_: None,
                            should_stop=lambda: "timeout" if time.monotonic() > deadline else None,
                            run_dir=run_dir, connect_timeout=settings.health_connect_timeout_seconds,
                            keep_output=False)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    answer = result.module_results.get(node)
    if answer is None:
        failure = result.host_failures.get(node) or {}
        return None, failure.get("message") or f"no answer before the read ended ({result.status})"
    content = answer.get(result_key)
    if not isinstance(content, str) or not content:
        return None, f"the module returned no {result_key}"
    return content, ""


def _record(db: Database, caller: Principal, instance: dict, name: str, module: str, member_id: UUID):
    """The audit row and the timeline event of one issuance (who, which credential, from which member);
    when it is issued. Never the content."""
    with db.transaction() as conn:
        member = service.get_member(conn, instance["id"], member_id)
        payload = {"purpose": "operator_access", "credential": name, "module": module,
                   "node_name": member["node_name"], "host_name": member["host_name"],
                   "issued_to": {"kind": caller.kind, "id": str(caller.id)}}
        event = audit.append_event(conn, instance, "runtime_secret.issued", payload, member_id=member_id)
        audit.record(conn, caller, "runtime_secret.issued", "app_instance", instance["id"], after=payload,
                     context=audit.instance_context(instance))
    return event["occurred_at"]
