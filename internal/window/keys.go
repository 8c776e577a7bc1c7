package window

import (
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/internal/topics"
)

// Subject is one counted thing: a feature value (Subject) of a feature Kind
// for one Action. Each subject has its own buckets and deny record.
type Subject struct {
	Action, Kind, Subject string
}

// Field names a subject inside its partition's slot, "action:kind:subject":
// the middle of its keys and its field in the slot's state hash. Action
// and kind cannot contain ':', so a field names exactly one subject.
func Field(sub Subject) string { return sub.Action + ":" + sub.Kind + ":" + sub.Subject }

// ParseField is the inverse of Field.
func ParseField(f string) (Subject, bool) {
	a, rest, ok1 := strings.Cut(f, ":")
	k, s, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 || a == "" || k == "" || s == "" {
		return Subject{}, false
	}
	return Subject{Action: a, Kind: k, Subject: s}, true
}

// Partition returns the Kafka partition that owns sub among partitions: the
// partition its events are produced to (murmur2 of "kind:subject", Java's
// and floodgate's producer's default), so the aggregator that counts a
// subject and the limiter that takes for it agree on its slot.
func Partition(sub Subject, partitions int) int {
	return topics.Partition([]byte(sub.Kind+":"+sub.Subject), partitions)
}

// Slot returns the hash tag every live key of a partition starts with,
// "{prefix:p<partition>}". On Redis Cluster a partition's counters, deny
// records, state, change log and offset share one slot, so one script
// applies a batch atomically there as on a single Redis, and a primary that
// loses recent writes in a failover loses the offset with them.
func Slot(prefix string, partition int) string {
	return "{" + prefix + ":p" + strconv.Itoa(partition) + "}"
}

// Keys of a slot that are not a subject's start with "@", which no action
// can start with, so they never collide with a subject's keys.
const (
	stateSuffix = ":@state" // hash field -> SubjectState JSON
	expSuffix   = ":@exp"   // zset field -> second its state stops saying anything
	logSuffix   = ":@log"   // stream of changes (state and decisions)
	seqSuffix   = ":@seq"   // sequence number of the last change entry
	relaySuffix = ":@relay" // stream id of the last change published to Kafka
	idsSuffix   = ":@ids"   // zset event id -> second it was counted (dedup)
	// stream of strict takes' events, for the partition owner's relay to
	// publish to the events topic (live/takerelay.go)
	takesSuffix = ":@takes"
	// "@<owner> <last entry> [<pending entry> <offset> <since ms>]": the
	// take relay's cursor (live/takerelay.go, docs/redis.md)
	takesRelaySuffix = ":@takes-relay"
	// entries refunds deleted from the take stream, counted: a relay notes
	// a request only if none was deleted since it read the entries
	takesRefundsSuffix = ":@takes-refunds"
	// the peer address of the aggregator answering the partition's owner
	// takes (takeroute), expiring unless refreshed
	takesOwnerSuffix = ":@takes-owner"
	// event id -> "<since ms> <entry>": take events Redis lost that the
	// owner leaving the partition hands over to the next (live/ownerloss.go)
	takesHandOverSuffix = ":@takes-handover"
	// hash field -> the decisions offset an operator's reset stood at: a
	// write-back owner replaying from its checkpoint skips the subject's
	// events before it (live/writeback.go)
	resetsSuffix = ":@resets"
)

// Keys locates the live keys of one prefix. docs/redis.md lists them.
type Keys struct{ Prefix string }

// Slot returns the hash tag of a partition.
func (k Keys) Slot(partition int) string { return Slot(k.Prefix, partition) }

// Offset returns the key holding a partition's next offset for a consumer
// group.
func (k Keys) Offset(group, topic string, partition int) string {
	return k.Slot(partition) + ":@off:" + group + ":" + topic
}

// Checkpoint returns the key holding a partition's checkpoint offset C for a
// consumer group: a write-back aggregator (live/writeback.go) has written
// the bucket counts of every event before it. The Offset key then holds the
// decisions offset D >= C: deny records and states are written for every
// event before it.
func (k Keys) Checkpoint(group, topic string, partition int) string {
	return k.Slot(partition) + ":@ckpt:" + group + ":" + topic
}

// CheckpointRules returns the key holding the rules text a write-back owner
// counted under since its checkpoint C: the next owner replays C..D under
// them, whatever rules it runs itself.
func (k Keys) CheckpointRules(group, topic string, partition int) string {
	return k.Slot(partition) + ":@ckrules:" + group + ":" + topic
}

// CheckpointMarks returns the key of the marks a write-back checkpoint
// written in parts leaves until its last part moves C (a hash:
// '<offset>/<part>' -> JSON array of the subject fields whose increments
// run to that offset): a replay from C skips their records before it.
func (k Keys) CheckpointMarks(group, topic string, partition int) string {
	return k.Slot(partition) + ":@ckmarks:" + group + ":" + topic
}

// Recount returns the key of the offset a recount runs to (a string): the
// partition's end when Redis was found to have lost its slot. The events
// the limiter had counted before it (event.HeaderCounted) were counted in
// the slot lost, so every owner counts them again up to there.
func (k Keys) Recount(group, topic string, partition int) string {
	return k.Slot(partition) + ":@recount:" + group + ":" + topic
}

// CheckpointHeld returns the key of the verdicts a write-back owner holds
// back past its checkpoint (a string: JSON, live/carried.go): denies its
// slot shows already, extended later. A new owner writes them as it
// resumes, so that none is lost with the one before it.
func (k Keys) CheckpointHeld(group, topic string, partition int) string {
	return k.Slot(partition) + ":@ckheld:" + group + ":" + topic
}

// Resets returns the key of a partition's reset boundaries (a hash: subject
// field -> the decisions offset when an operator reset it).
func (k Keys) Resets(partition int) string { return k.Slot(partition) + resetsSuffix }

// State returns the key of a partition's state hash.
func (k Keys) State(partition int) string { return k.Slot(partition) + stateSuffix }

// Exp returns the key of a partition's state expiries: a sorted set field
// -> the second its state stops saying anything.
func (k Keys) Exp(partition int) string { return k.Slot(partition) + expSuffix }

// Log returns the key of a partition's change stream.
func (k Keys) Log(partition int) string { return k.Slot(partition) + logSuffix }

// Seq returns the key of a partition's last change sequence number.
func (k Keys) Seq(partition int) string { return k.Slot(partition) + seqSuffix }

// Relay returns the key holding the id of the last change entry of a
// partition published to the decisions topic.
func (k Keys) Relay(partition int) string { return k.Slot(partition) + relaySuffix }

// IDs returns the key of the event ids a partition counted within the
// dedup horizon.
func (k Keys) IDs(partition int) string { return k.Slot(partition) + idsSuffix }

// Takes returns the key of a partition's stream of strict takes' events
// not yet published to the events topic.
func (k Keys) Takes(partition int) string { return k.Slot(partition) + takesSuffix }

// TakesHandOver returns the key of the take events Redis lost that an
// owner leaving the partition hands over to its next owner.
func (k Keys) TakesHandOver(partition int) string { return k.Slot(partition) + takesHandOverSuffix }

// TakesRelay returns the key holding the take relay's cursor.
func (k Keys) TakesRelay(partition int) string { return k.Slot(partition) + takesRelaySuffix }

// TakesOwner returns the key of the partition's owner record: where its
// owner takes are answered (package takeroute).
func (k Keys) TakesOwner(partition int) string { return k.Slot(partition) + takesOwnerSuffix }

// TakesRefunds returns the key counting the take stream entries refunds
// deleted.
func (k Keys) TakesRefunds(partition int) string { return k.Slot(partition) + takesRefundsSuffix }

// Deny returns the key of a subject's deny record in its partition's slot.
func (k Keys) Deny(partition int, sub Subject) string {
	return k.SubjectPrefix(partition, sub) + "deny"
}

// Shadow returns the key of a subject's shadow record: like a deny record,
// but nothing denies on it.
func (k Keys) Shadow(partition int, sub Subject) string {
	return k.SubjectPrefix(partition, sub) + "shadow"
}

// Bucket returns the key of the bucket hash of a level ('s', 'm' or 'h')
// holding time t, or "" for another level.
func (k Keys) Bucket(partition int, sub Subject, level byte, t time.Time) string {
	span := LevelSpan(level)
	if span == 0 {
		return ""
	}
	return k.bucketN(partition, sub, level, floorDiv(t.Unix(), span))
}

// Levels are the bucket levels an event of a subject whose longest window
// is maxw seconds is counted at, finest first: seconds always, minutes for
// a window longer than a minute, hours for one longer than an hour (as the
// scripts' fg_incr; a window of exactly a minute or an hour reads the finer
// levels).
func Levels(maxw int64) string {
	switch {
	case maxw > 3600:
		return "smh"
	case maxw > 60:
		return "sm"
	}
	return "s"
}

// LevelSpan is how many seconds one bucket hash of a level covers: a
// minute of seconds, an hour of minutes, a day of hours (0 for no level).
func LevelSpan(level byte) int64 {
	switch level {
	case 's':
		return 60
	case 'm':
		return 3600
	case 'h':
		return 86400
	}
	return 0
}

// bucketN is the key of bucket hash n of a level: the minute, hour or day
// number (Unix seconds divided by 60, 3600, 86400).
func (k Keys) bucketN(partition int, sub Subject, level byte, n int64) string {
	return BucketKey(k.SubjectPrefix(partition, sub), level, n)
}

// SubjectPrefix starts every key of a subject; BucketKey completes it for
// one bucket hash (a batch builds a subject's prefix once for all of them).
func (k Keys) SubjectPrefix(partition int, sub Subject) string {
	return k.Slot(partition) + ":" + Field(sub) + ":"
}

func BucketKey(prefix string, level byte, n int64) string {
	return prefix + string(level) + ":" + strconv.FormatInt(n, 10)
}

// Arrivals returns the key of a subject's bucket arrival times (GCRA): a
// hash rule -> theoretical arrival time, Unix microseconds.
func (k Keys) Arrivals(partition int, sub Subject) string {
	return k.SubjectPrefix(partition, sub) + "g"
}

// Distinct returns the key of a subject's distinct values of an attr kind:
// a sorted set value -> the last second it was seen.
func (k Keys) Distinct(partition int, sub Subject, kind string) string {
	return k.SubjectPrefix(partition, sub) + "d:" + kind
}

// Pattern matches every live key of the prefix (SCAN MATCH; braces are
// not special in Redis glob patterns, the prefix's glob characters are
// escaped). It may match keys of another application sharing the Redis
// ("{prefix:p1x}" ...): whoever deletes what it matches keeps only the keys
// Owns says are the prefix's.
func (k Keys) Pattern() string { return "{" + GlobEscape(k.Prefix) + ":p[0-9]*" }

// Owns tells whether key has the shape of a live key of the prefix:
// "{prefix:p<partition>}:" followed by anything.
func (k Keys) Owns(key string) bool {
	rest, ok := strings.CutPrefix(key, "{"+k.Prefix+":p")
	if !ok {
		return false
	}
	digits, after, ok := strings.Cut(rest, "}:")
	if !ok || digits == "" || len(digits) > 9 {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return after != ""
}

// GlobEscape escapes the characters special in a Redis glob pattern
// (SCAN MATCH, KEYS), so that s matches only itself.
func GlobEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		switch c {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
