package decide

import (
	"sync"
	"time"

	"github.com/floodgate-dev/floodgate/internal/window"
)

// banLabel is the rule label of ban denials in floodgate_limiter_denies_total:
// rule names cannot start with '@'.
const banLabel = "@ban"

// defaultBanMessage is what a banned subject is told when its ban has no
// message of its own.
const defaultBanMessage = "Blocked by an operator. Try again later."

// banTable holds the operators' bans of a State, per subject, fed like the
// decision state from the change streams (window.Change.Bans) and the
// snapshots. Bans are few: one map under one lock.
type banTable struct {
	mu sync.RWMutex
	m  map[window.Subject]banEntry
}

type banEntry struct {
	partition int
	ban       window.Ban
}

// Ban returns sub's ban when it is in force at now: every check of sub is
// denied until it ends, whatever its counts.
func (s *State) Ban(sub window.Subject, now time.Time) (window.Ban, bool) {
	t := &s.bans
	t.mu.RLock()
	e, ok := t.m[sub]
	t.mu.RUnlock()
	if !ok || !e.ban.InForce(now) {
		return window.Ban{}, false
	}
	return e.ban, true
}

// reset replaces the bans of a partition by a snapshot's.
func (t *banTable) reset(partition int, bans map[window.Subject]window.Ban) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for sub, e := range t.m {
		if e.partition == partition {
			delete(t.m, sub)
		}
	}
	for sub, b := range bans {
		t.put(partition, sub, b)
	}
}

// apply applies a change entry's bans and unbans.
func (t *banTable) apply(partition int, changes []window.BanChange) {
	if len(changes) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, bc := range changes {
		if bc.Ban == nil {
			delete(t.m, bc.Subject)
			continue
		}
		t.put(partition, bc.Subject, *bc.Ban)
	}
}

func (t *banTable) put(partition int, sub window.Subject, b window.Ban) {
	if t.m == nil {
		t.m = map[window.Subject]banEntry{}
	}
	t.m[sub] = banEntry{partition: partition, ban: b}
}

// sweep drops the bans that ended by now.
func (t *banTable) sweep(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for sub, e := range t.m {
		if !e.ban.InForce(now) {
			delete(t.m, sub)
		}
	}
}

// memoryBan returns the ban in force of a plan's subject held in memory.
func (l *Limiter) memoryBan(action string, p *plan, now time.Time) *window.Ban {
	b, ok := l.cfg.State.Ban(window.Subject{Action: action, Kind: p.sub.Kind, Subject: p.sub.Subject}, now)
	if !ok {
		return nil
	}
	return &b
}

// banDenial returns the denial of the banned subject whose ban ends last,
// nil when no subject is banned. A ban denies whatever the counts and the
// allowlists say: an operator decided.
func banDenial(plans []plan, views []view, now time.Time) *Denial {
	var deny *Denial
	for i := range plans {
		b := views[i].ban
		if !b.InForce(now) {
			continue
		}
		msg := b.Message
		if msg == "" {
			msg = defaultBanMessage
		}
		deny = pick(deny, &Denial{
			Kind: plans[i].sub.Kind, Subject: plans[i].sub.Subject, Message: msg,
			Until: b.Until, RetryAfter: b.Until.Sub(now), Banned: true,
		})
	}
	return deny
}

// denyLabel is the rule label of a denial in the metrics.
func denyLabel(d *Denial) string {
	if d.Banned {
		return banLabel
	}
	return d.Rule
}
