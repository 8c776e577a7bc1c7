package main

import "time"

// RLSFlags are the Envoy RLS settings beyond its address and mode. Envoy
// holds one connection per limiter for as long as it lives: an age limit is
// what spreads its calls over replicas added later (docs/limiter.md, "RLS
// port: health service and connection age").
type RLSFlags struct {
	RLSMaxConnAge      time.Duration `name:"rls-max-connection-age" env:"FLOODGATE_RLS_MAX_CONNECTION_AGE" default:"5m" help:"Close RLS connections this old (clients reconnect, so calls spread over new replicas); 0: never."`
	RLSMaxConnAgeGrace time.Duration `name:"rls-max-connection-age-grace" env:"FLOODGATE_RLS_MAX_CONNECTION_AGE_GRACE" default:"30s" help:"How long calls in flight on an aged RLS connection may finish."`
	RLSOKHeaders       bool          `name:"rls-ok-headers" env:"FLOODGATE_RLS_OK_HEADERS" default:"true" negatable:"" help:"Put the RateLimit header fields on OK RLS answers too (Envoy adds them to allowed responses); --no-rls-ok-headers: on OVER_LIMIT answers only."`
}

// rlsMaxConnAge maps the flag's 0 (never) to the server config's negative.
func (f RLSFlags) rlsMaxConnAge() time.Duration {
	if f.RLSMaxConnAge <= 0 {
		return -1
	}
	return f.RLSMaxConnAge
}
