-- Dashboard functions over history (docs/dashboards.md).
--
-- Keys: p_subject is the subject string; p_kind narrows it to one kind
-- ('ip', 'email', ...) and NULL means every kind with that subject. A NULL
-- p_subject means every subject of the action.
--
-- Time ranges are half-open [p_from, p_to) and select buckets by their start:
-- where a range edge falls inside a coarse bucket (an hour, a day of older
-- history), the whole bucket counts if it starts inside the range. Curve
-- points are aligned to Monday 2000-01-03 00:00 UTC (so to round UTC times)
-- and each bucket adds to the step holding its start; a step finer than the
-- resolution of old data shows that data as one point per coarse bucket.

-- +goose Up

-- count: events of an action (and subject) whose bucket starts in [p_from, p_to).
-- +goose StatementBegin
CREATE FUNCTION floodgate.count(p_action text, p_subject text, p_from timestamptz, p_to timestamptz, p_kind text DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql STABLE AS $$
DECLARE
    v bigint;
BEGIN
    EXECUTE 'SELECT coalesce(sum(n), 0)::bigint FROM floodgate.buckets WHERE action = $1 AND bucket >= $3 AND bucket < $4'
            || CASE WHEN p_subject IS NULL THEN '' ELSE ' AND subject = $2' END
            || CASE WHEN p_kind IS NULL THEN '' ELSE ' AND kind = $5' END
        INTO v USING p_action, p_subject, p_from, p_to, p_kind;
    RETURN v;
END
$$;
-- +goose StatementEnd

-- curve: one row per step from the step holding p_from to the one holding
-- p_to (exclusive), zeros included; "time" is the step start.
-- +goose StatementBegin
CREATE FUNCTION floodgate.curve(p_action text, p_subject text, p_from timestamptz, p_to timestamptz, p_step interval, p_kind text DEFAULT NULL)
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

-- top: the p_n subjects with the most events of an action in [p_from, p_to);
-- NULL p_from and p_to rank by all-time totals (one index read).
-- +goose StatementBegin
CREATE FUNCTION floodgate.top(p_action text, p_from timestamptz, p_to timestamptz, p_n int DEFAULT 10, p_kind text DEFAULT NULL)
RETURNS TABLE (kind text, subject text, value bigint) LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_from IS NULL AND p_to IS NULL THEN
        RETURN QUERY EXECUTE
            'SELECT kind, subject, n FROM floodgate.history_totals WHERE action = $1'
            || CASE WHEN p_kind IS NULL THEN '' ELSE ' AND kind = $5' END
            || ' ORDER BY n DESC, kind, subject LIMIT $4'
            USING p_action, p_from, p_to, p_n, p_kind;
        RETURN;
    END IF;
    RETURN QUERY EXECUTE
        'SELECT kind, subject, sum(n)::bigint AS v FROM floodgate.buckets WHERE action = $1 AND bucket >= $2 AND bucket < $3'
        || CASE WHEN p_kind IS NULL THEN '' ELSE ' AND kind = $5' END
        || ' GROUP BY kind, subject ORDER BY v DESC, kind, subject LIMIT $4'
        USING p_action, coalesce(p_from, '-infinity'), coalesce(p_to, 'infinity'), p_n, p_kind;
END
$$;
-- +goose StatementEnd

-- total: every event of an action (and subject) ever counted, late and
-- expired ones included: one indexed read of history_totals.
-- +goose StatementBegin
CREATE FUNCTION floodgate.total(p_action text, p_subject text, p_kind text DEFAULT NULL)
RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT coalesce(sum(n), 0)::bigint FROM floodgate.history_totals
    WHERE action = p_action
      AND (p_subject IS NULL OR subject = p_subject)
      AND (p_kind IS NULL OR kind = p_kind)
$$;
-- +goose StatementEnd

-- actions: every action with its total, for dashboard variables.
-- +goose StatementBegin
CREATE FUNCTION floodgate.actions()
RETURNS TABLE (action text, value bigint) LANGUAGE sql STABLE AS $$
    SELECT action, sum(n)::bigint FROM floodgate.history_totals GROUP BY action ORDER BY action
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION IF EXISTS floodgate.actions();
DROP FUNCTION IF EXISTS floodgate.total(text, text, text);
DROP FUNCTION IF EXISTS floodgate.top(text, timestamptz, timestamptz, int, text);
DROP FUNCTION IF EXISTS floodgate.curve(text, text, timestamptz, timestamptz, interval, text);
DROP FUNCTION IF EXISTS floodgate.count(text, text, timestamptz, timestamptz, text);
