package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/decide"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/childproc"
	"github.com/floodgate-dev/floodgate/internal/takeroute"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// peerRules: a strict 2/h on each subject of action peer.
const peerRules = `
rules:
  - name: peer
    action: peer
    kinds: [k]
    limits: [2/1h]
    strict: true
`

// peerSecrets writes the take surfaces' token and the members' peer
// credential to files and returns their paths.
func peerSecrets(t *testing.T, e *liveEnv) (public, peer string) {
	t.Helper()
	public, peer = filepath.Join(e.dir, "takes-token"), filepath.Join(e.dir, "peer-token")
	for path, s := range map[string]string{public: "public-take-token", peer: "members-peer-token"} {
		if err := os.WriteFile(path, []byte(s+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return public, peer
}

// TestOwnerTakesPeerCredentialRequired: an aggregator with owner takes
// refuses to start when its peer credential is the take surfaces' token,
// or missing beside that token or beyond loopback.
func TestOwnerTakesPeerCredentialRequired(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{partitions: 1, rules: peerRules})
	public, _ := peerSecrets(t, e)
	for i, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--takes-auth-token-file", public, "--takes-peer-token-file", public}, "holds the same secret as --takes-auth-token-file"},
		{[]string{"--takes-auth-token-file", public}, "needs --takes-peer-token-file too"},
		{[]string{"--takes-peer-addr", "0.0.0.0:0"}, "listens beyond loopback: it needs --takes-peer-token-file"},
		{[]string{"--takes-auth-token-file", public, "--takes-peer-addr", "0.0.0.0:0"}, "listens beyond loopback: it needs --takes-peer-token-file"},
	} {
		name := "refused" + strconv.Itoa(i)
		args := append([]string{"--metrics-addr", "127.0.0.1:0", "--no-history", "--owner-takes", "--takes-http-addr", "127.0.0.1:0", "--takes-rls-addr", "off", "--takes-peer-addr", "127.0.0.1:0"}, c.args...)
		p := e.run(name, args...)
		select {
		case <-p.done:
		case <-time.After(time.Minute):
			t.Fatalf("%v: still running, want a refusal to start", c.args)
		}
		if b, _ := os.ReadFile(filepath.Join(e.dir, name+".log")); !strings.Contains(string(b), c.says) {
			t.Errorf("%v: log %q, want it to say %q", c.args, b, c.says)
		}
	}
}

// peerWire is a forwarded take as takeroute sends it.
type peerWire struct {
	Op      string               `json:"op,omitempty"`
	Queries []window.EvalQuery   `json:"queries"`
	N       int64                `json:"n"`
	Events  []window.QueuedEvent `json:"events"`
}

// TestOwnerTakesPeerEndpointRefusesForgeries: two aggregators with owner
// takes, the take surfaces' token and the members' peer credential. A take
// forged at the owner's peer endpoint (the public token, none, a limit of
// 10^9, n near 2^63, an event of another action, a counted subject without
// its event) is refused with 401, 409 or 400 and counts nothing; a take
// sent to the other member is forwarded with the peer credential and
// counted; the subject is admitted exactly its limit, 2, and counted twice
// in the events topic.
func TestOwnerTakesPeerEndpointRefusesForgeries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{partitions: 4, rules: peerRules})
	public, peer := peerSecrets(t, e)
	var addrs, peers [2]string
	for i := range addrs {
		var err error
		if addrs[i], err = childproc.FreePort(); err != nil {
			t.Fatal(err)
		}
		e.extraArgs = []string{"--owner-takes", "--takes-http-addr", addrs[i], "--takes-rls-addr", "off", "--takes-peer-addr", "127.0.0.1:0", "--takes-timeout", "10s",
			"--takes-auth-token-file", public, "--takes-peer-token-file", peer}
		e.start("m" + strconv.Itoa(i))
		peers[i] = logField(t, e, "m"+strconv.Itoa(i), "owner takes served", "peer")
	}
	ownerOf := func(s string) string {
		part := window.Partition(window.Subject{Action: "peer", Kind: "k", Subject: s}, e.partitions)
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
	// victim: a subject m0 owns, taken once at m0 itself
	var victim string
	for _, s := range subjects(64) {
		if ownerOf(s) == peers[0] {
			victim = s
			break
		}
	}
	if victim == "" {
		t.Fatal("no subject owned by m0")
	}
	take := func(addr, token string) (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/take?action=peer&k="+victim, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		var r map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&r)
		return resp.StatusCode, r
	}
	stacktest.WaitFor(t, "m0 taking its subject", 60*time.Second, func() bool {
		code, r := take(addrs[0], "public-take-token")
		return code == http.StatusOK && r["allowed"] == true
	})

	set, err := rules.Parse([]byte(peerRules))
	if err != nil {
		t.Fatal(err)
	}
	sub := window.Subject{Action: "peer", Kind: "k", Subject: victim}
	forged := func(f func(w *peerWire)) []byte {
		q, err := decide.TakeQuery(set, sub, nil)
		if err != nil {
			t.Fatal(err)
		}
		ev := event.Event{V: event.Version, ID: event.NewID(), Action: "peer", Kind: "k", Subject: victim, TS: time.Now(), N: 1}
		v, err := event.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		w := peerWire{Queries: []window.EvalQuery{q}, N: 1, Events: []window.QueuedEvent{{Key: []byte(ev.Key()), Value: v, ID: ev.ID}}}
		f(&w)
		b, err := json.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	bigLimit := func(w *peerWire) { w.Queries[0].Limits[0].Limit.Count = 1e9 }
	for _, c := range []struct {
		name, token string
		forge       func(w *peerWire)
		code        int
		says        string
	}{
		{"the take surfaces' token, limit 10^9", "public-take-token", bigLimit, http.StatusUnauthorized, "peer credential"},
		{"no credential, limit 10^9", "", bigLimit, http.StatusUnauthorized, "peer credential"},
		{"limit 10^9", "members-peer-token", bigLimit, http.StatusConflict, "this member's rules give [{2/1h"},
		{"a reservation at limit 10^9", "members-peer-token", func(w *peerWire) { bigLimit(w); w.Op = "reserve" }, http.StatusConflict, "rules give"},
		{"n near 2^63", "members-peer-token", func(w *peerWire) { w.N = math.MaxInt64 - 1 }, http.StatusBadRequest, "want 1..1000000"},
		{"an event of another action", "members-peer-token", func(w *peerWire) {
			e, _ := event.Decode(w.Events[0].Value)
			e.Action = "other"
			w.Events[0].Value, _ = event.Encode(e)
		}, http.StatusBadRequest, "for the take's peer:k:" + victim},
		{"no event", "members-peer-token", func(w *peerWire) { w.Events = nil }, http.StatusBadRequest, "0 events for 1 counted subjects"},
		{"the subject under another action", "members-peer-token", func(w *peerWire) { w.Queries[0].Subject.Action = "other" }, http.StatusConflict, "rules give"},
	} {
		req, _ := http.NewRequest(http.MethodPost, "http://"+peers[0]+takeroute.Path, bytes.NewReader(forged(c.forge)))
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || !strings.Contains(string(body), c.says) {
			t.Errorf("%s: %d %q, want %d saying %q", c.name, resp.StatusCode, body, c.code, c.says)
		}
	}

	// m1 forwards its take of the subject to m0 with the peer credential:
	// the second and last the limit admits.
	if code, r := take(addrs[1], "public-take-token"); code != http.StatusOK || r["allowed"] != true {
		t.Fatalf("a take forwarded by m1: %d %v, want allowed", code, r)
	}
	for i, addr := range addrs {
		if code, r := take(addr, "public-take-token"); code != http.StatusTooManyRequests || r["degraded"] == true {
			t.Errorf("a third take at m%d: %d %v, want denied by the limit of 2", i, code, r)
		}
	}
	waitTakesRelayed(t, e)
	if n := e.topicCounts("peer")[victim]; n != 2 {
		t.Errorf("the subject counted %d times in the events topic, want 2", n)
	}
	body, err := httpGet(metricsAddr(t, e, "m0"))
	if err != nil {
		t.Fatal(err)
	}
	for reason, want := range map[string]float64{"unauthorized": 2, "rules_differ": 3, "invalid": 3} {
		if got := metricValue(body, "floodgate_takeroute_peer_refused_total", `reason="`+reason+`"`); got != want {
			t.Errorf("floodgate_takeroute_peer_refused_total{reason=%q} = %v, want %v", reason, got, want)
		}
	}
}
