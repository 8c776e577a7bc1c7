package backtest_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/backtest"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/window/windowtest"
)

// The baseline is the rules in force; the candidate tightens login from
// 5/m to 3/m, keeps signup, drops the old visit watch and adds a stricter
// one in shadow. One limit per rule and one rule per action, so that every
// subject's deny record belongs to one rule: the reference below can then
// follow each rule on its own.
const (
	diffBaseline = `
rules:
  - name: login
    action: login_failed
    kinds: [ip]
    limits: [5/m]
  - name: signup
    action: signup
    kinds: [ip]
    limits: [4/10m]
  - name: visits-old
    action: visit
    kinds: [ip]
    limits: [30/m]
    shadow: true
`
	diffCandidate = `
rules:
  - name: login
    action: login_failed
    kinds: [ip]
    limits: [3/m]
  - name: signup
    action: signup
    kinds: [ip]
    limits: [4/10m]
  - name: visits
    action: visit
    kinds: [ip]
    limits: [12/m]
    shadow: true
`
)

// TestBaselineDiffAgainstReference backtests a changed rules file against
// the one in force over a random bursty stream, on a scratch Redis, and
// checks both outcomes and their diff against an independent computation:
// an exact sliding log per subject (windowtest.Log), evaluated at every
// second the subject has events, as docs/redis.md defines windows and deny
// records.
func TestBaselineDiffAgainstReference(t *testing.T) {
	brokers := stacktest.Brokers(t)
	rdb := stacktest.Redis(t)
	topic := stacktest.Topic(t, brokers, 2)
	base, cand := mustRules(t, diffBaseline), mustRules(t, diffCandidate)

	r := rand.New(rand.NewPCG(14, 2))
	start := time.Now().Add(-90 * time.Minute).Truncate(time.Minute)
	evs := diffStream(r, start, 40*time.Minute)
	s := newStream(t, brokers, topic, 2)
	s.publish(t, time.Time{}, evs...) // each record time is its event's: the clock
	from, to := start.Add(25*time.Minute), start.Add(40*time.Minute)

	rep, err := backtest.Run(context.Background(), backtest.Config{
		Rules: cand, RulesName: "candidate.yaml", Baseline: base, BaselineName: "baseline.yaml",
		From: from, To: to, Brokers: brokers, Topic: topic, Scratch: rdb,
		MaxPending: 64, // checkpoints all along, as live's interval makes them
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{backtest.Candidate: reference(evs, cand, from, to), backtest.Baseline: reference(evs, base, from, to)}
	compareKeys(t, "candidate denies", denyLines(rep.Candidate), want[backtest.Candidate])
	compareKeys(t, "baseline denies", denyLines(rep.Baseline), want[backtest.Baseline])

	// The diff, from the reference's two outcomes.
	wantChanges, unchanged := referenceDiff(want[backtest.Candidate], want[backtest.Baseline])
	var got []string
	count := map[string]int{}
	for _, c := range rep.Changes {
		got = append(got, c.Change+" "+c.Action+" "+c.Kind+" "+c.Subject+" "+c.Rule)
		count[c.Change]++
	}
	slices.Sort(got)
	compareKeys(t, "changes", got, wantChanges)
	if rep.Unchanged != unchanged {
		t.Fatalf("%d unchanged, want %d", rep.Unchanged, unchanged)
	}
	if count[backtest.ChangeNew] == 0 || count[backtest.ChangeGone] == 0 || count[backtest.ChangeChanged] == 0 || unchanged == 0 {
		t.Fatalf("the stream should make changes of every kind: %v, %d unchanged", count, unchanged)
	}
	t.Logf("%d events; changes %v, %d unchanged", len(evs), count, unchanged)

	checkRendering(t, rep)

	// Nothing of the replay stays in the scratch Redis.
	keys, _, err := rdb.Scan(context.Background(), 0, "{backtest-*", 1000).Result()
	if err != nil || len(keys) > 0 {
		t.Fatalf("keys left in the scratch redis: %v (%v)", keys, err)
	}
}

// TestEventClock: events loaded into a topic after the fact carry record
// times of their loading, hours after they happened. On the event clock the
// backtest still finds what an exact sliding log finds at the events' own
// times (and reads past the range's end by record time, since every record
// is of later); on the record clock the same events are all too old to
// count, as they would have been for a live aggregator reading them then.
func TestEventClock(t *testing.T) {
	brokers := stacktest.Brokers(t)
	topic := stacktest.Topic(t, brokers, 2)
	set := mustRules(t, diffCandidate)
	r := rand.New(rand.NewPCG(14, 4))
	start := time.Now().Add(-3 * time.Hour).Truncate(time.Minute)
	evs := diffStream(r, start, 20*time.Minute)
	newStream(t, brokers, topic, 2).publish(t, time.Now(), evs...)
	from, to := start.Add(5*time.Minute), start.Add(15*time.Minute)

	cfg := backtest.Config{Rules: set, From: from, To: to, Brokers: brokers, Topic: topic, RedisServer: stacktest.RedisServer(t), Clock: backtest.ClockEvent}
	rep, err := backtest.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := reference(evs, set, from, to)
	if len(want) < 5 {
		t.Fatalf("the reference denies %d subjects: too few to compare", len(want))
	}
	compareKeys(t, "denies on the event clock", denyLines(rep.Candidate), want)

	cfg.Clock = backtest.ClockRecord
	if rep, err = backtest.Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if rep.Events != 0 || len(rep.Candidate.Denies) != 0 {
		t.Fatalf("record clock: %d events replayed, %d denies; want none (every record is of after the range)", rep.Events, len(rep.Candidate.Denies))
	}
}

// diffStream is d of bursty traffic from start: each second, each subject
// may send a burst; event times have milliseconds, in order.
func diffStream(r *rand.Rand, start time.Time, d time.Duration) []event.Event {
	type src struct {
		action string
		subs   []string
		p      float64 // chance of a burst in a second
		burst  int
	}
	srcs := []src{
		{"login_failed", []string{"192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4", "192.0.2.5", "192.0.2.6"}, 0.03, 3},
		{"signup", []string{"198.51.100.1", "198.51.100.2", "198.51.100.3"}, 0.008, 2},
		{"visit", []string{"203.0.113.1", "203.0.113.2", "203.0.113.3", "203.0.113.4"}, 0.12, 5},
	}
	var evs []event.Event
	for sec := time.Duration(0); sec < d; sec += time.Second {
		var batch []event.Event
		for _, s := range srcs {
			for _, sub := range s.subs {
				if r.Float64() >= s.p {
					continue
				}
				for range 1 + r.IntN(s.burst) {
					ts := start.Add(sec + time.Duration(r.IntN(1000))*time.Millisecond)
					batch = append(batch, event.Event{V: 1, ID: event.NewID(), Action: s.action, Kind: "ip", Subject: sub, TS: ts, N: 1})
				}
			}
		}
		slices.SortFunc(batch, func(a, b event.Event) int { return a.TS.Compare(b.TS) })
		evs = append(evs, batch...)
	}
	return evs
}

// reference computes what a rules set denies in [from, to), one line per
// subject and limit as denyLines writes them: at every second before to
// that a subject has events, each limit over its count is a deny from that
// second until its window holds the limit again (windowtest.Log.Until); a
// deny is a new decision when no earlier one lasts past that second.
func reference(evs []event.Event, set *rules.Set, from, to time.Time) []string {
	type key struct{ action, subject, rule string }
	logs := map[key]*windowtest.Log{}
	var order []key
	secs := map[key][]int64{}
	for _, e := range evs {
		for _, rl := range set.Match(e.Action, e.Kind) {
			k := key{e.Action, e.Subject, rl.Name}
			if logs[k] == nil {
				logs[k] = &windowtest.Log{}
				order = append(order, k)
			}
			logs[k].Add(e.TS.UnixMilli(), 1)
			s := windowtest.FloorDiv(e.TS.UnixMilli(), 1000)
			if ss := secs[k]; len(ss) == 0 || ss[len(ss)-1] != s {
				secs[k] = append(ss, s)
			}
		}
	}
	lo, hi := from.Unix(), to.Unix()
	var out []string
	for _, k := range order {
		rl := set.Rule(k.rule)
		lim := rl.Limits[0]
		w := int64(lim.Window / time.Second)
		var decisions int
		var first, last, total int64
		var ivS, ivE, until int64 = 0, 0, 0
		open := false
		closeIv := func() {
			if s, e := max(ivS, lo), min(ivE, hi); open && s < e {
				if total == 0 {
					first = s
				}
				last, total = ivE, total+(e-s)
			}
		}
		for _, t := range secs[k] {
			if t >= hi {
				break // the report is as of the range's end
			}
			c := logs[k].CountSec(t, w)
			if c <= lim.Count {
				continue
			}
			u := logs[k].Until(t, w, lim.Count)
			if until <= t && t >= lo && t < hi {
				decisions++
			}
			until = max(until, u)
			if open && t <= ivE {
				ivE = max(ivE, u)
				continue
			}
			closeIv()
			ivS, ivE, open = t, u, true
		}
		closeIv()
		if total == 0 && decisions == 0 {
			continue
		}
		out = append(out, fmt.Sprintf("%s ip %s %s %s shadow=%v decisions=%d first=%d last=%d seconds=%d",
			k.action, k.subject, k.rule, lim, rl.Shadow, decisions, first, last, total))
	}
	slices.Sort(out)
	return out
}

// denyLines writes an outcome's denies as reference does.
func denyLines(o *backtest.Outcome) []string {
	var out []string
	for _, d := range o.Denies {
		out = append(out, fmt.Sprintf("%s %s %s %s %s shadow=%v decisions=%d first=%d last=%d seconds=%v",
			d.Action, d.Kind, d.Subject, d.Rule, d.Limit, d.Shadow, d.Decisions, d.First.Unix(), d.Last.Unix(), d.DenySeconds))
	}
	slices.Sort(out)
	return out
}

// referenceDiff compares two reference outcomes per subject and rule (one
// limit each here): a subject and rule in one only is new or gone; in both
// with anything different, changed.
func referenceDiff(cand, base []string) (changes []string, unchanged int) {
	split := func(lines []string) map[string]string {
		m := map[string]string{}
		for _, l := range lines {
			var action, kind, subject, rule, rest string
			fmt.Sscanf(l, "%s %s %s %s", &action, &kind, &subject, &rule)
			rest = l
			m[action+" "+kind+" "+subject+" "+rule] = rest
		}
		return m
	}
	c, b := split(cand), split(base)
	for k, cl := range c {
		bl, ok := b[k]
		switch {
		case !ok:
			changes = append(changes, backtest.ChangeNew+" "+k)
		case cl != bl:
			changes = append(changes, backtest.ChangeChanged+" "+k)
		default:
			unchanged++
		}
	}
	for k := range b {
		if _, ok := c[k]; !ok {
			changes = append(changes, backtest.ChangeGone+" "+k)
		}
	}
	slices.SortFunc(changes, cmp.Compare)
	return changes, unchanged
}

// checkRendering writes a report with a baseline in the three formats.
func checkRendering(t *testing.T, rep *backtest.Report) {
	t.Helper()
	var js bytes.Buffer
	if err := backtest.WriteJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	var back backtest.Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Changes) != len(rep.Changes) || len(back.Candidate.Denies) != len(rep.Candidate.Denies) {
		t.Fatalf("json round trip: %v", err)
	}
	var cs bytes.Buffer
	if err := backtest.WriteCSV(&cs, rep); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&cs).ReadAll()
	if err != nil || len(rows) != 1+len(rep.Candidate.Denies)+len(rep.Baseline.Denies) || rows[0][0] != "rules" || rows[0][11] != "change" {
		t.Fatalf("csv: %d rows (%v), want a header and one per deny of either set", len(rows), err)
	}
	for _, row := range rows[1:] {
		wrong := backtest.ChangeGone // a candidate's deny cannot be gone, nor a baseline's new
		if row[0] == backtest.Baseline {
			wrong = backtest.ChangeNew
		}
		if row[11] == "" || row[11] == wrong {
			t.Fatalf("csv row %v: change %q does not fit its rules set", row, row[11])
		}
	}
	var txt bytes.Buffer
	if err := backtest.WriteText(&txt, rep, 3); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"candidate.yaml: ", "baseline.yaml: ", "changes, candidate.yaml against baseline.yaml: ", "RULE", "SUBJECT", "CHANGE"} {
		if !strings.Contains(txt.String(), want) {
			t.Fatalf("text report lacks %q:\n%s", want, txt.String())
		}
	}
}
