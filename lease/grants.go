package lease

import (
	"iter"
	"maps"
	"slices"
)

// grantIndex holds the grants of each name, in the order granted: one
// for a plain lease, up to its limit for a semaphore. A name with no grant
// has no entry. Nearly every name has one grant, so those are kept apart,
// in a map whose values are one pointer: at a million leases a map of
// slices costs about 40 bytes more per lease.
type grantIndex struct {
	one  map[string]*[1]*Lease
	many map[string][]*Lease
	// manyGrants counts the grants in many, so that the number of grants
	// is known without a walk over every name.
	manyGrants int
}

func newGrantIndex() grantIndex {
	return grantIndex{one: make(map[string]*[1]*Lease), many: make(map[string][]*Lease)}
}

// get returns the grants of name. The slice is the index's own: a caller
// may replace its elements (see State.update) but must not append to it
// other than through set.
func (g *grantIndex) get(name string) []*Lease {
	if p := g.one[name]; p != nil {
		return p[:]
	}
	return g.many[name]
}

// set makes ls the grants of name; no grants removes the name.
func (g *grantIndex) set(name string, ls []*Lease) {
	g.manyGrants -= len(g.many[name])
	switch len(ls) {
	case 0:
		delete(g.one, name)
		delete(g.many, name)
	case 1:
		delete(g.many, name)
		if p := g.one[name]; p != nil {
			p[0] = ls[0]
		} else {
			g.one[name] = &[1]*Lease{ls[0]}
		}
	default:
		delete(g.one, name)
		g.many[name] = ls
		g.manyGrants += len(ls)
	}
}

// grants returns how many grants there are, of every name.
func (g *grantIndex) grants() int { return len(g.one) + g.manyGrants }

// names returns how many names have grants.
func (g *grantIndex) names() int { return len(g.one) + len(g.many) }

// all yields every name with its grants, in no particular order.
func (g *grantIndex) all() iter.Seq2[string, []*Lease] {
	return func(yield func(string, []*Lease) bool) {
		for name, p := range g.one {
			if !yield(name, p[:]) {
				return
			}
		}
		for name, ls := range g.many {
			if !yield(name, ls) {
				return
			}
		}
	}
}

// sortedNames returns the names with grants, sorted.
func (g *grantIndex) sortedNames() []string {
	names := make([]string, 0, g.names())
	names = slices.AppendSeq(names, maps.Keys(g.one))
	names = slices.AppendSeq(names, maps.Keys(g.many))
	slices.Sort(names)
	return names
}
