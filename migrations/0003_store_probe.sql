-- One row the readiness probe rewrites: a real write transaction, so
-- /readyz turns 503 when the store's disk refuses writes (full, read-only,
-- I/O errors), and back when they work again.
CREATE TABLE store_probe (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    at INTEGER NOT NULL
);
