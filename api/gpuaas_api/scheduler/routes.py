"""Jobs and nodes of an instance (docs/scheduler.md), each route gated by its seed-004 `scheduler.*` key in the
instance's project and served by the instance's scheduler gateway."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import Query

from .. import docs, errors
from ..common import Cursor, Limit, Page
from ..deps import DB, Caller, RunSettings, router
from ..location import LocatedRoute
from . import service
from .schemas import Job, JobId, JobState, JobSubmit, Node, NodeDrain, NodeFeatures, NodeList, NodeName

api = router("scheduler")
api.route_class = LocatedRoute  # Location on a submit's 201 (gpuaas_api.location)
_SERVED = ("no_scheduler", "instance_not_operable", "scheduler_unavailable", "scheduler_refused",
           "identity_not_synced")


@api.post("/v1/instances/{instance_id}/jobs", operation_id="jobs_submit", response_model=Job, status_code=201,
          openapi_extra=docs.example({"name": "train", "script": "#!/bin/sh\nsrun hostname\n",
                                      "resources": {"nodes": 1, "tasks": 1, "gpus": 0, "time_limit_minutes": 30}}),
          responses=errors.responses("account_not_allowed", *_SERVED))
def submit_job(instance_id: UUID, body: JobSubmit, caller: Caller, db: DB, settings: RunSettings):
    """Submit a batch job (`scheduler.queue.submit`). It runs as your runtime identity and is charged to your
    project's account; naming any other account is refused (403 account_not_allowed), and the runtime refuses it
    too (403 scheduler_refused). Answers the job with its runtime id."""
    return service.submit(db, settings, caller, instance_id, body)


@api.get("/v1/instances/{instance_id}/jobs", operation_id="jobs_list", response_model=Page[Job],
         responses=errors.responses(*_SERVED))
def list_jobs(instance_id: UUID, caller: Caller, db: DB, settings: RunSettings,
              state: Annotated[JobState | None, Query(description="only jobs in this state")] = None,
              mine: Annotated[bool, Query(description="only jobs you submitted")] = False,
              cursor: Annotated[Cursor | None, Query(description="opaque cursor from a previous page")] = None,
              limit: Annotated[Limit, Query(description="page size")] = 50):
    """Your project's jobs, newest first (`scheduler.queue.read`): queued, running and recently ended ones;
    with `state` set to an ended state, also those of the last 7 days from the runtime's accounting."""
    return service.list_jobs(db, settings, caller, instance_id, state=state, mine=mine, cursor=cursor, limit=limit)


@api.get("/v1/instances/{instance_id}/jobs/{job_id}", operation_id="jobs_get", response_model=Job,
         responses=errors.responses(*_SERVED))
def get_job(instance_id: UUID, job_id: JobId, caller: Caller, db: DB, settings: RunSettings):
    """One job of your project (`scheduler.queue.read`); 404 for a job of any other account."""
    return service.get_job(db, settings, caller, instance_id, job_id)


@api.post("/v1/instances/{instance_id}/jobs/{job_id}/cancel", operation_id="jobs_cancel", response_model=Job,
          responses=errors.responses(*_SERVED))
def cancel_job(instance_id: UUID, job_id: JobId, caller: Caller, db: DB, settings: RunSettings):
    """Cancel a job of your project (`scheduler.queue.cancel`); 404 for a job of any other account. Answers the
    job as the runtime shows it right after."""
    return service.cancel_job(db, settings, caller, instance_id, job_id)


@api.get("/v1/instances/{instance_id}/nodes", operation_id="nodes_list", response_model=NodeList,
         responses=errors.responses(*_SERVED))
def list_nodes(instance_id: UUID, caller: Caller, db: DB, settings: RunSettings):
    """The runtime's nodes and their state (`scheduler.node.read`)."""
    return service.list_nodes(db, settings, caller, instance_id)


_NODE_OPS = errors.responses("node_operation_not_supported", *_SERVED)


@api.post("/v1/instances/{instance_id}/nodes/{name}/drain", operation_id="nodes_drain", response_model=Node,
          openapi_extra=docs.example({"reason": "bad DIMM on slot 3"}), responses=_NODE_OPS)
def drain_node(instance_id: UUID, name: NodeName, body: NodeDrain, caller: Caller, db: DB, settings: RunSettings):
    """Stop scheduling on a node now (`scheduler.node.operate`): its running jobs finish, no new one starts. The
    reason is recorded in the runtime with the platform's prefix. To take a member out of the instance, drain
    the member instead (POST .../members/{id}/drain waits for its jobs)."""
    return service.operate_node(db, settings, caller, instance_id, name, "drain", body.model_dump())


@api.post("/v1/instances/{instance_id}/nodes/{name}/resume", operation_id="nodes_resume", response_model=Node,
          responses=_NODE_OPS)
def resume_node(instance_id: UUID, name: NodeName, caller: Caller, db: DB, settings: RunSettings):
    """Schedule on a node again (`scheduler.node.operate`); only a drain the platform set is lifted (409
    otherwise, naming the reason someone else set)."""
    return service.operate_node(db, settings, caller, instance_id, name, "resume", {})


@api.post("/v1/instances/{instance_id}/nodes/{name}/features", operation_id="nodes_features_set",
          response_model=Node, openapi_extra=docs.example({"features": ["a100", "nvlink"]}), responses=_NODE_OPS)
def set_node_features(instance_id: UUID, name: NodeName, body: NodeFeatures, caller: Caller, db: DB,
                      settings: RunSettings):
    """Set a node's features (labels jobs can ask for) (`scheduler.node.operate`), where the runtime has them."""
    return service.operate_node(db, settings, caller, instance_id, name, "features", body.model_dump())
