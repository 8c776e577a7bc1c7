package stacktest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// RedisServer returns the path of Debian's redis-server (scripts/stack up
// installs it), for tests of code that runs a private server.
func RedisServer(tb testing.TB) string {
	tb.Helper()
	return program(tb, "redis-server", "redis-server", "/usr/bin/redis-server")
}

// DeleteRecords moves the log start of a topic's partition to offset, as
// retention would have: the records before it are gone. It runs Kafka's
// own DeleteRecordsCommand from the stack's classpath
// (FLOODGATE_KAFKA_CLASSPATH, `scripts/stack env`), since kafka-go has no
// DeleteRecords request.
func DeleteRecords(tb testing.TB, brokers []string, topic string, partition int, offset int64) {
	tb.Helper()
	cp := os.Getenv("FLOODGATE_KAFKA_CLASSPATH")
	if cp == "" {
		msg := `Kafka's tools: FLOODGATE_KAFKA_CLASSPATH is not set (eval "$(scripts/stack env)")`
		if testing.Short() && os.Getenv("CI") != "true" {
			tb.Skip(msg + "; skipped under -short")
		}
		tb.Fatal(msg)
	}
	java := program(tb, "java", "java")
	file := filepath.Join(tb.TempDir(), "delete-records.json")
	spec := fmt.Sprintf(`{"version":1,"partitions":[{"topic":%q,"partition":%d,"offset":%d}]}`, topic, partition, offset)
	if err := os.WriteFile(file, []byte(spec), 0o600); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := []string{"-Xmx256m", "-cp", cp, "org.apache.kafka.tools.DeleteRecordsCommand",
		"--bootstrap-server", strings.Join(brokers, ","), "--offset-json-file", file}
	// The secure profile's broker needs the tool's own TLS and SASL
	// settings (`scripts/stack env --secure`).
	if cc := os.Getenv("FLOODGATE_KAFKA_COMMAND_CONFIG"); cc != "" {
		args = append(args, "--command-config", cc)
	}
	out, err := exec.CommandContext(ctx, java, args...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "low_watermark: "+fmt.Sprint(offset)) {
		tb.Fatalf("delete records of %s partition %d before %d: %v\n%s", topic, partition, offset, err, out)
	}
}
