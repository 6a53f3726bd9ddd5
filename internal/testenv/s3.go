package testenv

// An S3-protocol endpoint over HTTP.

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// S3 is an S3-protocol endpoint (gofakes3, in memory) served over HTTP on
// 127.0.0.1, with one bucket created.
type S3 struct {
	URL    string
	Bucket string
	Region string
	// AccessKey and SecretKey are accepted by the endpoint (it does not check
	// signatures); set them as AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY for code
	// that uses the default credential chain.
	AccessKey, SecretKey string
}

// StartS3 starts the endpoint and creates bucket; it stops at test end.
func StartS3(t testing.TB, bucket string) *S3 {
	t.Helper()
	srv := httptest.NewServer(gofakes3.New(s3mem.New()).Server())
	t.Cleanup(srv.Close)
	s := &S3{URL: srv.URL, Bucket: bucket, Region: "us-east-1", AccessKey: "test", SecretKey: "test"}
	if _, err := s.Client().CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatalf("create bucket %s: %v", bucket, err)
	}
	return s
}

// Client is a real aws-sdk-go-v2 S3 client pointed at the endpoint with
// path-style addressing.
func (s *S3) Client() *s3.Client {
	return s3.New(s3.Options{
		Region:       s.Region,
		BaseEndpoint: aws.String(s.URL),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
		// gofakes3 sends no response checksums; do not log about it on every GET.
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

// SetEnv points the SDK's default credential chain at the endpoint's keys for
// the rest of the test (the region and endpoint are set through capper's own
// options).
func (s *S3) SetEnv(t testing.TB) {
	t.Setenv("AWS_ACCESS_KEY_ID", s.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s.SecretKey)
	t.Setenv("AWS_REGION", s.Region)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// NoAWSEnv is an environment (NAME=value pairs, to append to os.Environ())
// in which the AWS default chain finds no credentials, region or profile,
// and never asks the EC2 metadata service: every variable it reads them
// from is empty, and the shared config and credentials files are paths
// that do not exist.
func NoAWSEnv(t testing.TB) []string {
	t.Helper()
	none := filepath.Join(t.TempDir(), "none")
	env := []string{
		"AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=" + none,
		"AWS_SHARED_CREDENTIALS_FILE=" + none,
	}
	for _, name := range []string{
		"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY", "AWS_SECRET_KEY",
		"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
		"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
		"AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
		"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
	} {
		env = append(env, name+"=")
	}
	return env
}

// ClearAWSEnv sets NoAWSEnv for the rest of the test (see testing.T.Setenv).
func ClearAWSEnv(t testing.TB) {
	t.Helper()
	for _, kv := range NoAWSEnv(t) {
		name, value, _ := strings.Cut(kv, "=")
		t.Setenv(name, value)
	}
}
