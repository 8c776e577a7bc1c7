package history

import (
	"strings"
	"testing"
	"time"
)

func TestParseLadder(t *testing.T) {
	for _, c := range []struct {
		in, want, err string
	}{
		{in: DefaultLadder, want: DefaultLadder},
		{in: " 1m:2d , 5m:14d,1h:400d,1d:forever ", want: DefaultLadder},
		{in: "1m:1d,5m:3d,1h:7d,1d:52w,1w:forever", want: "1m:1d,5m:3d,1h:7d,1d:364d,1w:forever"},
		{in: "1m:90m,5m:1d", want: "1m:90m,5m:1d"},
		{in: "1m:forever", want: "1m:forever"},
		{in: "", err: "empty"},
		{in: "5m:1d", err: "first tier is 5m, must be 1m"},
		{in: "1m:2d,1m:3d", err: "steps must get coarser"},
		{in: "1m:2d,1h:1d", err: "must exceed the previous horizon"},
		{in: "1m:2d,5m:14d,1d:forever,1h:400d", err: "keeps data forever but is not the last"},
		{in: "1m:2d,2m:4d", err: `unknown step "2m"`},
		{in: "1m:2d,5m", err: "want step:horizon"},
		{in: "1m:2x", err: "want a number and a unit"},
		{in: "1m:0d", err: "positive whole number"},
		{in: "1m:-2d", err: "positive whole number"},
		{in: "1m:90s", err: "positive whole number of minutes"},
		{in: "1m:1d12h,5m:2w", want: "1m:36h,5m:14d"},
		{in: "1m:3m,1h:forever", err: "shorter than the next step"},
	} {
		t.Run(c.in, func(t *testing.T) {
			l, err := ParseLadder(c.in)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("ParseLadder(%q) = %v, %v; want error containing %q", c.in, l, err, c.err)
				}
				return
			}
			if err != nil || l.String() != c.want {
				t.Fatalf("ParseLadder(%q) = %q, %v; want %q", c.in, l, err, c.want)
			}
		})
	}
}

func TestBin(t *testing.T) {
	at := time.Date(2026, 3, 5, 13, 47, 31, 0, time.UTC) // a Thursday
	for _, c := range []struct {
		w    time.Duration
		want time.Time
	}{
		{time.Minute, time.Date(2026, 3, 5, 13, 47, 0, 0, time.UTC)},
		{5 * time.Minute, time.Date(2026, 3, 5, 13, 45, 0, 0, time.UTC)},
		{time.Hour, time.Date(2026, 3, 5, 13, 0, 0, 0, time.UTC)},
		{24 * time.Hour, time.Date(2026, 3, 5, 0, 0, 0, 0, time.UTC)},
		{7 * 24 * time.Hour, time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)}, // Monday
	} {
		if got := Bin(at, c.w); !got.Equal(c.want) {
			t.Errorf("Bin(%s, %s) = %s, want %s", at, c.w, got, c.want)
		}
	}
	if got := Bin(time.Date(1999, 12, 31, 23, 59, 59, 0, time.UTC), time.Hour); !got.Equal(time.Date(1999, 12, 31, 23, 0, 0, 0, time.UTC)) {
		t.Errorf("Bin before the origin = %s", got)
	}
}

func TestSparkline(t *testing.T) {
	pts := []Point{{Value: 0}, {Value: 1}, {Value: 4}, {Value: 8}}
	if got := Sparkline(pts); got != " ▂▅█" {
		t.Errorf("Sparkline = %q", got)
	}
	if got := Bar(5, 10, 4); got != "██" {
		t.Errorf("Bar(5, 10, 4) = %q", got)
	}
}
