from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..client.cli import command, emit, output_option, structured, url_option
from ..client.verbs import Verb, add, arg, resource
from . import smoke


def _artifact(client, ref, args) -> str:
    """An artifact by id or any unique start of it, among every app's."""
    from ..client import lookup

    if lookup.is_uuid(ref):
        return ref
    found = (a for app in client.pages("/v1/catalog/apps")
             for a in client.pages(f"/v1/catalog/apps/{app['slug']}/artifacts"))
    return lookup.by_id("artifact", ref, found, "the catalog")["id"]


APP = arg("slug", metavar="APP", to="path", help="the app's slug (gpuaas apps list)")
VERSION = arg("version", metavar="VERSION", to="path", help="the version, e.g. 1.2.0")
ARTIFACT = arg("artifact", metavar="ARTIFACT", to="path", key="artifact_id", resolve=_artifact,
               help="its id or any unique start of it")
REASON = arg("--reason", required=True, help="why (audited)")
SKIP_GATES = arg("--skip-gates", action="store_true", help="move past the promotion gates (platform admins; "
                 "recorded as gate.skipped)")
VERSION_COLUMNS = ("app_slug", "version", "status", "artifact_reference", "artifact_status", "updated_at", "id")
ARTIFACT_COLUMNS = ("app_slug", "kind", "reference", "status", "updated_at", "id")
SHOW_APP = Verb("show", "catalog_apps_get", "GET", "/v1/catalog/apps/{slug}", "one app of the catalog", (APP,))
VERSIONS = (
    Verb("list", "catalog_versions_list", "GET", "/v1/catalog/apps/{slug}/versions", "an app's versions", (APP,),
         VERSION_COLUMNS),
    Verb("show", "catalog_versions_get", "GET", "/v1/catalog/apps/{slug}/versions/{version}",
         "one version: its artifacts, compatibility, runtime profile and adapter", (APP, VERSION)),
    Verb("transition", "catalog_versions_transition", "POST", "/v1/catalog/apps/{slug}/versions/{version}/transitions",
         "promote or retire a version (draft, canary, active, deprecated; platform admins)",
         (APP, VERSION, arg("--to", required=True, choices=("draft", "canary", "active", "deprecated")), REASON,
          SKIP_GATES),
         VERSION_COLUMNS),
)
ARTIFACTS = (
    Verb("list", "catalog_artifacts_list", "GET", "/v1/catalog/apps/{slug}/artifacts",
         "an app's artifacts: the collection builds and images its versions pin",
         (APP, arg("--status", to="query", help="only artifacts in this status")), ARTIFACT_COLUMNS),
    Verb("transition", "catalog_artifacts_transition", "POST", "/v1/catalog/artifacts/{artifact_id}/transitions",
         "promote or retire an artifact (draft, staged, canary, active, deprecated, retired; platform admins)",
         (ARTIFACT, arg("--to", required=True, choices=("draft", "staged", "canary", "active", "deprecated",
                                                         "retired")), REASON, SKIP_GATES), ARTIFACT_COLUMNS),
)


def register(sub: argparse._SubParsersAction) -> None:
    from .gates import add_artifact_show, add_promote, events_verb

    p = sub.add_parser("apps", help="the app catalog: list it (any token that may read it), publish apps "
                                    "(publishers)")
    asub = p.add_subparsers(dest="apps_command", metavar="ACTION", required=True)
    reg = asub.add_parser("publish", aliases=["register"], help="publish the apps a collection build describes "
                          "(adapters/*.yml) with this token: upload the build by digest, create app, artifact and "
                          "version, in the platform catalog or (--private) the token's tenant's")
    reg.add_argument("collection", type=Path, help="a collection tarball, or a collection directory to build")
    url_option(reg)
    reg.add_argument("--private", action="store_true", help="as private apps of the token's own tenant (a tenant "
                     "publisher's): only the tenant sees and uses them; their slugs start with the tenant's name "
                     "and a dash")
    reg.add_argument("--activate", action="store_true", help="promote the artifacts and the versions to active")
    reg.add_argument("--canary", action="store_true", help="promote them to canary: only instances that opted "
                     "in to canary versions may bind them")
    reg.add_argument("--workload", action="append", default=[], metavar="APP=IMAGE",
                     help="the image (registry/repository@sha256:...) a version of APP pins, for apps whose "
                     "descriptor declares a workload; repeatable")
    reg.add_argument("--signed-by", action="append", default=[], metavar="APP=KEYFILE",
                     help="the PEM public key APP's --workload image is signed with (sigstore); its hosts accept "
                     "only images that verify with it")
    reg.add_argument("--reason", default="published with gpuaas apps publish")
    reg.add_argument("--skip-gates", action="store_true", help="move past the promotion gates (platform admins; "
                     "recorded as gate.skipped): the platform's own collection, whose CI ran the checks; without "
                     "it --activate/--canary start the build's staging gate and wait for it")
    reg.set_defaults(func=register_apps)
    ls = asub.add_parser("list", help="the apps of the catalog with their versions (any token that may read it)")
    output_option(ls)
    ls.set_defaults(func=list_apps)
    add(asub, SHOW_APP)
    smoke.register(asub)
    resource(sub, "versions", "the catalog's app versions: list, show, transition", VERSIONS)
    add_promote(asub)
    add(asub, events_verb(APP))
    resource(sub, "artifacts", "the catalog's artifacts (collection builds, images): list, show, transition",
             ARTIFACTS)
    add_artifact_show(sub.choices["artifacts"]._subparsers._group_actions[0], _artifact)


@command("catalog_apps_list", "catalog_versions_list")
def list_apps(args, client) -> int:
    from ..client.render import table

    apps = [app | {"versions": [{"version": v["version"], "status": v["status"], "id": v["id"]}
                                for v in client.pages(f"/v1/catalog/apps/{app['slug']}/versions")]}
            for app in client.pages("/v1/catalog/apps")]
    if structured(args):
        emit(args, apps)
        return 0
    print(table(["APP", "NAME", "BACKEND", "VERSIONS"],
                [[a["slug"], a["display_name"], a["runtime_backend"],
                  ", ".join(f"{v['version']} ({v['status']})" for v in a["versions"])] for a in apps]))
    return 0


@command("catalog_apps_create", "catalog_artifacts_create", "catalog_versions_create", "content_head", "content_put",
         "catalog_artifacts_gates_start")
def register_apps(args, client) -> int:
    """As the caller: the token of `gpuaas login` (or GPUAAS_TOKEN), like every client command; a platform
    publisher's for the platform catalog, a tenant publisher's with --private."""
    import httpx

    from ..catalog.register import RegisterError, register
    from ..client import lookup
    from ..client.errors import ClientError, unreachable

    workloads = dict(w.partition("=")[::2] for w in args.workload)
    key_files = dict(s.partition("=")[::2] for s in args.signed_by)
    if any(not app or not value for app, value in (workloads | key_files).items()):
        print(f"gpuaas apps {args.apps_command}: --workload takes APP=IMAGE, --signed-by APP=KEYFILE",
              file=sys.stderr)
        return 2
    try:
        signers = {app: Path(path).read_text() for app, path in key_files.items()}
    except OSError as exc:
        print(f"gpuaas apps {args.apps_command}: {exc}", file=sys.stderr)
        return 2
    client.http.timeout = httpx.Timeout(120)  # the upload of a build takes longer than a read
    try:
        tenant = lookup.me(client).get("tenant_id") if args.private else None  # only its own publish there
        if args.private and tenant is None:
            raise ClientError("--private publishes to the token's own tenant, and this token belongs to none")
        registered = register(client.http, args.collection, activate=args.activate, canary=args.canary,
                              workloads=workloads, signers=signers, reason=args.reason, tenant_id=tenant,
                              skip_gates=args.skip_gates, say=lambda line: print(line, flush=True))
    except httpx.TransportError as exc:
        raise unreachable(client.url, exc) from None
    except (RegisterError, httpx.HTTPError) as exc:
        raise ClientError(str(exc)) from None
    for r in registered:
        if r.status == "needs_workload":
            print(f"{r.app}: app only; its versions pin an image: --workload {r.app}=REGISTRY/REPO@sha256:...")
        else:
            print(f"{r.app} {r.version}: {r.status}, artifact {r.artifact_id} ({r.digest})")
    return 0
