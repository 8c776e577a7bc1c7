package deploy_test

import "testing"

// TestComposePublishesOnLoopback: no published port is reachable from other
// hosts, Redis and PostgreSQL have passwords and the limiter a token.
func TestComposePublishesOnLoopback(t *testing.T) {
	p := loadCompose(t)
	for name, s := range p.Services {
		for _, pc := range s.Ports {
			if pc.HostIP != "127.0.0.1" {
				t.Errorf("%s publishes %d on %q, want 127.0.0.1", name, pc.Target, pc.HostIP)
			}
		}
	}
	env := func(service, key string) string {
		v := p.Services[service].Environment[key]
		if v == nil {
			return ""
		}
		return *v
	}
	if env("limiter", "FLOODGATE_AUTH_TOKEN") == "" {
		t.Error("the limiter has no token")
	}
	if env("redis", "REDIS_PASSWORD") == "" || env("limiter", "FLOODGATE_REDIS_PASSWORD") != env("redis", "REDIS_PASSWORD") {
		t.Error("Redis has no password, or floodgate not the same one")
	}
	if env("timescaledb", "POSTGRES_PASSWORD") == "floodgate" {
		t.Error("PostgreSQL's password is the user name")
	}
}
