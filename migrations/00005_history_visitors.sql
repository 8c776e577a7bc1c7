-- History: unique visitors (issue 16, docs/history.md "Unique visitors",
-- docs/dashboards.md).
--
-- Distinct counts do not add up across buckets, so next to n every bucket
-- row (and every totals row) keeps a mergeable sketch of the distinct values
-- of one related feature (an event attr, e.g. the visitor's IP of a visit):
-- column visitors, of type floodgate.sketch, in one of two modes:
--
--   exact:  hashes = the sorted distinct 64-bit hashes of the values, at most
--           256 of them (2 KiB); planes NULL. Counts up to 256 are exact.
--   dense:  planes = a HyperLogLog sketch of 2^14 registers of 6 bits,
--           stored bit-sliced; hashes NULL. Relative standard error 0.81%
--           (1.04 / sqrt(16384)): within 2% for about 99% of estimates.
--
-- A row goes dense when its set exceeds 256 values, so an answer is exact if
-- and only if it counts at most 256 distinct values (up to 64-bit hash
-- collisions, about n^2 / 2^65).
--
-- The HyperLogLog is github.com/axiomhq/hyperloglog's (v0.3.x), in SQL so
-- that the sink, the roller and the dashboard functions merge sketches where
-- the rows are: register index = the hash's top 14 bits, register value =
-- 1 + the leading zeros of the other 50 bits (51 when they are all zero),
-- and the LogLog-Beta estimator with the library's p = 14 constants. Hashes
-- are xxhash64 of the value, computed by the sink (history/visitors.go).
-- The tests check the registers and the estimate against the library.
--
-- Bit-sliced registers: planes is one bit string of 6 x 16384 bits; bits
-- [j * 16384, (j + 1) * 16384) hold bit j (weight 2^j) of registers 0..16383.
-- The max of two sketches, register by register, is then a comparator over 6
-- pairs of 2 KiB bit strings with PostgreSQL's native bitwise operators
-- (~0.2 ms), instead of 16384 steps of SQL per sketch. TOAST compresses the
-- sparse high planes: a sketch of 1000 values takes about 2 KB.

-- +goose Up

-- +goose StatementBegin
CREATE TYPE floodgate.sketch AS (
    hashes bigint[],    -- exact mode: sorted distinct hashes (<= 256), else NULL
    planes bit varying  -- dense mode: 6 planes of 16384 bits, else NULL
);
-- +goose StatementEnd
-- A sketch with one field set is neither NULL nor NOT NULL in SQL (row
-- semantics): test absence with "visitors IS NULL" only, or count with
-- floodgate.sketch_estimate.
COMMENT ON TYPE floodgate.sketch IS
    'distinct values: exact sorted 64-bit hashes (<= 256) or a bit-sliced HyperLogLog of 2^14 6-bit registers';

-- +goose StatementBegin
DO $$
DECLARE
    s text;
BEGIN
    FOREACH s IN ARRAY ARRAY['1m', '5m', '1h', '1d', '1w'] LOOP
        EXECUTE format('ALTER TABLE floodgate.%I ADD COLUMN visitors floodgate.sketch', 'bucket_' || s);
    END LOOP;
END
$$;
-- +goose StatementEnd
ALTER TABLE floodgate.history_totals ADD COLUMN visitors floodgate.sketch;

-- Every merge decompresses a stored sketch and compresses the result: with
-- lz4, a dense sketch's update costs ~100 us instead of pglz's ~450. When the
-- server has lz4 (PostgreSQL built --with-lz4, as Debian's and the
-- TimescaleDB images are); otherwise sketches keep the default compression.
-- A partitioned table's setting reaches neither its partitions nor LIKE
-- copies: every existing partition is set here, and ensure_partition (below)
-- copies it (INCLUDING COMPRESSION).
-- +goose StatementBegin
DO $$
DECLARE
    t regclass;
BEGIN
    FOR t IN
        WITH parents AS (
            SELECT format('floodgate.%I', 'bucket_' || s)::regclass AS r FROM unnest(ARRAY['1m', '5m', '1h', '1d', '1w']) s
        )
        SELECT 'floodgate.history_totals'::regclass
        UNION ALL SELECT r FROM parents
        UNION ALL SELECT i.inhrelid::regclass FROM pg_inherits i JOIN parents ON i.inhparent = parents.r
    LOOP
        EXECUTE format('ALTER TABLE %s ALTER COLUMN visitors SET COMPRESSION lz4', t);
    END LOOP;
EXCEPTION WHEN OTHERS THEN
    -- lz4 is a speed-up, not a requirement (and TimescaleDB chunks may
    -- refuse the change): keep the default rather than fail the migration.
    RAISE NOTICE 'visitor sketches keep the default TOAST compression: %', SQLERRM;
END
$$;
-- +goose StatementEnd

CREATE OR REPLACE VIEW floodgate.buckets AS
          SELECT '1m'::text AS step, action, subject, kind, bucket, n, visitors FROM floodgate.bucket_1m
UNION ALL SELECT '5m', action, subject, kind, bucket, n, visitors FROM floodgate.bucket_5m
UNION ALL SELECT '1h', action, subject, kind, bucket, n, visitors FROM floodgate.bucket_1h
UNION ALL SELECT '1d', action, subject, kind, bucket, n, visitors FROM floodgate.bucket_1d
UNION ALL SELECT '1w', action, subject, kind, bucket, n, visitors FROM floodgate.bucket_1w;

-- ensure_partition: as in 00002 (with 00004's TimeZone), moving the visitors
-- column out of the DEFAULT partition too, and copying the parent's column
-- compression to the new partition.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION floodgate.ensure_partition(p_step text, p_at timestamptz) RETURNS text
LANGUAGE plpgsql SET TimeZone = 'UTC' AS $$
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
    PERFORM pg_advisory_xact_lock(hashtext('floodgate.history.partition'), hashtext(parent));
    IF EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
               WHERE ns.nspname = split_part('floodgate.x', '.', 1) AND c.relname = part) THEN
        RETURN part;
    END IF;
    EXECUTE format('LOCK TABLE floodgate.%I IN ACCESS EXCLUSIVE MODE', parent || '_default');
    EXECUTE format('CREATE TABLE floodgate.%I (LIKE floodgate.%I INCLUDING DEFAULTS INCLUDING COMPRESSION)', part, parent);
    EXECUTE format('WITH m AS (DELETE FROM floodgate.%I WHERE bucket >= $1 AND bucket < $2 RETURNING action, subject, kind, bucket, n, visitors) '
                   'INSERT INTO floodgate.%I (action, subject, kind, bucket, n, visitors) SELECT action, subject, kind, bucket, n, visitors FROM m',
                   parent || '_default', part) USING b.lo, b.hi;
    EXECUTE format('ALTER TABLE floodgate.%I ATTACH PARTITION floodgate.%I FOR VALUES FROM (%L) TO (%L)',
                   parent, part, b.lo, b.hi);
    RETURN part;
END
$$;
-- +goose StatementEnd

-- sketch_registers_add: planes (NULL: all registers zero) with the hashes
-- added: each register takes the max of its value and the values the hashes
-- give it. Register index: the hash's top 14 bits; value: the position of
-- the first 1 among the other 50 (h::bit(50) keeps the rightmost 50 bits),
-- 51 if none. A few hashes (the sink adding a batch's visitors to a large
-- sketch) are set one by one in place; many are first reduced to one value
-- per register, then set on the six planes apart (a set_bit copies 2 KiB,
-- not 12): about 1.5 us per register touched.
-- +goose StatementBegin
CREATE FUNCTION floodgate.sketch_registers_add(p_planes bit varying, p_hashes bigint[]) RETURNS bit varying
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    m   constant int := 16384;
    z   constant bit varying := B'0'::bit(16384);
    p   bit varying := coalesce(p_planes, B'0'::bit(98304));
    p0  bit varying;
    p1  bit varying;
    p2  bit varying;
    p3  bit varying;
    p4  bit varying;
    p5  bit varying;
    h   bigint;
    i   int;
    rho int;
    cur int;
BEGIN
    IF coalesce(cardinality(p_hashes), 0) <= 32 THEN
        FOREACH h IN ARRAY coalesce(p_hashes, '{}') LOOP
            CONTINUE WHEN h IS NULL;
            i := (h >> 50) & 16383;
            rho := coalesce(nullif(position(B'1' IN h::bit(50)), 0), 51);
            -- (In SQL, |, & and << share one precedence: hence the parentheses.)
            cur := get_bit(p, i) | (get_bit(p, m + i) << 1) | (get_bit(p, 2 * m + i) << 2)
                 | (get_bit(p, 3 * m + i) << 3) | (get_bit(p, 4 * m + i) << 4) | (get_bit(p, 5 * m + i) << 5);
            CONTINUE WHEN cur >= rho;
            FOR j IN 0..5 LOOP
                IF ((rho # cur) & (1 << j)) <> 0 THEN
                    p := set_bit(p, j * m + i, (rho >> j) & 1);
                END IF;
            END LOOP;
        END LOOP;
        RETURN p;
    END IF;
    p0 := substring(p FOR m);
    p1 := substring(p FROM m + 1 FOR m);
    p2 := substring(p FROM 2 * m + 1 FOR m);
    p3 := substring(p FROM 3 * m + 1 FOR m);
    p4 := substring(p FROM 4 * m + 1 FOR m);
    p5 := substring(p FROM 5 * m + 1 FOR m);
    FOR i, rho IN
        SELECT ((x >> 50) & 16383)::int, max(coalesce(nullif(position(B'1' IN x::bit(50)), 0), 51))
        FROM unnest(p_hashes) x WHERE x IS NOT NULL GROUP BY 1
    LOOP
        cur := get_bit(p0, i) | (get_bit(p1, i) << 1) | (get_bit(p2, i) << 2)
             | (get_bit(p3, i) << 3) | (get_bit(p4, i) << 4) | (get_bit(p5, i) << 5);
        CONTINUE WHEN cur >= rho;
        IF ((rho # cur) & 1) <> 0 THEN p0 := set_bit(p0, i, rho & 1); END IF;
        IF ((rho # cur) & 2) <> 0 THEN p1 := set_bit(p1, i, (rho >> 1) & 1); END IF;
        IF ((rho # cur) & 4) <> 0 THEN p2 := set_bit(p2, i, (rho >> 2) & 1); END IF;
        IF ((rho # cur) & 8) <> 0 THEN p3 := set_bit(p3, i, (rho >> 3) & 1); END IF;
        IF ((rho # cur) & 16) <> 0 THEN p4 := set_bit(p4, i, (rho >> 4) & 1); END IF;
        IF ((rho # cur) & 32) <> 0 THEN p5 := set_bit(p5, i, (rho >> 5) & 1); END IF;
    END LOOP;
    RETURN p0 || p1 || p2 || p3 || p4 || p5;
END
$$;
-- +goose StatementEnd

-- sketch_registers_max: the register-by-register max of two sets of planes.
-- A comparator from the top plane down: gt marks the registers where a is
-- already known greater, eq where a and b agree so far; then a's registers
-- are taken where a >= b, b's elsewhere. (In SQL, & and | share one
-- precedence: hence the parentheses.)
-- +goose StatementBegin
CREATE FUNCTION floodgate.sketch_registers_max(a bit varying, b bit varying) RETURNS bit varying
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    m  constant int := 16384;
    gt bit varying;
    eq bit varying;
    aj bit varying;
    bj bit varying;
BEGIN
    aj := substring(a FROM 5 * m + 1 FOR m); bj := substring(b FROM 5 * m + 1 FOR m);
    gt := aj & ~bj;
    eq := ~(aj # bj);
    aj := substring(a FROM 4 * m + 1 FOR m); bj := substring(b FROM 4 * m + 1 FOR m);
    gt := gt | (eq & aj & ~bj);
    eq := eq & ~(aj # bj);
    aj := substring(a FROM 3 * m + 1 FOR m); bj := substring(b FROM 3 * m + 1 FOR m);
    gt := gt | (eq & aj & ~bj);
    eq := eq & ~(aj # bj);
    aj := substring(a FROM 2 * m + 1 FOR m); bj := substring(b FROM 2 * m + 1 FOR m);
    gt := gt | (eq & aj & ~bj);
    eq := eq & ~(aj # bj);
    aj := substring(a FROM m + 1 FOR m); bj := substring(b FROM m + 1 FOR m);
    gt := gt | (eq & aj & ~bj);
    eq := eq & ~(aj # bj);
    aj := substring(a FOR m); bj := substring(b FOR m);
    gt := gt | (eq & aj & ~bj) | (eq & ~(aj # bj)); -- now: a >= b
    eq := ~gt;
    RETURN (a & (gt || gt || gt || gt || gt || gt)) | (b & (eq || eq || eq || eq || eq || eq));
END
$$;
-- +goose StatementEnd

-- sketch_registers_estimate: axiomhq/hyperloglog's LogLog-Beta estimate for
-- p = 14 (Qin, Kim, Tung 2016): alpha m (m - ez) / (sum 2^-r + beta(ez)),
-- ez the zero registers. The histogram of register values is counted one
-- value at a time (a mask of the registers equal to r, then bit_count) until
-- every register is counted.
-- +goose StatementBegin
CREATE FUNCTION floodgate.sketch_registers_estimate(p_planes bit varying) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    m    constant int := 16384;
    pl   bit varying[];
    nl   bit varying[];
    c    bigint;
    seen bigint := 0;
    ez   float8 := 0;
    s    float8 := 0;
    zl   float8;
    beta float8;
BEGIN
    FOR j IN 0..5 LOOP
        pl[j] := substring(p_planes FROM j * m + 1 FOR m);
        nl[j] := ~pl[j];
    END LOOP;
    FOR r IN 0..51 LOOP
        c := bit_count(CASE WHEN r & 1 <> 0 THEN pl[0] ELSE nl[0] END
                     & CASE WHEN r & 2 <> 0 THEN pl[1] ELSE nl[1] END
                     & CASE WHEN r & 4 <> 0 THEN pl[2] ELSE nl[2] END
                     & CASE WHEN r & 8 <> 0 THEN pl[3] ELSE nl[3] END
                     & CASE WHEN r & 16 <> 0 THEN pl[4] ELSE nl[4] END
                     & CASE WHEN r & 32 <> 0 THEN pl[5] ELSE nl[5] END);
        IF r = 0 THEN
            ez := c;
        END IF;
        s := s + c * power(2::float8, -r);
        seen := seen + c;
        EXIT WHEN seen >= m;
    END LOOP;
    zl := ln(ez + 1);
    beta := -0.371009760230692 * ez + 0.00978811941207509 * zl + 0.185796293324165 * zl ^ 2
          + 0.203015527328432 * zl ^ 3 - 0.116710521803686 * zl ^ 4 + 0.0431106699492820 * zl ^ 5
          - 0.00599583540511831 * zl ^ 6 + 0.000449704299509437 * zl ^ 7;
    RETURN floor(0.7213 / (1 + 1.079 / m) * m * (m - ez) / (s + beta) + 0.5)::bigint;
END
$$;
-- +goose StatementEnd

-- sketch_of: the sketch of a set of hashes (duplicates and NULLs ignored):
-- exact up to 256 distinct hashes, dense beyond. NULL for none.
-- +goose StatementBegin
CREATE FUNCTION floodgate.sketch_of(p_hashes bigint[]) RETURNS floodgate.sketch
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    u bigint[];
BEGIN
    SELECT array_agg(DISTINCT h ORDER BY h) INTO u FROM unnest(p_hashes) h WHERE h IS NOT NULL;
    IF u IS NULL THEN
        RETURN NULL;
    END IF;
    IF cardinality(u) <= 256 THEN
        RETURN ROW(u, NULL)::floodgate.sketch;
    END IF;
    RETURN ROW(NULL, floodgate.sketch_registers_add(NULL, u))::floodgate.sketch;
END
$$;
-- +goose StatementEnd

-- sketch_sorted: the sketch of hashes already sorted and distinct (as the
-- sink sends them). Plain SQL, inlined: an exact set costs no call.
-- +goose StatementBegin
CREATE FUNCTION floodgate.sketch_sorted(p_hashes bigint[]) RETURNS floodgate.sketch
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN cardinality(p_hashes) IS NULL OR cardinality(p_hashes) = 0 THEN NULL
                WHEN cardinality(p_hashes) <= 256 THEN ROW(p_hashes, NULL)::floodgate.sketch
                ELSE floodgate.sketch_of(p_hashes) END
$$;
-- +goose StatementEnd

-- sketch_merge: the union of two sketches (both non-NULL; see sketch_union).
-- +goose StatementBegin
CREATE FUNCTION floodgate.sketch_merge(a floodgate.sketch, b floodgate.sketch) RETURNS floodgate.sketch
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    p bit varying;
BEGIN
    IF (a).planes IS NULL AND (b).planes IS NULL THEN
        RETURN floodgate.sketch_of((a).hashes || (b).hashes);
    END IF;
    IF (a).planes IS NULL THEN
        p := (b).planes;
    ELSIF (b).planes IS NULL THEN
        p := (a).planes;
    ELSE
        p := floodgate.sketch_registers_max((a).planes, (b).planes);
    END IF;
    IF (a).hashes IS NOT NULL OR (b).hashes IS NOT NULL THEN
        p := floodgate.sketch_registers_add(p, (a).hashes || (b).hashes);
    END IF;
    RETURN ROW(NULL, p)::floodgate.sketch;
END
$$;
-- +goose StatementEnd

-- sketch_union: the union of two sketches, NULL meaning none. Plain SQL so
-- that the planner inlines it: an upsert whose new row has no visitors (most
-- rows of most actions) calls nothing.
-- +goose StatementBegin
CREATE FUNCTION floodgate.sketch_union(a floodgate.sketch, b floodgate.sketch) RETURNS floodgate.sketch
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN a IS NULL THEN b WHEN b IS NULL THEN a ELSE floodgate.sketch_merge(a, b) END
$$;
-- +goose StatementEnd

-- sketch_union_agg: the union of many sketches. The state is a sketch like
-- any other (a single row's sketch is the answer as is, at no cost).
CREATE AGGREGATE floodgate.sketch_union_agg(floodgate.sketch) (
    SFUNC = floodgate.sketch_merge,
    STYPE = floodgate.sketch,
    COMBINEFUNC = floodgate.sketch_merge,
    PARALLEL = SAFE
);

-- sketch_estimate: the number of distinct values in a sketch (0 for NULL):
-- exact in exact mode, the HyperLogLog estimate in dense mode.
-- +goose StatementBegin
CREATE FUNCTION floodgate.sketch_estimate(v floodgate.sketch) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN v IS NULL THEN 0
                WHEN (v).planes IS NULL THEN coalesce(cardinality((v).hashes), 0)
                ELSE floodgate.sketch_registers_estimate((v).planes) END
$$;
-- +goose StatementEnd

-- sketch_registers: the 16384 registers of a sketch, one byte each (the
-- dense payload of axiomhq/hyperloglog's binary format v2, after its 8-byte
-- header): for tests, and to hand a sketch to Go code.
-- +goose StatementBegin
CREATE FUNCTION floodgate.sketch_registers(v floodgate.sketch) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    p bit varying := coalesce((v).planes, floodgate.sketch_registers_add(NULL, (v).hashes));
BEGIN
    RETURN (SELECT decode(string_agg(lpad(to_hex(get_bit(p, i) | (get_bit(p, 16384 + i) << 1) | (get_bit(p, 32768 + i) << 2)
                                                 | (get_bit(p, 49152 + i) << 3) | (get_bit(p, 65536 + i) << 4) | (get_bit(p, 81920 + i) << 5)),
                                          2, '0'), '' ORDER BY i), 'hex')
            FROM generate_series(0, 16383) i);
END
$$;
-- +goose StatementEnd

-- Dashboard functions: unique visitors, beside count, curve, top and total
-- (00003). Keys and ranges as there: p_subject NULL means every subject of
-- the action, p_kind NULL every kind; buckets count if they start in
-- [p_from, p_to). A visitor seen under several keys or buckets counts once.

-- visitors: distinct counted values (e.g. visitor IPs) of the events whose
-- bucket starts in [p_from, p_to).
-- +goose StatementBegin
CREATE FUNCTION floodgate.visitors(p_action text, p_subject text, p_from timestamptz, p_to timestamptz, p_kind text DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql STABLE AS $$
DECLARE
    v bigint;
BEGIN
    EXECUTE 'SELECT floodgate.sketch_estimate(floodgate.sketch_union_agg(visitors)) FROM floodgate.buckets'
            || ' WHERE action = $1 AND bucket >= $3 AND bucket < $4'
            || CASE WHEN p_subject IS NULL THEN '' ELSE ' AND subject = $2' END
            || CASE WHEN p_kind IS NULL THEN '' ELSE ' AND kind = $5' END
        INTO v USING p_action, p_subject, p_from, p_to, p_kind;
    RETURN v;
END
$$;
-- +goose StatementEnd

-- visitors_curve: per step, the events (as curve's value) and the distinct
-- visitors of that step; steps as in curve (00004): seconds, aligned to
-- Monday 2000-01-03 UTC, at most 100000, zeros included.
-- +goose StatementBegin
CREATE FUNCTION floodgate.visitors_curve(p_action text, p_subject text, p_from timestamptz, p_to timestamptz, p_step interval, p_kind text DEFAULT NULL)
RETURNS TABLE ("time" timestamptz, events bigint, visitors bigint) LANGUAGE plpgsql STABLE SET TimeZone = 'UTC' AS $$
DECLARE
    origin constant timestamptz := timestamptz '2000-01-03 00:00:00+00';
BEGIN
    IF p_step IS NULL OR p_step <= interval '0' OR extract(month FROM p_step) <> 0 OR extract(year FROM p_step) <> 0 THEN
        RAISE EXCEPTION 'visitors_curve: step % must be positive and without months or years', p_step;
    END IF;
    p_step := make_interval(secs => extract(epoch FROM p_step));
    IF p_to <= p_from THEN
        RETURN;
    END IF;
    IF extract(epoch FROM p_to - p_from) / extract(epoch FROM p_step) > 100000 THEN
        RAISE EXCEPTION 'visitors_curve: % steps of % between % and %: at most 100000', ceil(extract(epoch FROM p_to - p_from) / extract(epoch FROM p_step)), p_step, p_from, p_to;
    END IF;
    RETURN QUERY EXECUTE
        'WITH g AS (SELECT date_bin($6, bucket, $7) AS t, sum(n) AS e, floodgate.sketch_union_agg(visitors) AS v'
        || ' FROM floodgate.buckets WHERE action = $1 AND bucket >= $3 AND bucket < $4'
        || CASE WHEN p_subject IS NULL THEN '' ELSE ' AND subject = $2' END
        || CASE WHEN p_kind IS NULL THEN '' ELSE ' AND kind = $5' END
        || ' GROUP BY 1)'
        || ' SELECT s.t, coalesce(g.e, 0)::bigint, floodgate.sketch_estimate(g.v)'
        || ' FROM generate_series(date_bin($6, $3, $7), $4 - interval ''1 microsecond'', $6) AS s(t)'
        || ' LEFT JOIN g ON g.t = s.t ORDER BY 1'
        USING p_action, p_subject, p_from, p_to, p_kind, p_step, origin;
END
$$;
-- +goose StatementEnd

-- top_visitors: the p_n subjects with the most distinct visitors in
-- [p_from, p_to), with their events; NULL p_from and p_to rank by the
-- all-time sketches of history_totals. Subjects without visitors are left
-- out. Every subject's sketch is estimated: the cost grows with the subjects
-- of the action.
-- +goose StatementBegin
CREATE FUNCTION floodgate.top_visitors(p_action text, p_from timestamptz, p_to timestamptz, p_n int DEFAULT 10, p_kind text DEFAULT NULL)
RETURNS TABLE (kind text, subject text, visitors bigint, events bigint) LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_from IS NULL AND p_to IS NULL THEN
        RETURN QUERY EXECUTE
            'SELECT * FROM (SELECT kind, subject, floodgate.sketch_estimate(visitors) AS v, n'
            || ' FROM floodgate.history_totals WHERE action = $1'
            || CASE WHEN p_kind IS NULL THEN '' ELSE ' AND kind = $5' END
            || ') t WHERE v > 0 ORDER BY v DESC, n DESC, kind, subject LIMIT $4'
            USING p_action, p_from, p_to, p_n, p_kind;
        RETURN;
    END IF;
    RETURN QUERY EXECUTE
        'SELECT * FROM (SELECT kind, subject, floodgate.sketch_estimate(floodgate.sketch_union_agg(visitors)) AS v, sum(n)::bigint AS e'
        || ' FROM floodgate.buckets WHERE action = $1 AND bucket >= $2 AND bucket < $3'
        || CASE WHEN p_kind IS NULL THEN '' ELSE ' AND kind = $5' END
        || ' GROUP BY kind, subject) t WHERE v > 0 ORDER BY v DESC, e DESC, kind, subject LIMIT $4'
        USING p_action, coalesce(p_from, '-infinity'), coalesce(p_to, 'infinity'), p_n, p_kind;
END
$$;
-- +goose StatementEnd

-- total_visitors: distinct visitors ever (late and expired events included),
-- from the all-time sketches of history_totals.
-- +goose StatementBegin
CREATE FUNCTION floodgate.total_visitors(p_action text, p_subject text, p_kind text DEFAULT NULL)
RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT floodgate.sketch_estimate(floodgate.sketch_union_agg(visitors)) FROM floodgate.history_totals
    WHERE action = p_action
      AND (p_subject IS NULL OR subject = p_subject)
      AND (p_kind IS NULL OR kind = p_kind)
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION IF EXISTS floodgate.total_visitors(text, text, text);
DROP FUNCTION IF EXISTS floodgate.top_visitors(text, timestamptz, timestamptz, int, text);
DROP FUNCTION IF EXISTS floodgate.visitors_curve(text, text, timestamptz, timestamptz, interval, text);
DROP FUNCTION IF EXISTS floodgate.visitors(text, text, timestamptz, timestamptz, text);
DROP FUNCTION IF EXISTS floodgate.sketch_registers(floodgate.sketch);
DROP FUNCTION IF EXISTS floodgate.sketch_estimate(floodgate.sketch);
DROP AGGREGATE IF EXISTS floodgate.sketch_union_agg(floodgate.sketch);
DROP FUNCTION IF EXISTS floodgate.sketch_union(floodgate.sketch, floodgate.sketch);
DROP FUNCTION IF EXISTS floodgate.sketch_merge(floodgate.sketch, floodgate.sketch);
DROP FUNCTION IF EXISTS floodgate.sketch_sorted(bigint[]);
DROP FUNCTION IF EXISTS floodgate.sketch_of(bigint[]);
DROP FUNCTION IF EXISTS floodgate.sketch_registers_estimate(bit varying);
DROP FUNCTION IF EXISTS floodgate.sketch_registers_max(bit varying, bit varying);
DROP FUNCTION IF EXISTS floodgate.sketch_registers_add(bit varying, bigint[]);
-- The definitions of 00002 (+ 00004's TimeZone) and 00002's view.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION floodgate.ensure_partition(p_step text, p_at timestamptz) RETURNS text
LANGUAGE plpgsql SET TimeZone = 'UTC' AS $$
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
DROP VIEW IF EXISTS floodgate.buckets;
CREATE VIEW floodgate.buckets AS
          SELECT '1m'::text AS step, action, subject, kind, bucket, n FROM floodgate.bucket_1m
UNION ALL SELECT '5m', action, subject, kind, bucket, n FROM floodgate.bucket_5m
UNION ALL SELECT '1h', action, subject, kind, bucket, n FROM floodgate.bucket_1h
UNION ALL SELECT '1d', action, subject, kind, bucket, n FROM floodgate.bucket_1d
UNION ALL SELECT '1w', action, subject, kind, bucket, n FROM floodgate.bucket_1w;
ALTER TABLE floodgate.history_totals DROP COLUMN visitors;
-- +goose StatementBegin
DO $$
DECLARE
    s text;
BEGIN
    FOREACH s IN ARRAY ARRAY['1m', '5m', '1h', '1d', '1w'] LOOP
        EXECUTE format('ALTER TABLE floodgate.%I DROP COLUMN visitors', 'bucket_' || s);
    END LOOP;
END
$$;
-- +goose StatementEnd
DROP TYPE IF EXISTS floodgate.sketch;
