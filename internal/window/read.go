package window

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/floodgate-dev/floodgate/internal/rules"
)

var (
	evalScript   = redis.NewScript("#!lua flags=no-writes\n" + LuaLib + banLib + maxDistinctLua + evalBody)
	takeScript   = redis.NewScript("#!lua\n" + LuaLib + banLib + maxDistinctLua + evalBody)
	refundScript = redis.NewScript("#!lua\n" + LuaLib + refundBody)
	checkScript  = redis.NewScript("#!lua flags=no-writes\n" + LuaLib + checkBody)
)

// maxDistinctLua gives a script the cap on a distinct set's values.
var maxDistinctLua = "local MAXDISTINCT = " + strconv.Itoa(rules.MaxDistinct) + "\n"

// Ahead is how far past now Evaluate and Take count events (see evalBody):
// the clock difference between limiters that strict mode tolerates.
const Ahead = 5 * time.Second

// EvalLimit is one limit of one subject in an Evaluate or Take call.
type EvalLimit struct {
	Limit rules.Limit
	// Distinct, when set, makes the limit count the subject's distinct
	// values of that attr kind (a distinct rule) instead of events.
	Distinct string
	// Block makes the limit stop a Take when the take would go over it
	// (enforced rules). Non-blocking limits (shadow rules, allowlisted
	// subjects) are only reported.
	Block bool
}

// EvalBucket is one bucket rule of one subject in an Evaluate or Take call.
type EvalBucket struct {
	Rule   string
	Bucket rules.Bucket
	Block  bool // as EvalLimit.Block
}

// EvalQuery asks for one subject's deny record and the state of its limits.
type EvalQuery struct {
	Subject Subject
	// MaxWindow is the longest window of all rules of the subject's action
	// and kind (rules.Set.MaxWindowFor): Take counts at every bucket level
	// it needs, exactly as the aggregator would. Required for Take.
	MaxWindow time.Duration
	Limits    []EvalLimit
	Buckets   []EvalBucket
	// Values are the request's related features (attr kind -> value): a
	// distinct limit counts its kind's value as new unless the window saw
	// it already, and a take records it. Without a value a distinct limit
	// assumes a new one.
	Values map[string]string
	// BlockRules names the rules whose deny record stops a Take (enforced
	// rules that do not allowlist the subject).
	BlockRules []string
	// Count makes Take count the subject (it has a strict rule). Subjects
	// not counted are still checked and can still stop the take.
	Count bool
}

// EvalState answers an EvalQuery.
type EvalState struct {
	Deny *Deny // the subject's deny record, nil when none
	Ban  *Ban  // an operator's ban in force, nil when none: it denies (and blocks takes) whatever the counts
	// Sums are the events in each limit's window ending with now's second
	// (plus those up to Ahead past it), before any take, in Limits order.
	Sums []int64
	// Until, per limit, is zero when sum+n fits the limit; otherwise the
	// first whole second at which it would fit (no more events assumed).
	// Evaluate uses n = 1: "may one more happen?".
	Until []time.Time
	// Buckets, in Buckets order.
	Buckets []BucketEval
}

// BucketEval answers an EvalBucket.
type BucketEval struct {
	TAT time.Time // the theoretical arrival time before any take (zero: full)
	// Until is zero when n more fit; otherwise when they would.
	Until time.Time
}

// TakeRequest is one strict take in one slot: all its queries are checked
// for N more events and, unless one blocks, N is counted for those marked
// Count.
type TakeRequest struct {
	Queries []EvalQuery
	N       int64
	// Events, when set, are the take's encoded events (all of this slot's
	// partition): a take that counts also appends them, in the same script
	// run, to the slot's take stream (Keys.Takes), from which the partition
	// owner publishes them (live.TakeRelay) — unless the stream already
	// holds QueueMax entries.
	Events []QueuedEvent
}

// QueuedEvent is one event of a take, as published: Kafka key and value,
// and the event's id (optional: a taker that needs it decodes Value
// without it).
type QueuedEvent struct {
	Key, Value []byte
	ID         string
}

// encode is the event as the take stream holds it: "<len(key)>:<key><value>".
func (e QueuedEvent) encode() string {
	return strconv.Itoa(len(e.Key)) + ":" + string(e.Key) + string(e.Value)
}

// ParseQueuedEvent reads a take stream entry's field value: the Kafka key
// and value of one event.
func ParseQueuedEvent(s string) (key, value []byte, err error) {
	n, rest, ok := strings.Cut(s, ":")
	k, err := strconv.Atoi(n)
	if !ok || err != nil || k < 0 || k > len(rest) {
		return nil, nil, fmt.Errorf("queued event: want \"<key length>:<key><value>\", got %.40q", s)
	}
	return []byte(rest[:k]), []byte(rest[k:]), nil
}

// TakeResult answers a TakeRequest: Taken, and the states before the take.
type TakeResult struct {
	Taken  bool
	States []EvalState
	// Queued: the request's Events are in the take stream, as Entry. False
	// for a take that counted while the stream was full: its caller
	// publishes them.
	Queued bool
	Entry  string
}

// Evaluate answers queries: each subject's deny record, the sum of each
// limit's window (plus events up to Ahead past now) and, for limits that n
// more events would exceed, when they would fit again. One read-only script
// run per slot the subjects fall in, the runs concurrent. It writes nothing.
func (s *Store) Evaluate(ctx context.Context, now time.Time, qs []EvalQuery, n int64) ([]EvalState, error) {
	out := make([]EvalState, len(qs))
	groups, err := s.bySlot(len(qs), func(i int) Subject { return qs[i].Subject })
	if err != nil {
		return nil, err
	}
	g, gctx := errgroup.WithContext(ctx)
	for part, idx := range groups {
		g.Go(func() error {
			sub := make([]EvalQuery, len(idx))
			for k, i := range idx {
				sub[k] = qs[i]
			}
			res, err := s.runEval(gctx, "evaluate", part, now, []TakeRequest{{Queries: sub, N: max(n, 1)}})
			if err != nil {
				return err
			}
			for k, i := range idx {
				out[i] = res[0].States[k]
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// TakeSlot runs the takes of one partition's slot in one script run, in
// order: each is all or nothing, and each sees the counts of those before
// it. The caller must not retry a run whose reply it did not get (the
// takes may have counted): a Redis client for takes has retries off.
func (s *Store) TakeSlot(ctx context.Context, partition int, now time.Time, reqs []TakeRequest) ([]TakeResult, error) {
	res, errs := s.TakeSlots(ctx, []SlotTakes{{Partition: partition, Now: now, Reqs: reqs}})
	return res[0], errs[0]
}

// SlotTakes is one script run of TakeSlots: takes of one partition's slot,
// counted at Now.
type SlotTakes struct {
	Partition int
	Now       time.Time
	Reqs      []TakeRequest
}

// TakeSlots runs several take runs (each as TakeSlot) in one pipeline: one
// round trip and one write for all of them, where separate calls cost a
// system call on each side per run. Each run is atomic on its own and
// independent of the others (a cluster client sends each to its slot's
// node); results and errors are per run. A run refused for a
// missing script (a restarted or failed-over Redis) did not run, and is
// sent again once the script is loaded.
func (s *Store) TakeSlots(ctx context.Context, runs []SlotTakes) ([][]TakeResult, []error) {
	out := make([][]TakeResult, len(runs))
	errs := make([]error, len(runs))
	args := make([][]any, len(runs))
	var todo []int
	for i, r := range runs {
		if args[i], errs[i] = s.takeArgs(r); errs[i] == nil {
			todo = append(todo, i)
		}
	}
	start := time.Now()
	defer s.observe("take", start)
	for attempt := 0; len(todo) > 0; attempt++ {
		cmds := make([]*redis.Cmd, len(todo))
		pipe := s.rdb.Pipeline()
		for k, i := range todo {
			cmds[k] = pipe.EvalSha(ctx, takeScript.Hash(), []string{s.keys.State(runs[i].Partition)}, args[i]...)
		}
		_, _ = pipe.Exec(ctx) // errors are read per command
		var again []int
		for k, i := range todo {
			r := runs[i]
			v, err := cmds[k].Slice()
			if err != nil && attempt == 0 && redis.HasErrorPrefix(err, "NOSCRIPT") {
				again = append(again, i)
				continue
			}
			if err != nil {
				errs[i] = fmt.Errorf("take %d requests partition=%d: %w", len(r.Reqs), r.Partition, err)
				continue
			}
			out[i], errs[i] = parseTakes("take", r.Reqs, v)
		}
		if len(again) > 0 {
			if err := takeScript.Load(ctx, s.rdb).Err(); err != nil {
				for _, i := range again {
					errs[i] = fmt.Errorf("take partition=%d: load script: %w", runs[i].Partition, err)
				}
				return out, errs
			}
		}
		todo = again
	}
	return out, errs
}

func (s *Store) takeArgs(r SlotTakes) ([]any, error) {
	for _, req := range r.Reqs {
		if req.N < 1 {
			return nil, fmt.Errorf("take: n = %d, want >= 1", req.N)
		}
		for _, q := range req.Queries {
			if q.Count && (q.MaxWindow < time.Second || q.MaxWindow > rules.MaxWindow) {
				return nil, fmt.Errorf("take %s: max window %s is not in [1s, %s]", Field(q.Subject), q.MaxWindow, rules.FormatWindow(rules.MaxWindow))
			}
		}
	}
	return s.evalArgs("take", r.Partition, r.Now, r.Reqs, true)
}

// Refund takes back n events that TakeSlot counted at now for the subjects
// of qs marked Count (one slot): a strict take spanning several slots
// reserves in each and refunds where another refused. entry is the take
// stream entry that queued the take's events in this slot (TakeResult.Entry;
// "" for none): it goes with the count. Once the take relay has reached it
// (published, or in a request on its way), nothing is refunded and
// refunded is false: the reservation stays counted, as its events do.
func (s *Store) Refund(ctx context.Context, partition int, now time.Time, qs []EvalQuery, n int64, entry string) (refunded bool, err error) {
	args := []any{s.keys.Slot(partition), now.UnixMilli(), int64(s.slack / time.Second), n, entry}
	var subs []any
	count := 0
	for _, q := range qs {
		if q.Count {
			count++
			subs = append(subs, Field(q.Subject), int64(q.MaxWindow/time.Second), len(q.Buckets))
			for _, b := range q.Buckets {
				subs = append(subs, b.Rule, b.Bucket.Interval().Microseconds())
			}
		}
	}
	args = append(append(args, count), subs...)
	start := time.Now()
	code, err := refundScript.Run(ctx, s.rdb, []string{s.keys.State(partition), s.keys.Takes(partition), s.keys.TakesRelay(partition), s.keys.TakesRefunds(partition)}, args...).Int64()
	s.observe("refund", start)
	if err != nil {
		return false, fmt.Errorf("refund %d subjects partition=%d: %w", count, partition, err)
	}
	return code == refundRefunded, nil
}

// refundRefunded is refund.lua's REFUNDED (KEPT, 0: the relay had the
// take's events, and the count stays).
const refundRefunded = 1

// bySlot groups the indexes of n subjects by partition.
func (s *Store) bySlot(n int, subject func(int) Subject) (map[int][]int, error) {
	groups := map[int][]int{}
	for i := range n {
		p, err := s.PartitionOf(subject(i))
		if err != nil {
			return nil, err
		}
		groups[p] = append(groups[p], i)
	}
	return groups, nil
}

func (s *Store) runEval(ctx context.Context, op string, partition int, now time.Time, reqs []TakeRequest) ([]TakeResult, error) {
	args, err := s.evalArgs(op, partition, now, reqs, false)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	v, err := evalScript.RunRO(ctx, s.rdb, []string{s.keys.State(partition)}, args...).Slice()
	s.observe(op, start)
	if err != nil {
		return nil, fmt.Errorf("%s %d requests partition=%d: %w", op, len(reqs), partition, err)
	}
	return parseTakes(op, reqs, v)
}

// takeTaken is eval.lua's TAKEN: the take counted its events (NOT_TAKEN,
// 0: it did not).
const takeTaken = 1

// parseTakes reads the reply of evalBody: one {taken, states, queued,
// entry} per request.
func parseTakes(op string, reqs []TakeRequest, v []any) ([]TakeResult, error) {
	if len(v) != len(reqs) {
		return nil, fmt.Errorf("%s: %d answers for %d requests", op, len(v), len(reqs))
	}
	out := make([]TakeResult, len(reqs))
	for r, x := range v {
		reply, ok := x.([]any)
		if !ok || len(reply) != 4 {
			return nil, fmt.Errorf("%s: bad reply %v", op, x)
		}
		taken, _ := reply[0].(int64)
		states, err := parseStates(op, reqs[r].Queries, reply[1])
		if err != nil {
			return nil, err
		}
		queued, _ := reply[2].(int64)
		entry, _ := reply[3].(string)
		out[r] = TakeResult{Taken: taken == takeTaken, States: states, Queued: queued == 1, Entry: entry}
	}
	return out, nil
}

func (s *Store) evalArgs(op string, partition int, now time.Time, reqs []TakeRequest, take bool) ([]any, error) {
	args := make([]any, 0, 8+16*len(reqs))
	qmax := int64(0)
	if take {
		qmax = s.queueMax
	}
	args = append(args, s.keys.Slot(partition), now.UnixMilli(), int64(s.slack/time.Second), int64(Ahead/time.Second), len(reqs), qmax)
	for _, r := range reqs {
		tk := 0
		if take {
			tk = 1
		}
		args = append(args, r.N, tk, len(r.Queries))
		ne := 0
		if take {
			ne = len(r.Events)
		}
		args = append(args, ne)
		for _, e := range r.Events[:ne] {
			args = append(args, e.encode())
		}
		for _, q := range r.Queries {
			cnt := 0
			if q.Count {
				cnt = 1
			}
			args = append(args, Field(q.Subject), int64(q.MaxWindow/time.Second), cnt, len(q.BlockRules))
			for _, name := range q.BlockRules {
				args = append(args, name)
			}
			args = append(args, len(q.Values))
			for k, v := range q.Values {
				args = append(args, k, v)
			}
			args = append(args, len(q.Limits))
			for _, l := range q.Limits {
				w := l.Limit.Window
				if w < time.Second || w%time.Second != 0 || w > rules.MaxWindow {
					return nil, fmt.Errorf("%s %s: window %s is not a whole number of seconds in [1s, %s]", op, Field(q.Subject), w, rules.FormatWindow(rules.MaxWindow))
				}
				args = append(args, l.Limit.Count, int64(w/time.Second), flag(l.Block), l.Distinct)
			}
			args = append(args, len(q.Buckets))
			for _, b := range q.Buckets {
				args = append(args, b.Rule, b.Bucket.Interval().Microseconds(), b.Bucket.Burst, flag(b.Block))
			}
		}
	}
	return args, nil
}

func parseStates(op string, qs []EvalQuery, v any) ([]EvalState, error) {
	rows, ok := v.([]any)
	if !ok || len(rows) != len(qs) {
		return nil, fmt.Errorf("%s: %d answers for %d subjects", op, len(rows), len(qs))
	}
	out := make([]EvalState, len(qs))
	for i, x := range rows {
		row, ok := x.([]any)
		nl, nb := len(qs[i].Limits), len(qs[i].Buckets)
		if !ok || len(row) != 2+2*nl+2*nb {
			return nil, fmt.Errorf("%s %s: bad reply %v", op, Field(qs[i].Subject), x)
		}
		if js, ok := row[0].(string); ok {
			d, err := ParseDeny([]byte(js))
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", op, Field(qs[i].Subject), err)
			}
			out[i].Deny = d
		}
		if js, ok := row[1+2*nl+2*nb].(string); ok {
			b, err := ParseBan([]byte(js))
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", op, Field(qs[i].Subject), err)
			}
			out[i].Ban = b
		}
		out[i].Sums = make([]int64, nl)
		out[i].Until = make([]time.Time, nl)
		for k := 0; k < nl; k++ {
			sum, ok1 := row[1+2*k].(int64)
			u, ok2 := row[2+2*k].(int64)
			if !ok1 || !ok2 {
				return nil, errors.New(op + ": non-integer sum or until in reply")
			}
			out[i].Sums[k] = sum
			if u > 0 {
				out[i].Until[k] = time.Unix(u, 0).UTC()
			}
		}
		for k := 0; k < nb; k++ {
			tat, ok1 := row[1+2*nl+2*k].(int64)
			u, ok2 := row[2+2*nl+2*k].(int64)
			if !ok1 || !ok2 {
				return nil, errors.New(op + ": non-integer bucket time in reply")
			}
			var be BucketEval
			if tat > 0 {
				be.TAT = time.UnixMicro(tat).UTC()
			}
			if u > 0 {
				be.Until = time.UnixMicro(u).UTC()
			}
			out[i].Buckets = append(out[i].Buckets, be)
		}
	}
	return out, nil
}

// Query asks for a subject's deny record and the sums of some windows.
type Query struct {
	Subject Subject
	Windows []time.Duration // whole seconds, at most rules.MaxWindow
}

// State answers a Query.
type State struct {
	Deny *Deny   // nil when the subject has no deny record
	Sums []int64 // events in each window ending with now's second, in Query order
}

// Check answers queries: each subject's deny record and the event count of
// each requested window at now, one read-only script run per slot. Window
// sums are exact to the second for windows no longer than the subject's
// longest rule window (see docs/redis.md). It is the plain reader for tools
// and tests; the limiter uses Evaluate.
func (s *Store) Check(ctx context.Context, now time.Time, qs []Query) ([]State, error) {
	groups, err := s.bySlot(len(qs), func(i int) Subject { return qs[i].Subject })
	if err != nil {
		return nil, err
	}
	out := make([]State, len(qs))
	for part, idx := range groups {
		args := []any{s.keys.Slot(part), now.UnixMilli(), len(idx)}
		for _, i := range idx {
			q := qs[i]
			args = append(args, Field(q.Subject), len(q.Windows))
			for _, w := range q.Windows {
				if w < time.Second || w%time.Second != 0 || w > rules.MaxWindow {
					return nil, fmt.Errorf("check %s: window %s is not a whole number of seconds in [1s, %s]", Field(q.Subject), w, rules.FormatWindow(rules.MaxWindow))
				}
				args = append(args, int64(w/time.Second))
			}
		}
		start := time.Now()
		v, err := checkScript.RunRO(ctx, s.rdb, []string{s.keys.State(part)}, args...).Slice()
		s.observe("check", start)
		if err != nil {
			return nil, fmt.Errorf("check %d subjects partition=%d: %w", len(idx), part, err)
		}
		if len(v) != len(idx) {
			return nil, fmt.Errorf("check: %d answers for %d subjects", len(v), len(idx))
		}
		for k, x := range v {
			row, ok := x.([]any)
			if !ok || len(row) < 1 {
				return nil, fmt.Errorf("check %s: bad reply %v", Field(qs[idx[k]].Subject), x)
			}
			st := &out[idx[k]]
			if js, ok := row[0].(string); ok {
				d, err := ParseDeny([]byte(js))
				if err != nil {
					return nil, fmt.Errorf("check %s: %w", Field(qs[idx[k]].Subject), err)
				}
				st.Deny = d
			}
			st.Sums = make([]int64, 0, len(row)-1)
			for _, n := range row[1:] {
				c, _ := n.(int64)
				st.Sums = append(st.Sums, c)
			}
		}
	}
	return out, nil
}
