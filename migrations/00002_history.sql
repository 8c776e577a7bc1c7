-- History: minute buckets and the retention ladder (issue 5, docs/history.md).
--
-- One table per resolution, floodgate.bucket_<step> for 1m, 5m, 1h, 1d, 1w,
-- range-partitioned by bucket start (a DEFAULT partition catches rows whose
-- partition does not exist yet, so an insert never fails). With TimescaleDB
-- installed and preloaded they are hypertables instead. Every event lives in
-- exactly one table: the sink writes a minute into the finest tier whose
-- rolled_to watermark is at or below it, and the roller moves rows down the
-- ladder and raises rolled_to in the same transaction.
--
-- Every object is schema-qualified with floodgate. so tests can install the
-- same file into a private schema.

-- +goose Up
CREATE SCHEMA IF NOT EXISTS floodgate;

-- The ladder: one row per tier, finest first (position 0).
CREATE TABLE floodgate.history_tiers (
    step       text PRIMARY KEY CHECK (step IN ('1m', '5m', '1h', '1d', '1w')),
    position   int NOT NULL UNIQUE,
    width      interval NOT NULL,
    horizon    interval,                                  -- NULL: forever
    rolled_to  timestamptz NOT NULL DEFAULT '-infinity',  -- nothing below this lives in the tier
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Totals per key since the beginning, late events included.
CREATE TABLE floodgate.history_totals (
    action     text NOT NULL,
    subject    text NOT NULL,
    kind       text NOT NULL,
    n          bigint NOT NULL,
    first_at   timestamptz NOT NULL,  -- earliest event minute seen
    last_at    timestamptz NOT NULL,  -- latest event minute seen
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (action, subject, kind)
);
CREATE INDEX history_totals_action_n ON floodgate.history_totals (action, n DESC);

-- Events that arrived after every tier covering their time was expired: in
-- totals, in no bucket. Reported, never silently lost.
CREATE TABLE floodgate.history_late (
    action      text NOT NULL,
    subject     text NOT NULL,
    kind        text NOT NULL,
    n           bigint NOT NULL,
    first_at    timestamptz NOT NULL,
    last_at     timestamptz NOT NULL,
    reported_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (action, subject, kind)
);

-- Events removed by retention of a last tier with a finite horizon.
CREATE TABLE floodgate.history_expired (
    step       text NOT NULL,
    before     timestamptz NOT NULL,
    n          bigint NOT NULL,
    rows       bigint NOT NULL,
    expired_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (step, before)
);

-- partition_bounds: the partition of a step's table that holds at. 1m: a UTC
-- day; 5m: a week from Monday; 1h: a UTC month; 1d and 1w: a UTC year.
-- +goose StatementBegin
CREATE FUNCTION floodgate.partition_bounds(p_step text, p_at timestamptz, OUT lo timestamptz, OUT hi timestamptz)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT b.lo, b.lo + CASE p_step WHEN '1m' THEN interval '1 day' WHEN '5m' THEN interval '7 days'
                                    WHEN '1h' THEN interval '1 month' ELSE interval '1 year' END
    FROM (SELECT CASE p_step
        WHEN '1m' THEN date_trunc('day', p_at, 'UTC')
        WHEN '5m' THEN date_bin('7 days', p_at, timestamptz '2000-01-03 00:00:00+00')
        WHEN '1h' THEN date_trunc('month', p_at, 'UTC')
        ELSE date_trunc('year', p_at, 'UTC') END AS lo) b
$$;
-- +goose StatementEnd

-- is_hypertable: whether the step's table is a TimescaleDB hypertable.
-- +goose StatementBegin
CREATE FUNCTION floodgate.is_hypertable(p_step text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF to_regclass('_timescaledb_catalog.hypertable') IS NULL THEN
        RETURN false;
    END IF;
    RETURN EXISTS (SELECT 1 FROM _timescaledb_catalog.hypertable h
                   WHERE h.schema_name = split_part('floodgate.x', '.', 1)
                     AND h.table_name = 'bucket_' || p_step);
END
$$;
-- +goose StatementEnd

-- ensure_partition: create the partition of the step's table that holds at,
-- moving any rows of its range out of the DEFAULT partition. Idempotent and
-- safe to call concurrently. Returns the partition's name (NULL for a
-- hypertable, whose chunks TimescaleDB creates itself).
-- +goose StatementBegin
CREATE FUNCTION floodgate.ensure_partition(p_step text, p_at timestamptz) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    b      record;
    parent text := 'bucket_' || p_step;
    part   text;
BEGIN
    IF floodgate.is_hypertable(p_step) THEN
        RETURN NULL;
    END IF;
    SELECT * INTO b FROM floodgate.partition_bounds(p_step, p_at);
    part := parent || '_p' || to_char(b.lo AT TIME ZONE 'UTC', 'YYYYMMDD');
    IF to_regclass(format('floodgate.%I', part)) IS NOT NULL THEN
        RETURN part;
    END IF;
    -- One creator per table at a time; the DEFAULT partition is locked before
    -- its rows move so that no insert slips in before ATTACH checks it.
    PERFORM pg_advisory_xact_lock(hashtext('floodgate.history.partition'), hashtext(parent));
    IF EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
               WHERE ns.nspname = split_part('floodgate.x', '.', 1) AND c.relname = part) THEN
        RETURN part;
    END IF;
    EXECUTE format('LOCK TABLE floodgate.%I IN ACCESS EXCLUSIVE MODE', parent || '_default');
    EXECUTE format('CREATE TABLE floodgate.%I (LIKE floodgate.%I INCLUDING DEFAULTS)', part, parent);
    EXECUTE format('WITH m AS (DELETE FROM floodgate.%I WHERE bucket >= $1 AND bucket < $2 RETURNING action, subject, kind, bucket, n) '
                   'INSERT INTO floodgate.%I (action, subject, kind, bucket, n) SELECT action, subject, kind, bucket, n FROM m',
                   parent || '_default', part) USING b.lo, b.hi;
    EXECUTE format('ALTER TABLE floodgate.%I ATTACH PARTITION floodgate.%I FOR VALUES FROM (%L) TO (%L)',
                   parent, part, b.lo, b.hi);
    RETURN part;
END
$$;
-- +goose StatementEnd

-- oldest_bucket: a lower bound of the oldest row of the step's table (the
-- lower bound of its oldest non-empty partition, or the oldest row of the
-- DEFAULT partition), NULL when empty. Reads no more than one row per empty
-- partition.
-- +goose StatementBegin
CREATE FUNCTION floodgate.oldest_bucket(p_step text) RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
DECLARE
    r      record;
    found  boolean;
    oldest timestamptz;
BEGIN
    IF floodgate.is_hypertable(p_step) THEN
        EXECUTE format('SELECT min(bucket) FROM floodgate.%I', 'bucket_' || p_step) INTO oldest;
        RETURN oldest;
    END IF;
    EXECUTE format('SELECT min(bucket) FROM floodgate.%I', 'bucket_' || p_step || '_default') INTO oldest;
    FOR r IN SELECT * FROM floodgate.partitions(p_step) LOOP
        IF oldest IS NOT NULL AND oldest <= r.lo THEN
            EXIT;
        END IF;
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM floodgate.%I)', r.name) INTO found;
        IF found THEN
            RETURN least(oldest, r.lo);
        END IF;
    END LOOP;
    RETURN oldest;
END
$$;
-- +goose StatementEnd

-- partitions: the range partitions of the step's table, oldest first.
-- +goose StatementBegin
CREATE FUNCTION floodgate.partitions(p_step text)
RETURNS TABLE (name text, lo timestamptz, hi timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT c.relname::text, b.lo, b.hi
    FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
    CROSS JOIN LATERAL floodgate.partition_bounds(p_step,
        to_timestamp(substring(c.relname from '_p([0-9]{8})$'), 'YYYYMMDD')::timestamp AT TIME ZONE 'UTC') b
    WHERE i.inhparent = to_regclass(format('floodgate.%I', 'bucket_' || p_step))
      AND c.relname ~ '_p[0-9]{8}$'
    ORDER BY b.lo
$$;
-- +goose StatementEnd

-- drop_partitions: drop the partitions (or chunks) of the step's table that
-- end at or before p_before. With p_require_empty, non-empty partitions are
-- kept (a roller drops only what it has fully rolled). Otherwise their rows
-- expire: counted into history_expired, together with the DEFAULT partition's
-- rows before p_before. Returns the number of partitions dropped. Callers
-- hold the routing lock, so no sink inserts meanwhile.
-- +goose StatementBegin
CREATE FUNCTION floodgate.drop_partitions(p_step text, p_before timestamptz, p_require_empty boolean)
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    r       record;
    parent  text := 'bucket_' || p_step;
    dropped int := 0;
    has     boolean;
    en      bigint;
    er      bigint;
    tn      bigint := 0;
    tr      bigint := 0;
BEGIN
    IF floodgate.is_hypertable(p_step) THEN
        IF NOT p_require_empty THEN
            EXECUTE format('SELECT coalesce(sum(n), 0), count(*) FROM floodgate.%I WHERE bucket < $1', parent)
                INTO tn, tr USING p_before;
        ELSE
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM floodgate.%I WHERE bucket < $1)', parent) INTO has USING p_before;
            IF has THEN RETURN 0; END IF;
        END IF;
        EXECUTE format('DELETE FROM floodgate.%I WHERE bucket < $1', parent) USING p_before;
        EXECUTE format('SELECT count(*) FROM drop_chunks(%L, older_than => $1)', 'floodgate.' || parent)
            INTO dropped USING p_before;
    ELSE
        -- Parent first, as readers lock it: no lock-order deadlock with them.
        EXECUTE format('LOCK TABLE floodgate.%I IN ACCESS EXCLUSIVE MODE', parent);
        FOR r IN SELECT * FROM floodgate.partitions(p_step) WHERE hi <= p_before LOOP
            IF p_require_empty THEN
                EXECUTE format('SELECT EXISTS (SELECT 1 FROM floodgate.%I)', r.name) INTO has;
                CONTINUE WHEN has;
            ELSE
                EXECUTE format('SELECT coalesce(sum(n), 0), count(*) FROM floodgate.%I', r.name) INTO en, er;
                tn := tn + en;
                tr := tr + er;
            END IF;
            EXECUTE format('DROP TABLE floodgate.%I', r.name);
            dropped := dropped + 1;
        END LOOP;
        IF NOT p_require_empty THEN
            EXECUTE format('WITH d AS (DELETE FROM floodgate.%I WHERE bucket < $1 RETURNING n) SELECT coalesce(sum(n), 0), count(*) FROM d',
                           parent || '_default') INTO en, er USING p_before;
            tn := tn + en;
            tr := tr + er;
        END IF;
    END IF;
    IF tr > 0 THEN
        INSERT INTO floodgate.history_expired AS e (step, before, n, rows) VALUES (p_step, p_before, tn, tr)
        ON CONFLICT (step, before) DO UPDATE SET n = e.n + EXCLUDED.n, rows = e.rows + EXCLUDED.rows, expired_at = now();
    END IF;
    RETURN dropped;
END
$$;
-- +goose StatementEnd

-- The bucket tables, partitioned or hypertables.
-- +goose StatementBegin
DO $$
DECLARE
    ts boolean := EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'timescaledb')
                  AND current_setting('shared_preload_libraries', true) LIKE '%timescaledb%';
    s  text;
    t  text;
BEGIN
    IF ts THEN
        CREATE EXTENSION IF NOT EXISTS timescaledb;
    END IF;
    FOREACH s IN ARRAY ARRAY['1m', '5m', '1h', '1d', '1w'] LOOP
        t := 'bucket_' || s;
        IF ts THEN
            EXECUTE format('CREATE TABLE floodgate.%I (action text NOT NULL, subject text NOT NULL, kind text NOT NULL, '
                           'bucket timestamptz NOT NULL, n bigint NOT NULL, PRIMARY KEY (action, subject, kind, bucket))', t);
            PERFORM create_hypertable(format('floodgate.%I', t)::regclass, 'bucket',
                chunk_time_interval => (SELECT hi - lo FROM floodgate.partition_bounds(s, timestamptz '2001-01-01 00:00:00+00')));
        ELSE
            EXECUTE format('CREATE TABLE floodgate.%I (action text NOT NULL, subject text NOT NULL, kind text NOT NULL, '
                           'bucket timestamptz NOT NULL, n bigint NOT NULL, PRIMARY KEY (action, subject, kind, bucket)) '
                           'PARTITION BY RANGE (bucket)', t);
            EXECUTE format('CREATE TABLE floodgate.%I PARTITION OF floodgate.%I DEFAULT', t || '_default', t);
            -- Range scans by time (roller chunks, top-N over a range) read
            -- few pages: buckets arrive roughly in time order.
            EXECUTE format('CREATE INDEX %I ON floodgate.%I USING brin (bucket)', t || '_bucket_brin', t);
        END IF;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- All tiers at once; each row's step says its resolution.
CREATE VIEW floodgate.buckets AS
          SELECT '1m'::text AS step, action, subject, kind, bucket, n FROM floodgate.bucket_1m
UNION ALL SELECT '5m', action, subject, kind, bucket, n FROM floodgate.bucket_5m
UNION ALL SELECT '1h', action, subject, kind, bucket, n FROM floodgate.bucket_1h
UNION ALL SELECT '1d', action, subject, kind, bucket, n FROM floodgate.bucket_1d
UNION ALL SELECT '1w', action, subject, kind, bucket, n FROM floodgate.bucket_1w;

-- +goose Down
DROP VIEW IF EXISTS floodgate.buckets;
DROP TABLE IF EXISTS floodgate.bucket_1m, floodgate.bucket_5m, floodgate.bucket_1h, floodgate.bucket_1d, floodgate.bucket_1w;
DROP FUNCTION IF EXISTS floodgate.drop_partitions(text, timestamptz, boolean);
DROP FUNCTION IF EXISTS floodgate.oldest_bucket(text);
DROP FUNCTION IF EXISTS floodgate.partitions(text);
DROP FUNCTION IF EXISTS floodgate.ensure_partition(text, timestamptz);
DROP FUNCTION IF EXISTS floodgate.is_hypertable(text);
DROP FUNCTION IF EXISTS floodgate.partition_bounds(text, timestamptz);
DROP TABLE IF EXISTS floodgate.history_expired, floodgate.history_late, floodgate.history_totals, floodgate.history_tiers;
