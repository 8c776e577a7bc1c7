package decide

import (
	"cmp"
	"math/rand/v2"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-dev/floodgate/event"
	floodgatev1 "github.com/floodgate-dev/floodgate/limiter/gen/floodgate/v1"
	"github.com/floodgate-dev/floodgate/limiter/limitapi"
)

// The request decoders of the three surfaces, fuzzed: whatever the bytes,
// no panic, and what reaches the decision is within the bounds (at most
// MaxSubjects subjects, none empty, each valid as the event contract has
// it) or refused. make test runs each briefly, make fuzz longer.

// checkValidated holds a request read by a surface to the bounds validate
// promises.
func checkValidated(t *testing.T, req Request, take bool, surfaceBad error) {
	t.Helper()
	l := &Limiter{maxSubj: DefaultMaxSubjects}
	subs, bad, err := l.validate(nil, req, take, surfaceBad) // nil: the built-in kinds
	if err != nil {
		if subs != nil || bad != nil {
			t.Fatalf("validate refused (%v) and returned subjects %v, bad %v", err, subs, bad)
		}
		return
	}
	if len(subs) > l.maxSubj {
		t.Fatalf("%d subjects through validate, at most %d", len(subs), l.maxSubj)
	}
	if len(req.Subjects) > l.maxSubj && bad == nil {
		t.Fatalf("%d subjects given, past the bound, and nothing refused", len(req.Subjects))
	}
	if surfaceBad != nil && bad != surfaceBad {
		t.Fatalf("the surface's problem %v lost for %v", surfaceBad, bad)
	}
	if len(subs) == 0 && bad == nil {
		t.Fatal("no subject to decide and nothing refused")
	}
	for _, s := range subs {
		e := event.Event{ID: "x", Action: req.Action, Kind: s.Kind, Subject: s.Subject, TS: time.Unix(1_800_000_000, 0)}
		if err := e.Validate(); err != nil {
			t.Fatalf("subject %q=%q through validate: %v", s.Kind, s.Subject, err)
		}
	}
}

func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{
		"action=login_failed&ip=203.0.113.7&email=a@example.com",
		"action=login_failed&ip=a&ip=b&ip=a&email=",
		"action=login_failed&X-Forwarded-For=x&ip=%ff",
		"action=&ip=1", "action=a&action=b", "ip=1",
		"action=visit&" + strings20("ip=10.0.0.", "&"),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, _ := url.ParseQuery(raw) // what parsed, as ParseForm keeps it
		req, err := ParseQuery(q)
		if err != nil {
			return
		}
		if req.Action != q.Get("action") || len(q["action"]) != 1 {
			t.Fatalf("action %q from %v", req.Action, q["action"])
		}
		n := 0
		for k, vs := range q {
			for _, v := range vs {
				if k != "action" && v != "" {
					n++
				}
			}
		}
		if len(req.Subjects) != n {
			t.Fatalf("%d subjects from %d non-empty values", len(req.Subjects), n)
		}
		if !slices.IsSortedFunc(req.Subjects, func(a, b Subject) int { return cmp.Compare(a.Kind, b.Kind) }) {
			t.Fatalf("subjects not in kind order: %v", req.Subjects)
		}
		checkValidated(t, req, false, nil)
	})
}

func FuzzRLSRequest(f *testing.F) {
	seeds := []*rlsv3.RateLimitRequest{
		{Domain: "login_failed", Descriptors: []*commonv3.RateLimitDescriptor{rlsDesc("ip", "203.0.113.7"), rlsDesc("email", "")}},
		{Domain: "visit", HitsAddend: 3, Descriptors: []*commonv3.RateLimitDescriptor{rlsDesc("ip", "1", "path", "/a|b"), {}}},
		{Domain: "visit", Descriptors: []*commonv3.RateLimitDescriptor{{Entries: rlsDesc("ip", "1").Entries, HitsAddend: wrapperspb.UInt64(0)}}},
	}
	many := &rlsv3.RateLimitRequest{Domain: "visit"}
	wide := &commonv3.RateLimitDescriptor{}
	for i := range 20 {
		many.Descriptors = append(many.Descriptors, rlsDesc("ip", "10.0.0."+strconv.Itoa(i)))
		wide.Entries = append(wide.Entries, &commonv3.RateLimitDescriptor_Entry{Key: "k", Value: strconv.Itoa(i)})
	}
	seeds = append(seeds, many, &rlsv3.RateLimitRequest{Domain: "visit", Descriptors: []*commonv3.RateLimitDescriptor{wide}})
	for _, s := range seeds {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var in rlsv3.RateLimitRequest
		if err := (lenientCodec{}).Unmarshal(b, &in); err != nil {
			return
		}
		req, owner, checkOnly, bad := rlsRequest(&in, nil, DefaultMaxSubjects, nil)
		descs := in.GetDescriptors()
		if len(req.Subjects) != len(owner) || len(owner) > DefaultMaxSubjects {
			t.Fatalf("%d subjects, %d owners from %d descriptors", len(req.Subjects), len(owner), len(descs))
		}
		for k, o := range owner {
			if o < 0 || o >= min(len(descs), DefaultMaxSubjects) || k > 0 && o <= owner[k-1] {
				t.Fatalf("owners %v of %d descriptors", owner, len(descs))
			}
		}
		if len(descs) > DefaultMaxSubjects && bad == nil {
			t.Fatalf("%d descriptors and nothing refused", len(descs))
		}
		if req.N < 1 || req.N > event.MaxN+1 || checkOnly && req.N != 1 {
			t.Fatalf("n %d, check only %v", req.N, checkOnly)
		}
		checkValidated(t, req, !checkOnly, bad)
	})
}

func FuzzConnectRequest(f *testing.F) {
	msg := &floodgatev1.TakeRequest{Action: "login_failed", N: 2, Id: "e1", Subjects: []*floodgatev1.Subject{{Kind: "ip", Subject: "203.0.113.7"}, {Kind: "email"}}}
	b, err := proto.Marshal(msg)
	if err != nil {
		f.Fatal(err)
	}
	js, err := protojson.Marshal(msg)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b, false)
	f.Add(js, true)
	f.Add([]byte(`{"action":"a","subjects":[`+strings20(`{"kind":"ip","subject":"1"}`, ",")+`]}`), true)
	f.Fuzz(func(t *testing.T, b []byte, isJSON bool) {
		var in floodgatev1.TakeRequest
		var err error
		if isJSON {
			// As connect reads application/json.
			err = protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, &in)
		} else {
			err = (lenientCodec{}).Unmarshal(b, &in)
		}
		if err != nil {
			return
		}
		req := Request{Action: in.GetAction(), Subjects: limitapi.SubjectsFromProto(in.GetSubjects()), N: in.GetN(), ID: in.GetId()}
		if len(req.Subjects) != len(in.GetSubjects()) {
			t.Fatalf("%d subjects from %d", len(req.Subjects), len(in.GetSubjects()))
		}
		checkValidated(t, req, true, nil)
	})
}

func rlsDesc(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// strings20 is 20 copies of s, numbered, joined by sep.
func strings20(s, sep string) string {
	out := ""
	for i := range 20 {
		if i > 0 {
			out += sep
		}
		out += s + strconv.Itoa(i)
	}
	return out
}

// dedupSubjects through its map (past dedupScan subjects) keeps what the
// pairwise scan keeps, in the same order.
func TestDedupSubjectsByMapMatchesScan(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		subs := make([]Subject, dedupScan+1+r.IntN(100))
		for i := range subs {
			subs[i] = Subject{Kind: []string{"ip", "email"}[r.IntN(2)], Subject: strconv.Itoa(r.IntN(len(subs)))}
		}
		var want []Subject
		for _, s := range subs {
			if !slices.Contains(want, s) {
				want = append(want, s)
			}
		}
		if got := dedupSubjects(subs); !slices.Equal(got, want) {
			t.Fatalf("dedup of %v:\n got %v\nwant %v", subs, got, want)
		}
	}
}
