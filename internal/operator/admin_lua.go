package operator

import _ "embed"

// adminBody runs one operator action on one subject in its partition's
// slot: ban, unban or reset. Redis runs it between the aggregator's apply
// scripts of the same slot, so a batch is counted wholly before it or
// wholly after it: never half reset.
//
//	KEYS: the slot's state key (routing only)
//	ARGV: slot, field, op, now_ms, maxlog, rule, ban_json, audit_json,
//	      maxw, slack, ahead, offkey, ndistinct, distinct kind*ndistinct
//
// ban writes ban_json to the slot's ban hash. unban deletes the subject's
// deny and shadow records (only those of rule when rule is not empty), its
// ban (only when rule is empty: a ban belongs to no rule) and its decision
// state (with rule: only that rule's limits and buckets of it). reset does
// what unban does for every rule and deletes the subject's counters: its
// bucket hashes at every level for the seconds [now-maxw-slack-period,
// now+ahead] (whatever a window of maxw can still read), its token buckets'
// arrival times and its distinct sets of the given attr kinds. offkey, when
// not empty, is a consumer
// group's offset key: its value (the next offset the group counts) is the
// reset's boundary, recorded in the entry as o.
//
// Every action appends one change entry with the next sequence number
// (as the apply script does), whatever it found, so that every limiter
// applies it and the relay publishes its audit record: audit_json (with
// "f") gains "cleared" and, for reset, "deleted_keys" and "offset" here.
//
// Every read comes first: a foreign key of another type under the prefix
// fails the run before anything is written.
//
// Returns {seq, entry id, {cleared...}, buckets, offset or -1}.
//
//go:embed admin.lua
var adminBody string
