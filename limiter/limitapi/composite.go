package limitapi

import "strings"

// Composite is the one subject several features make together (an Envoy
// descriptor with several entries, e.g. ip and path): its kind is the
// kinds joined by "." in their order ("ip.path"), its subject the values
// joined by "|" in the same order, each value's "\" and "|" escaped with a
// "\" ("203.0.113.7|/login"), so that two lists of values never give the
// same subject. A rule limits it as kind "ip.path"; an application that
// publishes its events (check mode) names them with the same function.
func Composite(kinds, values []string) (kind, subject string) {
	var b strings.Builder
	for i, v := range values {
		if i > 0 {
			b.WriteByte('|')
		}
		for j := 0; j < len(v); j++ {
			if v[j] == '\\' || v[j] == '|' {
				b.WriteByte('\\')
			}
			b.WriteByte(v[j])
		}
	}
	return strings.Join(kinds, "."), b.String()
}
