package live

import (
	"testing"

	"github.com/floodgate-dev/floodgate/internal/window"
)

// A subject new to the slot reads only its coarsest hashes; the finer
// ones under fields Redis held nothing in are made, not read, and those
// under a field it held counts in are read.
func TestPlanLoadsReadsCoarseHashesFirst(t *testing.T) {
	pl := &profiles{list: []profile{{maxw: 86400}, {maxw: 60}}}
	day, short := &pendingSubject{profile: 0}, &pendingSubject{profile: 1}
	const sec = int64(1_795_643_443) // its minute 29927390, hour 498789, day 20782
	hour, minute := sec/3600, sec/60
	missing := map[*pendingSubject]map[hashID]bool{
		day: {
			{'h', hour / 24}: true, {'h', hour/24 - 1}: true,
			{'m', hour}: true, {'m', hour - 24}: true,
			{'s', minute}: true, {'s', minute - 1440}: true,
		},
		short: {{'s', minute}: true, {'s', minute - 1}: true}, // no level above
	}
	held := redisHeld{}
	p := planLoads(missing, held, pl)
	if len(p.made) != 0 {
		t.Errorf("first round made %v, want nothing: no parent read yet", p.made)
	}
	want := map[hashID]bool{{'h', hour / 24}: true, {'h', hour/24 - 1}: true}
	if got := p.read[day]; len(got) != len(want) || !got[hashID{'h', hour / 24}] || !got[hashID{'h', hour/24 - 1}] {
		t.Errorf("first round reads %v of the day subject, want its days only %v", got, want)
	}
	if len(p.read[short]) != 2 {
		t.Errorf("first round reads %v of the one-minute subject, want both its hashes", p.read[short])
	}

	// Redis held today's hour in the day subject's current hour, nothing
	// yesterday: the current hour's minutes are read, the rest made at once.
	held.note(day, hashID{'h', hour / 24}, 1<<(hour%24))
	held.note(day, hashID{'h', hour/24 - 1}, 0)
	delete(missing, short)
	delete(missing[day], hashID{'h', hour / 24})
	delete(missing[day], hashID{'h', hour/24 - 1})
	p = planLoads(missing, held, pl)
	if got := p.read[day]; len(got) != 1 || !got[hashID{'m', hour}] {
		t.Errorf("second round reads %v, want the current hour's minutes only", got)
	}
	made := map[hashID]bool{}
	for _, id := range p.made[day] {
		made[id] = true
	}
	if len(made) != 2 || !made[hashID{'m', hour - 24}] || !made[hashID{'s', minute - 1440}] {
		t.Errorf("second round made %v, want yesterday's hour and its minute", p.made[day])
	}

	// Its current minute: read when the hour's copy says Redis counted
	// events in it, made when not.
	delete(missing[day], hashID{'m', hour})
	delete(missing[day], hashID{'m', hour - 24})
	delete(missing[day], hashID{'s', minute - 1440})
	for _, c := range []struct {
		mask uint64
		read bool
	}{{1 << (minute % 60), true}, {^uint64(1 << (minute % 60)), false}} {
		held.note(day, hashID{'m', hour}, c.mask)
		p = planLoads(missing, held, pl)
		if got := p.read[day][hashID{'s', minute}]; got != c.read {
			t.Errorf("hour's mask %x: current minute read %v, want %v", c.mask, got, c.read)
		}
	}
}

// An owner answering takes makes a hash whose parent copy holds no count
// where it stands (a minute the subject had no events in yet), with what
// memory counted in it, and leaves the one under a count to be loaded.
func TestOwnerMakesHashesUnderAnEmptyField(t *testing.T) {
	hr := NewHeadroom(10)
	hr.wb = &writeBack{pending: hr.t.pending}
	sub := window.Subject{Action: "login", Kind: "ip", Subject: "10.0.0.1"}
	r := hr.roomFor(sub, 1)
	const hour = int64(498789)
	m := make([]int64, 60)
	m[10] = 5 // minute 10 of the hour holds counts, minute 11 none
	hr.mir.store(r, hashID{'m', hour}, m)
	counted, fresh := hashID{'s', hour*60 + 10}, hashID{'s', hour*60 + 11}
	orphan := hashID{'s', (hour+1)*60 + 0} // its parent not held
	missing := map[hashID]bool{counted: true, fresh: true, orphan: true}
	ps := &pendingSubject{sub: sub}
	if !(&Applier{}).makeUnderEmpty(hr, r, ps, missing, "sm") {
		t.Fatal("nothing made")
	}
	if len(missing) != 2 || missing[fresh] || !missing[counted] || !missing[orphan] {
		t.Errorf("missing after: %v, want the hash under a count and the one without a parent held", missing)
	}
	if c, ok := hr.mir.get(r, fresh); !ok || c.sum(0, 59) != 0 {
		t.Errorf("the fresh minute's hash: held %v, sum %d", ok, c.sum(0, 59))
	}
	// seconds only (no level above): nothing to ask
	if (&Applier{}).makeUnderEmpty(hr, r, ps, map[hashID]bool{{'s', hour*60 + 12}: true}, "s") {
		t.Error("made a hash with no level above")
	}
}
