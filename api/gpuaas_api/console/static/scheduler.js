// An instance's jobs and nodes, served by its scheduler through the API (docs/scheduler.md): the project's jobs,
// with Cancel for a token that holds scheduler.queue.cancel, and the runtime's nodes, with Drain and Resume for
// one that holds scheduler.node.operate. The buttons follow GET /v1/me's grants; the service checks every request
// again, and its refusal is what the panel shows.

import {Refusal, apiPath, holds} from "./api.js";
import {badge, el, refusalBox, replace, time} from "./dom.js";

const POLL_MS = 10000;
const JOBS_SHOWN = 100;  // the newest jobs; `gpuaas jobs list --all` lists every one
const CANCELLABLE = ["pending", "running"];
const DRAINED = ["draining", "drained"];

// Why a panel has nothing to show when the service says why: an app without a scheduler (asked once), an
// instance that does not run yet. Anything else is a refusal, shown as one.
function notice(error, what) {
  if (error instanceof Refusal && error.code === "no_scheduler") {
    return el("p", {class: "hint no-scheduler"}, `No ${what} here: this instance's app has no scheduler.`);
  }
  if (error instanceof Refusal && error.code === "instance_not_operable") {
    return el("p", {class: "hint not-operable"}, `The ${what} are served once the instance runs.`);
  }
  return refusalBox(error, `the ${what}`);
}

function head(columns) {
  return el("thead", {}, el("tr", {}, columns.filter((c) => c !== null).map((c) => el("th", {}, c))));
}

// One panel: a section with its table (reloaded every POLL_MS, and after each action) and the refusal of its
// last action. While a confirmation is open the table is not redrawn: that would drop what the user typed.
class Panel {
  constructor(api, title, what, signal, load, render) {
    this.api = api;
    this.what = what;
    this.signal = signal;
    this.load = load;
    this.render = render;
    this.confirming = false;
    this.timer = null;
    this.turn = 0;  // the latest reload: only it draws and schedules the next one
    this.body = el("div", {class: "panel-body"}, el("p", {class: "hint"}, `Loading ${what}…`));
    this.actionRefusal = el("div", {class: "action-refusal"});
    this.section = el("section", {class: `scheduler ${what}`}, el("h2", {}, title), this.actionRefusal, this.body);
    signal.addEventListener("abort", () => clearTimeout(this.timer));
  }

  async reload() {
    clearTimeout(this.timer);
    const turn = ++this.turn;
    let again = true, shown;
    try {
      const data = await this.load();
      shown = () => this.render(data);
    } catch (error) {
      again = !(error instanceof Refusal && error.code === "no_scheduler");
      shown = () => notice(error, this.what);
    }
    if (this.signal.aborted || turn !== this.turn) return;
    if (!this.confirming) replace(this.body, shown());
    if (again) this.timer = setTimeout(() => this.reload(), POLL_MS);
  }

  // A confirmation in `cell` in place of its buttons: `question`, the fields, the button that does it, and
  // Keep, which puts the buttons back.
  confirm(cell, question, fields, label, act) {
    this.confirming = true;
    const keep = el("button", {type: "button", class: "keep"}, "Keep");
    const form = el("form", {class: "confirm"}, el("span", {class: "question"}, question), fields,
                    el("button", {type: "submit", class: "danger"}, label), keep);
    const buttons = [...cell.childNodes];
    keep.addEventListener("click", () => {
      this.confirming = false;
      replace(cell, buttons);
    });
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      form.querySelectorAll("button, input").forEach((b) => { b.disabled = true; });
      act();
    });
    replace(cell, form);
    form.querySelector("input, button[type=submit]")?.focus();
  }

  // POSTs an action, then reloads the table; a refusal stays above it until the next action.
  async act(path, body, what) {
    replace(this.actionRefusal);
    try {
      await this.api.post(path, body, {signal: this.signal});
    } catch (error) {
      if (this.signal.aborted) return;
      replace(this.actionRefusal, refusalBox(error, what));
    }
    this.confirming = false;
    await this.reload();
  }
}

function jobsPanel(api, me, instance, signal) {
  const id = instance.id, canCancel = holds(me, "scheduler.queue.cancel", instance);
  const panel = new Panel(api, "Jobs", "jobs", signal,
    () => api.get(apiPath`/v1/instances/${id}/jobs`, {limit: JOBS_SHOWN}, {signal}),
    (page) => [
      el("table", {class: "jobs"},
        head(["Id", "Name", "State", "Owner", "Account", "Submitted", "Started", "Ended", canCancel ? "" : null]),
        el("tbody", {}, page.items.length ? page.items.map(row)
          : el("tr", {}, el("td", {colspan: canCancel ? 9 : 8, class: "hint"}, "No jobs."))),
      ),
      page.next_cursor ? el("p", {class: "muted"}, `The newest ${JOBS_SHOWN} jobs; `,
                            el("code", {}, "gpuaas jobs list --all"), " lists every one.") : null,
    ]);

  const cancelButton = (job) => {
    const button = el("button", {type: "button", class: "cancel"}, "Cancel");
    button.addEventListener("click", () => panel.confirm(button.parentNode, `Cancel job ${job.id} (${job.name})?`, [],
      "Cancel job", () => panel.act(apiPath`/v1/instances/${id}/jobs/${job.id}/cancel`, undefined,
                                    `the cancel of job ${job.id}`)));
    return button;
  };

  const row = (job) => el("tr", {"data-job": job.id, "data-state": job.state},
    el("td", {class: "id mono"}, job.id),
    el("td", {class: "name"}, job.name),
    el("td", {class: "state", title: job.runtime_state}, badge(job.state),
       job.reason ? el("div", {class: "muted job-reason"}, job.reason) : null),
    el("td", {class: "owner", title: job.owner ? `${job.owner.kind.replace("_", " ")} ${job.owner.id}`
                                              : "not a user of the platform"},
       job.runtime_user, job.owner && job.owner.id === me.id ? el("span", {class: "muted"}, " (you)") : null),
    el("td", {class: "account"}, job.account),
    el("td", {class: "submitted"}, time(job.submitted_at)),
    el("td", {class: "started"}, time(job.started_at)),
    el("td", {class: "ended"}, time(job.ended_at)),
    canCancel ? el("td", {class: "actions"}, CANCELLABLE.includes(job.state) ? cancelButton(job) : null) : null);

  return panel;
}

function nodesPanel(api, me, instance, signal) {
  const id = instance.id, canOperate = holds(me, "scheduler.node.operate", instance);
  const panel = new Panel(api, "Nodes", "nodes", signal,
    () => api.get(apiPath`/v1/instances/${id}/nodes`, {}, {signal}),
    (list) => el("table", {class: "nodes"},
      head(["Name", "State", "Reason", "CPUs", "GPUs", "Features", canOperate ? "" : null]),
      el("tbody", {}, list.items.length ? list.items.map(row)
        : el("tr", {}, el("td", {colspan: canOperate ? 7 : 6, class: "hint"}, "No nodes.")))));

  const drainButton = (node) => {
    const button = el("button", {type: "button", class: "drain"}, "Drain");
    button.addEventListener("click", () => {
      const reason = el("input", {type: "text", name: "reason", required: true, maxlength: 200,
                                  placeholder: "reason", "aria-label": `why drain ${node.name}`});
      panel.confirm(button.parentNode, `Drain ${node.name}? Its running jobs finish; no new job starts on it.`,
        reason, `Drain ${node.name}`, () => panel.act(apiPath`/v1/instances/${id}/nodes/${node.name}/drain`,
                                                      {reason: reason.value.trim()}, `the drain of ${node.name}`));
    });
    return button;
  };

  const resumeButton = (node) => {
    const button = el("button", {type: "button", class: "resume"}, "Resume");
    button.addEventListener("click", () => {
      button.disabled = true;
      panel.act(apiPath`/v1/instances/${id}/nodes/${node.name}/resume`, undefined, `the resume of ${node.name}`);
    });
    return button;
  };

  const row = (node) => el("tr", {"data-node": node.name, "data-state": node.state},
    el("td", {class: "name mono"}, node.name),
    el("td", {class: "state", title: node.runtime_state}, badge(node.state)),
    el("td", {class: "reason"}, node.reason),
    el("td", {class: "cpus"}, node.cpus ?? ""),
    el("td", {class: "gpus"}, node.gpus ?? ""),
    el("td", {class: "features"}, (node.features || []).map((f) => el("code", {class: "feature"}, f))),
    canOperate ? el("td", {class: "actions"}, DRAINED.includes(node.state) ? resumeButton(node) : drainButton(node))
      : null);

  return panel;
}

// The two panels' sections, loading and then refreshing themselves until `signal` aborts.
export function schedulerSections(api, me, instance, signal) {
  const panels = [jobsPanel(api, me, instance, signal), nodesPanel(api, me, instance, signal)];
  for (const panel of panels) panel.reload();
  return panels.map((panel) => panel.section);
}
