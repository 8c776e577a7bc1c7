package live

import _ "embed"

// applyBody applies one batch of one partition: the offset check, every
// increment, the evaluation of the subjects the caller asks for, their
// deny records and state, the change entry and the new offset, in one
// script run in the partition's slot.
//
//	KEYS: offset key
//	ARGV: slot, first, last, now_ms, slack, expect, maxlog, keep_ms, gseq,
//	      nrules, {name, message}*nrules,
//	      nprofiles, {maxw, nlimits, {rule, count, w, shadow, distinct kind}*nlimits,
//	                  nbuckets, {rule, interval_us, burst, shadow, rate}*nbuckets}*nprofiles,
//	      nwrites, {key, field, n, ttl}*nwrites, partial,
//	      nsubjects, {field, profile, eval_sec, plan,
//	                  nseen, {distinct kind, value, sec}*nseen, nbev, {us, n}*nbev,
//	                  verdict}*nsubjects
//
// The writes are the batch's bucket increments, one hash field each, added
// up and keyed by the caller (window.Keys.SubjectPrefix, BucketKey); a hash
// an increment creates expires ttl seconds later. They cost the script one call each and nothing
// else, which is why they travel apart from the subjects: partial is 1 when
// the caller left out the subjects that have nothing but increments (no
// plan, verdict, distinct value or bucket event). When the script must
// evaluate every subject (the stored offset is not expect) and the list is
// partial, it returns {STALE, next} and writes nothing, as for stale verdicts.
//
// verdict is 0, or 1 followed by what the caller found evaluating the
// subject's window limits itself, from its copy of the buckets (mirror.go):
// nbest, {kind (0 deny, 1 shadow), limit, count, until_ms, eval_sec}*nbest,
// state JSON (” for none), its expiry second. The script then
// evaluates nothing of the subject and writes what the verdict says. Such a
// copy holds only while the caller is the partition's only writer: when the
// stored offset is not expect, or the slot's change sequence not gseq (an
// operator acted), the run returns {STALE, next} and writes nothing.
//
// Distinct limits count the values in the subject's distinct set of their
// kind (a sorted set value -> the last second it was seen); buckets keep
// the subject's theoretical arrival time per rule (GCRA, microseconds),
// advanced by every event in arrival order.
//
// expect is the offset the caller last stored for the partition (-2 when it
// does not know): when the stored offset differs, another owner moved the
// partition and every subject is evaluated, whatever the plans say.
//
// plan says which of the subject's limits (windows, then buckets) to
// evaluate: empty for none, "*" for all, else one '0' or '1' per limit.
//
// Each evaluated limit is evaluated at eval_sec (max of now and its latest
// event) and, when that lies ahead of now, at now too. Per limit: the count;
// when the count reaches half the limit (near), the limit enters the
// subject's state with, when one more event would go over, the second it
// would fit again; when the count is over the limit, a deny (or shadow)
// record, the exceeded limit with the latest until winning.
//
// After the subjects: horizon (seconds, 0 when dedup is off), nids, id*: the
// ids of the events counted, recorded in the slot's @ids set.
//
// keep_ms keeps deny and shadow records that long past their until (0: they
// expire exactly at until). The script itself treats a record whose until
// has passed as none; replays on event time keep them so that Redis's wall
// clock, which runs at another pace than theirs, never drops one early.
//
// Returns {DEDUP_RACED, next} when one of the ids was counted since the caller looked
// (it looks again), or {APPLIED, previous next offset or -1, all (1 when every subject was
// evaluated), {subject, limit, count, until_ms, shadow, eval_sec}* of NEW
// decisions, {subject, headroom per limit and bucket}* of subjects it evaluated,
// change seq or 0, {subject, limit, count, until_ms, shadow, eval_sec}* of
// records extended (written over a live record of the same rule and window:
// no new decision), the slot's change sequence after the run}
// when applied, {HELD, next} when the batch is already held, {TRIM, next} when only
// its tail is new (the caller trims and retries), {REWIND, next} when the batch
// starts after the stored offset (the slot lost writes it had acknowledged:
// nothing is written, the caller reads the partition again from next), {STALE,
// next} when the caller's verdicts are stale (nothing written). A
// limit's headroom is the fewest events that would bring it to its near
// threshold (<= 0 when near), NOEVAL for one the plan left out.
//
//go:embed apply.lua
var applyBody string
