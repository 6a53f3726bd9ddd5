package app

// The operations HTTP endpoint: /metrics, /healthz, /readyz, pprof.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check is one readiness condition: nil when fine.
type Check func() error

// opsServer serves /metrics, /healthz, /readyz and, when enabled, pprof.
type opsServer struct {
	srv *http.Server
	ln  net.Listener
}

// info's lines follow "ready" in /readyz's answer (what is in use); live
// fails /healthz (the process should be restarted: a stuck worker).
func newOpsServer(addr string, reg *prometheus.Registry, pprofOn bool, info func() string, live Check, ready ...Check) (*opsServer, error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := live(); err != nil {
			http.Error(w, "not live: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		var errs []error
		for _, c := range ready {
			if err := c(); err != nil {
				errs = append(errs, err)
			}
		}
		if err := errors.Join(errs...); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
		if info != nil {
			fmt.Fprintln(w, info())
		}
	})
	if pprofOn {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	// Listen now, so a port conflict fails the start, not a later actor.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on http.address %s: %w", addr, err)
	}
	return &opsServer{
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second},
		ln:  ln,
	}, nil
}

// Addr is the address the server listens on (useful with port 0).
func (s *opsServer) Addr() string { return s.ln.Addr().String() }

func (s *opsServer) serve() error {
	if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http server: %w", err)
	}
	return nil
}

func (s *opsServer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
}
