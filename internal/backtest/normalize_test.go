package backtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/backtest"
	"github.com/floodgate-dev/floodgate/internal/history/historytest"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// Issue 51: a backtest counts the spellings of one subject as that subject.
// From history, rows an older version wrote under three spellings of one
// e-mail (2 a minute each, no two over 5/m) are one subject at 6 a minute,
// counted in one partition: the candidate denies it.
func TestBacktestFromHistoryCountsSpellingsAsOneSubject(t *testing.T) {
	brokers := stacktest.Brokers(t)
	pool := historytest.Pool(t)
	topic := stacktest.Topic(t, brokers, 1)
	set := mustRules(t, "rules:\n  - name: login\n    action: login_failed\n    kinds: [email]\n    limits: [5/m]\n")
	spellings := []string{"Victim@x.example", "VICTIM@X.EXAMPLE", "victim@x.example"}
	const parallel = 8
	parts := map[int]bool{}
	for _, s := range spellings {
		parts[window.Partition(window.Subject{Action: "login_failed", Kind: "email", Subject: s}, parallel)] = true
	}
	if len(parts) < 2 {
		t.Fatalf("the spellings share one of %d partitions: the test would not see them placed apart", parallel)
	}

	start := time.Now().Add(-30 * time.Minute).Truncate(time.Minute)
	var evs []event.Event
	for m := range 10 {
		for _, s := range spellings {
			for i := range 2 {
				evs = append(evs, event.Event{V: 1, ID: event.NewID(), Action: "login_failed", Kind: "email", Subject: s,
					TS: start.Add(time.Duration(m)*time.Minute + time.Duration(i)*time.Second), N: 1})
			}
		}
	}
	// as an older version's history sink stored them: as the events carried them
	writeHistory(t, pool, topic, evs, 1)
	// The topic lost what the range needs: the backtest reads history.
	s := newStream(t, brokers, topic, 1)
	s.publish(t, time.Time{}, evs[0])
	stacktest.DeleteRecords(t, brokers, topic, 0, 1)

	cfg := backtest.Config{Rules: set, From: start.Add(5 * time.Minute), To: start.Add(10 * time.Minute), Brokers: brokers, Topic: topic,
		RedisServer: stacktest.RedisServer(t), FromHistory: true, History: pool, Parallel: parallel}
	rep, err := backtest.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Source != "history" {
		t.Fatalf("source %q, want history", rep.Source)
	}
	if len(rep.Candidate.Denies) != 1 || rep.Candidate.Denies[0].Subject != "victim@x.example" {
		t.Fatalf("denies %v, want victim@x.example's (6 a minute over 5/m)", denyLines(rep.Candidate))
	}
}
