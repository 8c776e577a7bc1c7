-- History: partitions and curves independent of the session TimeZone, and
-- drop_partitions that locks only when it drops (docs/history.md,
-- docs/dashboards.md).
--
-- 00002's partition_bounds added '1 day', '7 days' or '1 month' to a UTC
-- bound in the session's time zone: in a session outside UTC a partition
-- spanning a DST change was 23 or 25 hours long, and the next day's
-- partition could not be attached ("would overlap"). 00003's curve stepped
-- with generate_series in the session's time zone, so a day step moved its
-- points off UTC midnight after a DST change. Every function here computes
-- in UTC and runs with TimeZone = 'UTC' whatever the caller's session says.

-- +goose Up

-- partition_bounds: bounds computed on UTC wall-clock timestamps (timestamp
-- without time zone), so it depends on no setting and is truly immutable.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION floodgate.partition_bounds(p_step text, p_at timestamptz, OUT lo timestamptz, OUT hi timestamptz)
LANGUAGE sql IMMUTABLE PARALLEL SAFE SET TimeZone = 'UTC' AS $$
    SELECT b.lo AT TIME ZONE 'UTC',
           (b.lo + CASE p_step WHEN '1m' THEN interval '1 day' WHEN '5m' THEN interval '7 days'
                               WHEN '1h' THEN interval '1 month' ELSE interval '1 year' END) AT TIME ZONE 'UTC'
    FROM (SELECT CASE p_step
        WHEN '1m' THEN date_trunc('day', p_at AT TIME ZONE 'UTC')
        WHEN '5m' THEN date_bin('7 days', p_at AT TIME ZONE 'UTC', timestamp '2000-01-03 00:00:00')
        WHEN '1h' THEN date_trunc('month', p_at AT TIME ZONE 'UTC')
        ELSE date_trunc('year', p_at AT TIME ZONE 'UTC') END AS lo) b
$$;
-- +goose StatementEnd

ALTER FUNCTION floodgate.ensure_partition(text, timestamptz) SET TimeZone = 'UTC';
ALTER FUNCTION floodgate.partitions(text) SET TimeZone = 'UTC';
ALTER FUNCTION floodgate.oldest_bucket(text) SET TimeZone = 'UTC';

-- drop_partitions: as in 00002, but the parent table is locked only when some
-- partition ends at or before p_before.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION floodgate.drop_partitions(p_step text, p_before timestamptz, p_require_empty boolean)
RETURNS int LANGUAGE plpgsql SET TimeZone = 'UTC' AS $$
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
        -- Only when there is something to drop: the lock waits for every
        -- reader (a long dashboard query) and blocks every writer meanwhile.
        IF EXISTS (SELECT 1 FROM floodgate.partitions(p_step) WHERE hi <= p_before) THEN
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
        END IF;
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

-- curve: as in 00003, with the step normalised to seconds (a '1 day' step is
-- 86400 s, never a calendar day) and the series generated in UTC.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION floodgate.curve(p_action text, p_subject text, p_from timestamptz, p_to timestamptz, p_step interval, p_kind text DEFAULT NULL)
RETURNS TABLE ("time" timestamptz, value bigint) LANGUAGE plpgsql STABLE SET TimeZone = 'UTC' AS $$
DECLARE
    origin constant timestamptz := timestamptz '2000-01-03 00:00:00+00';
BEGIN
    IF p_step IS NULL OR p_step <= interval '0' OR extract(month FROM p_step) <> 0 OR extract(year FROM p_step) <> 0 THEN
        RAISE EXCEPTION 'curve: step % must be positive and without months or years', p_step;
    END IF;
    p_step := make_interval(secs => extract(epoch FROM p_step));
    IF p_to <= p_from THEN
        RETURN;
    END IF;
    IF extract(epoch FROM p_to - p_from) / extract(epoch FROM p_step) > 100000 THEN
        RAISE EXCEPTION 'curve: % steps of % between % and %: at most 100000', ceil(extract(epoch FROM p_to - p_from) / extract(epoch FROM p_step)), p_step, p_from, p_to;
    END IF;
    RETURN QUERY EXECUTE
        'WITH g AS (SELECT date_bin($6, bucket, $7) AS t, sum(n) AS v FROM floodgate.buckets'
        || ' WHERE action = $1 AND bucket >= $3 AND bucket < $4'
        || CASE WHEN p_subject IS NULL THEN '' ELSE ' AND subject = $2' END
        || CASE WHEN p_kind IS NULL THEN '' ELSE ' AND kind = $5' END
        || ' GROUP BY 1)'
        || ' SELECT s.t, coalesce(g.v, 0)::bigint FROM generate_series(date_bin($6, $3, $7), $4 - interval ''1 microsecond'', $6) AS s(t)'
        || ' LEFT JOIN g ON g.t = s.t ORDER BY 1'
        USING p_action, p_subject, p_from, p_to, p_kind, p_step, origin;
END
$$;
-- +goose StatementEnd

-- +goose Down
ALTER FUNCTION floodgate.ensure_partition(text, timestamptz) RESET TimeZone;
ALTER FUNCTION floodgate.partitions(text) RESET TimeZone;
ALTER FUNCTION floodgate.oldest_bucket(text) RESET TimeZone;
-- The definitions of 00002 and 00003.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION floodgate.drop_partitions(p_step text, p_before timestamptz, p_require_empty boolean)
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
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION floodgate.partition_bounds(p_step text, p_at timestamptz, OUT lo timestamptz, OUT hi timestamptz)
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
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION floodgate.curve(p_action text, p_subject text, p_from timestamptz, p_to timestamptz, p_step interval, p_kind text DEFAULT NULL)
RETURNS TABLE ("time" timestamptz, value bigint) LANGUAGE plpgsql STABLE AS $$
DECLARE
    origin constant timestamptz := timestamptz '2000-01-03 00:00:00+00';
BEGIN
    IF p_step IS NULL OR p_step <= interval '0' OR extract(month FROM p_step) <> 0 OR extract(year FROM p_step) <> 0 THEN
        RAISE EXCEPTION 'curve: step % must be positive and without months or years', p_step;
    END IF;
    IF p_to <= p_from THEN
        RETURN;
    END IF;
    IF extract(epoch FROM p_to - p_from) / extract(epoch FROM p_step) > 100000 THEN
        RAISE EXCEPTION 'curve: % steps of % between % and %: at most 100000', ceil(extract(epoch FROM p_to - p_from) / extract(epoch FROM p_step)), p_step, p_from, p_to;
    END IF;
    RETURN QUERY EXECUTE
        'WITH g AS (SELECT date_bin($6, bucket, $7) AS t, sum(n) AS v FROM floodgate.buckets'
        || ' WHERE action = $1 AND bucket >= $3 AND bucket < $4'
        || CASE WHEN p_subject IS NULL THEN '' ELSE ' AND subject = $2' END
        || CASE WHEN p_kind IS NULL THEN '' ELSE ' AND kind = $5' END
        || ' GROUP BY 1)'
        || ' SELECT s.t, coalesce(g.v, 0)::bigint FROM generate_series(date_bin($6, $3, $7), $4 - interval ''1 microsecond'', $6) AS s(t)'
        || ' LEFT JOIN g ON g.t = s.t ORDER BY 1'
        USING p_action, p_subject, p_from, p_to, p_kind, p_step, origin;
END
$$;
-- +goose StatementEnd
