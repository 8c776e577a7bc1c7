package history

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/rules"
)

// Hashing costs per distinct subject of a batch, not per event: a batch of
// 2 000 events about 20 e-mail addresses allocates a few objects per
// address more than the same batch stored raw.
func TestSummarizeHashesPerDistinctSubject(t *testing.T) {
	h, err := NewHasher([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPrivacy(map[string]Storage{"email": StoreHash}, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	const distinct = 20
	t0 := time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)
	recs := make([]consume.Record, 2000)
	for i := range recs {
		recs[i] = consume.Record{Offset: int64(i), Event: event.Event{Action: "login_failed", Kind: "email",
			Subject: fmt.Sprintf("user%d@example.com", i%distinct), TS: t0.Add(time.Duration(i%3) * time.Second), N: 1}}
	}
	raw := testing.AllocsPerRun(20, func() { summarize(recs, nil, nil) })
	hashed := testing.AllocsPerRun(20, func() { summarize(recs, nil, p.batch()) })
	t.Logf("allocations per batch: raw %.0f, hashed %.0f", raw, hashed)
	if extra := hashed - raw; extra > 6*distinct+10 {
		t.Errorf("hashing a batch of %d events about %d subjects allocated %.0f more objects, want at most %d", len(recs), distinct, extra, 6*distinct+10)
	}
	rs := summarize(recs, nil, p.batch())
	if len(rs.subjects) != distinct || !IsHashed(rs.subjects[0]) || rs.events != int64(len(recs)) {
		t.Errorf("rows %d (subjects %v...), events %d; want %d hashed rows of %d events", len(rs.subjects), rs.subjects[:1], rs.events, distinct, len(recs))
	}
	drop, _ := NewPrivacy(map[string]Storage{"email": StoreDrop}, nil, nil)
	if rs := summarize(recs, nil, drop.batch()); len(rs.subjects) != 0 || rs.dropped != int64(len(recs)) {
		t.Errorf("drop: %d rows, %d dropped; want none written, all dropped", len(rs.subjects), rs.dropped)
	}
}

// With a history key, the visitor sketches hold keyed hashes: not the
// unkeyed xxhash anyone can compute for every IPv4 address, not the first
// bytes of the value's subject hash, different under another key; the
// same value keeps one hash, so distinct counts hold. Each distinct
// visitor of a batch is hashed once.
func TestKeyedVisitorHashes(t *testing.T) {
	h1, err := NewHasher([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	h2, err := NewHasher([]byte("fedcba9876543210fedcba9876543210"))
	if err != nil {
		t.Fatal(err)
	}
	keyed, _ := NewPrivacy(nil, h1, nil)
	other, _ := NewPrivacy(nil, h2, nil)
	vis := Visitors{"visit": "ip"}
	const distinct = 20
	t0 := time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)
	recs := make([]consume.Record, 2000)
	for i := range recs {
		recs[i] = consume.Record{Offset: int64(i), Event: event.Event{Action: "visit", Kind: "link", Subject: "abc",
			TS: t0, N: 1, Attrs: map[string]string{"ip": fmt.Sprintf("192.0.2.%d", i%distinct)}}}
	}
	unkeyed := summarize(recs, vis, nil)
	a, b := summarize(recs, vis, keyed.batch()), summarize(recs, vis, other.batch())
	if len(unkeyed.visitorHashes) != distinct || len(a.visitorHashes) != distinct || len(b.visitorHashes) != distinct {
		t.Fatalf("visitors: unkeyed %d, keyed %d, other key %d; want %d each", len(unkeyed.visitorHashes), len(a.visitorHashes), len(b.visitorHashes), distinct)
	}
	plain := map[int64]bool{}
	for i := range distinct {
		plain[visitorHash(fmt.Sprintf("192.0.2.%d", i))] = true
	}
	for i, hk := range a.visitorHashes {
		if plain[hk] || plain[b.visitorHashes[i]] || hk == b.visitorHashes[i] {
			t.Fatalf("keyed hash %d: %x (other key %x) is unkeyed or the same under both keys", i, hk, b.visitorHashes[i])
		}
		if !plain[unkeyed.visitorHashes[i]] {
			t.Fatalf("without a key, hash %x is not xxhash64 of a value", unkeyed.visitorHashes[i])
		}
	}
	if again := summarize(recs, vis, keyed.batch()); !slices.Equal(again.visitorHashes, a.visitorHashes) {
		t.Error("the same key hashed the same visitors differently")
	}
	mac := hmac.New(sha256.New, h1.key) // the subjects' hash
	mac.Write([]byte("192.0.2.1"))
	if h := h1.visitor(hmac.New(sha256.New, h1.visitorKey), "192.0.2.1", nil); h == int64(binary.BigEndian.Uint64(mac.Sum(nil))) {
		t.Error("a visitor's hash is its subject hash: the two are linkable")
	}
	raw := testing.AllocsPerRun(20, func() { summarize(recs, vis, nil) })
	hashed := testing.AllocsPerRun(20, func() { summarize(recs, vis, keyed.batch()) })
	t.Logf("allocations per batch: unkeyed %.0f, keyed %.0f", raw, hashed)
	if extra := hashed - raw; extra > 4*distinct+20 {
		t.Errorf("keyed visitors of a batch of %d events, %d visitors: %.0f more allocations, want at most %d", len(recs), distinct, extra, 4*distinct+20)
	}
}

// Normalizing costs nothing for a batch whose subjects are already normal
// (the limiter publishes them so): no allocation over the raw batch.
func TestSummarizeNormalizesWithoutAllocating(t *testing.T) {
	set, err := rules.Parse([]byte("rules: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPrivacy(nil, nil, set)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)
	recs := make([]consume.Record, 2000)
	for i := range recs {
		kind, subject := "email", fmt.Sprintf("user%d@example.com", i%20)
		if i%2 == 1 {
			kind, subject = "ip", fmt.Sprintf("192.0.2.%d", i%20)
		}
		recs[i] = consume.Record{Offset: int64(i), Event: event.Event{Action: "visit", Kind: kind, Subject: subject, TS: t0, N: 1,
			Attrs: map[string]string{"email": "a@example.com"}}}
	}
	vis := Visitors{"visit": "email"}
	raw := testing.AllocsPerRun(20, func() { summarize(recs, vis, nil) })
	normalized := testing.AllocsPerRun(20, func() { summarize(recs, vis, p.batch()) })
	if normalized > raw+1 { // the batch's *subjects
		t.Errorf("normalizing a batch of normal subjects: %.0f allocations, raw %.0f", normalized, raw)
	}
}
