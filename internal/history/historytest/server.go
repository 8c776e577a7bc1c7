package historytest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Server is a private PostgreSQL server for tests that stop and start it
// (an outage must not hit the other tests sharing the stack's server). It
// uses the same PostgreSQL binaries as scripts/stack.
type Server struct {
	URL  string
	dir  string
	bin  string
	port int
}

// StartPostgres initialises and starts a throwaway server on a free
// loopback port; it is removed when the test ends.
func StartPostgres(tb testing.TB) *Server {
	tb.Helper()
	if testing.Short() && os.Getenv("CI") != "true" {
		tb.Skip("integration test: starts a PostgreSQL server; skipped under -short")
	}
	bin := pgBin()
	if bin == "" {
		tb.Fatal("no PostgreSQL server binaries under /usr/lib/postgresql (apt-get install postgresql; scripts/stack up installs them)")
	}
	dir, err := os.MkdirTemp("", "fghist-pg-")
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	s := &Server{dir: dir, bin: bin, port: port,
		URL: fmt.Sprintf("postgres://floodgate@127.0.0.1:%d/postgres?sslmode=disable", port)}
	tb.Cleanup(func() {
		_ = s.pgctl("stop", "-m", "immediate", "-w")
		_ = os.RemoveAll(dir)
	})
	if out, err := s.run(filepath.Join(bin, "initdb"), "-D", s.data(), "-U", "floodgate", "--auth=trust", "-E", "UTF8", "--no-sync"); err != nil {
		tb.Fatalf("initdb: %v\n%s", err, out)
	}
	s.Start(tb)
	return s
}

func pgBin() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Strings(dirs)
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "pg_ctl")); err == nil {
			return dirs[i]
		}
	}
	return ""
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

// run runs a server binary, as the postgres user when we are root.
func (s *Server) run(name string, args ...string) ([]byte, error) {
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
	} else {
		cmd = exec.Command(name, args...)
	}
	return cmd.CombinedOutput()
}

func (s *Server) pgctl(args ...string) error {
	out, err := s.run(filepath.Join(s.bin, "pg_ctl"), append([]string{"-D", s.data()}, args...)...)
	if err != nil {
		return fmt.Errorf("pg_ctl %v: %w\n%s", args, err, out)
	}
	return nil
}

// Start starts the server and waits until it accepts connections.
func (s *Server) Start(tb testing.TB) {
	tb.Helper()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off", s.port, s.dir)
	if err := s.pgctl("start", "-w", "-t", "60", "-o", opts, "-l", filepath.Join(s.dir, "log")); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "log"))
		tb.Fatalf("%v\n%s", err, log)
	}
}

// Stop shuts the server down at once (like a crash: no checkpoint).
func (s *Server) Stop(tb testing.TB) {
	tb.Helper()
	if err := s.pgctl("stop", "-m", "immediate", "-w"); err != nil {
		tb.Fatal(err)
	}
}

// Pool creates a database on the server with floodgate's migrations
// applied, as Pool does on the stack's, and returns a pool on it.
func (s *Server) Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	return database(tb, s.URL)
}
