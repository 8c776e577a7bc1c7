-- A read-only role for dashboards (issue 51, docs/dashboards.md "Reading
-- as floodgate_reader").
--
-- Grafana and `floodgate dashboard` need to read history, never to write
-- it, nor to read the consumer offsets or the dedup ids: they log in as a
-- role of their own that is a member of floodgate_reader, a NOLOGIN group
-- role holding exactly what the dashboard functions read. A password is a
-- deployment's secret, so no login role is made here (docker-compose makes
-- floodgate_grafana; docs/dashboards.md shows the statement elsewhere).
--
-- floodgate.grant_reader(role) grants the set: USAGE on the schema, SELECT
-- on the buckets view (its bucket tables and their partitions are read
-- with the view owner's rights, so partitions made later need no grant),
-- the totals, late, tiers and expired tables, and EXECUTE on the dashboard
-- functions and the sketch functions they call (all SECURITY INVOKER: they
-- run with the reader's rights). A migration that adds a dashboard
-- function replaces grant_reader with the longer list; `floodgate migrate
-- up` and `floodgate setup` call it for floodgate_reader after every run
-- (migrations.Up), so a role an administrator makes after this migration
-- gets the grants at the next run.
--
-- Roles belong to the server, not the database: the role is made only when
-- it does not exist, and a migration of another database making it at the
-- same moment (unique_violation) is no failure. A migrating user that may
-- not create roles (no CREATEROLE, as on some managed servers) applies
-- this migration all the same, with a WARNING: an administrator then runs
-- CREATE ROLE floodgate_reader NOLOGIN, and the next migrate up grants.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION floodgate.grant_reader(p_role name) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA floodgate TO %I', p_role);
    EXECUTE format('GRANT SELECT ON floodgate.buckets, floodgate.history_totals, floodgate.history_late,'
                   ' floodgate.history_tiers, floodgate.history_expired TO %I', p_role);
    EXECUTE format('GRANT EXECUTE ON FUNCTION'
                   ' floodgate.count(text, text, timestamptz, timestamptz, text),'
                   ' floodgate.curve(text, text, timestamptz, timestamptz, interval, text),'
                   ' floodgate.top(text, timestamptz, timestamptz, int, text),'
                   ' floodgate.total(text, text, text),'
                   ' floodgate.actions(),'
                   ' floodgate.visitors(text, text, timestamptz, timestamptz, text),'
                   ' floodgate.visitors_curve(text, text, timestamptz, timestamptz, interval, text),'
                   ' floodgate.top_visitors(text, timestamptz, timestamptz, int, text),'
                   ' floodgate.total_visitors(text, text, text),'
                   ' floodgate.sketch_union_agg(floodgate.sketch),'
                   ' floodgate.sketch_union(floodgate.sketch, floodgate.sketch),'
                   ' floodgate.sketch_merge(floodgate.sketch, floodgate.sketch),'
                   ' floodgate.sketch_estimate(floodgate.sketch),'
                   ' floodgate.sketch_registers(floodgate.sketch),'
                   ' floodgate.sketch_of(bigint[]),'
                   ' floodgate.sketch_sorted(bigint[]),'
                   ' floodgate.sketch_registers_add(bit varying, bigint[]),'
                   ' floodgate.sketch_registers_max(bit varying, bit varying),'
                   ' floodgate.sketch_registers_estimate(bit varying)'
                   ' TO %I', p_role);
END
$$;
-- +goose StatementEnd
REVOKE EXECUTE ON FUNCTION floodgate.grant_reader(name) FROM PUBLIC;

-- +goose StatementBegin
DO $$
BEGIN
    IF to_regrole('floodgate_reader') IS NULL THEN
        BEGIN
            CREATE ROLE floodgate_reader NOLOGIN;
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN
                NULL; -- made meanwhile by the migration of another database
            WHEN insufficient_privilege THEN
                RAISE WARNING 'cannot create role floodgate_reader (%): dashboards need it; as an administrator run CREATE ROLE floodgate_reader NOLOGIN, then floodgate migrate up', SQLERRM;
                RETURN;
        END;
    END IF;
    PERFORM floodgate.grant_reader('floodgate_reader');
END
$$;
-- +goose StatementEnd

-- +goose Down
-- The role stays: it belongs to the server, and other databases may grant
-- it their own objects.
-- +goose StatementBegin
DO $$
BEGIN
    IF to_regrole('floodgate_reader') IS NOT NULL THEN
        REVOKE ALL ON ALL TABLES IN SCHEMA floodgate FROM floodgate_reader;
        REVOKE ALL ON ALL FUNCTIONS IN SCHEMA floodgate FROM floodgate_reader;
        REVOKE ALL ON SCHEMA floodgate FROM floodgate_reader;
    END IF;
END
$$;
-- +goose StatementEnd
DROP FUNCTION IF EXISTS floodgate.grant_reader(name);
