package objstore

// The S3 store (aws-sdk-go-v2).

// feature/s3/manager is deprecated in favour of feature/s3/transfermanager,
// which is still v0 (pre-release); manager is the pinned, maintained choice.
//lint:file-ignore SA1019 manager.Uploader is used deliberately until transfermanager is v1

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/s3/manager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
)

// DefaultPartSize is the S3 multipart part size when S3Options.PartSize is 0.
const DefaultPartSize = 16 << 20

// DefaultEndpointRegion is the region of a store with a custom endpoint when
// no region is configured anywhere (option, AWS_REGION, AWS_DEFAULT_REGION,
// profile): S3-compatible stores mostly ignore it, but the SDK signs every
// request with one and refuses to work without.
const DefaultEndpointRegion = "us-east-1"

// s3Store keeps objects under s3://bucket/prefix.
type s3Store struct {
	client   *s3.Client
	uploader *manager.Uploader
	bucket   string
	prefix   string // "" or ends with "/"

	multipartUploads atomic.Int64 // how many Puts went multipart (tests check it)
}

func newS3Store(ctx context.Context, bucket, prefix string, opts S3Options) (*s3Store, error) {
	if opts.PartSize == 0 {
		opts.PartSize = DefaultPartSize
	}
	if opts.PartSize < manager.MinUploadPartSize {
		return nil, fmt.Errorf("S3 part size %d is below the minimum %d", opts.PartSize, manager.MinUploadPartSize)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	logMode := aws.ClientLogMode(0)
	if log.Enabled(ctx, slog.LevelDebug) {
		logMode = aws.LogRetries
	}
	loadOpts := []func(*config.LoadOptions) error{
		config.WithLogger(sdkLogger{l: log}),
		config.WithClientLogMode(logMode),
	}
	if opts.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(opts.Region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("load AWS config: %w", err)
	}
	if cfg.Region == "" && opts.Endpoint != "" {
		cfg.Region = DefaultEndpointRegion
	}
	if cfg.Region == "" {
		// Without a region the SDK fails every request with "Invalid
		// region: region was not a valid DNS name".
		return nil, fmt.Errorf("no AWS region for s3://%s: set segments.s3.region in the config (or --s3-region), AWS_REGION, or a profile's region", bucket)
	}
	if opts.Endpoint != "" {
		// An S3-compatible store is reached with keys or a profile; without
		// them the SDK would fail at the first request, naming only the last
		// provider of its chain (often the EC2 metadata service). On AWS
		// itself credentials often come from a role over the network (pod
		// identity, instance profile), which may fail for a moment: there
		// the first request fetches them, as it always did.
		if err := checkCredentials(ctx, cfg, bucket); err != nil {
			return nil, err
		}
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if opts.Endpoint != "" {
			o.BaseEndpoint = aws.String(opts.Endpoint)
		}
		o.UsePathStyle = opts.UsePathStyle
		// We verify every object with the manifest's sha256; S3-compatible
		// stores often send no response checksums, and the SDK would log a
		// warning about each GET.
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	prefix = strings.Trim(prefix, "/")
	if prefix != "" {
		prefix += "/"
	}
	st := &s3Store{client: client, bucket: bucket, prefix: prefix}
	st.uploader = manager.NewUploader(client, func(u *manager.Uploader) { u.PartSize = opts.PartSize })
	return st, nil
}

func (s *s3Store) String() string {
	return strings.TrimSuffix("s3://"+s.bucket+"/"+s.prefix, "/")
}

func (s *s3Store) url(key string) string { return "s3://" + s.bucket + "/" + s.prefix + key }

func (s *s3Store) Get(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: aws.String(s.prefix + key)})
	if err != nil {
		return nil, 0, s.wrap("get", key, err)
	}
	size := int64(-1)
	if out.ContentLength != nil {
		size = *out.ContentLength
	}
	return out.Body, size, nil
}

func (s *s3Store) GetIfChanged(ctx context.Context, key, etag string) ([]byte, string, error) {
	in := &s3.GetObjectInput{Bucket: &s.bucket, Key: aws.String(s.prefix + key)}
	if etag != "" {
		in.IfNoneMatch = aws.String(etag)
	}
	out, err := s.client.GetObject(ctx, in)
	if err != nil {
		if isNotModified(err) {
			return nil, etag, ErrNotModified
		}
		return nil, "", s.wrap("get", key, err)
	}
	defer out.Body.Close()
	data, err := readSmall(out.Body, MaxSmallObject)
	if err != nil {
		return nil, "", fmt.Errorf("read %s: %w", s.url(key), err)
	}
	return data, aws.ToString(out.ETag), nil
}

// Size returns an object's size (a HEAD request).
func (s *s3Store) Size(ctx context.Context, key string) (int64, error) {
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: aws.String(s.prefix + key)})
	if err != nil {
		return 0, s.wrapHead(ctx, key, err)
	}
	return aws.ToInt64(out.ContentLength), nil
}

func (s *s3Store) Put(ctx context.Context, key string, r io.Reader) error {
	// The uploader sends one PutObject when the body fits in one part and a
	// multipart upload otherwise, without knowing the size in advance.
	out, err := s.uploader.Upload(ctx, &s3.PutObjectInput{Bucket: &s.bucket, Key: aws.String(s.prefix + key), Body: r})
	if err != nil {
		return s.wrap("put", key, err)
	}
	if out.UploadID != "" {
		s.multipartUploads.Add(1)
	}
	return nil
}

func (s *s3Store) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(s.prefix + prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, s.wrap("list", prefix, err)
		}
		for _, o := range page.Contents {
			keys = append(keys, strings.TrimPrefix(aws.ToString(o.Key), s.prefix))
		}
	}
	return keys, nil
}

func (s *s3Store) Delete(ctx context.Context, key string) error {
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: aws.String(s.prefix + key)})
	if err != nil && !errors.Is(s.wrap("delete", key, err), fs.ErrNotExist) {
		return s.wrap("delete", key, err)
	}
	return nil
}

// checkCredentials makes sure that the default chain yields credentials.
func checkCredentials(ctx context.Context, cfg aws.Config, bucket string) error {
	const hint = "set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile, or a role"
	if cfg.Credentials == nil {
		return fmt.Errorf("no AWS credentials for s3://%s: %s", bucket, hint)
	}
	if _, err := cfg.Credentials.Retrieve(ctx); err != nil {
		return fmt.Errorf("no AWS credentials for s3://%s: %s (%w)", bucket, hint, err)
	}
	return nil
}

// wrap names the object and turns S3's "no such key" into fs.ErrNotExist
// and "no such bucket" into errNoSuchBucket.
func (s *s3Store) wrap(op, key string, err error) error {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode() {
		case "NoSuchBucket":
			return fmt.Errorf("%s %s: %w", op, s.url(key), errNoSuchBucket{s.bucket})
		case "NoSuchKey", "NotFound":
			return fmt.Errorf("%s %s: %w", op, s.url(key), errNoSuchObject{})
		}
	}
	if httpStatus(err) == http.StatusNotFound {
		return fmt.Errorf("%s %s: %w", op, s.url(key), errNoSuchObject{})
	}
	return fmt.Errorf("%s %s: %w", op, s.url(key), err)
}

// wrapHead is wrap for a HEAD request, whose 404 has no body to tell a
// missing object from a missing bucket: it asks about the bucket then.
func (s *s3Store) wrapHead(ctx context.Context, key string, err error) error {
	werr := s.wrap("head", key, err)
	if !errors.Is(werr, fs.ErrNotExist) {
		return werr
	}
	_, berr := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &s.bucket})
	if berr != nil && httpStatus(berr) == http.StatusNotFound {
		return fmt.Errorf("head %s: %w", s.url(key), errNoSuchBucket{s.bucket})
	}
	return werr
}

// ErrNoSuchBucket matches the error of an operation on a bucket that does
// not exist.
var ErrNoSuchBucket = errors.New("no such bucket")

// errNoSuchBucket is a missing bucket: a configuration error, not a missing
// object (a reader must not take it for "nothing published yet").
type errNoSuchBucket struct{ bucket string }

func (e errNoSuchBucket) Error() string {
	return "bucket " + e.bucket + " does not exist (or is not reachable at this endpoint)"
}
func (errNoSuchBucket) Is(target error) bool { return target == ErrNoSuchBucket }

// errNoSuchObject is S3's missing object; it matches fs.ErrNotExist so that
// callers handle both stores alike.
type errNoSuchObject struct{}

func (errNoSuchObject) Error() string        { return "no such object" }
func (errNoSuchObject) Is(target error) bool { return target == fs.ErrNotExist }

func isNotModified(err error) bool {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode() == "NotModified" {
		return true
	}
	return httpStatus(err) == http.StatusNotModified
}

func httpStatus(err error) int {
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// sdkLogger routes the AWS SDK's own messages to slog: its warnings as
// warnings, its debug messages (retries, with debug logging) at debug.
type sdkLogger struct {
	l   *slog.Logger
	ctx context.Context
}

func (s sdkLogger) Logf(class logging.Classification, format string, v ...any) {
	level := slog.LevelInfo
	switch class {
	case logging.Warn:
		level = slog.LevelWarn
	case logging.Debug:
		level = slog.LevelDebug
	}
	ctx := s.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	if !s.l.Enabled(ctx, level) {
		return
	}
	s.l.Log(ctx, level, strings.TrimSpace(fmt.Sprintf(format, v...)), "component", "aws-sdk")
}

// WithContext is how the SDK hands a request's context to its logger.
func (s sdkLogger) WithContext(ctx context.Context) logging.Logger {
	return sdkLogger{l: s.l, ctx: ctx}
}
