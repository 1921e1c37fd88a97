// The console: a project's instances, and an instance's members, jobs and nodes, operations and live
// timeline, read through the public API with the token the user pasted in (kept in sessionStorage: gone
// when the tab closes), and the actions that token may take on them (actions.js). Routes: #/ (the projects
// this token may read), #/projects/ID, #/instances/ID.

import {closeDialog, createButton, instanceButtons, memberButtons} from "./actions.js";
import {Api, Refusal, apiPath, holds} from "./api.js";
import {ago, badge, duration, el, link, plural, refusalBox, replace, statusClass, time} from "./dom.js";
import {Progress, TERMINAL} from "./progress.js";
import {schedulerSections} from "./scheduler.js";
import {Timeline} from "./timeline.js";

const TOKEN_KEY = "gpuaas.console.token";
const TIMELINE_ROWS = 500;  // the newest rows shown; the whole timeline is one `gpuaas events tail` away
const PROJECT_POLL_MS = 5000;

const main = document.getElementById("main");
const whoami = document.getElementById("whoami");
const tokenForm = document.getElementById("token-form");
const tokenInput = document.getElementById("token");
const forget = document.getElementById("forget");
let view = null;  // the AbortController of the view on screen: aborting it stops its requests, stream and timers

// The projects whose instances this token may read, from GET /v1/me (as `gpuaas instances list` finds them).
async function visibleProjects(api, me, signal) {
  const projectIds = new Set(me.project_id ? [me.project_id] : []), tenantIds = new Set();
  for (const grant of me.grants || []) {
    if (!(grant.permissions || []).includes("apps.instance.read")) continue;
    if (grant.scope_kind === "project" && grant.project_id) projectIds.add(grant.project_id);
    else if (grant.scope_kind === "tenant" && grant.tenant_id) tenantIds.add(grant.tenant_id);
  }
  const projects = new Map();
  for (const tenant of tenantIds) {
    for (const p of await api.pages(apiPath`/v1/tenants/${tenant}/projects`, {}, {signal})) projects.set(p.id, p);
  }
  for (const id of projectIds) {
    if (!projects.has(id)) projects.set(id, await api.get(apiPath`/v1/projects/${id}`, {}, {signal}));
  }
  return [...projects.values()].sort((a, b) => a.name.localeCompare(b.name) || a.id.localeCompare(b.id));
}

function membersSummary(instance) {
  return (instance.topology?.roles || []).map((r) => `${r.name} ${r.member_count}/${r.desired_count}`).join(", ");
}

// A condition's status as a badge: each condition says something good when True (Available, Healthy).
function conditionBadge(status) {
  return el("span", {class: `status status-${status === "True" ? "ok" : "failed"}`}, status);
}

// What the last health check ran: "opsapp_status on 2 hosts, 2 members, 0.84 s" (as `gpuaas instances show`).
function checkSummary(check) {
  if (!check?.module) return "";
  return `${check.module} on ${plural(check.hosts, "host")}, ${plural(check.members, "member")}, ${check.seconds} s`;
}

// The app's runtime detail of a member as the check read it: key=value by key, empty ones left out, and
// a detail `reason` that only repeats the check's reason (as `gpuaas members list`).
function runtimeDetails(runtime) {
  return Object.entries(runtime.details || {}).sort(([a], [b]) => a.localeCompare(b))
    .filter(([key, value]) => value !== null && value !== "" && !(key === "reason" && value === runtime.reason))
    .map(([key, value]) => el("code", {class: "detail-kv", "data-key": key}, `${key}=${value}`));
}

function homeView(api, me, signal) {
  replace(main, el("p", {class: "hint"}, "Loading projects…"));
  visibleProjects(api, me, signal).then((projects) => {
    if (signal.aborted) return;
    if (projects.length === 1) {
      location.replace(`#/projects/${encodeURIComponent(projects[0].id)}`);
      return;
    }
    replace(main, el("h1", {}, "Projects"),
      projects.length
        ? el("table", {},
            el("thead", {}, el("tr", {}, el("th", {}, "Project"), el("th", {}, "Id"))),
            el("tbody", {}, projects.map((p) => el("tr", {},
              el("td", {}, link(`#/projects/${encodeURIComponent(p.id)}`, p.name)),
              el("td", {class: "mono"}, p.id)))))
        : el("p", {class: "hint"}, "This token may read no project's instances."));
  }).catch((error) => signal.aborted || replace(main, refusalBox(error, "the project list")));
}

function projectView(api, me, projectId, signal) {
  replace(main, el("p", {class: "hint"}, "Loading instances…"));
  let project = null;
  const body = el("tbody"), notice = el("div", {class: "notice-slot"});
  const render = (instances) => replace(body, instances.length ? instances.map((i) => el("tr", {"data-instance": i.id},
    el("td", {class: "name"}, link(`#/instances/${encodeURIComponent(i.id)}`, i.name)),
    el("td", {}, badge(i.status)),
    el("td", {class: "reason"}, i.status_reason),
    el("td", {}, `${i.app_slug} ${i.app_version}`),
    el("td", {class: "members"}, membersSummary(i)),
    el("td", {class: "muted"}, ago(i.updated_at)))) : el("tr", {}, el("td", {colspan: 6, class: "hint"}, "No instances.")));
  const load = async () => {
    project = project || await api.get(apiPath`/v1/projects/${projectId}`, {}, {signal});
    const instances = await api.pages(apiPath`/v1/projects/${projectId}/instances`, {}, {signal});
    if (signal.aborted) return;
    if (!body.isConnected) {
      replace(main, el("h1", {}, "Project ", el("span", {class: "project-name"}, project.name)),
        el("p", {class: "muted mono"}, project.id),
        el("div", {class: "action-bar"}, createButton(api, me, project, signal,
                                                   (error, what) => replace(notice, refusalBox(error, what)))),
        notice,
        el("section", {}, el("h2", {}, "Instances"), el("table", {class: "instances"},
          el("thead", {}, el("tr", {}, ["Instance", "Status", "Reason", "App", "Members per role", "Updated"]
            .map((h) => el("th", {}, h)))), body)));
    }
    render(instances);
  };
  const poll = () => load().then(() => signal.aborted || setTimeout(poll, PROJECT_POLL_MS))
    .catch((error) => signal.aborted || replace(main, refusalBox(error, "this project")));
  poll();
}

function instanceView(api, me, id, signal) {
  const state = {instance: null, project: null, members: [], ops: new Map(), progress: new Map(), events: [],
                 filter: null, stream: "connecting", streamDetail: null};
  const parts = {head: el("div"), actions: el("div", {class: "action-bar"}), notice: el("div", {class: "notice-slot"}),
                 failure: el("div"), health: el("div"), roles: el("tbody"), members: el("tbody"), ops: el("tbody"),
                 timeline: el("tbody"), toolbar: el("div", {class: "toolbar"})};
  let operatesMembers = false;  // whether the members table has an Actions column: set once the instance is read
  replace(main, el("p", {class: "hint"}, "Loading instance…"));

  const track = (op) => {
    state.ops.set(op.id, op);
    const progress = state.progress.get(op.id) || new Progress(op);
    progress.op = op;
    if (!state.progress.has(op.id)) {
      state.progress.set(op.id, progress);
      for (const event of state.events) progress.apply(event);
    }
  };

  // The head, and above everything else an unhealthy instance's alert: the Healthy condition's message
  // (or the status reason) and since when.
  const renderHead = () => {
    const i = state.instance, health = i.health || {};
    const healthy = (health.conditions || []).find((c) => c.type === "Healthy");
    const sick = i.status === "degraded" || healthy?.status === "False";
    replace(parts.head,
      el("h1", {}, "Instance ", el("span", {class: "instance-name"}, i.name), " ", badge(i.status)),
      sick ? el("div", {class: "health-alert", role: "alert"},
        el("h2", {}, i.status === "degraded" ? "Degraded" : "Unhealthy",
           healthy?.status === "False" ? ` since ${time(healthy.last_transition_at)}` : ""),
        el("p", {class: "message"}, healthy?.status === "False" && healthy.message ? healthy.message : i.status_reason),
        i.status === "degraded"
          ? el("p", {class: "muted"}, "Its control plane answers. Removing or replacing the failed members makes it well.")
          : null) : null,
      el("dl", {class: "facts"},
        el("dt", {}, "reason"), el("dd", {class: "status-reason"}, i.status_reason || "—"),
        el("dt", {}, "app"), el("dd", {}, `${i.app_slug} ${i.app_version}`),
        el("dt", {}, "members"), el("dd", {}, membersSummary(i)),
        el("dt", {}, "project"), el("dd", {}, el("a", {href: `#/projects/${encodeURIComponent(i.project_id)}`,
                                                      title: i.project_id}, state.project.name)),
        el("dt", {}, "id"), el("dd", {class: "mono"}, i.id)));
    replace(parts.health, health.checked_at
      ? [el("p", {class: "check"}, "Checked ", el("span", {class: "checked-at"}, time(health.checked_at)),
            el("span", {class: "muted"}, ` (${ago(health.checked_at)})`),
            health.check?.module ? `: ${checkSummary(health.check)}` : ""),
         el("table", {class: "conditions"},
           el("thead", {}, el("tr", {}, ["Condition", "Status", "Reason", "Since", "Message"]
             .map((h) => el("th", {}, h)))),
           el("tbody", {}, (health.conditions || []).map((c) => el("tr", {"data-condition": c.type,
                                                                       "data-status": c.status},
             el("td", {class: "type"}, c.type), el("td", {class: "state"}, conditionBadge(c.status)),
             el("td", {class: "reason"}, c.reason), el("td", {class: "since"}, time(c.last_transition_at)),
             el("td", {class: "message"}, c.message)))))]
      : el("p", {class: "hint"}, "No health check has read this instance yet (the platform checks it once it runs)."));
    // Each role: its members of the desired count, and how many are in each status.
    replace(parts.roles, (i.topology?.roles || []).map((r) => el("tr", {"data-role": r.name},
      el("td", {}, r.name), el("td", {class: "count"}, `${r.member_count}/${r.desired_count}`),
      el("td", {class: "by-status"}, Object.entries(r.members_by_status || {}).sort(([a], [b]) => a.localeCompare(b))
        .map(([status, n]) => el("span", {class: statusClass(status), "data-status": status}, `${n} ${status}`))))));
  };

  // What the token may do now (actions.js), with the service's answers to it: the operation it queued, or its
  // refusal with its correlation id.
  const actionContext = () => ({
    api, me, signal, instance: state.instance, ops: [...state.ops.values()], members: state.members,
    adapter: state.adapter,
    queued: (op) => {
      track(op);
      replace(parts.notice, el("p", {class: "notice", role: "status", "data-operation": op.id},
        `${op.kind} ${op.status}: operation `, el("code", {class: "op-id", title: op.id}, op.id.slice(0, 8)),
        ", correlation id ", correlationLink(op.correlation_id)));
      renderActions();
      renderMembers();
      renderOps();
      refreshSoon();
    },
    deleted: () => { location.hash = `#/projects/${encodeURIComponent(state.instance.project_id)}`; },
    refused: (error, what) => {
      replace(parts.notice, refusalBox(error, what));
      renderActions();
      renderMembers();
    },
  });
  const renderActions = () => replace(parts.actions, instanceButtons(actionContext()));

  // Each member: its status and reason, what the last check read (reachable, observed, the app's
  // details) and its last operation, whose correlation id narrows the timeline to that run.
  const renderMembers = () => replace(parts.members, state.members.map((m) => {
    const runtime = m.runtime || {}, op = m.last_operation;
    return el("tr", {"data-member": m.id, "data-node": m.node_name},
      el("td", {}, m.role), el("td", {class: "mono"}, m.node_name), el("td", {class: "host"}, m.host_name),
      el("td", {class: "state"}, badge(m.status)), el("td", {class: "reason"}, m.status_reason),
      el("td", {class: "check"}, runtime.checked_at
        ? [runtime.observed ? badge(runtime.observed) : el("span", {class: "muted"}, "unknown"), " ",
           runtime.reachable === false ? badge("unreachable") : runtime.reachable ? "reachable" : "",
           el("div", {class: "muted", title: time(runtime.checked_at)}, ago(runtime.checked_at))]
        : el("span", {class: "muted"}, "not checked")),
      el("td", {class: "read"}, runtime.reason ? el("div", {class: "runtime-reason"}, runtime.reason) : null,
         el("div", {class: "details"}, runtimeDetails(runtime))),
      el("td", {class: "last-op"}, op
        ? [`${op.kind} `, badge(op.status), " ", el("code", {class: "op-id", title: op.id}, op.id.slice(0, 8)),
           el("div", {}, correlationLink(op.correlation_id))]
        : ""),
      operatesMembers ? el("td", {class: "actions"}, memberButtons(actionContext(), m)) : null);
  }));

  const correlationLink = (cid) => {
    const a = el("a", {href: "#", class: "correlation-id mono", title: "show only this operation's events"}, cid);
    a.addEventListener("click", (ev) => {
      ev.preventDefault();
      state.filter = state.filter === cid ? null : cid;
      renderTimeline();
      renderToolbar();
    });
    return a;
  };

  const renderOps = () => {
    const ops = [...state.ops.values()].reverse();  // newest first
    replace(parts.ops, ops.length ? ops.map((op) => {
      const p = state.progress.get(op.id);
      const hosts = [...p.running].map(([host, task]) => `${host}: ${task}`).join("; ");
      return el("tr", {"data-operation": op.id, "data-status": op.status},
        el("td", {}, op.kind), el("td", {}, badge(op.status)), el("td", {}, `${op.attempt} of ${op.max_attempts}`),
        el("td", {class: "tasks"}, el("progress", {max: Math.max(p.started, 1), value: p.done}),
           `${p.done}/${p.started}`, p.failed ? `, ${p.failed} failed` : ""),
        el("td", {class: "hosts"}, hosts || [...p.hosts].join(", ")),
        el("td", {}, duration(p.elapsed())),
        el("td", {class: "error"}, op.error ? `${op.error.code}: ${op.error.message}` : ""),
        el("td", {class: "cid"}, correlationLink(op.correlation_id)));
    }) : el("tr", {}, el("td", {colspan: 8, class: "hint"}, "No operations yet.")));
  };

  // The newest failed operation: its error, the task that failed with its host and message, and the
  // correlation id that finds its log lines, trace and events.
  const renderFailure = () => {
    const failed = [...state.ops.values()].reverse().find((op) => op.status === "failed");
    if (!failed) return replace(parts.failure);
    const p = state.progress.get(failed.id);
    const cid = failed.correlation_id;
    replace(parts.failure, el("div", {class: "failure", role: "alert", "data-operation": failed.id},
      el("h2", {}, `${failed.kind} failed`),
      el("dl", {class: "facts"},
        el("dt", {}, "error"), el("dd", {class: "error"}, failed.error
          ? `${failed.error.code}: ${failed.error.message}` : "failed"),
        p.failure ? [el("dt", {}, "task"), el("dd", {class: "task"}, p.failure.task),
                     el("dt", {}, "host"), el("dd", {class: "host"}, p.failure.host)] : null,
        el("dt", {}, "finished"), el("dd", {}, time(failed.finished_at)),
        el("dt", {}, "correlation id"), el("dd", {}, el("code", {class: "correlation-id"}, cid))),
      p.failure ? el("div", {class: "message task-message"}, String(p.failure.message)) : null,
      el("p", {class: "muted"}, "Search the logs of serve and the workers with the correlation id: ",
         el("code", {}, `jq -cR 'fromjson? | select(.correlation_id == "${cid}")'`))));
  };

  const timeline = new Timeline(parts.timeline, TIMELINE_ROWS);
  const renderTimeline = () => timeline.load(state.filter
    ? state.events.filter((e) => e.correlation_id === state.filter) : state.events);

  const renderToolbar = () => {
    const clear = state.filter ? el("button", {type: "button"}, "Show all events") : null;
    clear?.addEventListener("click", () => {
      state.filter = null;
      renderTimeline();
      renderToolbar();
    });
    replace(parts.toolbar,
      el("span", {class: "muted"}, plural(state.events.length, "event")),
      state.filter ? el("span", {}, "correlation id ", el("code", {class: "filter"}, state.filter)) : null, clear,
      el("span", {class: "stream"}, "stream ", badge(state.stream),
         state.streamDetail ? el("span", {class: "muted"}, ` ${state.streamDetail}`) : null));
  };

  const refresh = async () => {
    // The instance first: when the token may not read it, its refusal is the one the page shows.
    const instance = await api.get(apiPath`/v1/instances/${id}`, {}, {signal});
    const [members, ops] = await Promise.all([api.pages(apiPath`/v1/instances/${id}/members`, {}, {signal}),
                                              api.pages(apiPath`/v1/instances/${id}/operations`, {}, {signal})]);
    // The project by its name (read once); a token that may not read the project still sees its id.
    state.project = state.project || await api.get(apiPath`/v1/projects/${instance.project_id}`, {}, {signal})
      .catch((error) => {
        if (error instanceof Refusal && error.status) return {id: instance.project_id, name: instance.project_id};
        throw error;
      });
    // The version's adapter (its roles and the actions it has playbooks for), read again after an upgrade; a
    // token that may not read the catalog is offered every action, and the service answers.
    if (state.adapterOf !== instance.app_version_id) {
      state.adapter = await api.get(apiPath`/v1/catalog/apps/${instance.app_slug}/versions/${instance.app_version}`,
                                    {}, {signal}).then((v) => v.adapter, () => null);
      state.adapterOf = instance.app_version_id;
    }
    state.instance = instance;
    state.members = members;
    for (const op of ops) track(op);
  };

  let pending = null;
  const refreshSoon = () => {
    pending = pending || setTimeout(() => {
      pending = null;
      if (signal.aborted) return;
      refresh().then(() => signal.aborted || (renderHead(), renderActions(), renderMembers(), renderOps(),
                                              renderFailure()))
        .catch((error) => signal.aborted || replace(parts.failure, refusalBox(error, "a refresh")));
    }, 300);
  };

  const onEvent = (event) => {
    if (state.events.length && event.id <= state.events[state.events.length - 1].id) return;
    state.events.push(event);
    for (const p of state.progress.values()) p.apply(event);
    if (!state.filter || event.correlation_id === state.filter) timeline.apply(event);
    if (!event.type.startsWith("run.") || event.type === "run.task_failed") refreshSoon();
    renderOps();
    renderToolbar();
  };

  const onState = (stream, detail) => {
    state.stream = stream;
    state.streamDetail = detail instanceof Refusal
      ? `${detail.code}: ${detail.message} (correlation id ${detail.correlationId})`
      : detail ? String(detail.message || detail) : null;
    renderToolbar();
    if (stream === "live") refreshSoon();  // anything that changed while the stream was down
  };

  (async () => {
    await refresh();
    state.events = await api.pages(apiPath`/v1/instances/${id}/events`, {}, {signal}, 40);
    for (const p of state.progress.values()) for (const event of state.events) p.apply(event);
    if (signal.aborted) return;
    operatesMembers = holds(me, "apps.member.operate", state.instance);
    renderHead();
    renderActions();
    renderMembers();
    renderOps();
    renderFailure();
    renderTimeline();
    renderToolbar();
    replace(main, parts.head, parts.actions, parts.notice, parts.failure,
      el("section", {class: "health"}, el("h2", {}, "Health"), parts.health),
      el("section", {}, el("h2", {}, "Members"),
        el("table", {class: "roles"},
          el("thead", {}, el("tr", {}, ["Role", "Members/desired", "By status"].map((h) => el("th", {}, h)))),
          parts.roles),
        el("table", {class: "members"},
          el("thead", {}, el("tr", {}, ["Role", "Node", "Host", "Status", "Reason", "Last check", "Read",
                                        "Last operation", operatesMembers ? "Actions" : null]
            .filter((h) => h !== null).map((h) => el("th", {}, h)))),
          parts.members)),
      schedulerSections(api, me, state.instance, signal),
      el("section", {}, el("h2", {}, "Operations"), el("table", {class: "operations"},
        el("thead", {}, el("tr", {}, ["Kind", "Status", "Attempt", "Tasks done/started", "Hosts", "Elapsed",
                                      "Error", "Correlation id"].map((h) => el("th", {}, h)))),
        parts.ops)),
      el("section", {}, el("h2", {}, "Timeline"), parts.toolbar, el("table", {class: "timeline"},
        el("thead", {}, el("tr", {}, ["Event", "Time (UTC)", "Host", "What", "Result", "Duration", "Correlation id"]
          .map((h) => el("th", {}, h)))),
        parts.timeline)));
    const last = state.events.length ? state.events[state.events.length - 1].id : 0;
    const ticker = setInterval(() => {
      if ([...state.ops.values()].some((op) => !TERMINAL.includes(op.status))) renderOps();
    }, 1000);
    signal.addEventListener("abort", () => clearInterval(ticker));
    await api.follow(id, last, {onEvent, onState, signal});
  })().catch((error) => signal.aborted || replace(main, refusalBox(error, "this instance")));
}

async function route() {
  view?.abort();
  closeDialog();
  view = new AbortController();
  const signal = view.signal;
  const token = sessionStorage.getItem(TOKEN_KEY);
  tokenForm.hidden = Boolean(token);
  forget.hidden = !token;
  replace(whoami);
  if (!token) {
    replace(main, el("p", {class: "hint"}, "Paste an API token above. The console shows what that token may read " +
      "through the API, and keeps the token in this tab only (sessionStorage)."));
    return;
  }
  const api = new Api(token);
  let me;
  try {
    me = await api.get("/v1/me", {}, {signal});
  } catch (error) {
    if (signal.aborted) return;
    tokenForm.hidden = false;
    replace(main, refusalBox(error, "this token"));
    return;
  }
  if (signal.aborted) return;
  replace(whoami, `${me.kind.replace("_", " ")} `, el("strong", {}, me.name));
  const match = location.hash.match(/^#\/(projects|instances)\/([^/?#]+)$/);
  if (match?.[1] === "instances") instanceView(api, me, decodeURIComponent(match[2]), signal);
  else if (match?.[1] === "projects") projectView(api, me, decodeURIComponent(match[2]), signal);
  else homeView(api, me, signal);
}

tokenForm.addEventListener("submit", (ev) => {
  ev.preventDefault();
  const token = tokenInput.value.trim();
  tokenInput.value = "";
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  route();
});
forget.addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  route();
});
window.addEventListener("hashchange", route);
route();
