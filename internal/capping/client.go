package capping

// The go-redis client for each deployment mode (single, cluster, sentinel).

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
	Mode       string   // ModeSingle, ModeCluster or ModeSentinel
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

// FieldError is a problem with one option, named as in the config file's
// redis section.
type FieldError struct{ Field, Msg string }

func (e FieldError) Error() string { return e.Field + ": " + e.Msg }

// Validate returns every problem of the options (the config file reports
// them under redis.*; NewClient refuses them).
func (o ClientOptions) Validate() []FieldError {
	var errs []FieldError
	add := func(field, format string, args ...any) {
		errs = append(errs, FieldError{field, fmt.Sprintf(format, args...)})
	}
	if len(o.Addrs) == 0 {
		add("addrs", "at least one address is required")
	}
	switch o.Mode {
	case ModeSingle:
		if len(o.Addrs) > 1 {
			add("addrs", "mode single takes one address, got %d (use mode cluster or sentinel)", len(o.Addrs))
		}
	case ModeCluster:
		if o.DB != 0 {
			add("db", "Redis Cluster has only database 0")
		}
	case ModeSentinel:
		if o.MasterName == "" {
			add("master_name", "is required with mode sentinel")
		}
	default:
		add("mode", "%q is not one of %s, %s, %s", o.Mode, ModeSingle, ModeCluster, ModeSentinel)
	}
	if o.Mode != ModeSentinel && o.MasterName != "" {
		add("master_name", "is only used with mode sentinel")
	}
	if o.DB < 0 {
		add("db", "must not be negative")
	}
	return errs
}

// NewClient builds the go-redis client for a mode: *redis.Client (single),
// *redis.ClusterClient (cluster, also with one seed address) or a
// sentinel-backed *redis.Client that follows the master (sentinel).
func NewClient(o ClientOptions) (redis.UniversalClient, error) {
	if fes := o.Validate(); len(fes) > 0 {
		errs := make([]error, len(fes))
		for i, fe := range fes {
			errs[i] = fe
		}
		return nil, fmt.Errorf("redis client: %w", errors.Join(errs...))
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
	case ModeCluster:
		u.IsClusterMode = true
	case ModeSentinel:
		u.MasterName = o.MasterName
		u.SentinelUsername = o.SentinelUsername
		u.SentinelPassword = o.SentinelPassword
	}
	return redis.NewUniversalClient(u), nil
}
