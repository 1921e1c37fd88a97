"""Runtime access for people: their SSH public keys (/v1/me/ssh-keys) and how they log in to an instance
(GET /v1/instances/{id}/access). docs/scheduler.md."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from uuid import UUID

from pydantic import BaseModel, Field, StringConstraints

from .. import docs, errors
from ..deps import DB, Caller, RunSettings, router
from ..instances import service as instances
from ..location import LocatedRoute
from ..scheduler.schemas import Access
from ..sharing import scope
from . import keys, service

api = router("access")
api.route_class = LocatedRoute


class SshKeyCreate(BaseModel):
    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")]
    public_key: str = Field(max_length=16384, description="one OpenSSH public key line: `<type> <base64> "
                            "[comment]`")


class SshKey(BaseModel):
    id: UUID
    name: str
    public_key: str
    fingerprint: str
    created_at: datetime


class SshKeyList(BaseModel):
    items: list[SshKey]


@api.get("/v1/me/ssh-keys", operation_id="me_ssh_keys_list", response_model=SshKeyList,
         responses=errors.responses())
def list_ssh_keys(caller: Caller, db: DB):
    """Your SSH public keys."""
    with db.transaction() as conn:
        return {"items": keys.list_keys(conn, caller)}


@api.post("/v1/me/ssh-keys", operation_id="me_ssh_keys_create", response_model=SshKey, status_code=201,
          openapi_extra=docs.example({"name": "laptop", "public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG"
                                      "9hZmlsZWtleWZvcmV4YW1wbGVvbmx5MDEyMzQ1Njc4 alice@laptop"}),
          responses=errors.responses("invalid_ssh_key", "already_exists"))
def add_ssh_key(body: SshKeyCreate, caller: Caller, db: DB, settings: RunSettings):
    """Register an SSH public key. It reaches the login hosts of every running instance you may log in to
    (`apps.instance.access`) with the access_sync this queues."""
    with db.transaction() as conn:
        return keys.add(conn, settings, caller, body.name, body.public_key)


@api.delete("/v1/me/ssh-keys/{key_id}", operation_id="me_ssh_keys_delete", status_code=204)
def delete_ssh_key(key_id: UUID, caller: Caller, db: DB, settings: RunSettings):
    """Remove an SSH public key; the login hosts drop it with the access_sync this queues."""
    with db.transaction() as conn:
        keys.delete(conn, settings, caller, key_id)


@api.get("/v1/instances/{instance_id}/access", operation_id="instances_access_get", response_model=Access,
         responses=errors.responses("no_login"))
def get_access(instance_id: UUID, caller: Caller, db: DB):
    """How you log in to the instance (`apps.instance.access`): your Unix user, your account and the login hosts'
    addresses. Your registered SSH keys open it."""
    with db.transaction() as conn:
        instance = instances.get_instance(conn, instance_id)
        scope.caller_projects(conn, instance, caller, service.LOGIN)  # a shared runtime: any project it serves
        spec = service.declares_access(conn, instance)
        if spec is None:
            raise errors.conflict("no_login", "this instance's app has no logins (its adapter declares no access)")
        return service.login_for(conn, spec, instance, caller)



class AccessMap(BaseModel):
    """The access map (docs/scheduler.md) as a run of the instance gets it now."""
    accounts: list[dict]
    identities: list[dict]


@api.get("/v1/instances/{instance_id}/access-map", operation_id="instances_access_map_get", response_model=AccessMap,
         responses=errors.responses("no_login"))
def get_access_map(instance_id: UUID, caller: Caller, db: DB):
    """The instance's access map as the platform's next run will apply it (`apps.instance.update`): for an operator
    who runs the app's access playbook by hand or as an AWX job (`-e @map.json`; `gpuaas instances access-map`)."""
    with db.transaction() as conn:
        instance = instances.get_instance(conn, instance_id)
        caller.require("apps.instance.update", tenant_id=instance["tenant_id"], project_id=instance["project_id"])
        if service.declares_access(conn, instance) is None:
            raise errors.conflict("no_login", "this instance's app has no access map (its adapter declares no access)")
        return service.access_map(conn, instance)


class AccountPair(BaseModel):
    account: str
    user: str


class AccessDrift(BaseModel):
    """How the runtime's accounts and associations differ from the access map; an access_sync repairs it."""
    in_sync: bool
    missing_accounts: list[str]
    unexpected_accounts: list[str] = Field(description="accounts marked as the platform's that the map does not name")
    foreign_accounts: list[str] = Field(description="accounts the map needs that exist without the platform's mark: "
                                        "the sync refuses to take them over")
    missing_associations: list[AccountPair]
    unexpected_associations: list[AccountPair]


@api.get("/v1/instances/{instance_id}/access-drift", operation_id="instances_access_drift_get",
         response_model=AccessDrift, responses=errors.responses("no_login", "no_scheduler", "instance_not_operable",
                                                                "scheduler_unavailable", "scheduler_refused"))
def get_access_drift(instance_id: UUID, caller: Caller, db: DB, settings: RunSettings):
    """Compare the runtime's accounts and associations (read from its accounting now) with the platform's access
    map (`apps.instance.update`): an account or association added or removed by hand shows here, and
    `POST .../access-sync` repairs it."""
    return service.drift(db, settings, caller, instance_id)
