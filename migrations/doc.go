// Package migrations holds floodgate's PostgreSQL schema as numbered goose
// SQL files, embedded in the binary, and applies them.
//
// Files are named NNNNN_<what>.sql with sequential numbers (00001_offsets.sql,
// 00002_history.sql, ...): add the next number, never renumber or edit an
// applied file. Every object lives in schema floodgate, and so does goose's
// version table (floodgate.goose_db_version). Up takes a PostgreSQL advisory
// lock, so concurrent runs (two replicas starting) apply each file once.
//
//	db, err := migrations.Open(ctx, "postgres://floodgate@127.0.0.1:15432/floodgate?sslmode=disable")
//	if err != nil {
//		return err
//	}
//	defer db.Close()
//	applied, err := migrations.Up(ctx, db)
//
// The command line is `floodgate migrate up|status`. Tests and benchmarks
// that need a history of their own create a database of their own with
// CreateDatabase (and DropDatabase it after): the same files, applied the
// same way, in the same schema.
//
// Public: a team that applies its schema with its own tooling runs these
// files (goose, embedded) instead of `floodgate migrate`; the SQL functions
// they create are what dashboards call (docs/history.md).
package migrations
