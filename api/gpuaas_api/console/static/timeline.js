// An instance's timeline as one reads a run: one row per task and host, its start and its result merged
// (ok, changed, failed, unreachable; skipped where the host went on to its next task, or the run to its
// recap, with no result: a skipped task's only event is its start), a header per playbook and play, the
// recap per host, the run's argument checks folded into one row, and every other event (operation,
// member, instance, secret, health) a row of its own.
// Events come in order. Each one adds a row or updates its task's row in place, and the oldest row
// beyond the limit leaves: a long timeline costs one row's work per event, never a rebuild.

import {badge, el, plural, replace, time} from "./dom.js";
import {describe} from "./progress.js";

// Argument checks: the plays the collection's playbooks start with ("Refuse --limit, ...", "Check the
// inventory ...") with all their tasks, and the task Ansible adds where a role validates its arguments.
const CHECKS = /^(Check the inventory|Refuse --limit|Validating arguments against arg spec)/;
const ENDS = {"run.task_ok": "ok", "run.task_failed": "failed", "run.host_unreachable": "unreachable"};
// The recap's columns as ansible-playbook prints them, and the stats key each one reads.
const RECAP = [["ok", "ok"], ["changed", "changed"], ["unreachable", "dark"], ["failed", "failures"],
               ["skipped", "skipped"], ["rescued", "rescued"], ["ignored", "ignored"]];
const RUN_ENDS = ["operation.succeeded", "operation.failed", "operation.canceled"];
const FAILED = ["failed", "unreachable"];
// Events that say something got well or sick without "failed" in their name: their rows are tinted so.
const TONE = {healthy: "good", member_recovered: "good", host_cleaned: "good", unhealthy: "failed",
              host_cleanup_pending: "warn"};

function seconds(value) {
  const s = Number(value);
  if (value === undefined || value === null || Number.isNaN(s)) return "";
  if (s < 60) return `${s.toFixed(s < 10 ? 2 : 1)} s`;
  return `${Math.floor(s / 60)}m${String(Math.floor(s % 60)).padStart(2, "0")}s`;
}

export class Timeline {
  constructor(body, limit) {
    this.body = body;  // the table's tbody: the newest row first
    this.limit = limit;  // the newest rows shown
    this.reset();
  }

  reset() {
    this.entries = [];  // the rows, oldest first: {kind, event, row (while shown), ...}
    this.runs = new Map();  // correlation id -> {open: host -> its task's entry, checkPlay, fold}
    this.live = false;  // false while load() builds the model: no DOM work per event
    replace(this.body);
  }

  // Many events at once (the page's load, a narrowed timeline): the model, then the newest rows at once.
  load(events) {
    this.reset();
    for (const event of events) this.apply(event);
    this.live = true;
    replace(this.body, this.entries.slice(-this.limit).reverse().map((entry) => this.render(entry, false)));
  }

  apply(event) {
    const p = event.payload || {}, type = event.type, run = this.run(event.correlation_id);
    if (type === "run.playbook_started") {
      this.close(run, "stopped");  // a new attempt: what the last one left running did not end
      Object.assign(run, {checkPlay: false, fold: null});
      this.add({kind: "header", event, what: `playbook ${p.playbook || ""}`.trim()});
    } else if (type === "run.play_started") {
      this.close(run, "skipped");  // the play before ended on every host: a task still open there was skipped
      run.checkPlay = CHECKS.test(p.play || "");
      this.add({kind: "header", event, host: p.pattern, what: `play ${p.play || "(no name)"}`}, run.checkPlay && run);
    } else if (type === "run.task_started") {
      const host = p.host || "-", task = p.task || "";
      const previous = run.open.get(host);
      if (previous) this.finish(previous, "skipped");
      const entry = {kind: "task", event, host, task, result: "running"};
      run.open.set(host, entry);
      this.add(entry, this.isCheck(run, task) && run);
    } else if (type in ENDS) {
      const host = p.host || "-", task = p.task || "";
      let entry = run.open.get(host);
      run.open.delete(host);
      if (entry && entry.task !== task) {
        this.finish(entry, "skipped");
        entry = null;
      }
      if (!entry) {  // its start is not in the timeline (older than what was read, or narrowed away)
        entry = {kind: "task", event, host, task};
        this.add(entry, this.isCheck(run, task) && run);
      }
      Object.assign(entry, {duration: p.duration, message: p.message, ignored: Boolean(p.ignored)});
      this.finish(entry, ENDS[type] === "ok" && p.changed ? "changed" : ENDS[type]);
    } else if (type === "run.playbook_stats") {
      this.close(run, "skipped");
      const hosts = new Set(RECAP.flatMap(([, key]) => Object.keys(p[key] || {})));
      for (const host of [...hosts].sort()) {
        const count = (key) => Number(p[key]?.[host] || 0);
        this.add({kind: "recap", event, host, what: `recap ${RECAP.map(([label, key]) => `${label}=${count(key)}`).join(" ")}`,
                  result: count("failures") ? "failed" : count("dark") ? "unreachable" : "ok"});
      }
    } else {
      if (RUN_ENDS.includes(type)) this.close(run, "stopped");  // a killed run's task has no result
      this.add({kind: "event", event, host: p.node_name});  // a member's or a cleanup's node in the Host column
    }
  }

  run(cid) {
    if (!this.runs.has(cid)) this.runs.set(cid, {open: new Map(), checkPlay: false, fold: null});
    return this.runs.get(cid);
  }

  isCheck(run, task) {
    return run.checkPlay || CHECKS.test(task.replace(/^[^:]* : /, ""));  // "role : task" names too
  }

  // A new row at the top; `run` set: into that run's fold of argument checks instead.
  add(entry, run = null) {
    if (run) return this.addToFold(entry, run);
    this.entries.push(entry);
    if (!this.live) return;
    this.body.prepend(this.render(entry, true));
    const old = this.entries[this.entries.length - 1 - this.limit];
    if (old?.row) {
      old.row.remove();
      old.row = null;
    }
  }

  addToFold(entry, run) {
    if (!run.fold) {
      run.fold = {kind: "checks", event: entry.event, children: []};
      this.add(run.fold);
    }
    const fold = run.fold;
    entry.parent = fold;
    fold.children.push(entry);
    if (fold.row) {
      fold.body.prepend(this.render(entry, true));
      this.summarize(fold);
    }
  }

  finish(entry, result) {
    entry.result = result;
    if (entry.row) this.fill(entry.row, entry, true);
    if (entry.parent?.row) this.summarize(entry.parent);
  }

  close(run, result) {
    for (const entry of run.open.values()) this.finish(entry, result);
    run.open.clear();
  }

  render(entry, fresh) {
    entry.row = el("tr");
    if (entry.kind === "checks") {
      entry.body = el("tbody");
      entry.summary = el("summary");
      entry.details = el("details", {}, entry.summary, el("table", {class: "checks"}, entry.body));
      replace(entry.body, entry.children.slice().reverse().map((child) => this.render(child, false)));
      this.summarize(entry);
    }
    this.fill(entry.row, entry, fresh && this.live);
    return entry.row;
  }

  // A row's cells from its entry; a row inside the fold leaves the correlation id to the fold's row.
  fill(row, entry, fresh) {
    const event = entry.event, failed = this.failed(entry);
    const type = {task: "run.task", recap: "run.recap", checks: "run.checks"}[entry.kind] || event.type;
    const tone = failed ? "event-failed" : entry.kind === "event" && TONE[event.type] ? `event-${TONE[event.type]}` : "";
    row.className = [`row-${entry.kind}`, fresh ? "fresh" : "", tone].join(" ").trim();
    row.setAttribute("data-event", event.id);
    row.setAttribute("data-type", type);
    if (entry.kind === "task") {
      row.setAttribute("data-host", entry.host);
      row.setAttribute("data-task", entry.task);
      row.setAttribute("data-result", entry.result || "");
    }
    if (entry.kind === "checks") {
      if (row.childElementCount) return;  // built once: its summary changes, its details keep their state
      return replace(row, el("td", {class: "mono"}, event.id), el("td", {}, time(event.occurred_at)),
        el("td", {class: "host"}), el("td", {class: "what", colspan: 3}, entry.details),
        el("td", {class: "cid mono muted"}, event.correlation_id));
    }
    let what;
    if (entry.kind === "event") {
      what = [el("span", {class: "type"}, event.type), " ",
              el("span", {class: "detail"}, describe(event, entry.host ? ["node_name"] : []))];
    } else if (entry.kind === "task") {
      what = [entry.task, entry.message ? el("div", {class: "detail task-message"}, String(entry.message)) : null];
    } else {
      what = entry.what;
    }
    replace(row, el("td", {class: "mono"}, event.id), el("td", {}, time(event.occurred_at)),
      el("td", {class: "host"}, entry.host || ""), el("td", {class: "what"}, what),
      el("td", {class: "result"}, entry.result ? badge(entry.result) : "",
         entry.ignored ? el("span", {class: "muted"}, " ignored") : null),
      el("td", {class: "duration"}, seconds(entry.duration)),
      entry.parent ? null : el("td", {class: "cid mono muted"}, event.correlation_id));
  }

  failed(entry) {
    if (entry.kind === "checks") return entry.children.some((child) => this.failed(child));
    if (entry.kind === "event") return entry.event.type.endsWith("failed") || TONE[entry.event.type] === "failed";
    return FAILED.includes(entry.result) && !entry.ignored;
  }

  // The fold's one line: how many checks, and whether any failed (then it opens by itself).
  summarize(fold) {
    const tasks = fold.children.filter((child) => child.kind === "task");
    const failed = tasks.filter((task) => this.failed(task)).length;
    const running = tasks.filter((task) => task.result === "running").length;
    const state = failed ? `${failed} failed` : running ? `${running} running`
      : tasks.every((task) => ["ok", "changed"].includes(task.result)) ? "all ok" : "none failed";
    replace(fold.summary, `argument checks: ${plural(tasks.length, "task")}, ${state}`);
    if (failed && !fold.opened) {
      fold.details.open = fold.opened = true;
      fold.row.classList.add("event-failed");
    }
  }
}
