// Acting from the console: creating an instance; deploying, upgrading, rolling back, decommissioning and deleting
// it; adding, draining, resuming, removing and replacing its members. Each is the public route the gpuaas client
// calls, sent with the token in use, so the service authorizes it as it would the client's request, and its refusal
// (code, message, correlation id) is what the page shows.
//
// A button is shown only for an action the token may take and the instance (or member) accepts now. KINDS mirrors
// the service's table of operation kinds (api/gpuaas_api/operations/kinds.py: the permissions each needs, the
// instance and member statuses it is accepted in, the one-at-a-time and queue-closing kinds); tests/console reads
// both and checks that they agree. What cannot be taken back (drain, remove, replace, decommission, delete) is
// asked first, in a dialog.

import {Refusal, apiPath, holds} from "./api.js";
import {el, plural, refusalBox, replace} from "./dom.js";
import {TERMINAL} from "./progress.js";

const LIFECYCLE = ["apps.instance.update"], MEMBER = ["apps.member.operate"];
const NODE = [...MEMBER, "scheduler.node.operate"];  // a drain or resume changes the scheduler's node as well
const RUNNING = ["degraded", "running", "starting"];  // starting: queued behind the deploy

export const KINDS = {
  deploy: {permissions: LIFECYCLE, instance: ["created", "failed"], single: true, queuedAs: {created: "starting"}},
  upgrade: {permissions: LIFECYCLE, instance: RUNNING},
  rollback: {permissions: LIFECYCLE, instance: RUNNING},
  decommission: {permissions: ["apps.instance.delete"], instance: ["degraded", "failed", "running", "starting",
                                                                   "stopping"], closesQueue: true},
  member_add: {permissions: MEMBER, instance: RUNNING},
  member_drain: {permissions: NODE, instance: RUNNING, member: ["active"]},
  member_resume: {permissions: NODE, instance: RUNNING, member: ["drained", "draining"]},
  member_remove: {permissions: MEMBER, instance: RUNNING,
                  member: ["active", "drained", "draining", "failed", "joining", "removing"]},
  member_replace: {permissions: MEMBER, instance: RUNNING, member: ["active", "drained", "draining", "failed"]},
};
// Not operations (instances/routes.py): creating an instance in a project, and deleting one that runs nothing.
export const CREATE = "apps.instance.create";
export const DELETE = {permission: "apps.instance.delete", instance: ["created", "stopped"]};

const open = (ops) => ops.filter((op) => !TERMINAL.includes(op.status));

// Whether the token may ask for `kind` now, as the service would decide (operations/service.py accept): it holds
// the kind's permissions; the app has a playbook for it; no decommission is queued; a deploy is not asked twice;
// the instance (behind a queued deploy: as the deploy leaves it) and the member are in statuses the kind accepts;
// the member has no operation of its own queued or running; a removal leaves its role at least its minimum,
// counting the removals already queued; a replacement, whose new member joins before the old one leaves, finds
// room for it in the role (instances/service.py add_member: role_at_max).
export function may(me, kind, {instance, ops, adapter, member = null, members = []}) {
  const k = KINDS[kind], pending = open(ops);
  if (!k.permissions.every((permission) => holds(me, permission, instance))) return false;
  if (adapter && !(kind in (adapter.actions || {}))) return false;
  if (pending.some((op) => KINDS[op.kind]?.closesQueue || (k.single && op.kind === kind))) return false;
  const status = pending.map((op) => KINDS[op.kind]?.queuedAs?.[instance.status]).find(Boolean) || instance.status;
  if (!k.instance.includes(status)) return false;
  if (!member) return true;
  if (member.status === "removed" || (k.member && !k.member.includes(member.status))
      || pending.some((op) => (op.member_ids || []).includes(member.id))) return false;
  const role = adapter?.roles?.find((r) => r.name === member.role);
  if (kind === "member_replace") return hasRoom(role, members);
  if (kind !== "member_remove") return true;
  const leaving = new Set(pending.filter((op) => op.kind === "member_remove").flatMap((op) => op.member_ids || []));
  return members.filter((m) => m.role === member.role && m.id !== member.id && !leaving.has(m.id)
                        && !["removed", "removing"].includes(m.status)).length >= (role?.min ?? 0);
}

// Whether a role (the adapter's: its name, min and max) takes one more member; without the adapter, the service
// says.
function hasRoom(role, members) {
  return !role || role.max === null || role.max === undefined
    || members.filter((m) => m.role === role.name && m.status !== "removed").length < role.max;
}

function mayDelete(me, instance, ops) {
  return holds(me, DELETE.permission, instance) && DELETE.instance.includes(instance.status) && !open(ops).length;
}

// An Idempotency-Key per request the user makes: sent again (a lost answer), it queues nothing more.
// crypto.randomUUID needs a secure context; getRandomValues does not.
function newKey() {
  return `console-${[...crypto.getRandomValues(new Uint8Array(16))].map((b) => b.toString(16).padStart(2, "0"))
    .join("")}`;
}

let dialog = null;

export function closeDialog() {
  dialog?.close();
  dialog?.remove();
  dialog = null;
}

// The page's one dialog (outside <main>, which each view replaces): what the action does, its fields, the button
// that sends it (red where it cannot be taken back) and the one that keeps things as they are. A refusal shows in
// the dialog, the fields as they were, to change and send again; `send` resolving closes it.
function ask({title, question, fields = [], label, danger = false, what, send}) {
  closeDialog();
  const problem = el("div", {class: "dialog-refusal"});
  const submit = el("button", {type: "submit", class: danger ? "danger" : "primary"}, label);
  const dismiss = el("button", {type: "button", class: "dismiss"}, danger ? "Keep" : "Close");
  const form = el("form", {class: "action-form"}, el("h2", {}, title), el("p", {class: "question"}, question),
                  el("div", {class: "fields"}, fields), problem, el("div", {class: "buttons"}, submit, dismiss));
  dialog = el("dialog", {class: "action-dialog"}, form);
  const shown = dialog;
  dismiss.addEventListener("click", closeDialog);
  shown.addEventListener("close", () => shown.remove());
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const controls = [...form.querySelectorAll("button, input, select, textarea")];
    const enabled = controls.filter((c) => !c.disabled);
    enabled.forEach((c) => { c.disabled = true; });
    replace(problem);
    try {
      await send();
      if (dialog === shown) closeDialog();
    } catch (error) {
      replace(problem, error instanceof Refusal ? refusalBox(error, what)
        : el("p", {class: "problem", role: "alert"}, String(error.message || error)));
      enabled.forEach((c) => { c.disabled = false; });
    }
  });
  document.body.append(shown);
  shown.showModal();
  return {submit, problem};
}

function field(label, control, hint = null) {
  return el("label", {class: "field"}, el("span", {class: "label"}, label), control,
            hint ? el("span", {class: "hint"}, hint) : null);
}

function select(name, options, props = {}) {
  return el("select", {name, ...props}, options.map(([value, text]) => el("option", {value}, text)));
}

function actionButton(label, action, onClick) {
  const button = el("button", {type: "button", class: `action ${action}`, "data-action": action}, label);
  button.addEventListener("click", () => onClick(button));
  return button;
}

// The project's allocations that can still hold members (not released), and the hosts of one that no live member
// of this instance holds. The service decides in the end (another instance may hold a host: host_taken).
async function allocations(api, projectId, signal) {
  return (await api.pages(apiPath`/v1/projects/${projectId}/allocations`, {}, {signal}))
    .filter((a) => !a.released_at);
}

function placement(list, members) {
  const taken = new Set(members.filter((m) => m.status !== "removed").map((m) => `${m.allocation_id}/${m.host_name}`));
  const allocation = select("allocation_id", list.map((a) => [a.id, `${a.name} (${plural(a.hosts.length, "host")})`]),
                            {required: true});
  const host = select("host_name", []);
  const hosts = () => replace(host, el("option", {value: ""}, "the first free host"),
    (list.find((a) => a.id === allocation.value)?.hosts || []).filter((h) => !taken.has(`${allocation.value}/${h.name}`))
      .map((h) => el("option", {value: h.name}, h.name)));
  allocation.addEventListener("change", hosts);
  hosts();
  return {allocation, host, body: () => ({allocation_id: allocation.value, ...(host.value ? {host_name: host.value} : {})}),
          fields: [field("Allocation", allocation), field("Host", host)]};
}

// The instance's buttons, each where the token may take it now. ctx: {api, me, instance, ops, members, adapter,
// signal, queued(op) for an accepted operation, deleted() once the instance is gone, refused(error, what) for a
// refusal of an action that asks nothing first}.
export function instanceButtons(ctx) {
  const {api, me, instance, ops, adapter, signal} = ctx, id = instance.id, name = instance.name;
  const can = (kind) => may(me, kind, {instance, ops, adapter});
  const post = (kind, body, key) => api.post(apiPath`/v1/instances/${id}/${kind}`, body, {signal, key})
    .then(ctx.queued);
  return [
    can("deploy") && actionButton("Deploy", "deploy", (button) => {
      button.disabled = true;
      post("deploy", undefined, newKey()).catch((error) => ctx.refused(error, `the deploy of ${name}`));
    }),
    can("member_add") && (!adapter || adapter.roles.some((r) => hasRoom(r, ctx.members)))
      && actionButton("Add member…", "member_add", () => addMember(ctx)),
    can("upgrade") && actionButton("Upgrade…", "upgrade", () => upgrade(ctx, post)),
    can("rollback") && actionButton("Roll back…", "rollback", () => {
      const key = newKey();
      ask({title: `Roll back ${name}`, label: "Roll back", what: `the rollback of ${name}`,
           question: `Roll ${name} back from ${instance.app_slug} ${instance.app_version} to the version it ran ` +
             "before? Every host runs that version's playbook.", send: () => post("rollback", undefined, key)});
    }),
    can("decommission") && actionButton("Decommission…", "decommission", () => {
      const key = newKey();
      ask({title: `Decommission ${name}`, label: `Decommission ${name}`, danger: true,
           what: `the decommission of ${name}`,
           question: `Tear ${name} down on every host? Its members are removed and it ends stopped; it takes no ` +
             "other request meanwhile. This cannot be undone.", send: () => post("decommission", undefined, key)});
    }),
    mayDelete(me, instance, ops) && actionButton("Delete…", "delete", () => ask({
      title: `Delete ${name}`, label: `Delete ${name}`, danger: true, what: `the deletion of ${name}`,
      question: `Delete ${name}? It is ${instance.status}: nothing of it runs on a host. Its record and its name ` +
        "are gone for good.",
      send: () => api.delete(apiPath`/v1/instances/${id}`, {signal}).then(ctx.deleted)})),
  ].filter(Boolean);
}

async function addMember(ctx) {
  const {api, instance, members, adapter, signal} = ctx, key = newKey();
  const list = await allocations(api, instance.project_id, signal).catch((error) => ctx.refused(error, "the allocations"));
  if (!list) return;
  // The roles with room for one more (the adapter's max); without the adapter, every role of the instance.
  const roles = adapter ? adapter.roles.filter((r) => hasRoom(r, members)).map((r) => r.name)
    : (instance.topology?.roles || []).map((r) => r.name);
  const role = select("role", roles.map((r) => [r, r]), {required: true});
  const where = placement(list, members);
  ask({title: `Add a member to ${instance.name}`, label: "Add member", what: `the member add to ${instance.name}`,
       question: "A pending member is made now on the host; the run makes it join.",
       fields: [field("Role", role), ...where.fields],
       send: () => api.post(apiPath`/v1/instances/${instance.id}/members`, {role: role.value, ...where.body()},
                            {signal, key}).then(ctx.queued)});
}

async function upgrade(ctx, post) {
  const {api, instance, signal} = ctx, key = newKey();
  const usable = instance.canary ? ["active", "canary"] : ["active"];
  const versions = await api.pages(apiPath`/v1/catalog/apps/${instance.app_slug}/versions`, {}, {signal})
    .catch((error) => ctx.refused(error, `the versions of ${instance.app_slug}`));
  if (!versions) return;
  const targets = versions.filter((v) => v.id !== instance.app_version_id && usable.includes(v.status)).reverse();
  const version = select("app_version_id", targets.map((v) => [v.id, `${v.version} (${v.status})`]), {required: true});
  const {submit} = ask({
    title: `Upgrade ${instance.name}`, label: "Upgrade", what: `the upgrade of ${instance.name}`,
    question: `${instance.name} runs ${instance.app_slug} ${instance.app_version}; the version it leaves stays its ` +
      "rollback target.",
    fields: targets.length ? field("To version", version)
      : el("p", {class: "hint"}, `No other ${usable.join(" or ")} version of ${instance.app_slug}.`),
    send: () => post("upgrade", {app_version_id: version.value}, key)});
  submit.disabled = !targets.length;
}

// A member's buttons, each where the token may take it now.
export function memberButtons(ctx, member) {
  const {api, me, instance, ops, members, adapter, signal} = ctx, node = member.node_name;
  const can = (kind) => may(me, kind, {instance, ops, adapter, member, members});
  const post = (action, body, key) => api.post(apiPath`/v1/instances/${instance.id}/members/${member.id}/${action}`,
                                               body, {signal, key}).then(ctx.queued);
  const confirm = (action, label, question, extra = null) => {
    const key = newKey();
    ask({title: `${label} ${node}`, label: `${label} ${node}`, danger: true, question, fields: extra?.fields || [],
         what: `the ${action} of ${node}`, send: () => post(action, extra?.body(), key)});
  };
  return [
    can("member_drain") && actionButton("Drain…", "member_drain", () => confirm("drain", "Drain",
      `Drain ${node} (${member.host_name})? It takes no new work and finishes what it runs; Resume brings it back.`)),
    can("member_resume") && actionButton("Resume", "member_resume", (button) => {
      button.disabled = true;
      post("resume", undefined, newKey()).catch((error) => ctx.refused(error, `the resume of ${node}`));
    }),
    can("member_replace") && actionButton("Replace…", "member_replace", async () => {
      const list = await allocations(api, instance.project_id, signal)
        .catch((error) => ctx.refused(error, "the allocations"));
      if (list) {
        confirm("replace", "Replace", `Replace ${node} (${member.host_name}) by a new ${member.role} on another host? ` +
          `The new one joins first; then ${node} is drained and removed.`, placement(list, ctx.members));
      }
    }),
    can("member_remove") && actionButton("Remove…", "member_remove", () => confirm("remove", "Remove",
      `Remove ${node} (${member.host_name}) from ${instance.name}? It leaves the runtime and its host is cleaned.`)),
  ].filter(Boolean);
}

// "New instance…" on a project's page, for a token that may create one there: its name, app (of the project's
// entitlements), version, allocations, members per role (the version's roles, from their minimum) and parameters.
// `refused(error, what)`: a refusal of what the form reads (the entitlements, allocations, versions).
export function createButton(api, me, project, signal, refused) {
  if (!holds(me, CREATE, {tenant_id: project.tenant_id, project_id: project.id})) return null;
  return actionButton("New instance…", "create", () => createInstance(api, project, signal)
    .catch((error) => signal.aborted || refused(error, "what the new instance form reads")));
}

async function createInstance(api, project, signal) {
  const [entitled, list] = await Promise.all([
    api.pages(apiPath`/v1/projects/${project.id}/entitlements`, {}, {signal}), allocations(api, project.id, signal)]);
  const name = el("input", {name: "name", required: true, maxlength: 63, pattern: "[a-z0-9]([a-z0-9\\-]{0,61}[a-z0-9])?",
                            spellcheck: "false", autocomplete: "off"});
  const app = select("app_slug", entitled.map((e) => [e.app_slug, e.app_slug]), {required: true});
  const version = select("version", []);
  const roles = el("div", {class: "roles"});
  const picks = list.map((a) => el("input", {type: "checkbox", name: "allocation_ids", value: a.id}));
  if (picks.length === 1) picks[0].checked = true;
  const parameters = el("textarea", {name: "parameters", rows: 3, spellcheck: "false", placeholder: "{}"});
  let versions = [];
  const showRoles = () => {
    const chosen = versions.find((v) => v.version === version.value) || versions.find((v) => v.status === "active");
    replace(roles, (chosen?.adapter?.roles || []).map((r) => field(r.name, el("input", {
      type: "number", name: `role:${r.name}`, "data-role": r.name, value: r.min, min: r.min, max: r.max ?? undefined,
      required: true}), r.max === null || r.max === undefined ? `at least ${r.min}` : `${r.min} to ${r.max}`)));
  };
  const showVersions = async () => {
    versions = app.value ? (await api.pages(apiPath`/v1/catalog/apps/${app.value}/versions`, {}, {signal})).reverse()
      .filter((v) => ["active", "canary"].includes(v.status)) : [];
    replace(version, el("option", {value: ""}, "the newest active"),
            versions.map((v) => el("option", {value: v.version}, `${v.version} (${v.status})`)));
    showRoles();
  };
  app.addEventListener("change", showVersions);
  version.addEventListener("change", showRoles);
  await showVersions();
  const body = () => {
    let extra = {};
    if (parameters.value.trim()) {
      try {
        extra = JSON.parse(parameters.value);
      } catch (error) {
        throw new Error(`Parameters: not JSON (${error.message})`);
      }
      if (!extra || typeof extra !== "object" || Array.isArray(extra)) throw new Error("Parameters: not a JSON object");
    }
    return {name: name.value.trim(), app_slug: app.value, ...(version.value ? {version: version.value} : {}),
            allocation_ids: picks.filter((p) => p.checked).map((p) => p.value),
            topology: [...roles.querySelectorAll("input[data-role]")].map((i) => ({role: i.dataset.role,
                                                                                  count: Number(i.value)})),
            parameters: extra};
  };
  ask({title: `New instance in ${project.name}`, label: "Create", what: "the new instance",
       question: "It is created now, with its members pending on the allocations' hosts; Deploy starts it.",
       fields: [field("Name", name, "lower-case letters, digits and -"), field("App", app), field("Version", version),
                el("fieldset", {class: "allocations"}, el("legend", {}, "Allocations"),
                   list.length ? list.map((a, i) => el("label", {class: "check"}, picks[i],
                     ` ${a.name} (${plural(a.hosts.length, "host")}, ${a.capacity_shape}, ${a.region})`))
                     : el("p", {class: "hint"}, "This project has no allocation.")),
                el("fieldset", {class: "members"}, el("legend", {}, "Members per role"), roles),
                field("Parameters", parameters, "a JSON object, as the app's parameters schema says")],
       send: async () => {
         const created = await api.post(apiPath`/v1/projects/${project.id}/instances`, body(), {signal});
         location.hash = `#/instances/${encodeURIComponent(created.id)}`;
       }});
}
