package redisconn

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestRedisOptionsURL(t *testing.T) {
	f := Flags{RedisURL: "rediss://app:hunter2hunter2@cache.example.com:6380/2", RedisPoolSize: 8}
	o, err := f.Options()
	if err != nil {
		t.Fatal(err)
	}
	if o.Addrs[0] != "cache.example.com:6380" || o.Username != "app" || o.Password != "hunter2hunter2" || o.DB != 2 || o.TLSConfig == nil ||
		o.TLSConfig.ServerName != "cache.example.com" {
		t.Fatalf("options %+v", o)
	}
	if _, ok := redis.NewUniversalClient(o).(*redis.Client); !ok {
		t.Fatal("want a single-server client")
	}

	// A bad URL's error does not carry its password.
	f = Flags{RedisURL: "rediss://app:hunter2hunter2@cache.example.com:6380/notadb"}
	if _, err := f.Options(); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("bad url: %v", err)
	}

	// Cluster seeds from ?addr=.
	f = Flags{RedisURL: "rediss://app:pw@node1:6379?addr=node2:6379"}
	if o, err = f.Options(); err != nil || len(o.Addrs) != 2 || !o.IsClusterMode {
		t.Fatalf("cluster url: %+v, %v", o, err)
	}
	if _, ok := redis.NewUniversalClient(o).(*redis.ClusterClient); !ok {
		t.Fatal("want a cluster client")
	}
}

func TestRedisOptionsSentinel(t *testing.T) {
	f := Flags{RedisAddr: []string{"s1:26379", "s2:26379"}, RedisSentinelMaster: "mymaster", RedisUsername: "app", RedisPassword: "pw"}
	o, err := f.Options()
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewUniversalClient(o)
	defer c.Close()
	if _, ok := c.(*redis.Client); !ok || o.MasterName != "mymaster" || o.Username != "app" {
		t.Fatalf("sentinel: %T %+v", c, o)
	}
}
