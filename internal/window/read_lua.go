package window

import _ "embed"

// evalBody evaluates the requests of one slot in order and, for those that
// take, counts n for the subjects marked count when nothing blocks: all in
// one run, so concurrent takes can never both pass the last slot, and a
// later take of the run sees the counts of the earlier ones.
//
// Callers pass their own clock. Scripts run in arrival order, not clock
// order, so a take stamped second T may run after one stamped T+1: every
// window sum therefore also counts the events of the next ahead seconds,
// which keeps takes exact for clock differences up to Ahead (and for
// goroutines of one process racing across a second boundary).
//
//	KEYS: the slot's state key (routing only)
//	ARGV: slot, now_ms, slack, ahead, nrequests,
//	      {n, take, nsubjects,
//	       {field, maxw, count, nblock, rule*nblock, nvalues, {distinct kind, value}*nvalues,
//	        nlimits, {limit, w, block, distinct kind or ''}*nlimits,
//	        nbuckets, {rule, interval_us, burst, block}*nbuckets}*nsubjects}*nrequests
//
// Returns {{taken, {deny JSON or false, {sum, until_sec}*nlimits,
// {tat_us, until_us}*nbuckets, ban JSON or false}*nsubjects}*nrequests}. A
// distinct limit counts the subject's distinct set; a bucket (GCRA) admits n
// when its arrival time advanced by n intervals stays within the burst. A
// subject's ban in force (banLib) blocks a take whatever its counts.
// A Redis error (a foreign key of another type) undoes the run's counts and
// fails it whole.
//
//go:embed eval.lua
var evalBody string

// refundBody takes back n events counted at now_ms for subjects of one slot:
// the reservation of a strict take that another slot refused. A bucket's
// arrival time moves back by n intervals (a time before now is a full
// bucket either way). Distinct values a take recorded stay recorded. With
// the take stream entry that holds the take's events, it deletes the entry
// too, unless the relay's cursor has reached it (published, or in a
// request noted): then it refunds nothing and replies KEPT, so that counts
// and history agree.
//
//	KEYS: the slot's state key (routing only), take stream, relay cursor,
//	      refunds counter (Keys.TakesRefunds: counts the entries deleted)
//	ARGV: slot, now_ms, slack, n, entry ('' for none), nsubjects,
//	      {field, maxw, nbuckets, {rule, interval_us}*nbuckets}*nsubjects
//
//go:embed refund.lua
var refundBody string

// checkBody reads, for each queried subject of one slot, its deny record
// and the sum of each requested window.
//
//	KEYS: the slot's state key (routing only)
//	ARGV: slot, now_ms, nqueries, {field, nwindows, w*nwindows}*nqueries
//
// Returns {{deny JSON or false, sum*nwindows}*nqueries}.
//
//go:embed check.lua
var checkBody string
