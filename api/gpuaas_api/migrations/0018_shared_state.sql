-- Issue 28: nothing the service keeps lives on one machine's disk. Every serve replica and worker, on any host,
-- reads the content a run executes and the keys every replica signs with from the database (replicated with it),
-- and keeps only caches on its own disk.

-- The content store (api/gpuaas_api/content/store.py): every blob by its sha256 digest, in chunks, so that a
-- collection build streams in and out without holding it in memory. Immutable: nothing updates a row.
CREATE TABLE content_blobs (
    digest      text PRIMARY KEY CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
    size        bigint NOT NULL CHECK (size >= 0),
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE content_chunks (
    digest  text NOT NULL REFERENCES content_blobs(digest) ON DELETE CASCADE,
    seq     integer NOT NULL CHECK (seq >= 0),
    data    bytea NOT NULL,
    PRIMARY KEY (digest, seq)
);

-- Keys every replica must share (the registry token signing key), sealed with the service's secret key
-- (GPUAAS_SECRET_KEY). Made once by whichever replica needs one first; the others read that one.
CREATE TABLE service_keys (
    name        text PRIMARY KEY,
    sealed      bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
