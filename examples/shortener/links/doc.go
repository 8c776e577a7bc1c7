// Package links stores the shortener's links in PostgreSQL: a random
// base62 code per URL, one code per URL (the design notes' reverse mapping:
// repeated requests for one URL do not use up codes), in a schema of the
// shortener's own with its own goose migrations and version table, apart
// from floodgate's.
//
//	pool, _ := pgxpool.New(ctx, url)
//	if err := links.Migrate(ctx, pool, "shortener"); err != nil { ... }
//	st := links.NewStore(pool, "shortener")
//	l, created, err := st.Create(ctx, "https://example.com/a/long/path", "203.0.113.7")
//	target, err := st.Resolve(ctx, l.Code) // links.ErrNotFound for unknown codes
package links
