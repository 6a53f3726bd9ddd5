package config

// CAPPER_* environment overrides of any key.

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/capper-dev/capper/internal/yamldoc"
)

// EnvPrefix starts every environment override.
const EnvPrefix = "CAPPER_"

// EnvName is the variable that overrides the key at path (dotted YAML keys):
// "redis.password" -> "CAPPER_REDIS_PASSWORD". The names are derived from the
// YAML keys so the two can never drift apart.
func EnvName(path string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(path, ".", "_"))
}

// envKey is one overridable key: its dotted path and where it lives.
type envKey struct {
	path  string
	field reflect.Value
}

// envKeys lists every key of cfg that an environment variable can set, by
// variable name. Structs are walked into; everything else (scalars, lists,
// lists of policies) is one key whose value is parsed as YAML. An inline
// struct (the policy in capping) adds its keys to its parent's, as in the
// file.
func envKeys(cfg *Config) map[string]envKey {
	keys := map[string]envKey{}
	var walk func(v reflect.Value, prefix string)
	walk = func(v reflect.Value, prefix string) {
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			name, opts, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			if name == "" && opts == "inline" && v.Field(i).Kind() == reflect.Struct {
				walk(v.Field(i), prefix)
				continue
			}
			if name == "" || name == "-" {
				continue
			}
			path := name
			if prefix != "" {
				path = prefix + "." + name
			}
			f := v.Field(i)
			if f.Kind() == reflect.Struct {
				walk(f, path)
				continue
			}
			keys[EnvName(path)] = envKey{path: path, field: f}
		}
	}
	walk(reflect.ValueOf(cfg).Elem(), "")
	return keys
}

// EnvNames returns every supported variable with its key path, sorted, for
// documentation and tests.
func EnvNames() map[string]string {
	cfg := Default()
	out := map[string]string{}
	for name, k := range envKeys(&cfg) {
		out[name] = k.path
	}
	return out
}

// applyEnv sets keys from CAPPER_* variables. It returns the CAPPER_*
// variables that match no key.
func applyEnv(cfg *Config, environ []string) ([]string, error) {
	keys := envKeys(cfg)
	var ignored []string
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, EnvPrefix) {
			continue
		}
		k, known := keys[name]
		if !known {
			ignored = append(ignored, name)
			continue
		}
		if err := setFromEnv(k.field, value); err != nil {
			return nil, fmt.Errorf("environment %s (key %s): %w", name, k.path, err)
		}
	}
	sort.Strings(ignored)
	return ignored, nil
}

func setFromEnv(f reflect.Value, value string) error {
	switch {
	case f.Kind() == reflect.String:
		// Taken verbatim: YAML would turn "yes" into a bool and strip quotes,
		// and a Secret must bypass the file-only refusal.
		f.SetString(value)
		return nil
	case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.String && !strings.HasPrefix(strings.TrimSpace(value), "["):
		var items []string
		for _, s := range strings.Split(value, ",") {
			if s = strings.TrimSpace(s); s != "" {
				items = append(items, s)
			}
		}
		f.Set(reflect.ValueOf(items).Convert(f.Type()))
		return nil
	}
	fresh := reflect.New(f.Type())
	dec := yaml.NewDecoder(strings.NewReader(value))
	dec.KnownFields(true)
	if err := dec.Decode(fresh.Interface()); err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("empty value")
		}
		return yamldoc.Explain([]byte(value), fresh.Interface(), err)
	}
	f.Set(fresh.Elem())
	return nil
}
