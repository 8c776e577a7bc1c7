package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/childproc"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// ownerTakeRules: a strict rule the test's takes run into.
const ownerTakeRules = `
rules:
  - name: reset
    action: crash
    kinds: [k]
    limits: [25/1h]
    strict: true
`

// ownerTakeTally is what the takes were told, per subject.
type ownerTakeTally struct {
	mu        sync.Mutex
	allowed   map[string]int64
	uncertain map[string]int64 // no answer: taken or not
	limited   map[string]int64 // denied by the limit (not by the failure mode)
}

// take runs one take of subject against the owner's /v1/take.
func (tl *ownerTakeTally) take(c *http.Client, addr, subject string) {
	resp, err := c.Post("http://"+addr+"/v1/take?action=crash&k="+subject, "", nil)
	if errors.Is(err, syscall.ECONNREFUSED) {
		return // no owner listening: nothing taken
	}
	if err != nil {
		tl.note(tl.uncertain, subject)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r struct {
		Allowed  bool `json:"allowed"`
		Degraded bool `json:"degraded"`
	}
	switch {
	case json.Unmarshal(b, &r) != nil || resp.StatusCode >= 500:
		tl.note(tl.uncertain, subject)
	case r.Allowed:
		tl.note(tl.allowed, subject)
	case !r.Degraded && resp.StatusCode == http.StatusTooManyRequests:
		tl.note(tl.limited, subject)
	}
}

func (tl *ownerTakeTally) note(m map[string]int64, subject string) {
	tl.mu.Lock()
	m[subject]++
	tl.mu.Unlock()
}

func (tl *ownerTakeTally) count(m map[string]int64, subject string) int64 {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return m[subject]
}

// TestOwnerTakesExactAcrossKills runs strict takes against `aggregator
// --owner-takes` from 8 goroutines and SIGKILLs it twice while they run:
// no subject is ever admitted past its limit (the windows in memory plus
// the takes in flight, across the kills: the next owner loads what its
// predecessor answered), every take is counted once (in Redis and in the
// events topic, each equal to the limit once every subject is denied), and
// takes fail closed while no owner has caught up.
func TestOwnerTakesExactAcrossKills(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{partitions: 4, rules: ownerTakeRules})
	ownerTakesExact(t, e, 8, func(run *ownerTakesRun) {
		for round, at := range []int64{40, 100} {
			stacktest.WaitFor(t, "takes admitted", 90*time.Second, func() bool { return run.total() >= at })
			run.p.kill(t)
			run.p = e.start("run" + string(rune('1'+round)))
		}
	})
}

// ownerTakesRun is a run of ownerTakesExact: its owner and what its takes
// were told.
type ownerTakesRun struct {
	p    *proc
	subs []string
	tl   *ownerTakeTally
	// failedMayCount: the fault makes appends fail without an answer, and
	// a take answered failed (closed) may then be counted; the takes
	// counted beyond those admitted or unanswered are checked against the
	// owner's count of failed takes, not subject by subject.
	failedMayCount bool
}

// total is how many takes were admitted so far.
func (r *ownerTakesRun) total() (n int64) {
	for _, s := range r.subs {
		n += r.tl.count(r.tl.allowed, s)
	}
	return n
}

// ownerTakesExact starts `aggregator --owner-takes` (run0) on e, sends
// strict takes of n subjects to it from 8 goroutines (to run.p's take
// address, kept across restarts), runs fault while they go on, and then,
// once every subject is denied by its limit of 25, checks that no subject
// was admitted past it and that each is counted exactly the limit, in
// Redis and in the events topic.
func ownerTakesExact(t *testing.T, e *liveEnv, n int, fault func(run *ownerTakesRun)) {
	t.Helper()
	addr, err := childproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	e.extraArgs = []string{"--owner-takes", "--takes-http-addr", addr, "--takes-rls-addr", "off", "--takes-peer-addr", "127.0.0.1:0", "--takes-timeout", "10s"}
	run := &ownerTakesRun{subs: subjects(n), tl: &ownerTakeTally{allowed: map[string]int64{}, uncertain: map[string]int64{}, limited: map[string]int64{}}}
	subs, tl := run.subs, run.tl
	const limit = 25

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			c := &http.Client{Timeout: 15 * time.Second}
			for {
				select {
				case <-stop:
					return
				default:
				}
				tl.take(c, addr, subs[rand.IntN(len(subs))])
			}
		})
	}
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopLoad)
	run.p = e.start("run0")
	fault(run)
	stacktest.WaitFor(t, "every subject denied by its limit", 3*time.Minute, func() bool {
		for _, s := range subs {
			if tl.count(tl.limited, s) < 3 {
				return false
			}
		}
		return true
	})
	stopLoad()

	ctx := context.Background()
	waitTakesRelayed(t, e)
	var failed float64
	if run.failedMayCount {
		body, err := httpGet(metricsAddr(t, e, run.p.name))
		if err != nil {
			t.Fatal(err)
		}
		failed = metricValue(body, "floodgate_live_owner_takes_total", `result="failed"`)
	}
	run.p.stop(t) // its final checkpoint: Redis holds every count
	qs := make([]window.Query, len(subs))
	for i, s := range subs {
		qs[i] = window.Query{Subject: window.Subject{Action: "crash", Kind: "k", Subject: s}, Windows: []time.Duration{time.Hour}}
	}
	states, err := e.store.Check(ctx, time.Now(), qs)
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]int64{}
	for i, s := range subs {
		live[s] = states[i].Sums[0]
	}
	inTopic := e.topicCounts("crash")
	var beyond int64
	for _, s := range subs {
		a, u := tl.count(tl.allowed, s), tl.count(tl.uncertain, s)
		if a > limit {
			t.Errorf("subject %s: %d takes admitted, over its limit of %d", s, a, limit)
		}
		if live[s] != limit || inTopic[s] != limit {
			t.Errorf("subject %s: counted %d in Redis and %d in the topic, want the limit %d each (admitted %d, %d unanswered)", s, live[s], inTopic[s], limit, a, u)
		}
		if a+u < limit && !run.failedMayCount {
			t.Errorf("subject %s: %d admitted and %d unanswered, fewer than the %d counted", s, a, u, limit)
		}
		beyond += max(limit-a-u, 0)
	}
	if run.failedMayCount && float64(beyond) > failed {
		t.Errorf("%d takes counted beyond those admitted or unanswered, and only %v answered failed", beyond, failed)
	}
	t.Logf("admitted %v, unanswered %v", tl.allowed, tl.uncertain)
}

// takeOnce posts one take and returns its status and answer (0 and nil
// when nothing answered).
func takeOnce(addr, subject string) (int, map[string]any) {
	resp, err := http.Post("http://"+addr+"/v1/take?action=crash&k="+subject, "", nil)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var r map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, nil
	}
	return resp.StatusCode, r
}

// TestOwnerTakesBansAndPartitionsElsewhere: an operator's ban stops owner
// takes of its subject within a few ticks, with the ban's message, and
// lifts with it; of two aggregators that do not forward
// (--takes-peer-addr off), each answers the takes of the partitions it
// owns and denies, closed and with a retry, those owned by the other.
func TestOwnerTakesBansAndPartitionsElsewhere(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{partitions: 4, rules: strings.Replace(ownerTakeRules, "25/1h", "1000000/1h", 1)})
	addrA, err := childproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	e.extraArgs = []string{"--owner-takes", "--takes-http-addr", addrA, "--takes-rls-addr", "off", "--takes-peer-addr", "off"}
	e.start("a")
	subs := subjects(16)
	allowed := func(addr, s string) bool {
		code, r := takeOnce(addr, s)
		return code == http.StatusOK && r["allowed"] == true
	}
	stacktest.WaitFor(t, "owner takes answered", 60*time.Second, func() bool { return allowed(addrA, subs[0]) })

	// A ban, as the operator writes it.
	ctx := context.Background()
	sub := window.Subject{Action: "crash", Kind: "k", Subject: subs[1]}
	part := window.Partition(sub, e.partitions)
	ban, _ := json.Marshal(window.Ban{Until: time.Now().Add(time.Hour), Message: "banned by the test", Since: time.Now()})
	if err := e.rdb.HSet(ctx, e.store.Keys().Bans(part), window.Field(sub), ban).Err(); err != nil {
		t.Fatal(err)
	}
	stacktest.WaitFor(t, "the ban denies takes", 10*time.Second, func() bool {
		code, r := takeOnce(addrA, subs[1])
		return code == http.StatusTooManyRequests && r["message"] == "banned by the test"
	})
	if err := e.rdb.HDel(ctx, e.store.Keys().Bans(part), window.Field(sub)).Err(); err != nil {
		t.Fatal(err)
	}
	stacktest.WaitFor(t, "the unban lets takes through", 10*time.Second, func() bool { return allowed(addrA, subs[1]) })

	// A second member takes half the partitions.
	addrB, err := childproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	e.extraArgs = []string{"--owner-takes", "--takes-http-addr", addrB, "--takes-rls-addr", "off", "--takes-peer-addr", "off"}
	e.start("b")
	stacktest.WaitFor(t, "each member answering the partitions it owns, and only those", 90*time.Second, func() bool {
		var byA, byB int
		for _, s := range subs {
			a, b := allowed(addrA, s), allowed(addrB, s)
			if a == b { // both (two owners) or neither (a move not settled)
				return false
			}
			if a {
				byA++
			} else {
				byB++
			}
		}
		return byA > 0 && byB > 0
	})
	code, r := takeOnce(addrA, subs[0])
	if code == http.StatusOK {
		code, r = takeOnce(addrB, subs[0])
	}
	if code != http.StatusTooManyRequests || r["degraded"] != true || r["retry_after"] == nil {
		t.Errorf("a take of a partition owned elsewhere: %d %v, want a closed denial with a retry", code, r)
	}
}

// TestOwnerTakesForwardedToTheOwner: two aggregators with --owner-takes,
// every take sent to the member that does not own its subject's partition:
// each forwards it to the owner its owner records name, every take is
// answered, and together they admit each subject exactly its limit,
// counted once.
func TestOwnerTakesForwardedToTheOwner(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{partitions: 4, rules: ownerTakeRules})
	addrs, peers := startTakeMembers(t, e)
	subs := subjects(16)
	// other is, per subject, the member its owner record does not name.
	other := map[string]string{}
	stacktest.WaitFor(t, "each member owning partitions of the subjects", 90*time.Second, func() bool {
		by := map[string]bool{}
		for _, s := range subs {
			part := window.Partition(window.Subject{Action: "crash", Kind: "k", Subject: s}, e.partitions)
			v, _ := e.rdb.Get(context.Background(), e.store.Keys().TakesOwner(part)).Result()
			switch v {
			case peers[0]:
				other[s] = addrs[1]
			case peers[1]:
				other[s] = addrs[0]
			default:
				return false
			}
			by[v] = true
		}
		return len(by) == 2
	})
	tl := &ownerTakeTally{allowed: map[string]int64{}, uncertain: map[string]int64{}, limited: map[string]int64{}}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			c := &http.Client{Timeout: 15 * time.Second}
			for k := 0; ; k++ {
				if slices.IndexFunc(subs, func(x string) bool { return tl.count(tl.limited, x) < 3 }) < 0 {
					return
				}
				s := subs[(g+k)%len(subs)]
				tl.take(c, other[s], s)
			}
		})
	}
	wg.Wait()
	waitTakesRelayed(t, e)
	inTopic := e.topicCounts("crash")
	for _, s := range subs {
		if a, u := tl.count(tl.allowed, s), tl.count(tl.uncertain, s); a != 25 || u != 0 || inTopic[s] != 25 {
			t.Errorf("subject %s: admitted %d (%d unanswered), %d in the topic: want the limit, 25, each", s, a, u, inTopic[s])
		}
	}
	var forwarded float64
	for i := range addrs {
		body, err := httpGet(metricsAddr(t, e, "m"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		forwarded += metricValue(body, "floodgate_takeroute_forwarded_total", `result="forwarded"`)
	}
	// every admitted and every limited take went through a peer (a
	// rebalance meanwhile may have made some local: not counted here)
	if forwarded < float64(len(subs)*25)/2 {
		t.Errorf("%v takes forwarded, of %d admitted", forwarded, len(subs)*25)
	}
}

// startTakeMembers starts two aggregators with owner takes, m0 and m1,
// and returns their take addresses and the peer addresses their owner
// records give.
func startTakeMembers(t *testing.T, e *liveEnv) (addrs, peers [2]string) {
	t.Helper()
	for i := range addrs {
		var err error
		if addrs[i], err = childproc.FreePort(); err != nil {
			t.Fatal(err)
		}
		e.extraArgs = []string{"--owner-takes", "--takes-http-addr", addrs[i], "--takes-rls-addr", "off", "--takes-peer-addr", "127.0.0.1:0", "--takes-timeout", "10s"}
		e.start("m" + strconv.Itoa(i))
		peers[i] = logField(t, e, "m"+strconv.Itoa(i), "owner takes served", "peer")
	}
	return addrs, peers
}

// waitTakesRelayed waits until every take stream is published and trimmed
// and the live group has read the topic to its end.
func waitTakesRelayed(t *testing.T, e *liveEnv) {
	t.Helper()
	keys := e.store.Keys()
	start, told := time.Now(), map[int]bool{}
	stacktest.WaitFor(t, "every take stream relayed", 60*time.Second, func() bool {
		for part := range e.partitions {
			if n, err := e.rdb.XLen(context.Background(), keys.Takes(part)).Result(); err != nil || n != 0 {
				if time.Since(start) > 55*time.Second && !told[part] {
					// what a failure needs to be read: where the relay stands
					told[part] = true
					cur, _ := e.rdb.Get(context.Background(), keys.TakesRelay(part)).Result()
					msgs, _ := e.rdb.XRange(context.Background(), keys.Takes(part), "-", "+").Result()
					info, _ := e.rdb.XInfoStream(context.Background(), keys.Takes(part)).Result()
					var ids []string
					for _, m := range msgs {
						ids = append(ids, m.ID)
					}
					t.Logf("partition %d: %d entries %v, relay cursor %q, last generated id %s", part, n, ids, cur, info.LastGeneratedID)
				}
				return false
			}
		}
		return true
	})
	e.waitPast(60 * time.Second)
}

// logField waits for a line of name's log holding msg and returns the
// value of its field key.
func logField(t *testing.T, e *liveEnv, name, msg, key string) string {
	t.Helper()
	var v string
	stacktest.WaitFor(t, name+" logging "+msg, 30*time.Second, func() bool {
		b, _ := os.ReadFile(filepath.Join(e.dir, name+".log"))
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.Contains(line, msg) {
				continue
			}
			for _, f := range strings.Fields(line) {
				if after, ok := strings.CutPrefix(f, key+"="); ok {
					v = after
					return v != ""
				}
			}
		}
		return false
	})
	return v
}

// pairRules: a strict limit on each IP and each e-mail of action "pair".
const pairRules = `
rules:
  - name: pair
    action: pair
    kinds: [ip, email]
    limits: [25/1h]
    strict: true
`

// TestOwnerTakesAcrossOwners: two aggregators with owner takes, and takes
// of an IP and an e-mail whose partitions the two own apart, sent to
// either. Each IP goes with two e-mails, so it runs out first: a take is
// reserved at both owners and committed at both, or the part reserved is
// released when the other is refused. Every IP is admitted exactly its
// limit, and each subject is counted in the events topic exactly as often
// as its takes were admitted.
func TestOwnerTakesAcrossOwners(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{partitions: 4, rules: pairRules})
	addrs, peers := startTakeMembers(t, e)
	ownerOf := func(kind, subject string) string {
		part := window.Partition(window.Subject{Action: "pair", Kind: kind, Subject: subject}, e.partitions)
		v, _ := e.rdb.Get(context.Background(), e.store.Keys().TakesOwner(part)).Result()
		return v
	}
	stacktest.WaitFor(t, "each member owning partitions", 90*time.Second, func() bool {
		by := map[string]bool{}
		for p := range e.partitions {
			v, _ := e.rdb.Get(context.Background(), e.store.Keys().TakesOwner(p)).Result()
			if v != peers[0] && v != peers[1] {
				return false
			}
			by[v] = true
		}
		return len(by) == 2
	})
	// four IPs, two owned by each member (a take across owners is
	// reserved in the order of the owners' addresses: only a refusal at
	// the second releases the first's part), each with two e-mails the
	// other member owns
	type pair struct{ ip, email string }
	var pairs []pair
	ips := map[string]int{}
	byOwner := map[string]int{}
	for i := 1; len(ips) < 4 && i < 250; i++ {
		ip := "10.0.0." + strconv.Itoa(i)
		if byOwner[ownerOf("ip", ip)] == 2 {
			continue
		}
		var two []pair
		for k := 0; len(two) < 2 && k < 200; k++ {
			email := "p" + strconv.Itoa(i) + "x" + strconv.Itoa(k) + "@example.com"
			if ownerOf("email", email) != ownerOf("ip", ip) {
				two = append(two, pair{ip, email})
			}
		}
		if len(two) == 2 {
			pairs = append(pairs, two...)
			ips[ip] = 0
			byOwner[ownerOf("ip", ip)]++
		}
	}
	if len(ips) < 4 {
		t.Fatalf("found %d IPs with e-mails owned apart", len(ips))
	}
	var mu sync.Mutex
	allowed, limited, uncertain := map[pair]int{}, map[pair]int{}, map[pair]int{}
	var wg sync.WaitGroup
	deadline := time.Now().Add(2 * time.Minute)
	for g := range 8 {
		wg.Go(func() {
			c := &http.Client{Timeout: 15 * time.Second}
			for k := 0; ; k++ {
				mu.Lock()
				done := !slices.ContainsFunc(pairs, func(p pair) bool { return limited[p] < 3 })
				mu.Unlock()
				if done || time.Now().After(deadline) {
					return // past the deadline, the counts below tell what is missing
				}
				p := pairs[(g+k)%len(pairs)]
				resp, err := c.Post("http://"+addrs[(g+k)%2]+"/v1/take?action=pair&ip="+p.ip+"&email="+p.email, "", nil)
				var r struct {
					Allowed  bool `json:"allowed"`
					Degraded bool `json:"degraded"`
				}
				code := 0
				if err == nil {
					code = resp.StatusCode
					_ = json.NewDecoder(resp.Body).Decode(&r)
					resp.Body.Close()
				}
				mu.Lock()
				switch {
				case err != nil || code >= 500:
					uncertain[p]++
				case r.Allowed:
					allowed[p]++
				case !r.Degraded && code == http.StatusTooManyRequests:
					limited[p]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	waitTakesRelayed(t, e)
	inTopic := e.topicCounts("pair")
	for _, p := range pairs {
		ips[p.ip] += allowed[p]
		if uncertain[p] != 0 || inTopic[p.email] != int64(allowed[p]) {
			t.Errorf("pair %v: admitted %d (%d unanswered), its e-mail %d times in the topic", p, allowed[p], uncertain[p], inTopic[p.email])
		}
	}
	for ip, n := range ips {
		if n != 25 || inTopic[ip] != 25 {
			t.Errorf("IP %s: admitted %d, %d in the topic: want the limit, 25, each", ip, n, inTopic[ip])
		}
	}
	var split, released float64
	for i := range addrs {
		body, err := httpGet(metricsAddr(t, e, "m"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		split += metricValue(body, "floodgate_takeroute_forwarded_total", `result="split"`)
		released += metricValue(body, "floodgate_live_owner_takes_total", `result="released"`)
	}
	// (a partition moving as the pairs were chosen makes some takes local
	// or forwarded whole: some, not all, go across owners)
	if split == 0 || released == 0 {
		t.Errorf("%v takes answered across owners, %v reserved parts released: want some of each", split, released)
	}
}

// TestOwnerTakesHandLostTakesOver: Redis loses every take stream under
// ownerTakesExact's takes (the owner paused meanwhile, so the loss is
// whole, as a failover's is), and the owner is stopped (SIGTERM) as soon
// as it noticed, before it may append the lost takes again (the relay's
// requests could still land): it hands them over to the next owner, which
// counts them in its overlay and appends them again once nothing else can
// count them. No subject is admitted past its limit, and each is counted
// exactly its limit in Redis and in the events topic.
func TestOwnerTakesHandLostTakesOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{partitions: 4, rules: ownerTakeRules})
	ownerTakesExact(t, e, 40, func(run *ownerTakesRun) {
		run.failedMayCount = true
		stacktest.WaitFor(t, "takes admitted", 90*time.Second, func() bool { return run.total() >= 300 })
		paused(t, run.p, func() error {
			for p := range e.partitions {
				if err := e.rdb.Del(context.Background(), e.store.Keys().Takes(p)).Err(); err != nil {
					return err
				}
			}
			return nil
		})
		stacktest.WaitFor(t, "the owner noticing its take streams went back", 30*time.Second, func() bool {
			return e.logsContain("Redis lost take stream entries it had acknowledged")
		})
		run.p.stop(t)
		if !e.logsContain("handed over to the partition's next owner") {
			t.Fatal("the stopped owner handed nothing over")
		}
		run.p = e.start("run1")
		stacktest.WaitFor(t, "the next owner taking them over", time.Minute, func() bool {
			return e.logsContain("took over take events Redis lost")
		})
		// every partition's settled, once the relay's requests can no
		// longer land (15 s after the loss, or after the hand-over for a
		// loss found only then)
		stacktest.WaitFor(t, "the next owner settling what it took over", 90*time.Second, func() bool {
			b, _ := os.ReadFile(filepath.Join(e.dir, run.p.name+".log"))
			took, settled := map[string]bool{}, map[string]bool{}
			for _, line := range strings.Split(string(b), "\n") {
				part := ""
				for _, f := range strings.Fields(line) {
					if after, ok := strings.CutPrefix(f, "partition="); ok {
						part = after
					}
				}
				switch {
				case strings.Contains(line, "took over take events Redis lost"):
					took[part] = true
				case strings.Contains(line, "appends in doubt settled"):
					settled[part] = true
				}
			}
			for part := range took {
				if !settled[part] {
					return false
				}
			}
			return len(took) > 0
		})
	})
}
