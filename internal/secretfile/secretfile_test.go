package secretfile_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate-dev/floodgate/internal/secretfile"
)

func TestSecretFromFile(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "pw")
	if err := os.WriteFile(f, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if v, err := secretfile.Read("redis-password", "flag-value", f); err != nil || v != "s3cret" {
		t.Fatalf("secret = %q, %v; want the file's, trimmed", v, err)
	}
	if v, _ := secretfile.Read("redis-password", "flag-value", ""); v != "flag-value" {
		t.Fatalf("secret without a file = %q", v)
	}
	empty := filepath.Join(dir, "empty")
	_ = os.WriteFile(empty, []byte("\n"), 0o600)
	if _, err := secretfile.Read("redis-password", "", empty); err == nil || !strings.Contains(err.Error(), "--redis-password-file") {
		t.Fatalf("empty file: %v", err)
	}
}
