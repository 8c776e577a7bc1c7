package history_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/axiomhq/hyperloglog"
	"github.com/jackc/pgx/v5"

	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/history/historytest"
)

func TestParseVisitors(t *testing.T) {
	for _, c := range []struct {
		in, want, err string
	}{
		{in: "", want: ""},
		{in: "visit=ip", want: "visit=ip"},
		{in: " visit = ip , download=user,", want: "download=user,visit=ip"},
		{in: "visit", err: "want action=attr"},
		{in: "visit=ip,visit=user", err: "named twice"},
		{in: "Visit=ip", err: "visitors Visit=ip"},
		{in: "visit=", err: "kind"},
	} {
		v, err := history.ParseVisitors(c.in)
		switch {
		case c.err != "":
			if err == nil || !contains(err.Error(), c.err) {
				t.Errorf("ParseVisitors(%q) = %v, %v; want error with %q", c.in, v, err, c.err)
			}
		case err != nil || v.String() != c.want:
			t.Errorf("ParseVisitors(%q) = %q, %v; want %q", c.in, v.String(), err, c.want)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// stream is a random stream of visits: n distinct visitors, each visiting
// one to three times, in random order, spread over parts (minute rows).
type stream struct {
	parts  []int32
	hashes []int64
	exact  int // distinct visitor values, counted on the values themselves
	lib    *hyperloglog.Sketch
}

func newStream(r *rand.Rand, n, parts int) stream {
	s := stream{lib: hyperloglog.NewNoSparse()}
	seen := make(map[string]bool, n)
	for len(seen) < n {
		v := fmt.Sprintf("%d.%d.%d.%d/%x", r.IntN(256), r.IntN(256), r.IntN(256), r.IntN(256), r.Uint32())
		if seen[v] {
			continue
		}
		seen[v] = true
		h := history.VisitorHash(v)
		s.lib.InsertHash(uint64(h))
		for range 1 + r.IntN(3) {
			s.parts = append(s.parts, int32(r.IntN(parts)))
			s.hashes = append(s.hashes, h)
		}
	}
	s.exact = len(seen)
	r.Shuffle(len(s.parts), func(i, j int) {
		s.parts[i], s.parts[j] = s.parts[j], s.parts[i]
		s.hashes[i], s.hashes[j] = s.hashes[j], s.hashes[i]
	})
	return s
}

// rolled builds the stream's sketch as the ladder does: one sketch per part
// (a minute row), merged eight at a time (a first roll), then all together
// (a second roll). It returns the estimate, whether the sketch is exact, and
// its registers.
func rolled(t *testing.T, db history.DB, s stream) (est int64, exact bool, regs []byte) {
	t.Helper()
	q := func(name string) string { return pgx.Identifier{"floodgate", name}.Sanitize() }
	err := db.QueryRow(context.Background(), `WITH m AS (
	SELECT p, `+q("sketch_of")+`(array_agg(h)) AS s FROM unnest($1::int[], $2::bigint[]) AS u(p, h) GROUP BY p
), h AS (
	SELECT p / 8 AS p, `+q("sketch_union_agg")+`(s) AS s FROM m GROUP BY 1
), d AS (
	SELECT `+q("sketch_union_agg")+`(s) AS s FROM h
)
SELECT `+q("sketch_estimate")+`(s), (s).planes IS NULL, `+q("sketch_registers")+`(s) FROM d`,
		s.parts, s.hashes).Scan(&est, &exact, &regs)
	if err != nil {
		t.Fatal(err)
	}
	return est, exact, regs
}

// libRegisters returns the library's dense registers (its binary format v2:
// an 8-byte header, then one byte per register).
func libRegisters(t *testing.T, sk *hyperloglog.Sketch) []byte {
	t.Helper()
	b, err := sk.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 8+16384 {
		t.Fatalf("library sketch encodes to %d bytes, want a dense 8+16384", len(b))
	}
	return b[8:]
}

// TestVisitorSketchError checks the stated error of unique-visitor counts
// against exact counts of random streams from 10 to 10^6 distinct visitors,
// after two levels of merges: exact up to 256, within 2% above. The SQL
// sketch must also be the library's: same registers, same estimate.
func TestVisitorSketchError(t *testing.T) {
	pool := historytest.Pool(t)
	r := rand.New(rand.NewPCG(16, 1))
	for _, n := range []int{10, 100, 256, 257, 1000, 4000, 10_000, 100_000, 1_000_000} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			s := newStream(r, n, 64)
			est, exact, regs := rolled(t, pool, s)
			relErr := float64(est-int64(s.exact)) / float64(s.exact)
			t.Logf("%d distinct visitors (%d visits): estimate %d, error %+.3f%%, exact mode %v", s.exact, len(s.hashes), est, 100*relErr, exact)
			switch {
			case s.exact <= 256 && (est != int64(s.exact) || !exact):
				t.Errorf("estimate %d (exact mode %v), want exactly %d", est, exact, s.exact)
			case s.exact > 256 && (exact || math.Abs(relErr) > 0.02):
				t.Errorf("estimate %d (exact mode %v): error %.3f%%, want dense and within 2%%", est, exact, 100*relErr)
			}
			if string(regs) != string(libRegisters(t, s.lib)) {
				t.Errorf("registers differ from axiomhq/hyperloglog's for the same hashes")
			}
			if lib := int64(s.lib.Estimate()); !exact && (est < lib-1 || est > lib+1) {
				t.Errorf("estimate %d, axiomhq/hyperloglog says %d for the same hashes", est, lib)
			}
		})
	}
}

// TestVisitorSketchSpread measures the spread of the estimate over many
// streams: the root mean square error should be near the stated standard
// error of 0.81%.
func TestVisitorSketchSpread(t *testing.T) {
	pool := historytest.Pool(t)
	r := rand.New(rand.NewPCG(16, 2))
	var sum2, worst float64
	const trials, n = 24, 20_000
	for range trials {
		est, _, _ := rolled(t, pool, newStream(r, n, 16))
		e := float64(est-n) / n
		sum2 += e * e
		worst = max(worst, math.Abs(e))
	}
	rms := math.Sqrt(sum2 / trials)
	t.Logf("%d streams of %d distinct visitors: RMS error %.3f%%, worst %.3f%% (stated: 0.81%% standard error)", trials, n, 100*rms, 100*worst)
	if rms > 0.012 || worst > 0.03 {
		t.Errorf("RMS error %.3f%% (want <= 1.2%%), worst %.3f%% (want <= 3%%)", 100*rms, 100*worst)
	}
}
