package adminapi

import (
	"strings"
	"testing"
	"time"
)

// A ban's duration is sent as the admin endpoint reads it.
func TestFormatFor(t *testing.T) {
	for d, want := range map[time.Duration]string{
		90 * time.Second: "1m30s", time.Hour: "1h0m0s", 48 * time.Hour: "2d", 25 * time.Hour: "25h0m0s", 366 * 24 * time.Hour: "366d",
	} {
		if got := formatFor(d); got != want {
			t.Errorf("formatFor(%s) = %q, want %q", d, got, want)
		}
	}
}

func TestNewClientRefusesBadConfig(t *testing.T) {
	for _, c := range []struct {
		cfg  ClientConfig
		want string
	}{
		{ClientConfig{Token: "t"}, "URL is required"},
		{ClientConfig{BaseURL: "ftp://h", Token: "t"}, "want http"},
		{ClientConfig{BaseURL: "http://", Token: "t"}, "no host"},
		{ClientConfig{BaseURL: "http://u:p@h", Token: "t"}, "only scheme"},
		{ClientConfig{BaseURL: "http://h?x=1", Token: "t"}, "only scheme"},
		{ClientConfig{BaseURL: "http://h"}, "token is required"},
		{ClientConfig{BaseURL: "http://h", Token: "a b"}, "whitespace"},
	} {
		_, err := NewClient(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), ":p@") {
			t.Errorf("%+v: the error shows the password: %v", c.cfg, err)
		}
	}
}
