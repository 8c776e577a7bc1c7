package loadgen

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/event"
)

var t0 = time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)

func TestParseLine(t *testing.T) {
	tests := []struct {
		name   string
		line   string
		check  func(event.Event) bool
		reason string
	}{
		{"complete", `{"v":1,"id":"a1","action":"login_failed","kind":"ip","subject":"203.0.113.7","ts":1700000000000,"n":3}`,
			func(e event.Event) bool { return e.ID == "a1" && e.N == 3 && e.TS.UnixMilli() == 1700000000000 }, ""},
		{"defaults", `{"action":"login_failed","kind":"ip","subject":"203.0.113.7"}`,
			func(e event.Event) bool { return len(e.ID) == 32 && e.V == 1 && e.N == 1 && e.TS.Equal(t0) }, ""},
		{"null id and ts", `{"id":null,"ts":null,"action":"a","kind":"ip","subject":"s"}`,
			func(e event.Event) bool { return e.ID != "" && e.TS.Equal(t0) }, ""},
		{"attrs kept, defaults filled", `{"action":"login_failed","kind":"ip","subject":"203.0.113.7","attrs":{"email":"a@example.com"}}`,
			func(e event.Event) bool {
				return e.Attrs["email"] == "a@example.com" && len(e.Attrs) == 1 && e.TS.Equal(t0)
			}, ""},
		{"attrs kept", `{"v":1,"id":"a2","action":"login_failed","kind":"ip","subject":"s","ts":1700000000000,"attrs":{"email":"b@example.com"}}`,
			func(e event.Event) bool { return e.ID == "a2" && e.Attrs["email"] == "b@example.com" }, ""},
		{"rfc3339 ts kept", `{"action":"a","kind":"ip","subject":"s","ts":"2024-01-02T03:04:05Z"}`,
			func(e event.Event) bool { return e.TS.Equal(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)) }, ""},
		{"not json", `hello`, nil, event.ReasonInvalidJSON},
		{"array", `[1]`, nil, event.ReasonInvalidJSON},
		{"null", `null`, nil, event.ReasonMissingField},
		{"v 2", `{"v":2,"action":"a","kind":"ip","subject":"s"}`, nil, event.ReasonUnsupportedVersion},
		{"no subject", `{"action":"a","kind":"ip"}`, nil, event.ReasonMissingField},
		{"bad kind", `{"action":"a","kind":"IP","subject":"s"}`, nil, event.ReasonInvalidField},
		{"n zero", `{"action":"a","kind":"ip","subject":"s","n":0}`, nil, event.ReasonOutOfRange},
		{"too large", `{"action":"a","kind":"ip","subject":"` + strings.Repeat("x", event.MaxSize) + `"}`, nil, event.ReasonTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := ParseLine([]byte(tt.line), t0)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("ParseLine: %v", err)
				}
				if !tt.check(e) {
					t.Errorf("ParseLine = %+v", e)
				}
				return
			}
			var ee *event.Error
			if !errors.As(err, &ee) || ee.Reason != tt.reason {
				t.Fatalf("ParseLine = %+v, %v; want reason %s", e, err, tt.reason)
			}
		})
	}
}

func TestNDJSON(t *testing.T) {
	input := strings.Join([]string{
		`{"action":"a","kind":"ip","subject":"s1"}`,
		``,
		`not json`,
		`{"action":"a","kind":"ip","subject":"s2"}` + "\r",
		`{"action":"a","kind":"ip","subject":"` + strings.Repeat("x", 100<<10) + `"}`,
		`   `,
		`{"action":"a","kind":"ip","subject":"s3","n":0}`,
		`{"action":"a","kind":"ip","subject":"s4"}`, // no final newline
	}, "\n")
	src := NewNDJSON(strings.NewReader(input))
	var subjects []string
	var badLines []int
	var badReasons []string
	for {
		e, err := src.Next(t0)
		if errors.Is(err, io.EOF) {
			break
		}
		var le *LineError
		var ee *event.Error
		switch {
		case errors.As(err, &le) && errors.As(err, &ee):
			badLines = append(badLines, le.Line)
			badReasons = append(badReasons, ee.Reason)
			if !strings.HasPrefix(err.Error(), "line ") {
				t.Errorf("error %q does not start with the line", err)
			}
		case err != nil:
			t.Fatalf("Next: %v", err)
		default:
			subjects = append(subjects, e.Subject)
		}
	}
	if got := strings.Join(subjects, ","); got != "s1,s2,s4" {
		t.Errorf("subjects = %s, want s1,s2,s4", got)
	}
	wantLines, wantReasons := []int{3, 5, 7}, []string{event.ReasonInvalidJSON, event.ReasonTooLarge, event.ReasonOutOfRange}
	if len(badLines) != 3 {
		t.Fatalf("bad lines %v (%v), want %v", badLines, badReasons, wantLines)
	}
	for i := range wantLines {
		if badLines[i] != wantLines[i] || badReasons[i] != wantReasons[i] {
			t.Errorf("bad line %d: %d %s, want %d %s", i, badLines[i], badReasons[i], wantLines[i], wantReasons[i])
		}
	}
}

func TestSyntheticReproducibleAndValid(t *testing.T) {
	cfg := SyntheticConfig{Subjects: 1000, Actions: []string{"login_failed", "signup"}, Kind: "ip", Seed: 7}
	a, err := NewSynthetic(cfg, t0)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewSynthetic(cfg, t0)
	ids := map[string]bool{}
	for i := range 2000 {
		ea, _ := a.Next(t0)
		eb, _ := b.Next(t0)
		if ea.Subject != eb.Subject || ea.Action != eb.Action {
			t.Fatalf("event %d differs with the same seed: %+v vs %+v", i, ea, eb)
		}
		if ea.ID == eb.ID || ids[ea.ID] {
			t.Fatalf("event %d: ids must be unique across runs, got %q twice", i, ea.ID)
		}
		ids[ea.ID] = true
		if err := ea.Validate(); err != nil {
			t.Fatalf("event %d invalid: %v", i, err)
		}
		if !ea.TS.Equal(t0) {
			t.Fatalf("event %d ts %v, want now", i, ea.TS)
		}
	}
	if a.Seed() != 7 {
		t.Errorf("Seed() = %d", a.Seed())
	}
}

func TestSyntheticSkew(t *testing.T) {
	g, err := NewSynthetic(SyntheticConfig{Subjects: 10000, Seed: 1}, t0)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	const n = 100000
	for range n {
		e, _ := g.Next(t0)
		counts[e.Subject]++
	}
	hot := counts[g.Subject(0)]
	// Uniform would give 10 per subject; Zipf(1.1) gives the hottest
	// subject thousands.
	if hot < n/50 {
		t.Errorf("hottest subject %s got %d of %d events: not skewed", g.Subject(0), hot, n)
	}
	if len(counts) < 1000 {
		t.Errorf("only %d distinct subjects: tail too thin", len(counts))
	}
}

func TestSyntheticSubjects(t *testing.T) {
	tests := []struct {
		kind string
		i    uint64
		want string
	}{
		{"ip", 0, "10.0.0.0"},
		{"ip", 70000, "10.1.17.112"},
		{"email", 5, "user5@example.com"},
		{"device", 9, "device-9"},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			g, err := NewSynthetic(SyntheticConfig{Kind: tt.kind}, t0)
			if err != nil {
				t.Fatal(err)
			}
			if got := g.Subject(tt.i); got != tt.want {
				t.Errorf("Subject(%d) = %q, want %q", tt.i, got, tt.want)
			}
		})
	}
}

func TestSyntheticTimes(t *testing.T) {
	t.Run("backfill", func(t *testing.T) {
		g, _ := NewSynthetic(SyntheticConfig{Backfill: 72 * time.Hour, Seed: 3}, t0)
		var oldest time.Time = t0
		for range 10000 {
			e, _ := g.Next(t0)
			if e.TS.After(t0) || e.TS.Before(t0.Add(-72*time.Hour)) {
				t.Fatalf("ts %v outside [now-72h, now]", e.TS)
			}
			if e.TS.Before(oldest) {
				oldest = e.TS
			}
		}
		if t0.Sub(oldest) < 70*time.Hour {
			t.Errorf("oldest event only %v old: not spread", t0.Sub(oldest))
		}
	})
	t.Run("range", func(t *testing.T) {
		from, to := t0.Add(-time.Hour), t0.Add(-time.Minute)
		g, _ := NewSynthetic(SyntheticConfig{TSFrom: from, TSTo: to}, t0)
		for range 1000 {
			e, _ := g.Next(t0)
			if e.TS.Before(from) || !e.TS.Before(to) {
				t.Fatalf("ts %v outside [%v, %v)", e.TS, from, to)
			}
		}
	})
}

func TestSyntheticConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  SyntheticConfig
	}{
		{"subjects", SyntheticConfig{Subjects: -1}},
		{"too many subjects", SyntheticConfig{Subjects: 1<<24 + 1}},
		{"action", SyntheticConfig{Actions: []string{"Login Failed"}}},
		{"kind", SyntheticConfig{Kind: "ip:v4"}},
		{"zipf", SyntheticConfig{ZipfS: 0.5}},
		{"backfill", SyntheticConfig{Backfill: -time.Hour}},
		{"range reversed", SyntheticConfig{TSFrom: t0, TSTo: t0.Add(-time.Hour)}},
		{"from in the future", SyntheticConfig{TSFrom: t0.Add(time.Hour)}},
		{"from 1990", SyntheticConfig{TSFrom: time.Date(1990, 1, 1, 0, 0, 0, 0, time.UTC), TSTo: t0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewSynthetic(tt.cfg, t0); err == nil {
				t.Errorf("NewSynthetic(%+v) accepted an invalid config", tt.cfg)
			}
		})
	}
}

// fakeClock is a clock that only moves when the pump sleeps.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	return ctx.Err()
}

type recorder struct {
	mu     sync.Mutex
	clock  *fakeClock
	calls  []int
	at     []time.Time
	events int
	err    error
}

func (r *recorder) Publish(_ context.Context, evs ...event.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.err
	}
	r.calls = append(r.calls, len(evs))
	if r.clock != nil {
		r.at = append(r.at, r.clock.Now())
	}
	r.events += len(evs)
	return nil
}

func TestPumpCount(t *testing.T) {
	g, _ := NewSynthetic(SyntheticConfig{Seed: 1}, t0)
	rec := &recorder{}
	p, err := NewPump(PumpConfig{Count: 2500}, g, rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	if rec.events != 2500 || p.Counts().Sent != 2500 {
		t.Errorf("sent %d (counts %+v), want 2500", rec.events, p.Counts())
	}
	if len(rec.calls) != 3 || rec.calls[2] != 500 {
		t.Errorf("batches %v, want 1000,1000,500", rec.calls)
	}
}

func TestPumpRate(t *testing.T) {
	clock := &fakeClock{now: t0}
	g, _ := NewSynthetic(SyntheticConfig{Seed: 1}, t0)
	rec := &recorder{clock: clock}
	p, err := NewPump(PumpConfig{Count: 5000, Rate: 1000, Now: clock.Now, Sleep: clock.Sleep}, g, rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	if rec.events != 5000 {
		t.Fatalf("sent %d", rec.events)
	}
	if rec.calls[0] != 10 {
		t.Errorf("batch size %d at 1000/s, want 10 (10ms worth)", rec.calls[0])
	}
	// Event 5000 is due 5s after the start.
	if got := clock.Now().Sub(t0); got != 5*time.Second {
		t.Errorf("5000 events at 1000/s took %v, want 5s", got)
	}
	sent := 0
	for i, n := range rec.calls {
		sent += n
		if due := t0.Add(time.Duration(sent) * time.Millisecond); rec.at[i].Before(due) {
			t.Fatalf("batch %d (%d events) published at %v, before its due time %v", i, n, rec.at[i], due)
		}
	}
}

func TestPumpDuration(t *testing.T) {
	clock := &fakeClock{now: t0}
	g, _ := NewSynthetic(SyntheticConfig{Seed: 1}, t0)
	rec := &recorder{}
	p, _ := NewPump(PumpConfig{Duration: 2 * time.Second, Rate: 500, Now: clock.Now, Sleep: clock.Sleep}, g, rec)
	if err := p.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	if rec.events < 990 || rec.events > 1010 {
		t.Errorf("2s at 500/s sent %d events, want about 1000", rec.events)
	}
}

func TestPumpBadInputAndEOF(t *testing.T) {
	src := NewNDJSON(strings.NewReader("{\"action\":\"a\",\"kind\":\"ip\",\"subject\":\"s\"}\nbad\n{\"action\":\"a\",\"kind\":\"ip\",\"subject\":\"t\"}\n"))
	var reported []string
	rec := &recorder{}
	p, _ := NewPump(PumpConfig{OnBadInput: func(err error) { reported = append(reported, err.Error()) }}, src, rec)
	if err := p.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := p.Counts(); got != (Counts{Sent: 2, Bad: 1}) {
		t.Errorf("Counts = %+v", got)
	}
	if len(reported) != 1 || !strings.HasPrefix(reported[0], "line 2:") {
		t.Errorf("reported %q", reported)
	}
}

func TestPumpPublishError(t *testing.T) {
	g, _ := NewSynthetic(SyntheticConfig{Seed: 1}, t0)
	boom := errors.New("boom")
	p, _ := NewPump(PumpConfig{Count: 10}, g, &recorder{err: boom})
	if err := p.Run(t.Context()); !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want boom", err)
	}
}

func TestPumpStopsOnCancel(t *testing.T) {
	g, _ := NewSynthetic(SyntheticConfig{Seed: 1}, t0)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	p, _ := NewPump(PumpConfig{}, g, &recorder{})
	if err := p.Run(ctx); err != nil {
		t.Fatalf("Run after cancel = %v, want nil (a normal stop)", err)
	}
}

func TestPumpConfigValidate(t *testing.T) {
	for _, cfg := range []PumpConfig{{Count: -1}, {Duration: -1}, {Rate: -1}, {Batch: -1}} {
		if _, err := NewPump(cfg, nil, nil); err == nil {
			t.Errorf("NewPump(%+v) accepted", cfg)
		}
	}
}

func BenchmarkSyntheticNext(b *testing.B) {
	g, _ := NewSynthetic(SyntheticConfig{Subjects: 100000, Seed: 1}, t0)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Next(t0); err != nil {
			b.Fatal(err)
		}
	}
}
