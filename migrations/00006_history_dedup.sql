-- History: dedup by event id (issue 13, docs/history.md "Dedup",
-- docs/rules.md "Deduplication").
--
-- With `floodgate aggregator --dedup <horizon>`, the history sink records
-- the id of every event it counts here, in the transaction that writes the
-- event's buckets and the partition's offset, and skips an event whose id
-- was counted less than the horizon ago (a producer's retry). So a crash can
-- never leave an id recorded without its counts, or counts without their id.
--
-- id is the first 16 bytes of the SHA-256 of the event id (up to 64 bytes of
-- printable ASCII): 16 bytes a row however long the producer's ids are, and
-- a fixed-width key that is cheap to compare. Two distinct ids collide with
-- probability 2^-128; floodgate.history_id(text) computes the key in SQL,
-- to look an id up by hand. counted_at is the sink's clock when it counted
-- the event: an id counted at or before now - horizon counts again (the
-- sink's ON CONFLICT ... WHERE), whether or not it was pruned yet.
--
-- Bounded by pruning, not partitions: the sink deletes ids counted before
-- now - horizon in the background (history.Sink.Prune), in chunks, by the
-- counted_at index. Measured before choosing: one unique index probed and
-- written by INSERT ... ON CONFLICT costs fewer buffer accesses per id than
-- time partitions (each of which must be probed for every id) and needs no
-- DDL while the sink writes; the cost is the deletes and their vacuum.
-- Keys are global, not per partition: event ids are unique, and a retry has
-- the same key (so the same partition) anyway.

-- +goose Up
CREATE TABLE floodgate.history_ids (
    id         uuid PRIMARY KEY,       -- floodgate.history_id(event id)
    counted_at timestamptz NOT NULL    -- when the sink counted it
);
CREATE INDEX history_ids_counted_at ON floodgate.history_ids (counted_at);

COMMENT ON TABLE floodgate.history_ids IS
    'ids of the events history counted within the --dedup horizon (pruned by the sink)';

-- history_id: the key of an event id in history_ids (the sink computes the
-- same in Go: history.IDKey).
-- +goose StatementBegin
CREATE FUNCTION floodgate.history_id(p_id text) RETURNS uuid
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT encode(substring(sha256(convert_to(p_id, 'UTF8')) FROM 1 FOR 16), 'hex')::uuid
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION floodgate.history_id(text);
DROP TABLE floodgate.history_ids;
