// An operation's progress rebuilt from the instance's events that carry its correlation id: the same
// counting as the gpuaas client's `ops follow` (gpuaas_api/client/follow.py, docs/cli.md). No run knows
// its total ahead, so "started" is the task starts seen so far (one per task and host) and "done" the
// starts that ended; a skipped task counts as done when its host starts its next one.

export const TERMINAL = ["succeeded", "failed", "canceled"];
const TASK_ENDS = {"run.task_ok": "ok", "run.task_failed": "failed", "run.host_unreachable": "unreachable"};

export class Progress {
  constructor(op) {
    this.op = op;
    this.started = 0;
    this.done = 0;
    this.failed = 0;
    this.running = new Map();  // host -> the task it runs now
    this.hosts = new Set();
    this.failure = null;  // the first failed task that was not ignored: {host, task, message}
    this.lastTask = null;
    this.seen = new Set();
  }

  get finished() {
    return TERMINAL.includes(this.op.status);
  }

  elapsed(now = Date.now()) {
    const begin = Date.parse(this.op.started_at || this.op.created_at);
    const end = this.finished && this.op.finished_at ? Date.parse(this.op.finished_at) : now;
    return Number.isNaN(begin) ? 0 : Math.max(0, (end - begin) / 1000);
  }

  apply(event) {
    if (this.seen.has(event.id) || event.correlation_id !== this.op.correlation_id) return;
    this.seen.add(event.id);
    const payload = event.payload || {};
    const ours = payload.operation_id === this.op.id;
    const type = event.type;
    if (type === "operation.started" && ours) {
      if (Number(payload.attempt || 1) > 1) {  // a new attempt runs the playbook again from the start
        this.started = this.done = this.failed = 0;
        this.running.clear();
        this.failure = null;
      }
    } else if (type === "run.task_started") {
      const host = payload.host || "-";
      if (this.running.has(host)) this.done += 1;
      this.running.set(host, payload.task || "");
      this.hosts.add(host);
      this.started += 1;
    } else if (type in TASK_ENDS) {
      const host = payload.host || "-", task = payload.task || "";
      if (!this.running.delete(host)) this.started += 1;
      this.hosts.add(host);
      this.done += 1;
      let outcome = TASK_ENDS[type];
      if (outcome !== "ok") {
        if (payload.ignored) outcome += " (ignored)";
        else {
          this.failed += 1;
          this.failure = this.failure || {host, task, message: payload.message ?? ""};
        }
      }
      this.lastTask = `${outcome} ${host}: ${task}`;
    } else if (type === "run.playbook_stats" || type === "run.play_started") {
      // A play starts once the one before ended on every host: a task still open there was skipped.
      this.done += this.running.size;
      this.running.clear();
    } else if (type.startsWith("operation.") && ours && TERMINAL.includes(type.slice("operation.".length))) {
      this.running.clear();  // a stopped run's tasks did not end; none runs any more
    }
  }
}

// The payload keys a reader needs, in the order shown: an operation's, a run's, a member's node, a health
// check's (what it ran: module, hosts, members, seconds) and a host cleanup's (client/follow.py's DESCRIBED).
const DESCRIBED = ["kind", "attempt", "node_name", "host_name", "host", "task", "status", "code", "module", "hosts",
                   "members", "seconds", "attempts", "reason", "message"];

// One event as `key=value ...` (its type apart), as `gpuaas events tail` shows it; `skip`: keys shown elsewhere.
export function describe(event, skip = []) {
  const payload = event.payload || {};
  return DESCRIBED.filter((key) => !skip.includes(key))
    .filter((key) => payload[key] !== undefined && payload[key] !== null && payload[key] !== "")
    .map((key) => `${key}=${typeof payload[key] === "object" ? JSON.stringify(payload[key]) : payload[key]}`)
    .join(" ");
}
