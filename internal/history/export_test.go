package history

// VisitorHash is visitorHash, for tests that build sketches in SQL from
// values as the sink does.
var VisitorHash = visitorHash
