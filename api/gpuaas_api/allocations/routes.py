from __future__ import annotations

from uuid import UUID

from psycopg.types.json import Jsonb

from .. import docs, errors
from ..audit import service as audit
from ..common import Page, decode_cursor, page_of
from ..deps import DB, Caller, CursorParam, LimitParam, router
from ..errors import conflict
from ..iam.service import get_project
from ..location import LocatedRoute
from . import service
from .schemas import Allocation, AllocationCreate

api = router("allocations")
api.route_class = LocatedRoute  # Location on 201/202 (gpuaas_api.location)


@api.post("/v1/allocations", operation_id="allocations_create",
          openapi_extra=docs.example({'project_id': '7b1f4c2e-0d3a-4e5b-9c6d-1a2b3c4d5e6f',
                                      'name': 'rack-a',
                                      'capacity_shape': 'baremetal',
                                      'gpu_count': 16,
                                      'region': 'eu-west-1',
                                      'hosts': [{'name': 'gpu-a1', 'address': '10.0.0.11'},
                                                {'name': 'gpu-a2', 'address': '10.0.0.12'}]}),
          responses=errors.responses("host_registered_elsewhere"), response_model=Allocation, status_code=201)
def register_allocation(body: AllocationCreate, caller: Caller, db: DB):
    """Register capacity a project holds (platform admins, until allocations come from the cloud API).
    Host addresses are resolved now and compared by the IP addresses they reach: a name that does not
    resolve, a legacy IPv4 spelling (`127.1`) or one host listed twice is refused (422), and a host (an
    address it reaches, with its SSH port) that another tenant holds is refused (409)."""
    with db.transaction() as conn:
        project = get_project(conn, body.project_id)
        caller.require("allocations.write", tenant_id=project["tenant_id"], project_id=body.project_id)
        hosts = [h.model_dump() for h in body.hosts]
        addresses = service.host_addresses(hosts)
        service.lock_hosts(conn)
        taken = service.registered_elsewhere(conn, project["tenant_id"], hosts, addresses)
        if taken:
            raise conflict("host_registered_elsewhere",
                           f"host(s) {', '.join(taken)} are registered to another tenant", hosts=taken)
        exclusive = body.exclusive if body.exclusive is not None else body.capacity_shape == "baremetal"
        row = conn.execute(
            """INSERT INTO allocations (tenant_id, project_id, name, capacity_shape, sku, gpu_count, region,
                   exclusive, hosts, host_addresses) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING *""",
            (project["tenant_id"], body.project_id, body.name, body.capacity_shape, body.sku, body.gpu_count,
             body.region, exclusive, Jsonb(hosts), Jsonb(addresses)),
        ).fetchone()
        audit.record(conn, caller, "allocations.register", "allocation", row["id"], after=row,
                     context={"tenant_id": project["tenant_id"], "project_id": body.project_id})
    return row


@api.get("/v1/projects/{project_id}/allocations", operation_id="allocations_list", response_model=Page[Allocation])
def list_allocations(project_id: UUID, caller: Caller, db: DB, include_released: bool = False,
                     cursor: CursorParam = None, limit: LimitParam = 50):
    """The project's allocations (host sets it may deploy to), newest first."""
    with db.transaction() as conn:
        project = get_project(conn, project_id)
        caller.require("allocations.read", tenant_id=project["tenant_id"], project_id=project_id)
        rows = conn.execute(
            """SELECT * FROM allocations WHERE project_id = %s AND (%s OR released_at IS NULL) AND seq > %s
               ORDER BY seq LIMIT %s""",
            (project_id, include_released, decode_cursor(cursor) or 0, limit + 1),
        ).fetchall()
    items, nxt = page_of(rows, limit)
    return {"items": items, "next_cursor": nxt}


@api.get("/v1/allocations/{allocation_id}", operation_id="allocations_get", response_model=Allocation)
def get_allocation(allocation_id: UUID, caller: Caller, db: DB):
    """One allocation."""
    with db.transaction() as conn:
        row = service.get_allocation(conn, allocation_id)
    caller.require("allocations.read", tenant_id=row["tenant_id"], project_id=row["project_id"])
    return row


@api.delete("/v1/allocations/{allocation_id}", operation_id="allocations_release",
            responses=errors.responses("allocation_in_use"), response_model=Allocation)
def release_allocation(allocation_id: UUID, caller: Caller, db: DB):
    """Mark an allocation released; refused while any live instance member is bound to it."""
    with db.transaction() as conn:
        before = conn.execute("SELECT * FROM allocations WHERE id = %s FOR UPDATE", (allocation_id,)).fetchone()
        if before is None:
            service.get_allocation(conn, allocation_id)  # raises not found
        caller.require("allocations.write", tenant_id=before["tenant_id"], project_id=before["project_id"])
        bound = service.live_member_count(conn, allocation_id)
        if bound:
            raise conflict("allocation_in_use", f"{bound} live instance member(s) are bound to this allocation",
                           members=bound)
        row = conn.execute(
            "UPDATE allocations SET released_at = coalesce(released_at, now()) WHERE id = %s RETURNING *",
            (allocation_id,),
        ).fetchone()
        audit.record(conn, caller, "allocations.release", "allocation", allocation_id, before=before, after=row,
                     context={"tenant_id": before["tenant_id"], "project_id": before["project_id"]})
    return row
