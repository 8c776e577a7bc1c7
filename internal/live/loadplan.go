package live

import (
	"strings"

	"github.com/floodgate-dev/floodgate/internal/window"
)

// A load reads coarse hashes before the finer ones under them. Every
// write counts an event in each level its rules keep, at once (an apply,
// a checkpoint, a take), and a coarser hash outlives the finer ones under
// it (it ends later, with the same slack), so a field Redis holds no
// count in says that the finer hash it stands for holds none either. That
// finer hash is then made from memory alone, as a read of nothing would
// make it. A subject new to the slot costs a read per hash of its
// coarsest level (two for a day window, not six), and an old one skips
// the edges of its windows it had no events in. Only what this batch's
// loads read counts: a checkpoint between two batches may have written
// the finer hash since.
//
// Rules that grew their longest window start writing a coarser level
// only then: until the first event after the change, that level is empty
// over finer hashes that are not, and the window undercounts what came
// before the change, as its middle already does (docs/architecture.md).

// redisHeld is, per subject, the hashes this batch's loads read or made:
// a bit per field Redis held a count in.
type redisHeld map[*pendingSubject]map[hashID]uint64

func (h redisHeld) note(ps *pendingSubject, id hashID, mask uint64) {
	m := h[ps]
	if m == nil {
		m = map[hashID]uint64{}
		h[ps] = m
	}
	m[id] = mask
}

// parentOf is the hash and field one level up that counts what id holds,
// when the rules' levels lv (window.Levels) keep that level.
func parentOf(id hashID, lv string) (hashID, int64, bool) {
	switch {
	case id.level == 's' && strings.IndexByte(lv, 'm') >= 0:
		return hashID{'m', floorDiv(id.n, 60)}, floorMod(id.n, 60), true
	case id.level == 'm' && strings.IndexByte(lv, 'h') >= 0:
		return hashID{'h', floorDiv(id.n, 24)}, floorMod(id.n, 24), true
	}
	return hashID{}, 0, false
}

// loadPlan is what one round of loads does with the hashes evaluations
// found missing.
type loadPlan struct {
	read map[*pendingSubject]map[hashID]bool // from Redis
	made map[*pendingSubject][]hashID        // from memory: Redis holds nothing in them
}

// planLoads splits missing, coarsest level first: a hash whose parent
// this batch's loads found without a count where it stands is made; one
// whose parent is missing too waits for the next round, which knows it;
// the rest are read.
func planLoads(missing map[*pendingSubject]map[hashID]bool, held redisHeld, pl *profiles) loadPlan {
	p := loadPlan{read: map[*pendingSubject]map[hashID]bool{}, made: map[*pendingSubject][]hashID{}}
	for ps, ids := range missing {
		lv := window.Levels(pl.list[ps.profile].maxw)
		if len(lv) == 1 {
			p.read[ps] = ids // seconds only: no level above to ask first
			continue
		}
		for _, level := range []byte{'h', 'm', 's'} {
			for id := range ids {
				if id.level != level {
					continue
				}
				if parent, field, ok := parentOf(id, lv); ok {
					if mask, known := held[ps][parent]; known {
						if mask&(1<<field) == 0 {
							p.made[ps] = append(p.made[ps], id)
							held.note(ps, id, 0)
							continue
						}
					} else if ids[parent] {
						continue // read the parent first
					}
				}
				if p.read[ps] == nil {
					p.read[ps] = map[hashID]bool{}
				}
				p.read[ps][id] = true
			}
		}
	}
	return p
}

// makeUnderEmpty makes, from memory alone, each of missing (a subject's
// hashes, ps's) whose parent hash this write-back owner holds a copy of
// with no count where it stands, and tells whether it made any. Only for
// an owner answering takes: the slot's only writer then, its copies are
// what Redis holds plus what it counted since (no script of a limiter
// counts beside it), so the parent's empty field says the finer hash is
// empty in Redis too, whenever it was loaded. A take of a subject in a
// minute it had no events in yet then needs no round trip: at every minute,
// every subject taken from had one.
func (s *Applier) makeUnderEmpty(hr *Headroom, r *room, ps *pendingSubject, missing map[hashID]bool, lv string) bool {
	made := false
	var scratch [60]int64
	for id := range missing {
		parent, field, ok := parentOf(id, lv)
		if !ok {
			continue
		}
		bi := hr.mir.find(r, parent)
		if bi == 0 || hr.mir.counts(bi).at(field) != 0 {
			continue
		}
		s.copyEmpty(scratch[:], ps, id, hr)
		delete(missing, id)
		made = true
	}
	return made
}
