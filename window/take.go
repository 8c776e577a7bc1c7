package window

// This file is the limiter's part of the window package (issue 4): Evaluate,
// a read-only lookup that also computes retry times, and Take, the strict
// mode's atomic check-and-count over the same bucket keys the aggregator
// writes. Both are one script run (one round trip) for all subjects.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"floodgate/rules"
)

// EvalLimit is one limit of one subject in an Evaluate or Take call.
type EvalLimit struct {
	Limit rules.Limit
	// Block makes the limit stop a Take when the take would go over it
	// (enforced rules). Non-blocking limits (shadow rules, allowlisted
	// subjects) are only reported.
	Block bool
}

// EvalQuery asks for one subject's deny record and the state of its limits.
type EvalQuery struct {
	Subject Subject
	// MaxWindow is the longest window of all rules of the subject's action
	// and kind (rules.Set.MaxWindowFor): Take counts at every bucket level
	// it needs, exactly as the aggregator would. Required for Take.
	MaxWindow time.Duration
	Limits    []EvalLimit
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
	// Sums are the events in each limit's window ending with now's second,
	// before any take, in Limits order.
	Sums []int64
	// Until, per limit, is zero when sum+n fits the limit; otherwise the
	// first whole second at which it would fit (no more events assumed).
	// Evaluate uses n = 1: "may one more happen?".
	Until []time.Time
}

// evalBody evaluates subjects and, when take is 1, counts n for the subjects
// marked count if nothing blocks: all in one run, so concurrent takes can
// never both pass the last slot.
//
// Callers pass their own clock. Scripts run in arrival order, not clock
// order, so a take stamped second T may run after one stamped T+1: every
// window sum therefore also counts the events of the next Ahead seconds,
// which keeps takes exact for clock differences up to Ahead (and for
// goroutines of one process racing across a second boundary).
//
//	ARGV: prefix, now_ms, n, take, slack, nsubjects, ahead,
//	      {tag, maxw, count, nblock, rule*nblock, nlimits, {limit, w, block}*nlimits}*nsubjects
//
// Returns {taken, {deny JSON or false, {sum, until_sec}*nlimits}*nsubjects}.
const evalBody = `
-- events in seconds now+1 .. now+ahead (second buckets always exist): what
-- callers whose clocks run ahead of this one have already counted
local function fg_ahead(c, p, tag, now, ahead)
  if ahead < 1 then return 0 end
  local segs = {}
  fg_segs(segs, 's', 60, now + 1, now + ahead)
  local s = 0
  for i = 1, #segs do s = s + fg_seg_sum(c, p, tag, segs[i]) end
  return s
end

local a = ARGV
local p = a[1]
local now_ms = tonumber(a[2])
local now = math.floor(now_ms / 1000)
local n, take, slack = tonumber(a[3]), a[4] == '1', tonumber(a[5])
local nsub = tonumber(a[6])
local ahead = tonumber(a[7])
local i = 8
local out = {}
local blocked = false
local subs = {}
for s = 1, nsub do
  local tag, maxw, count = a[i], tonumber(a[i + 1]), a[i + 2] == '1'
  local nb = tonumber(a[i + 3]); i = i + 4
  local block = {}
  for b = 1, nb do block[a[i]] = true; i = i + 1 end
  local c = {}
  local early = fg_ahead(c, p, tag, now, ahead)
  local deny = redis.call('GET', p .. ':' .. tag .. ':deny')
  local row = {deny}
  if deny and take and nb > 0 then
    local ok, d = pcall(cjson.decode, deny)
    if ok and type(d) == 'table' and block[d['rule']] then blocked = true end
  end
  local nl = tonumber(a[i]); i = i + 1
  for l = 1, nl do
    local lim, w, blk = tonumber(a[i]), tonumber(a[i + 1]), a[i + 2] == '1'
    i = i + 3
    local sum = fg_sum(c, p, tag, now, w) + early
    local u = 0
    if sum + n > lim then
      u = fg_until(c, p, tag, now, w, sum + n - lim, ahead)
      if blk then blocked = true end
    end
    row[#row + 1] = sum
    row[#row + 1] = u
  end
  out[s] = row
  subs[s] = {tag, maxw, count}
end
local taken = 0
if take and not blocked then
  -- a subject queried twice is counted once: every row checked sum + n,
  -- so counting n per row would overshoot
  local done = {}
  for s = 1, nsub do
    local sub = subs[s]
    if sub[3] and not done[sub[1]] then
      done[sub[1]] = true
      fg_incr(p, sub[1], {[now] = n}, sub[2], now, slack)
    end
  end
  taken = 1
end
return {taken, out}
`

// Ahead is how far past now Evaluate and Take count events (see evalBody):
// the clock difference between limiters that strict mode tolerates.
const Ahead = 5 * time.Second

// The scripts are immutable; redis.Script only caches their SHA.
var (
	evalScript = redis.NewScript("#!lua flags=no-writes\n" + LuaLib + evalBody)
	takeScript = redis.NewScript("#!lua\n" + LuaLib + evalBody)
)

// Evaluate answers queries in one round trip: each subject's deny record,
// the sum of each limit's window (plus events up to Ahead past now) and, for limits that one more event would
// exceed, when it would fit again. It writes nothing.
func (s *Store) Evaluate(ctx context.Context, now time.Time, qs []EvalQuery) ([]EvalState, error) {
	_, st, err := s.run(ctx, evalScript, "evaluate", now, qs, 1, false)
	return st, err
}

// Take checks and counts atomically: if no blocking limit of any subject
// would go over with n more events and no blocking deny record exists, n is
// added at now to the buckets of every subject marked Count (at the levels
// of its MaxWindow, as the aggregator adds events), and taken is true;
// otherwise nothing is written. States hold the sums before the take. A
// subject in several queries is counted once (each query is checked for n).
//
// The caller publishes the event with the event.HeaderCounted header so the
// aggregator records its history without counting it again.
func (s *Store) Take(ctx context.Context, now time.Time, qs []EvalQuery, n int64) (taken bool, st []EvalState, err error) {
	if n < 1 {
		return false, nil, fmt.Errorf("take: n = %d, want >= 1", n)
	}
	for _, q := range qs {
		if q.Count && (q.MaxWindow < time.Second || q.MaxWindow > rules.MaxWindow) {
			return false, nil, fmt.Errorf("take %s: max window %s is not in [1s, %s]", Tag(q.Subject), q.MaxWindow, rules.FormatWindow(rules.MaxWindow))
		}
	}
	return s.run(ctx, takeScript, "take", now, qs, n, true)
}

func (s *Store) run(ctx context.Context, script *redis.Script, op string, now time.Time, qs []EvalQuery, n int64, take bool) (bool, []EvalState, error) {
	args := make([]any, 0, 6+8*len(qs))
	tk := 0
	if take {
		tk = 1
	}
	args = append(args, s.prefix, now.UnixMilli(), n, tk, int64(s.slack/time.Second), len(qs), int64(Ahead/time.Second))
	for _, q := range qs {
		cnt := 0
		if q.Count {
			cnt = 1
		}
		args = append(args, Tag(q.Subject), int64(q.MaxWindow/time.Second), cnt, len(q.BlockRules))
		for _, r := range q.BlockRules {
			args = append(args, r)
		}
		args = append(args, len(q.Limits))
		for _, l := range q.Limits {
			w := l.Limit.Window
			if w < time.Second || w%time.Second != 0 || w > rules.MaxWindow {
				return false, nil, fmt.Errorf("%s %s: window %s is not a whole number of seconds in [1s, %s]", op, Tag(q.Subject), w, rules.FormatWindow(rules.MaxWindow))
			}
			blk := 0
			if l.Block {
				blk = 1
			}
			args = append(args, l.Limit.Count, int64(w/time.Second), blk)
		}
	}
	start := time.Now()
	v, err := script.Run(ctx, s.rdb, nil, args...).Slice()
	s.observe(op, start)
	if err != nil {
		return false, nil, fmt.Errorf("%s %d subjects: %w", op, len(qs), err)
	}
	if len(v) != 2 {
		return false, nil, fmt.Errorf("%s: bad reply %v", op, v)
	}
	taken, _ := v[0].(int64)
	rows, ok := v[1].([]any)
	if !ok || len(rows) != len(qs) {
		return false, nil, fmt.Errorf("%s: %d answers for %d subjects", op, len(rows), len(qs))
	}
	out := make([]EvalState, len(qs))
	for i, x := range rows {
		row, ok := x.([]any)
		nl := len(qs[i].Limits)
		if !ok || len(row) != 1+2*nl {
			return false, nil, fmt.Errorf("%s %s: bad reply %v", op, Tag(qs[i].Subject), x)
		}
		if js, ok := row[0].(string); ok {
			d, err := ParseDeny([]byte(js))
			if err != nil {
				return false, nil, fmt.Errorf("%s %s: %w", op, Tag(qs[i].Subject), err)
			}
			out[i].Deny = d
		}
		out[i].Sums = make([]int64, nl)
		out[i].Until = make([]time.Time, nl)
		for k := 0; k < nl; k++ {
			sum, ok1 := row[1+2*k].(int64)
			u, ok2 := row[2+2*k].(int64)
			if !ok1 || !ok2 {
				return false, nil, errors.New(op + ": non-integer sum or until in reply")
			}
			out[i].Sums[k] = sum
			if u > 0 {
				out[i].Until[k] = time.Unix(u, 0).UTC()
			}
		}
	}
	return taken == 1, out, nil
}
