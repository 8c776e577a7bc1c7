package history

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/migrations"
)

// Storage is how history stores the subjects of a kind (the rules file's
// kinds: {K: {history: raw|hash|drop}}, docs/history.md "What is stored
// where, and for how long").
type Storage uint8

const (
	// StoreRaw stores subjects as given.
	StoreRaw Storage = iota
	// StoreHash stores the keyed hash of each subject (Hasher).
	StoreHash
	// StoreDrop writes none of the kind's events to history.
	StoreDrop
)

// ParseStorage reads raw, hash or drop.
func ParseStorage(s string) (Storage, error) {
	switch s {
	case "", "raw":
		return StoreRaw, nil
	case "hash":
		return StoreHash, nil
	case "drop":
		return StoreDrop, nil
	}
	return 0, fmt.Errorf("history storage %q: want raw, hash or drop", s)
}

// HashPrefix starts a subject stored hashed: "~h:" and the unpadded
// base64url of the first 16 bytes of HMAC-SHA256(key, subject), 25 bytes
// in all. Distinct from event.DigestPrefix ("~sha256:"), the unkeyed digest
// of a subject too long or unprintable to be one.
const HashPrefix = "~h:"

const hashLen = len(HashPrefix) + 22

// MinKeyLen is the shortest key a Hasher takes: 128 bits.
const MinKeyLen = 16

// Hasher computes the keyed hashes history stores for subjects of a kind
// stored hashed. Whoever holds the key can find a subject's rows (queries,
// erase); nobody can read a subject from its hash, nor test a guess
// without the key.
type Hasher struct {
	key []byte
	// visitorKey keys the visitor sketches' hashes: derived from key, so
	// that a visitor's hash is not the first bytes of the same value's
	// subject hash (an IP visiting a link would be linked to its hashed
	// rows of kind ip).
	visitorKey []byte
}

// NewHasher returns a Hasher with key (at least MinKeyLen bytes; the
// content of --history-key-file, e.g. `openssl rand -base64 32`).
func NewHasher(key []byte) (*Hasher, error) {
	if len(key) < MinKeyLen {
		return nil, fmt.Errorf("history key of %d bytes: want at least %d (e.g. openssl rand -base64 32)", len(key), MinKeyLen)
	}
	mac := hmac.New(sha256.New, key)
	_, _ = mac.Write([]byte("floodgate history visitors"))
	return &Hasher{key: slices.Clone(key), visitorKey: mac.Sum(nil)}, nil
}

// visitor returns the keyed hash standing for value in the visitor
// sketches: the first 8 bytes of HMAC-SHA256 under the visitor key, as
// PostgreSQL's bigint. Uniform like xxhash64 (HyperLogLog's error bound
// holds), but nobody without the key can test a guess: unkeyed, the
// hashes of every IPv4 address are 2^32 computations away.
func (h *Hasher) visitor(mac hash.Hash, value string, buf []byte) int64 {
	mac.Reset()
	buf = append(buf[:0], value...)
	_, _ = mac.Write(buf)
	return int64(binary.BigEndian.Uint64(mac.Sum(buf[:0])))
}

// Subject returns the stored form of subject: its hash, or subject itself
// when it already has a hash's form (an operator may name a subject by the
// hash a query showed). The subject is made canonical first
// (event.CanonicalSubject), as the sink receives it.
func (h *Hasher) Subject(subject string) string {
	return h.sum(hmac.New(sha256.New, h.key), event.CanonicalSubject(subject), nil)
}

// sum hashes s with mac (reset first), appending to buf when it is big
// enough.
func (h *Hasher) sum(mac hash.Hash, s string, buf []byte) string {
	if IsHashed(s) {
		return s
	}
	mac.Reset()
	_, _ = mac.Write([]byte(s))
	var sum [sha256.Size]byte
	out := append(buf[:0], HashPrefix...)
	out = base64.RawURLEncoding.AppendEncode(out, mac.Sum(sum[:0])[:16])
	return string(out)
}

// IsHashed reports whether s has the form of a hashed subject.
func IsHashed(s string) bool {
	if len(s) != hashLen || !strings.HasPrefix(s, HashPrefix) {
		return false
	}
	for i := len(HashPrefix); i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Normalizer gives a subject of a kind the form it is counted in, the
// rules file's normalization (rules.Set.Normalize: an e-mail trimmed and
// lowercased, an IP address in canonical form; IPv6 addresses are kept
// whole, not cut to their prefix). It must be idempotent.
type Normalizer interface {
	Normalize(kind, subject string) string
}

// normalize is n's form of subject, subject itself without n or when it
// is a stored hash (which names a subject already normalized).
func normalize(n Normalizer, kind, subject string) string {
	if n == nil || IsHashed(subject) {
		return subject
	}
	return n.Normalize(kind, subject)
}

// Privacy is the subject policy of the history sink: the form each kind's
// subjects are stored in, normalized, then raw, hashed or dropped, and,
// when it has a key, the key of the visitor sketches' hashes. A nil
// *Privacy stores every subject raw, as the event carries it, and hashes
// visitors unkeyed.
type Privacy struct {
	kinds  map[string]Storage
	hasher *Hasher
	norm   Normalizer
}

// NewPrivacy returns the policy storing each kind of kinds as said (the
// others raw), every subject and visitor value normalized by norm first
// (nil: as the event carries it). A kind stored hashed needs hasher:
// without one it is an error naming the kinds, never a silent raw write.
// With a hasher, the visitor sketches hold keyed hashes (docs/history.md,
// "Unique visitors").
func NewPrivacy(kinds map[string]Storage, hasher *Hasher, norm Normalizer) (*Privacy, error) {
	var hashed []string
	for k, s := range kinds {
		if s > StoreDrop {
			return nil, fmt.Errorf("history policy: kind %s: unknown storage %d", k, s)
		}
		if s == StoreHash {
			hashed = append(hashed, k)
		}
	}
	if len(hashed) > 0 && hasher == nil {
		slices.Sort(hashed)
		return nil, fmt.Errorf("history policy: kinds %s are stored hashed (history: hash) but no key is given (--history-key-file)", strings.Join(hashed, ", "))
	}
	return &Privacy{kinds: maps.Clone(kinds), hasher: hasher, norm: norm}, nil
}

// Storage returns how kind's subjects are stored.
func (p *Privacy) Storage(kind string) Storage {
	if p == nil {
		return StoreRaw
	}
	return p.kinds[kind]
}

// subjects maps a batch's subjects to their stored form, and its visitors
// to their hashes. Each distinct subject of a hashed kind, and each
// distinct visitor, is hashed once per batch, with one MAC each. A nil
// *subjects stores every subject as given.
type subjects struct {
	p     *Privacy
	mac   hash.Hash
	buf   []byte
	cache map[string]string // subject -> hash (the hash ignores the kind)

	visitorMAC hash.Hash
	visitorBuf []byte           // the value, then its MAC: no allocation per value
	visitors   map[string]int64 // value -> keyed hash
}

func (p *Privacy) batch() *subjects {
	if p == nil || (len(p.kinds) == 0 && p.hasher == nil && p.norm == nil) {
		return nil
	}
	s := &subjects{p: p}
	if p.hasher != nil {
		s.mac = hmac.New(sha256.New, p.hasher.key)
		s.buf = make([]byte, 0, hashLen)
		s.cache = map[string]string{}
	}
	return s
}

// visitor returns the hash standing for a visitor's value in the sketches:
// keyed when the policy has a key, else xxhash64 (visitorHash).
func (s *subjects) visitor(value string) int64 {
	if s == nil || s.p.hasher == nil {
		return visitorHash(value)
	}
	if h, ok := s.visitors[value]; ok {
		return h
	}
	if s.visitorMAC == nil {
		s.visitorMAC = hmac.New(sha256.New, s.p.hasher.visitorKey)
		s.visitorBuf = make([]byte, 0, 64)
		s.visitors = map[string]int64{}
	}
	h := s.p.hasher.visitor(s.visitorMAC, value, s.visitorBuf)
	s.visitors[value] = h
	return h
}

// stored returns the subject as stored for kind, or false when the kind is
// not stored.
func (s *subjects) stored(kind, subject string) (string, bool) {
	if s == nil {
		return subject, true
	}
	subject = normalize(s.p.norm, kind, subject)
	switch s.p.kinds[kind] {
	case StoreDrop:
		return "", false
	case StoreHash:
		h, ok := s.cache[subject]
		if !ok {
			h = s.p.hasher.sum(s.mac, subject, s.buf)
			s.cache[subject] = h
		}
		return h, true
	}
	return subject, true
}

// visitorValue returns an attr value of kind as counted: normalized.
func (s *subjects) visitorValue(kind, value string) string {
	if s == nil {
		return value
	}
	return normalize(s.p.norm, kind, value)
}

// storedForms returns the forms a subject of kind may be stored under: as
// given and normalized by n (kind empty or n nil: as given), each raw and
// hashed when a hasher is known. All are looked up, so that a query or an
// erase finds the rows written before and after a kind's policy or
// normalization changed (rows written before keep the spelling their
// events carried).
func storedForms(h *Hasher, n Normalizer, kind, subject string) []string {
	subject = event.CanonicalSubject(subject)
	spellings := []string{subject}
	if kind != "" && subject != "" {
		if c := event.CanonicalSubject(normalize(n, kind, subject)); c != subject {
			spellings = append(spellings, c)
		}
	}
	out := slices.Clone(spellings)
	if h != nil && subject != "" {
		for _, s := range spellings {
			if hs := h.Subject(s); !slices.Contains(out, hs) {
				out = append(out, hs)
			}
		}
	}
	return out
}

// SubjectTable is a table holding rows by subject.
type SubjectTable struct {
	Name string // unqualified, in migrations.Schema
	// Width is a bucket table's bucket width; 0 for the totals and the
	// late events (rows with first_at and last_at).
	Width time.Duration
}

// SubjectTables are the tables that hold rows by subject, finest bucket
// tier first: every step's bucket table (whether or not the ladder uses
// it), the late events and the totals (last: deletions from the others
// are taken off the totals).
func SubjectTables() []SubjectTable {
	out := make([]SubjectTable, 0, len(steps)+2)
	for _, s := range steps {
		out = append(out, SubjectTable{Name: s.Table(), Width: s.Width})
	}
	return append(out, SubjectTable{Name: "history_late"}, SubjectTable{Name: "history_totals"})
}

// Erased is what Erase removed from one table.
type Erased struct {
	Table string `json:"table"`
	Rows  int64  `json:"rows"`
	// Events is the sum of n of the rows removed.
	Events int64 `json:"events"`
}

// Erase deletes every row of subject (of kind; of action, unless empty)
// from every table holding subjects (SubjectTables), under each form it
// may be stored in (storedForms: as given and normalized by n, raw and
// hashed when h is given), in one transaction
// holding the routing lock: no roll moves rows past it and no sink writes
// meanwhile. It returns the rows removed per table; run again, it removes
// nothing. Events still in Kafka that history has not read yet are written
// after it.
func Erase(ctx context.Context, db DB, h *Hasher, n Normalizer, kind, subject, action string) (out []Erased, err error) {
	if kind == "" || subject == "" {
		return nil, errors.New("history erase: a kind and a subject are required")
	}
	forms := storedForms(h, n, kind, subject)
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("history erase %s: begin: %w", kind, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if err := LockRoute(ctx, tx); err != nil {
		return nil, fmt.Errorf("history erase %s: %w", kind, err)
	}
	for _, st := range SubjectTables() {
		t := st.Name
		e := Erased{Table: t}
		err := tx.QueryRow(ctx, `WITH d AS (DELETE FROM `+qualify(t)+` WHERE kind = $1 AND subject = ANY($2) AND ($3 = '' OR action = $3) RETURNING n)
SELECT count(*), coalesce(sum(n), 0)::bigint FROM d`, kind, forms, action).Scan(&e.Rows, &e.Events)
		if err != nil {
			return nil, fmt.Errorf("history erase %s from %s.%s: %w", kind, migrations.Schema, t, err)
		}
		out = append(out, e)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("history erase %s: commit: %w", kind, err)
	}
	return out, nil
}
