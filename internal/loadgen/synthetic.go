package loadgen

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"time"

	"github.com/floodgate-dev/floodgate/event"
)

// SyntheticConfig configures a Synthetic generator.
type SyntheticConfig struct {
	// Subjects is how many distinct subjects exist. Default 10000; at most
	// 1<<24 (ip subjects are addresses of 10.0.0.0/8).
	Subjects int
	// Actions are chosen uniformly per event. Default ["login_failed"].
	Actions []string
	// Kind of every subject: "ip" gives 10.x.y.z addresses, "email"
	// user<i>@example.com, anything else "<kind>-<i>". Default "ip".
	Kind string
	// ZipfS is the skew of subjects (Zipf s parameter, > 1): higher is
	// more skewed. Default 1.1.
	ZipfS float64
	// Uniform draws subjects uniformly instead (cold subjects spread
	// evenly: the worst case for per-subject caches). ZipfS is then unused.
	Uniform bool
	// Backfill spreads event times uniformly over [now-Backfill, now].
	// Default 0: event time is now. Ignored when TSFrom is set.
	Backfill time.Duration
	// TSFrom and TSTo, when TSFrom is set, spread event times uniformly
	// over [TSFrom, TSTo); TSTo defaults to now at construction.
	TSFrom, TSTo time.Time
	// Seed makes the choice of subjects, actions and times reproducible.
	// Default 0: a random seed (see Synthetic.Seed). Event ids are always
	// random, so replays are not mistaken for duplicates.
	Seed uint64
}

// Validate reports invalid fields (after defaults).
func (c SyntheticConfig) Validate() error {
	c = c.withDefaults(time.Time{})
	var errs []error
	if c.Subjects < 1 || c.Subjects > 1<<24 {
		errs = append(errs, fmt.Errorf("subjects %d: want 1..%d", c.Subjects, 1<<24))
	}
	probe := event.Event{ID: "x", Kind: c.Kind, Subject: "s", TS: time.Unix(1e9, 0)}
	for _, a := range c.Actions {
		probe.Action = a
		if err := probe.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("action %q: %w", a, err))
		}
	}
	probe.Action = "a"
	if err := probe.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("kind %q: %w", c.Kind, err))
	}
	if !(c.ZipfS > 1) {
		errs = append(errs, fmt.Errorf("zipf s %v: must be > 1", c.ZipfS))
	}
	if c.Backfill < 0 {
		errs = append(errs, fmt.Errorf("backfill %v: must not be negative", c.Backfill))
	}
	if !c.TSFrom.IsZero() && (c.TSFrom.UnixMilli() < event.MinTSMillis || c.TSFrom.UnixMilli() >= event.MaxTSMillis) {
		errs = append(errs, fmt.Errorf("ts from %s: outside the event time range [2000, 2200)", c.TSFrom.Format(time.RFC3339)))
	}
	if !c.TSFrom.IsZero() && !c.TSTo.IsZero() && !c.TSFrom.Before(c.TSTo) {
		errs = append(errs, fmt.Errorf("ts range [%s, %s): from must be before to", c.TSFrom.Format(time.RFC3339), c.TSTo.Format(time.RFC3339)))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("synthetic load config: %w", err)
	}
	return nil
}

func (c SyntheticConfig) withDefaults(now time.Time) SyntheticConfig {
	if c.Subjects == 0 {
		c.Subjects = 10000
	}
	if len(c.Actions) == 0 {
		c.Actions = []string{"login_failed"}
	}
	if c.Kind == "" {
		c.Kind = "ip"
	}
	if c.ZipfS == 0 {
		c.ZipfS = 1.1
	}
	if !c.TSFrom.IsZero() && c.TSTo.IsZero() {
		c.TSTo = now
	}
	return c
}

// Synthetic generates events. It is not safe for concurrent use.
type Synthetic struct {
	cfg   SyntheticConfig
	seed  uint64
	rnd   *mrand.Rand
	zipf  *mrand.Zipf
	ids   *mrand.ChaCha8 // event ids: random, independent of the seed
	idBuf [16]byte
	buf   []byte
}

// NewSynthetic validates cfg and returns a generator. now is used only to
// default TSTo.
func NewSynthetic(cfg SyntheticConfig, now time.Time) (*Synthetic, error) {
	cfg = cfg.withDefaults(now) // TSTo = now if unset, then validate the range
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	seed := cfg.Seed
	var key [32]byte
	_, _ = rand.Read(key[:]) // never fails (Go 1.24+)
	if seed == 0 {
		seed = mrand.New(mrand.NewChaCha8(key)).Uint64() | 1
	}
	rnd := mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return &Synthetic{
		cfg:  cfg,
		seed: seed,
		rnd:  rnd,
		zipf: mrand.NewZipf(rnd, cfg.ZipfS, 1, uint64(cfg.Subjects-1)),
		ids:  mrand.NewChaCha8(key),
	}, nil
}

// Seed returns the seed in use (the random one when none was configured).
func (g *Synthetic) Seed() uint64 { return g.seed }

// Next returns a new event at time now (or spread over the configured
// window). It never fails.
func (g *Synthetic) Next(now time.Time) (event.Event, error) {
	i := g.zipf.Uint64()
	if g.cfg.Uniform {
		i = g.rnd.Uint64N(uint64(g.cfg.Subjects))
	}
	_, _ = g.ids.Read(g.idBuf[:])
	e := event.Event{
		V:       event.Version,
		ID:      hex.EncodeToString(g.idBuf[:]),
		Action:  g.cfg.Actions[g.rnd.IntN(len(g.cfg.Actions))],
		Kind:    g.cfg.Kind,
		Subject: g.subject(i),
		TS:      now,
		N:       1,
	}
	switch {
	case !g.cfg.TSFrom.IsZero():
		e.TS = g.cfg.TSFrom.Add(time.Duration(g.rnd.Int64N(int64(g.cfg.TSTo.Sub(g.cfg.TSFrom)))))
	case g.cfg.Backfill > 0:
		e.TS = now.Add(-time.Duration(g.rnd.Int64N(int64(g.cfg.Backfill) + 1)))
	}
	return e, nil
}

// Subject returns the name of subject number i (0 is the hottest).
func (g *Synthetic) Subject(i uint64) string { return g.subject(i) }

func (g *Synthetic) subject(i uint64) string {
	b := g.buf[:0]
	switch g.cfg.Kind {
	case "ip":
		b = append(b, "10."...)
		b = strconv.AppendUint(b, i>>16&255, 10)
		b = append(b, '.')
		b = strconv.AppendUint(b, i>>8&255, 10)
		b = append(b, '.')
		b = strconv.AppendUint(b, i&255, 10)
	case "email":
		b = append(b, "user"...)
		b = strconv.AppendUint(b, i, 10)
		b = append(b, "@example.com"...)
	default:
		b = append(b, g.cfg.Kind...)
		b = append(b, '-')
		b = strconv.AppendUint(b, i, 10)
	}
	g.buf = b
	return string(b)
}
