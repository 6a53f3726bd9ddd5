package dispatch

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/capper-dev/capper/internal/testenv"
)

// TestKafkaSecurity: the reader and writers the worker builds authenticate
// with SASL (plain, SCRAM-SHA-256/512) and speak TLS to a broker that
// requires them, and a wrong password is refused.
func TestKafkaSecurity(t *testing.T) {
	serverTLS, clientTLS := testTLS(t)
	for _, tc := range []struct {
		name, mechanism, kfakeMethod string
		tls                          bool
	}{
		{"plain", "plain", "PLAIN", false},
		{"scram-sha-256", "scram-sha-256", "SCRAM-SHA-256", false},
		{"scram-sha-512 over tls", "scram-sha-512", "SCRAM-SHA-512", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []kfake.Opt{kfake.EnableSASL(), kfake.Superuser(tc.kfakeMethod, "capper", "s3cret")}
			if tc.tls {
				opts = append(opts, kfake.TLS(serverTLS))
			}
			k := testenv.StartKafka(t, 1, []string{"in", "out"}, opts...)
			o := KafkaOptions{Brokers: k.Addrs, GroupID: "g", FetchMaxWait: 100 * time.Millisecond, SessionTimeout: 6 * time.Second}
			if tc.tls {
				o.TLS = clientTLS
			}
			var err error
			if o.SASL, err = NewSASL(tc.mechanism, "capper", "s3cret"); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			w, err := NewWriter(o, "in")
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if err := w.WriteMessages(ctx, kafka.Message{Key: []byte("1"), Value: []byte("v")}); err != nil {
				t.Fatalf("write with %s: %v", tc.mechanism, err)
			}
			r, err := NewReader(o, "in")
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			m, err := r.FetchMessage(ctx)
			if err != nil || string(m.Value) != "v" {
				t.Fatalf("fetch with %s: %q %v", tc.mechanism, m.Value, err)
			}
			if err := r.CommitMessages(ctx, m); err != nil {
				t.Fatalf("commit with %s: %v", tc.mechanism, err)
			}

			bad := o
			if bad.SASL, err = NewSASL(tc.mechanism, "capper", "wrong"); err != nil {
				t.Fatal(err)
			}
			bw, err := NewWriter(bad, "out")
			if err != nil {
				t.Fatal(err)
			}
			defer bw.Close()
			bctx, bcancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer bcancel()
			if err := bw.WriteMessages(bctx, kafka.Message{Value: []byte("x")}); err == nil {
				t.Fatalf("a wrong password was accepted")
			}
		})
	}
}

func TestKafkaOptionErrors(t *testing.T) {
	if _, err := NewSASL("gssapi", "u", "p"); err == nil || !strings.Contains(err.Error(), "gssapi") {
		t.Errorf("NewSASL(gssapi) = %v", err)
	}
	if _, err := NewWriter(KafkaOptions{Brokers: []string{"x:1"}, Compression: "brotli"}, "t"); err == nil || !strings.Contains(err.Error(), "brotli") {
		t.Errorf("NewWriter(brotli) = %v", err)
	}
	if _, err := NewReader(KafkaOptions{Brokers: []string{"x:1"}, GroupID: "g", StartOffset: "middle"}, "t"); err == nil || !strings.Contains(err.Error(), "middle") {
		t.Errorf("NewReader(middle) = %v", err)
	}
	for _, c := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		if _, err := NewWriter(KafkaOptions{Brokers: []string{"x:1"}, Compression: c}, "t"); err != nil {
			t.Errorf("compression %s: %v", c, err)
		}
	}
}

// testTLS returns a server config with a certificate for 127.0.0.1 signed by
// a fresh CA, and a client config that trusts only that CA.
func testTLS(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "capper test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	server = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}
	client = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return server, client
}
