package history_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/history/historytest"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/producer"
)

// The crash test runs the history consumer in a child process: this test
// binary re-executed with FLOODGATE_HISTORY_CHILD set.
func TestMain(m *testing.M) {
	if os.Getenv("FLOODGATE_HISTORY_CHILD") == "1" {
		if err := runChild(); err != nil {
			fmt.Fprintln(os.Stderr, "history child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runChild runs a history group until killed.
func runChild() error {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("FLOODGATE_POSTGRES_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := history.NewSink(ctx, history.SinkConfig{DB: pool, Group: os.Getenv("FGTEST_GROUP"),
		Logger: logger, Visitors: testVisitors})
	if err != nil {
		return err
	}
	return runGroup(ctx, s, strings.Split(os.Getenv("FLOODGATE_BROKERS"), ","), os.Getenv("FGTEST_TOPIC"), os.Getenv("FGTEST_GROUP"), logger)
}

func runGroup(ctx context.Context, s consume.Sink, brokers []string, topic, group string, logger *slog.Logger) error {
	g, err := consume.NewGroup(consume.Config{
		Brokers: brokers, Topic: topic, GroupID: group,
		BatchMax: 1000, BatchWait: 20 * time.Millisecond, SessionTimeout: 6 * time.Second,
		RetryBackoff: 50 * time.Millisecond, MaxRetryBackoff: 500 * time.Millisecond,
		Logger: logger,
	}, s)
	if err != nil {
		return err
	}
	return g.Run(ctx)
}

// testVisitors is what the sinks of these tests count as visitors.
var testVisitors = history.Visitors{"visit": "ip"}

// produced tracks what a test published.
type produced struct {
	total    atomic.Int64
	perKey   map[string]int64           // action|kind|subject, written by one goroutine
	visitors map[string]map[string]bool // action|kind|subject -> visitor ips
}

func newProduced() *produced {
	return &produced{perKey: map[string]int64{}, visitors: map[string]map[string]bool{}}
}

func publish(t *testing.T, ctx context.Context, p *producer.Publisher, prod *produced, evs []event.Event) {
	t.Helper()
	if err := p.Publish(ctx, evs...); err != nil {
		t.Errorf("publish: %v", err)
		return
	}
	for _, e := range evs {
		k := e.Action + "|" + e.Kind + "|" + e.Subject
		prod.perKey[k] += e.N
		prod.total.Add(e.N)
		if ip := e.Attrs["ip"]; ip != "" && e.Action == "visit" {
			if prod.visitors[k] == nil {
				prod.visitors[k] = map[string]bool{}
			}
			prod.visitors[k][ip] = true
		}
	}
}

func randomEvents(r *rand.Rand, n int, now time.Time, span time.Duration) []event.Event {
	out := make([]event.Event, n)
	for i := range out {
		out[i] = event.Event{
			ID: event.NewID(), Action: []string{"visit", "login_failed", "signup"}[r.IntN(3)],
			Kind: []string{"ip", "user"}[r.IntN(2)], Subject: fmt.Sprintf("k%03d", r.IntN(200)),
			TS: now.Add(-time.Duration(r.Int64N(int64(span)))), N: 1 + r.Int64N(3),
		}
		if r.IntN(4) > 0 { // most events carry a visitor; only visits count it
			out[i].Attrs = map[string]string{"ip": fmt.Sprintf("192.0.2.%d", r.IntN(30))}
		}
	}
	return out
}

// waitTotals waits until the group's stored offsets reach the topic's end
// offsets, taken once everything was published: every event is applied
// then, and a batch applied twice would be in the totals already. It then
// checks every key against what was produced.
func waitTotals(t *testing.T, pool *pgxpool.Pool, brokers []string, topic, group string, prod *produced, within time.Duration) {
	t.Helper()
	waitApplied(t, pool, brokers, topic, group, within)
	rows, err := pool.Query(context.Background(), `SELECT action, kind, subject, n FROM `+pgx.Identifier{"floodgate", "history_totals"}.Sanitize())
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := map[string]int64{}
	for rows.Next() {
		var a, k, s string
		var n int64
		if err := rows.Scan(&a, &k, &s, &n); err != nil {
			t.Fatal(err)
		}
		seen[a+"|"+k+"|"+s] = n
	}
	bad := 0
	for key, want := range prod.perKey {
		if seen[key] != want && bad < 10 {
			bad++
			t.Errorf("total %s = %d, produced %d", key, seen[key], want)
		}
	}
	if len(seen) != len(prod.perKey) {
		t.Errorf("%d keys in history, %d produced", len(seen), len(prod.perKey))
	}
	checkVisitors(t, pool, prod)
	var bucketSum int64
	if err := pool.QueryRow(context.Background(), `SELECT coalesce(sum(n), 0)::bigint FROM `+pgx.Identifier{"floodgate", "buckets"}.Sanitize()).Scan(&bucketSum); err != nil {
		t.Fatal(err)
	}
	if bucketSum != prod.total.Load() {
		t.Errorf("buckets hold %d events, produced %d", bucketSum, prod.total.Load())
	}
}

// waitApplied waits until the group's next offset stored in history (in
// the same transaction as the rows) is at the end offset of every partition
// of topic.
func waitApplied(t *testing.T, pool *pgxpool.Pool, brokers []string, topic, group string, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	end, err := endOffsets(ctx, brokers, topic)
	if err != nil {
		t.Fatal(err)
	}
	var stored map[int]int64
	for {
		stored = map[int]int64{}
		rows, err := pool.Query(ctx, `SELECT "partition", next_offset FROM floodgate.consumer_offsets WHERE consumer_group = $1 AND topic = $2`, group, topic)
		if err == nil {
			for rows.Next() {
				var p int
				var n int64
				if err = rows.Scan(&p, &n); err != nil {
					break
				}
				stored[p] = n
			}
			rows.Close()
		}
		done := err == nil
		for p, e := range end {
			if stored[p] < e {
				done = false
			}
		}
		if done {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("history group %s at offsets %v after %s, topic %s ends at %v (last error %v)", group, stored, within, topic, end, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// endOffsets returns each partition's end offset.
func endOffsets(ctx context.Context, brokers []string, topic string) (map[int]int64, error) {
	client := &kafka.Client{Addr: kafka.TCP(brokers...)}
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil || len(md.Topics) != 1 || md.Topics[0].Error != nil {
		return nil, fmt.Errorf("metadata of %s: %v %v", topic, err, md)
	}
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for _, p := range md.Topics[0].Partitions {
		req.Topics[topic] = append(req.Topics[topic], kafka.LastOffsetOf(p.ID))
	}
	res, err := client.ListOffsets(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	out := map[int]int64{}
	for _, po := range res.Topics[topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("end offset of %s partition %d: %w", topic, po.Partition, po.Error)
		}
		out[po.Partition] = po.LastOffset
	}
	return out, nil
}

// checkVisitors compares every key's unique visitors, all time and over
// its buckets, with the ips produced (30 at most: exact).
func checkVisitors(t *testing.T, pool *pgxpool.Pool, prod *produced) {
	t.Helper()
	q := history.NewQuerier(pool)
	ctx := context.Background()
	bad, counted := 0, 0
	for key := range prod.perKey {
		parts := strings.SplitN(key, "|", 3)
		k := history.Key{Action: parts[0], Kind: parts[1], Subject: parts[2]}
		want := int64(len(prod.visitors[key]))
		total, err := q.TotalVisitors(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		inBuckets, err := q.Visitors(ctx, k, time.Unix(0, 0), time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if (total != want || inBuckets != want) && bad < 10 {
			bad++
			t.Errorf("visitors %s: %d all time, %d in buckets; produced %d", key, total, inBuckets, want)
		}
		if want > 0 {
			counted++
		}
	}
	t.Logf("unique visitors agree for %d keys (%d with visitors)", len(prod.perKey), counted)
}

func TestCrashedConsumerLosesAndDoublesNothing(t *testing.T) {
	pool := historytest.Pool(t)
	brokers := stacktest.Brokers(t)
	topic := stacktest.Topic(t, brokers, 6)
	group := "fgtest-history-crash-" + topic
	ctx := context.Background()

	start := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "FLOODGATE_HISTORY_CHILD=1", "FGTEST_TOPIC="+topic,
			"FGTEST_GROUP="+group, "FLOODGATE_BROKERS="+strings.Join(brokers, ","), "FLOODGATE_POSTGRES_URL="+pool.Config().ConnString())
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	p, err := producer.New(producer.Config{Brokers: brokers, Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	prod := newProduced()
	r := rand.New(rand.NewPCG(7, 7))
	now := time.Now().Truncate(time.Minute)
	child := start()
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	const kills = 3
	for k := 0; k <= kills; k++ {
		// Events flow for a while, then the consumer dies mid-stream.
		stop := time.Now().Add(time.Duration(1500+r.IntN(1500)) * time.Millisecond)
		for time.Now().Before(stop) {
			publish(t, ctx, p, prod, randomEvents(r, 200, now, 6*time.Hour))
			time.Sleep(10 * time.Millisecond)
		}
		if k == kills {
			break
		}
		if err := child.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = child.Wait()
		t.Logf("killed the consumer after %d events", prod.total.Load())
		child = start()
	}
	waitTotals(t, pool, brokers, topic, group, prod, 60*time.Second)
	t.Logf("%d events produced, history totals and buckets agree after %d SIGKILLs", prod.total.Load(), kills)
}

func TestPostgresOutageLosesNothing(t *testing.T) {
	brokers := stacktest.Brokers(t)
	// A private server: stopping the stack's would break the tests of
	// everyone sharing it.
	pg := historytest.StartPostgres(t)
	pool := pg.Pool(t)
	topic := stacktest.Topic(t, brokers, 3)
	group := "fgtest-history-outage-" + topic
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	s, err := history.NewSink(ctx, history.SinkConfig{DB: pool, Group: group, Logger: logger, Visitors: testVisitors})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- runGroup(ctx, s, brokers, topic, group, logger) }()

	p, err := producer.New(producer.Config{Brokers: brokers, Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	prod := newProduced()
	r := rand.New(rand.NewPCG(8, 8))
	now := time.Now().Truncate(time.Minute)
	burst := func(d time.Duration) {
		for stop := time.Now().Add(d); time.Now().Before(stop); {
			publish(t, ctx, p, prod, randomEvents(r, 100, now, 2*time.Hour))
			time.Sleep(10 * time.Millisecond)
		}
	}
	burst(time.Second)
	pg.Stop(t)
	before := prod.total.Load()
	burst(3 * time.Second)
	t.Logf("%d events produced while Postgres was down", prod.total.Load()-before)
	pg.Start(t)
	burst(time.Second)
	waitTotals(t, pool, brokers, topic, group, prod, 60*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
