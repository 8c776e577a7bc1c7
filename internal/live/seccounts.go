package live

// secCounts is a batch subject's events per second. Most subjects of a
// batch have their events in a second or two, so a short list scanned from
// its end (events come roughly in time order) replaces a map per subject
// per batch: a map's allocation and hashing were a twentieth of the
// aggregator's CPU. Past maxFewSeconds distinct seconds — a client
// spreading one subject's events over many seconds, which would make the
// scan quadratic — it moves them into a map.
type secCounts struct {
	few  []secCount
	many map[int64]int64
}

type secCount struct{ sec, n int64 }

const maxFewSeconds = 16

// add counts n events at second sec.
func (c *secCounts) add(sec, n int64) {
	if c.many != nil {
		c.many[sec] += n
		return
	}
	for i := len(c.few) - 1; i >= 0; i-- {
		if c.few[i].sec == sec {
			c.few[i].n += n
			return
		}
	}
	if len(c.few) < maxFewSeconds {
		c.few = append(c.few, secCount{sec, n})
		return
	}
	c.many = make(map[int64]int64, 2*maxFewSeconds)
	for _, x := range c.few {
		c.many[x.sec] = x.n
	}
	c.few = nil
	c.many[sec] += n
}

// each calls fn for every second counted, in no particular order.
func (c *secCounts) each(fn func(sec, n int64)) {
	for _, x := range c.few {
		fn(x.sec, x.n)
	}
	for sec, n := range c.many {
		fn(sec, n)
	}
}
