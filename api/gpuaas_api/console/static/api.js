// The public API, with the token the user pasted in: the same routes, answers and refusals as curl or
// the gpuaas client. The console has no API of its own.

export class Refusal extends Error {
  constructor(status, code, message, correlationId, details = {}) {
    super(message);
    this.status = status;
    this.code = code;
    this.correlationId = correlationId;
    this.details = details;
  }
}

async function refusal(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    // not the envelope (a proxy's page): the status and the header say enough
  }
  const error = body && typeof body.error === "object" && body.error ? body.error : {};
  return new Refusal(response.status, String(error.code ?? "http_error"), String(error.message ?? response.statusText),
                     error.correlation_id ?? response.headers.get("X-Correlation-ID"), error.details ?? {});
}

// An API path whose every ${value} is one encoded path segment: apiPath`/v1/instances/${id}/members`.
// encodeURIComponent escapes "/", "?", "#" and "%" but leaves "." and "..", which the URL parser resolves
// (and a link's "%2E%2E" decodes to ".."): the request would leave the route named here. No id is one
// of those, so they are refused (issue 22, finding 6).
export function apiPath(strings, ...values) {
  return strings.reduce((path, text, i) => path + segment(values[i - 1]) + text);
}

function segment(value) {
  const text = String(value);
  if (text === "" || text === "." || text === "..") throw new Error(`"${text}" is not an id`);
  return encodeURIComponent(text);
}

// Whether the token holds `permission` where `scope` ({tenant_id, project_id}: an instance, or a project with its
// id as project_id) lives, as the service decides it (iam/auth.py Principal.permits): a platform grant, a grant in
// its tenant or one in its project; a service account acts in its own project only. GET /v1/me lists the grants.
// The console hides what this denies; the service checks every request again.
export function holds(me, permission, scope) {
  if (me.kind === "service_account" && me.project_id !== scope.project_id) return false;
  return (me.grants || []).some((g) => (g.permissions || []).includes(permission)
    && (g.scope_kind === "platform" || (g.scope_kind === "tenant" && g.tenant_id === scope.tenant_id)
        || (g.scope_kind === "project" && g.project_id === scope.project_id)));
}

export class Api {
  constructor(token) {
    this.token = token;
    this.root = new URL("../", location.href);  // the console lives at <root>/console/
  }

  url(path, params = {}) {
    const url = new URL(path.replace(/^\//, ""), this.root);
    for (const [key, value] of Object.entries(params)) {
      if (value !== undefined && value !== null) url.searchParams.set(key, String(value));
    }
    return url;
  }

  async request(path, params = {}, {signal, accept = "application/json", method = "GET", body, headers: extra = {}} = {}) {
    const headers = {...extra, Authorization: `Bearer ${this.token}`, Accept: accept};
    if (body !== undefined) headers["Content-Type"] = "application/json";
    try {
      return await fetch(this.url(path, params), {
        method, headers, body: body === undefined ? undefined : JSON.stringify(body),
        cache: "no-store", credentials: "omit", signal,
      });
    } catch (error) {
      if (error.name === "AbortError") throw error;
      throw new Refusal(0, "unreachable", `the service did not answer (${error.message})`, null);
    }
  }

  async get(path, params = {}, options = {}) {
    const response = await this.request(path, params, options);
    if (!response.ok) throw await refusal(response);
    return response.json();
  }

  // An action (cancel a job, drain a node, deploy an instance): the service's answer, or its refusal thrown.
  // `key`: the Idempotency-Key of an operation's request, so that sending it again queues nothing more.
  async post(path, body = undefined, {signal, key} = {}) {
    return this.send("POST", path, body, {signal, headers: key ? {"Idempotency-Key": key} : {}});
  }

  async delete(path, {signal} = {}) {
    return this.send("DELETE", path, undefined, {signal});
  }

  async send(method, path, body, {signal, headers} = {}) {
    const response = await this.request(path, {}, {signal, method, body, headers});
    if (!response.ok) throw await refusal(response);
    return response.status === 204 ? null : response.json();
  }

  // Every item of a paginated list (keyset cursors), up to maxPages pages.
  async pages(path, params = {}, options = {}, maxPages = 20) {
    const items = [];
    let cursor = null;
    for (let page = 0; page < maxPages; page++) {
      const answer = await this.get(path, {...params, limit: 500, cursor}, options);
      items.push(...answer.items);
      cursor = answer.next_cursor;
      if (!cursor) break;
    }
    return items;
  }

  // Follows the instance's event stream (Server-Sent Events) from after `after`, calling onEvent for
  // each event and onState("live" | "reconnecting" | "ended" | "refused", detail) as the connection
  // changes. EventSource cannot send a bearer token, so this reads the stream with fetch; it
  // reconnects after where it stopped, as EventSource would, until `signal` aborts.
  async follow(instanceId, after, {onEvent, onState, signal}) {
    const stream = apiPath`/v1/instances/${instanceId}/events/stream`;
    let last = after, retryMs = 2000;
    while (!signal.aborted) {
      try {
        const response = await this.request(stream, {after: last}, {signal, accept: "text/event-stream"});
        if (!response.ok) {
          const refused = await refusal(response);
          if (response.status >= 400 && response.status < 500) {
            onState("refused", refused);
            return;
          }
          throw refused;
        }
        onState("live");
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (;;) {
          const {value, done} = await reader.read();
          if (done) break;
          buffer += value.replace(/\r\n?/g, "\n");
          let cut;
          while ((cut = buffer.indexOf("\n\n")) >= 0) {
            const frame = parseFrame(buffer.slice(0, cut));
            buffer = buffer.slice(cut + 2);
            if (frame.retry) retryMs = frame.retry;
            if (frame.event === "end") {
              onState("ended", JSON.parse(frame.data || "{}").reason || "the service ended the stream");
              return;
            }
            if (frame.data) {
              const event = JSON.parse(frame.data);
              last = Math.max(last, Number(event.id));
              onEvent(event);
            }
          }
        }
      } catch (error) {
        if (signal.aborted) return;
        onState("reconnecting", error);
      }
      if (signal.aborted) return;
      onState("reconnecting");
      await new Promise((resolve) => setTimeout(resolve, retryMs));
    }
  }
}

function parseFrame(text) {
  const frame = {data: ""};
  for (const line of text.split("\n")) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "data") frame.data += (frame.data ? "\n" : "") + value;
    else if (field === "event") frame.event = value;
    else if (field === "id") frame.id = value;
    else if (field === "retry" && /^\d+$/.test(value)) frame.retry = Number(value);
  }
  return frame;
}
