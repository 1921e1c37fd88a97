"""The tenant's client for the control service: what `gpuaas login`, `instances`, `deploy`, `members`,
`ops` and `events` use, and what `gpuaas demo` follows operations with. It speaks only the public
HTTP API (the same routes and tokens as curl or a generated client).

- config: the client's config file (URL and token, mode 0600) and the GPUAAS_API / GPUAAS_TOKEN
  environment variables that override it;
- http: the HTTP client (error envelopes as ApiError, pagination, Idempotency-Key, retries, the
  event stream) and the lookups of names (projects, instances, members, allocations);
- follow: the state of a running operation built from its events, and the follower that reads the
  event stream until the operation ends;
- render: tables, the live view (rich, on a terminal) and plain progress lines.
"""
