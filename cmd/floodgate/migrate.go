package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/floodgate-dev/floodgate/migrations"
)

// MigrateCmd applies or lists the embedded database migrations.
type MigrateCmd struct {
	PostgresFlags
	Action   string        `arg:"" enum:"up,status" default:"status" help:"up: apply pending migrations; status: list them (default)."`
	Deadline time.Duration `name:"deadline" aliases:"timeout" env:"FLOODGATE_MIGRATE_DEADLINE" default:"5m" help:"Give up on the whole command after this long (includes waiting for another migrator's lock)."`
	exitCodeFlag
	JSON bool `name:"json" env:"FLOODGATE_MIGRATE_JSON" help:"Print the status as one JSON document instead of a table."`
}

// Run opens the database and runs the action.
func (c *MigrateCmd) Run(ctx context.Context, log *slog.Logger, std stdio) (err error) {
	out := std.out
	ctx, cancel := context.WithTimeout(ctx, c.Deadline)
	defer cancel()
	u, err := c.URL()
	if err != nil {
		return err
	}
	db, err := migrations.Open(ctx, u)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := db.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close database: %w", cerr))
		}
	}()

	if c.Action == "up" {
		applied, err := migrations.Up(ctx, db)
		for _, a := range applied {
			log.Info("migration applied", "version", a.Version, "file", a.Name, "duration", a.Duration.Round(time.Millisecond))
		}
		if err != nil {
			return err
		}
		if len(applied) == 0 {
			log.Info("database is up to date")
		}
		warnNoReader(ctx, log, db)
	}
	st, err := migrations.Status(ctx, db)
	if err != nil {
		return err
	}
	if c.JSON {
		type migration struct {
			Version   int64      `json:"version"`
			File      string     `json:"file"`
			Applied   bool       `json:"applied"`
			AppliedAt *time.Time `json:"applied_at"` // null while pending
		}
		doc := struct {
			Migrations []migration `json:"migrations"`
		}{make([]migration, 0, len(st))}
		for _, m := range st {
			mj := migration{Version: m.Version, File: m.Name, Applied: m.Applied}
			if m.Applied {
				at := m.AppliedAt.UTC()
				mj.AppliedAt = &at
			}
			doc.Migrations = append(doc.Migrations, mj)
		}
		if err := writeJSON(out, doc); err != nil {
			return err
		}
		return c.found(st)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tFILE\tSTATE\tAPPLIED AT")
	for _, m := range st {
		state, at := "pending", "-"
		if m.Applied {
			state, at = "applied", m.AppliedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", m.Version, m.Name, state, at)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return c.found(st)
}

// found is --exit-code's answer: pending migrations are found.
func (c *MigrateCmd) found(st []migrations.Migration) error {
	pending := 0
	for _, m := range st {
		if !m.Applied {
			pending++
		}
	}
	if c.ExitCode && pending > 0 {
		return foundError{fmt.Sprintf("%d pending migrations", pending)}
	}
	return nil
}

// warnNoReader says when the dashboards' read-only role is missing (the
// migrating user may not create roles): they would have to read history
// as a user that can write it.
func warnNoReader(ctx context.Context, log *slog.Logger, db *sql.DB) {
	ok, err := migrations.HasReader(ctx, db)
	if err != nil {
		log.Warn("could not check the dashboards' read-only role", "role", migrations.ReaderRole, "err", err)
		return
	}
	if !ok {
		log.Warn("no read-only role for the dashboards: as an administrator run CREATE ROLE "+migrations.ReaderRole+" NOLOGIN, then floodgate migrate up (docs/dashboards.md)",
			"role", migrations.ReaderRole)
	}
}

// writeJSON writes v as one line of JSON.
func writeJSON(w io.Writer, v any) error { return json.NewEncoder(w).Encode(v) }
