package attack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/floodgate-dev/floodgate/bench/harness"
	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/stacktest/promtext"
)

const visitRules = `rules:
  - name: visit
    action: visit
    kinds: [ip]
    limits: [2/h]
`

// heldMetric is the limiter's gauge of subjects held in memory.
const heldMetric = "floodgate_limiter_state_subjects"

// millionSubjects: one event each from cfg.Subjects invented IPv6
// addresses, each in a /64 of its own (so counting by prefix does not fold
// them), against a 2/h rule: every one of them is at half its limit, the
// state a limiter keeps in memory. One IP among them goes over the limit
// and must stay denied.
func millionSubjects(ctx context.Context, e *env) (Row, error) {
	n := e.cfg.Subjects
	row := Row{Tried: fmt.Sprintf("one event each from %d invented IPv6 addresses (a /64 each) against 2/h, one IP over it; then a limiter restart", n)}
	rules, err := e.writeRules(visitRules)
	if err != nil {
		return row, err
	}
	slow, err := newSlowlog(ctx, e.rdb)
	if err != nil {
		return row, err
	}
	defer slow.restore(ctx, e.log)
	agg, err := e.startAggregator(ctx, rules)
	if err != nil {
		return row, err
	}
	l, err := e.startLimiter(ctx, rules, e.cfg.RedisAddr)
	if err != nil {
		return row, err
	}
	pub, err := e.publisher()
	if err != nil {
		return row, err
	}
	const over = "203.0.113.30"
	now := time.Now()
	start := time.Now()
	batch := make([]event.Event, 0, 5000)
	for i := range n {
		batch = append(batch, event.Event{ID: e.id + "-" + strconv.Itoa(i), Action: "visit", Kind: "ip", Subject: inventedIPv6(i), TS: now})
		if len(batch) == cap(batch) || i == n-1 {
			if err := pub.Publish(ctx, batch...); err != nil {
				return row, fmt.Errorf("publish: %w", errors.Join(err, pub.Close()))
			}
			batch = batch[:0]
		}
	}
	for i := range 3 {
		batch = append(batch, event.Event{ID: e.id + "-over-" + strconv.Itoa(i), Action: "visit", Kind: "ip", Subject: over, TS: now})
	}
	err = pub.Publish(ctx, batch...)
	if cerr := pub.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return row, fmt.Errorf("publish: %w", err)
	}
	published := time.Since(start)
	if err := waitFor(ctx, "aggregator at the topic's end", 15*time.Minute, func() (bool, error) {
		lag, err := e.lag(ctx)
		return lag == 0, err
	}); err != nil {
		return row, err
	}
	check := func(l *limiter) (int, error) {
		return status(ctx, http.MethodGet, "http://"+l.http+"/v1/check?action=visit&ip="+over, nil)
	}
	deniedBefore := waitFor(ctx, "the IP over the limit denied", time.Minute, func() (bool, error) {
		c, err := check(l)
		return c == http.StatusTooManyRequests, err
	}) == nil
	held := -1.0
	if s, err := promtext.Scrape(ctx, "http://"+l.http+"/metrics"); err == nil && s.Has(heldMetric) {
		held = s.Sum(heldMetric)
	}
	limiterPeak := l.PeakRSS()
	if err := l.Stop(20 * time.Second); err != nil {
		e.log.Warn("attack: stop limiter", "err", err)
	}
	restartAt := time.Now()
	l2, err := e.startLimiter(ctx, rules, e.cfg.RedisAddr)
	if err != nil {
		return row, err
	}
	ready := time.Since(restartAt)
	c2, _ := check(l2)
	deniedAfter := c2 == http.StatusTooManyRequests
	slowest, err := slow.slowest(ctx)
	if err != nil {
		return row, err
	}
	peak := max(limiterPeak, l2.PeakRSS())
	row.Pass = deniedBefore && deniedAfter && peak <= e.cfg.LimiterRSSBound
	row.Held = fmt.Sprintf("limiter peak RSS %s (bound %s), %s held; restarted limiter ready in %s, peak %s; aggregator peak RSS %s; "+
		"Redis's slowest command %s; the IP over the limit denied before %t, after the restart %t; published in %s",
		harness.MiB(limiterPeak), harness.MiB(e.cfg.LimiterRSSBound), heldText(held), ready.Round(100*time.Millisecond),
		harness.MiB(l2.PeakRSS()), harness.MiB(agg.PeakRSS()), slowest, deniedBefore, deniedAfter, published.Round(time.Second))
	return row, nil
}

func heldText(v float64) string {
	if v < 0 {
		return "? subjects"
	}
	return strconv.FormatFloat(v, 'f', 0, 64) + " subjects"
}

// inventedIPv6 is address i in a /64 of its own: 2001:db8:<hi>:<lo>::1.
func inventedIPv6(i int) string {
	return "2001:db8:" + strconv.FormatInt(int64(i>>16), 16) + ":" + strconv.FormatInt(int64(i&0xffff), 16) + "::1"
}
