package window

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/internal/rules"
)

// SubjectState is what the live aggregator last found of a subject with at
// least one limit at half its count or more (near): the limiter answers
// from it without reading Redis, and a subject without one is at less than
// half of every limit. Written by the apply script into the slot's state
// hash and change stream as
//
//	{"t":<eval second>,"l":[["<rule>",<limit>,<window s>,<count>,<until s or 0>],...],
//	 "b":[["<rule>",<theoretical arrival time, unix us>],...]}
type SubjectState struct {
	// At is the second the subject was evaluated at.
	At time.Time
	// Limits are its near limits, in rule order.
	Limits []LimitState
	// Buckets are its bucket rules at half their burst or more.
	Buckets []BucketState
}

// BucketState is a near bucket of a SubjectState: its theoretical arrival
// time (GCRA), from which the rule's interval and burst give everything: an
// event at t conforms when t >= TAT + interval - interval*burst, and
// (TAT - t)/interval tokens are used at t. The TAT does not move without
// events, so it stays exact until the aggregator writes the next one.
type BucketState struct {
	Rule string
	TAT  time.Time
}

// LimitState is one near limit of a SubjectState.
type LimitState struct {
	Rule  string
	Limit rules.Limit
	// Count is the events in the window at At: an upper bound of the count
	// at any later time without new events evaluated since, so Limit-Count
	// never overstates what is left as of the state. A write-back owner
	// writes a state that does not block with its checkpoint
	// (live/deferred.go), so such a state may be up to that interval old;
	// one that only extends a deny, up to its --deny-refresh
	// (live/carried.go).
	Count int64
	// Until is when one more event fits again; zero when one more fits now.
	// While a deny lasts it may be up to --deny-refresh old: earlier than
	// the truth, never later.
	Until time.Time
}

// Valid reports whether the limit still says something at now: while it
// blocks, and while the events it counted can still be in the window.
func (l LimitState) Valid(at, now time.Time) bool {
	return now.Before(l.Until) || now.Before(at.Add(l.Limit.Window))
}

// Expires is the second from which the state says nothing any more.
// Blocks reports whether the state says one more event does not fit a
// limit or bucket: what a bound on held states keeps first, since a check
// then denies without a Redis read. A bucket is held only from half its
// burst on; without the rule at hand, every held bucket counts.
func (s SubjectState) Blocks() bool {
	for _, l := range s.Limits {
		if !l.Until.IsZero() {
			return true
		}
	}
	return len(s.Buckets) > 0
}

func (s SubjectState) Expires() time.Time {
	var x time.Time
	for _, l := range s.Limits {
		x = maxTime(x, l.Until, s.At.Add(l.Limit.Window))
	}
	for _, b := range s.Buckets {
		x = maxTime(x, b.TAT)
	}
	return x
}

func maxTime(ts ...time.Time) time.Time {
	var m time.Time
	for _, t := range ts {
		if t.After(m) {
			m = t
		}
	}
	return m
}

// ParseState decodes a state JSON value.
func ParseState(data []byte) (SubjectState, error) {
	var w struct {
		T int64               `json:"t"`
		L [][]json.RawMessage `json:"l"`
		B [][]json.RawMessage `json:"b"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return SubjectState{}, fmt.Errorf("subject state: %w", err)
	}
	st := SubjectState{At: time.Unix(w.T, 0).UTC(), Limits: make([]LimitState, 0, len(w.L))}
	for _, l := range w.L {
		if len(l) != 5 {
			return SubjectState{}, fmt.Errorf("subject state: limit of %d fields, want 5", len(l))
		}
		var ls LimitState
		var win, until int64
		for i, dst := range []any{&ls.Rule, &ls.Limit.Count, &win, &ls.Count, &until} {
			if err := json.Unmarshal(l[i], dst); err != nil {
				return SubjectState{}, fmt.Errorf("subject state: limit field %d: %w", i, err)
			}
		}
		ls.Limit.Window = time.Duration(win) * time.Second
		if until > 0 {
			ls.Until = time.Unix(until, 0).UTC()
		}
		st.Limits = append(st.Limits, ls)
	}
	for _, b := range w.B {
		var bs BucketState
		var tat int64
		if len(b) != 2 || json.Unmarshal(b[0], &bs.Rule) != nil || json.Unmarshal(b[1], &tat) != nil {
			return SubjectState{}, fmt.Errorf("subject state: bad bucket %s", b)
		}
		bs.TAT = time.UnixMicro(tat).UTC()
		st.Buckets = append(st.Buckets, bs)
	}
	return st, nil
}

// StateChange is a subject's new state; State nil means it has none any more.
type StateChange struct {
	Subject Subject
	State   *SubjectState
}

// Change is one entry of a partition's change stream: what one applied
// batch changed. Entries of a partition carry consecutive Seq numbers, so a
// reader can tell a gap (entries trimmed before it read them, or lost with
// a Redis primary) from a quiet partition.
type Change struct {
	ID        string // stream entry id, "<ms>-<n>"
	Seq       int64
	Next      int64 // the partition's next offset once the batch was applied
	States    []StateChange
	Decisions []DecisionMessage
	Bans      []BanChange // operators' bans and unbans (admin.go)
}

// decisionLog is a decision as the apply script writes it into the stream:
// the subject as its field.
type decisionLog struct {
	Field string `json:"f"`
	decisionWire
}

// ParseChange decodes a change stream entry.
func ParseChange(m redis.XMessage) (Change, error) { return parseChange(m, true) }

// ParseChangeWithoutStates decodes a change stream entry but its states,
// for readers that want only its decisions and bans (the decisions relay):
// the states are most of an entry, and parsing them most of the reading.
func ParseChangeWithoutStates(m redis.XMessage) (Change, error) { return parseChange(m, false) }

func parseChange(m redis.XMessage, states bool) (Change, error) {
	c := Change{ID: m.ID}
	var err error
	if c.Seq, err = strconv.ParseInt(str(m.Values["q"]), 10, 64); err != nil {
		return Change{}, fmt.Errorf("change %s: seq: %w", m.ID, err)
	}
	if c.Next, err = strconv.ParseInt(str(m.Values["o"]), 10, 64); err != nil {
		return Change{}, fmt.Errorf("change %s: offset: %w", m.ID, err)
	}
	if s := str(m.Values["s"]); s != "" && states {
		var raw [][2]json.RawMessage
		if err := json.Unmarshal([]byte(s), &raw); err != nil {
			return Change{}, fmt.Errorf("change %s: states: %w", m.ID, err)
		}
		for _, pair := range raw {
			var f string
			if err := json.Unmarshal(pair[0], &f); err != nil {
				return Change{}, fmt.Errorf("change %s: state field: %w", m.ID, err)
			}
			sub, ok := ParseField(f)
			if !ok {
				return Change{}, fmt.Errorf("change %s: bad subject field %q", m.ID, f)
			}
			sc := StateChange{Subject: sub}
			if string(pair[1]) != "null" {
				st, err := ParseState(pair[1])
				if err != nil {
					return Change{}, fmt.Errorf("change %s: %w", m.ID, err)
				}
				sc.State = &st
			}
			c.States = append(c.States, sc)
		}
	}
	if s := str(m.Values["b"]); s != "" {
		if c.Bans, err = parseBanChanges(m.ID, s); err != nil {
			return Change{}, err
		}
	}
	if s := str(m.Values["d"]); s != "" {
		var ds []decisionLog
		if err := json.Unmarshal([]byte(s), &ds); err != nil {
			return Change{}, fmt.Errorf("change %s: decisions: %w", m.ID, err)
		}
		for _, d := range ds {
			sub, ok := ParseField(d.Field)
			if !ok {
				return Change{}, fmt.Errorf("change %s: bad decision subject %q", m.ID, d.Field)
			}
			d.Action, d.Kind, d.Subject = sub.Action, sub.Kind, sub.Subject
			dec, err := d.decisionWire.decision()
			if err != nil {
				return Change{}, fmt.Errorf("change %s: %w", m.ID, err)
			}
			c.Decisions = append(c.Decisions, dec)
		}
	}
	return c, nil
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// Snapshot is a partition's state at one point of its change stream: the
// limiter loads it, then follows the stream from LastID.
type Snapshot struct {
	LastID string // id of the last change entry, "0-0" when none
	Seq    int64  // its sequence number, 0 when none
	States map[Subject]SubjectState
	Bans   map[Subject]Ban // bans in force (admin.go)
	// Omitted states are in Redis but not in States (SnapshotAtMost's
	// bound); the last of them says something until OmittedUntil.
	Omitted      int
	OmittedUntil time.Time
}

// snapshotBody reads a partition's change stream position and bans,
// atomically: the state hash is read after it in pages (snapshotPageBody),
// so no script run holds the shard for a hash an attacker can grow.
//
//	KEYS: log key, seq key, bans key
//
// Returns {last entry id or "0-0", seq, {field, ban json}*}. Bans are an
// operator's, few.
//
//go:embed snapshot.lua
var snapshotBody string

// snapshotPageBody reads one page of a partition's state hash.
//
//	KEYS: state key
//	ARGV: cursor, count
//
// Returns {next cursor, {field, json}*}.
//
//go:embed snapshot_page.lua
var snapshotPageBody string

var (
	snapshotScript     = redis.NewScript("#!lua flags=no-writes\n" + snapshotBody)
	snapshotPageScript = redis.NewScript("#!lua flags=no-writes\n" + snapshotPageBody)
)

// SnapshotPage is how many state hash fields one snapshot read asks for.
const SnapshotPage = 512

// Snapshot reads a partition's current state, bans and stream position.
// States and bans already expired at now are left out.
//
// The stream position and bans are read first, in one script run; the
// state hash then in pages (HSCAN), each its own run, so a snapshot of
// millions of subjects never blocks the shard for more than a page. The
// pages are not one point in time, yet state plus stream stays exact: every
// change to the hash after the position is also a stream entry after
// LastID, holding the subject's whole new state (or its removal), which
// the follower applies after the snapshot. A subject the scan read before
// such a change, after it, or (removed or added meanwhile) not at all, ends
// with the entry's state; one present throughout is read (HSCAN's
// guarantee) with the value it had at the position. Only expired states
// are removed from the hash without an entry, and a reader drops those
// itself.
func (s *Store) Snapshot(ctx context.Context, partition int, now time.Time) (Snapshot, error) {
	return s.SnapshotAtMost(ctx, partition, now, 0)
}

// SnapshotAtMost is Snapshot holding at most max states (0: no bound),
// blocking ones first (SubjectState.Blocks); the rest are counted in
// Omitted. A reader bounded in the subjects it holds has no use for more,
// and a partition's state hash is as large as an attacker makes it.
func (s *Store) SnapshotAtMost(ctx context.Context, partition int, now time.Time, max int) (Snapshot, error) {
	k := s.keys
	start := time.Now()
	defer s.observe("snapshot", start)
	v, err := snapshotScript.RunRO(ctx, s.rdb, []string{k.Log(partition), k.Seq(partition), k.Bans(partition)}).Slice()
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot partition=%d: %w", partition, err)
	}
	if len(v) != 3 {
		return Snapshot{}, fmt.Errorf("snapshot partition=%d: bad reply", partition)
	}
	snap := Snapshot{LastID: str(v[0]), States: map[Subject]SubjectState{}}
	if snap.LastID == "" {
		return Snapshot{}, errors.New("snapshot: no stream position in reply")
	}
	snap.Seq, _ = v[1].(int64)
	bans, _ := v[2].([]any)
	if snap.Bans, err = parseBans(bans, now); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot partition=%d: %w", partition, err)
	}
	keep := snapshotKeeper{snap: &snap, max: max}
	cursor := "0"
	for pages := 0; ; pages++ {
		if err := ctx.Err(); err != nil {
			return Snapshot{}, fmt.Errorf("snapshot partition=%d: %w", partition, err)
		}
		page, err := snapshotPageScript.RunRO(ctx, s.rdb, []string{k.State(partition)}, cursor, SnapshotPage).Slice()
		if err != nil {
			return Snapshot{}, fmt.Errorf("snapshot partition=%d page=%d: %w", partition, pages, err)
		}
		if len(page) != 2 {
			return Snapshot{}, fmt.Errorf("snapshot partition=%d page=%d: bad reply", partition, pages)
		}
		cursor = str(page[0])
		flat, _ := page[1].([]any)
		for i := 0; i+1 < len(flat); i += 2 {
			sub, ok := ParseField(str(flat[i]))
			if !ok {
				return Snapshot{}, fmt.Errorf("snapshot partition=%d: bad subject field %q", partition, str(flat[i]))
			}
			st, err := ParseState([]byte(str(flat[i+1])))
			if err != nil {
				return Snapshot{}, fmt.Errorf("snapshot partition=%d %s: %w", partition, str(flat[i]), err)
			}
			if st.Expires().After(now) {
				keep.add(sub, st)
			}
		}
		if cursor == "0" || cursor == "" {
			return snap, nil
		}
	}
}

// snapshotKeeper fills a snapshot's States up to max (0: no bound): past
// it a blocking state takes the place of one that does not block, and
// whatever is left out is counted with the time it stops saying anything.
type snapshotKeeper struct {
	snap        *Snapshot
	max         int
	nonBlocking []Subject // candidates to give their place, oldest first
}

func (k *snapshotKeeper) add(sub Subject, st SubjectState) {
	states := k.snap.States
	if _, held := states[sub]; held || k.max == 0 || len(states) < k.max {
		states[sub] = st
		if !st.Blocks() {
			k.nonBlocking = append(k.nonBlocking, sub)
		}
		return
	}
	if st.Blocks() {
		for len(k.nonBlocking) > 0 {
			victim := k.nonBlocking[0]
			k.nonBlocking = k.nonBlocking[1:]
			if vs, ok := states[victim]; ok && !vs.Blocks() {
				delete(states, victim)
				k.omit(vs)
				states[sub] = st
				return
			}
		}
	}
	k.omit(st)
}

func (k *snapshotKeeper) omit(st SubjectState) {
	k.snap.Omitted++
	k.snap.OmittedUntil = maxTime(k.snap.OmittedUntil, st.Expires())
}
