package capping

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis deployment modes of ClientOptions.Mode.
const (
	ModeSingle   = "single"
	ModeCluster  = "cluster"
	ModeSentinel = "sentinel"
)

// ClientOptions is the Redis connection, as the config file states it. Zero
// timeouts, pool size and retries mean go-redis' defaults.
type ClientOptions struct {
	Mode       string   // ModeSingle (default), ModeCluster or ModeSentinel
	Addrs      []string // single: one node; cluster: seed nodes; sentinel: sentinels
	MasterName string   // sentinel only
	Username   string   // Redis 6 ACL user; "" = default user
	Password   string
	// SentinelUsername and SentinelPassword authenticate to the sentinels
	// themselves (sentinel only).
	SentinelUsername string
	SentinelPassword string
	DB               int         // single and sentinel only
	TLS              *tls.Config // nil = plain TCP
	DialTimeout      time.Duration
	ReadTimeout      time.Duration
	WriteTimeout     time.Duration
	PoolSize         int // connections per node
	MaxRetries       int // go-redis retries; -1 = none
	ClientName       string
}

// NewClient builds the go-redis client for a mode: *redis.Client (single),
// *redis.ClusterClient (cluster, also with one seed address) or a
// sentinel-backed *redis.Client that follows the master (sentinel).
func NewClient(o ClientOptions) (redis.UniversalClient, error) {
	if len(o.Addrs) == 0 {
		return nil, errors.New("redis client: addrs: at least one address is required")
	}
	u := &redis.UniversalOptions{
		Addrs:        o.Addrs,
		ClientName:   o.ClientName,
		Username:     o.Username,
		Password:     o.Password,
		DB:           o.DB,
		TLSConfig:    o.TLS,
		DialTimeout:  o.DialTimeout,
		ReadTimeout:  o.ReadTimeout,
		WriteTimeout: o.WriteTimeout,
		PoolSize:     o.PoolSize,
		MaxRetries:   o.MaxRetries,
	}
	switch o.Mode {
	case ModeSingle, "":
		if len(o.Addrs) > 1 {
			return nil, fmt.Errorf("redis client: mode single takes one address, got %d", len(o.Addrs))
		}
		if o.MasterName != "" {
			return nil, errors.New("redis client: master name is only used with mode sentinel")
		}
	case ModeCluster:
		if o.DB != 0 {
			return nil, errors.New("redis client: Redis Cluster has only database 0")
		}
		if o.MasterName != "" {
			return nil, errors.New("redis client: master name is only used with mode sentinel")
		}
		u.IsClusterMode = true
	case ModeSentinel:
		if o.MasterName == "" {
			return nil, errors.New("redis client: master name is required with mode sentinel")
		}
		u.MasterName = o.MasterName
		u.SentinelUsername = o.SentinelUsername
		u.SentinelPassword = o.SentinelPassword
	default:
		return nil, fmt.Errorf("redis client: mode %q is not one of %s, %s, %s", o.Mode, ModeSingle, ModeCluster, ModeSentinel)
	}
	return redis.NewUniversalClient(u), nil
}
