// Building the page from data. Every string from the service (tenant names, event messages, task names)
// becomes a text node: nothing here parses HTML, so a hostile name or message shows as the characters
// it is. No HTML-parsing sink (the *HTML properties and methods, document's write) may be used here or
// anywhere in the console; tests/console checks the sources.

import {Refusal} from "./api.js";

export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.toLowerCase().startsWith("on")) throw new Error(`attach ${key} with addEventListener`);
    else node.setAttribute(key, String(value));
  }
  append(node, children);
  return node;
}

export function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function replace(node, ...children) {
  node.replaceChildren();
  return append(node, children);
}

// A CSS class for a status the service reports (a fixed vocabulary); anything else gets a neutral one.
export function statusClass(status) {
  return /^[a-z_]{1,32}$/.test(String(status)) ? `status status-${status}` : "status";
}

export function badge(status) {
  return el("span", {class: statusClass(status)}, status);
}

export function link(hash, ...children) {
  return el("a", {href: hash}, ...children);
}

// "1 event", "2 events": every count the console prints in words goes through here.
export function plural(count, one, many = `${one}s`) {
  return `${count} ${count === 1 ? one : many}`;
}

export function ago(iso) {
  if (!iso) return "";
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  return `${duration(seconds)} ago`;
}

export function duration(seconds) {
  seconds = Math.floor(seconds);
  if (seconds < 60) return `${seconds}s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes}m${String(seconds % 60).padStart(2, "0")}s`;
  return `${Math.floor(minutes / 60)}h${String(minutes % 60).padStart(2, "0")}m`;
}

// UTC, to the second: the same instant the service's logs show.
export function time(iso) {
  return iso ? new Date(iso).toISOString().slice(0, 19).replace("T", " ") + "Z" : "";
}

// The service's refusal (its code, message, HTTP status and correlation id), or what else went wrong.
export function refusalBox(error, what) {
  if (!(error instanceof Refusal)) {
    return el("div", {class: "refusal", role: "alert"}, el("h2", {}, `Could not show ${what}`), String(error));
  }
  return el("div", {class: "refusal", role: "alert", "data-code": error.code},
    el("h2", {}, `The service refused ${what}`),
    el("p", {}, el("code", {class: "code"}, error.code), ": ", el("span", {class: "message"}, error.message),
       error.status ? ` (HTTP ${error.status})` : ""),
    error.correlationId
      ? el("p", {}, "correlation id ", el("code", {class: "correlation-id"}, error.correlationId),
           el("span", {class: "muted"}, " (search the service's logs with it)"))
      : null);
}
