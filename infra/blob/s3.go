package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"threadbox/domain/fault"
)

// S3 keeps blobs in a bucket of an S3-compatible object store, under the
// same content-addressed keys as Store ([prefix]ab/abcdef...). Every
// replica of a scaled-out deployment reads and writes the same bucket.
//
// An upload is first spooled to a temporary file on local disk while its
// SHA-256 is computed (memory stays bounded whatever the size), then sent
// with one PUT, or a multipart upload of bounded parts, under its final
// key: S3 makes an object visible only once whole, so a blob is either
// absent or complete. A failed multipart upload is aborted by the client.
//
// Every call has a deadline (S3Options.Timeout): a store that does not
// answer is reported as fault.Unavailable, never waited on for ever.
//
// Remove checks an object's age and deletes it in two requests, so unlike
// Store it is not atomic with respect to a concurrent Put: the caller
// orders the two (app/workspace takes a database lock shared by every
// replica around saves, deletions and collection).
type S3 struct {
	c       *minio.Client
	bucket  string
	prefix  string
	spool   string
	timeout time.Duration
}

// S3Options configure NewS3.
type S3Options struct {
	// Endpoint is the store's base URL (http://host:port or
	// https://host); empty means AWS S3 in Region.
	Endpoint string
	// Region is the bucket's region (default us-east-1).
	Region string
	// Bucket is the bucket holding the blobs; it must exist unless
	// Create is set.
	Bucket string
	// Prefix is prepended to every key ("" or ending in "/").
	Prefix string
	// AccessKey and SecretKey are the credentials; when both are empty
	// they come from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
	// AWS_SESSION_TOKEN, then from the AWS shared credentials file.
	AccessKey, SecretKey string
	// Spool is the local folder uploads are staged in (default the
	// system's temporary folder).
	Spool string
	// Timeout bounds each request that is not a body transfer (default
	// 10 s); transfers are bounded by their caller's context and by the
	// store answering within Timeout.
	Timeout time.Duration
	// Create makes the bucket when it does not exist.
	Create bool
}

// ParseS3URL reads a BLOB_URL of the form
// s3://bucket[/prefix]?endpoint=http://host:port&region=us-east-1.
func ParseS3URL(raw string) (S3Options, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "s3" || u.Host == "" {
		return S3Options{}, fmt.Errorf("blob: BLOB_URL %q: want s3://bucket[/prefix]?endpoint=...&region=...", raw)
	}
	q := u.Query()
	o := S3Options{Bucket: u.Host, Endpoint: q.Get("endpoint"), Region: q.Get("region")}
	if p := strings.Trim(u.Path, "/"); p != "" {
		o.Prefix = p + "/"
	}
	for k := range q {
		if k != "endpoint" && k != "region" {
			return S3Options{}, fmt.Errorf("blob: BLOB_URL: unknown parameter %q (endpoint, region)", k)
		}
	}
	if o.Endpoint != "" {
		e, err := url.Parse(o.Endpoint)
		if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" {
			return S3Options{}, fmt.Errorf("blob: BLOB_URL endpoint %q: want http://host:port or https://host", o.Endpoint)
		}
	}
	return o, nil
}

// NewS3 connects to the store (no request is made unless o.Create).
func NewS3(ctx context.Context, o S3Options) (*S3, error) {
	if o.Bucket == "" {
		return nil, errors.New("blob: s3: no bucket")
	}
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	host, secure := "s3."+o.Region+".amazonaws.com", true
	if o.Endpoint != "" {
		e, err := url.Parse(o.Endpoint)
		if err != nil || e.Host == "" {
			return nil, fmt.Errorf("blob: s3: endpoint %q", o.Endpoint)
		}
		host, secure = e.Host, e.Scheme == "https"
	}
	creds := credentials.NewStaticV4(o.AccessKey, o.SecretKey, "")
	if o.AccessKey == "" && o.SecretKey == "" {
		creds = credentials.NewChainCredentials([]credentials.Provider{&credentials.EnvAWS{}, &credentials.FileAWSCredentials{}})
	}
	// A store that does not answer must not hold a request: dials,
	// TLS handshakes and response headers all have deadlines.
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: o.Timeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   o.Timeout,
		ResponseHeaderTimeout: o.Timeout,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   16,
	}
	c, err := minio.New(host, &minio.Options{
		Creds: creds, Secure: secure, Region: o.Region, Transport: tr,
		BucketLookup: minio.BucketLookupPath, MaxRetries: 2,
	})
	if err != nil {
		return nil, fmt.Errorf("blob: s3: %w", err)
	}
	s := &S3{c: c, bucket: o.Bucket, prefix: o.Prefix, spool: o.Spool, timeout: o.Timeout}
	if o.Create {
		cctx, cancel := context.WithTimeout(ctx, o.Timeout)
		defer cancel()
		ok, err := c.BucketExists(cctx, o.Bucket)
		if err != nil {
			return nil, s.fail("bucket", err)
		}
		if !ok {
			if err := c.MakeBucket(cctx, o.Bucket, minio.MakeBucketOptions{Region: o.Region}); err != nil {
				return nil, s.fail("make bucket", err)
			}
		}
	}
	return s, nil
}

func (s *S3) key(sum string) string { return s.prefix + sum[:2] + "/" + sum }

// errUnavailable is what a tenant sees when the store cannot be reached.
const errUnavailable = "the artifact store is unavailable; try again shortly"

// fail wraps a store error: a missing object is fault.NotFound, anything
// the store did not answer (or answered with a server error) is
// fault.Unavailable.
func (s *S3) fail(what string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("blob: s3: %s: %w", what, err)
	}
	resp := minio.ToErrorResponse(err)
	switch {
	case resp.Code == minio.NoSuchKey || resp.StatusCode == http.StatusNotFound && resp.Code != minio.NoSuchBucket:
		return fault.Wrap(fault.NotFound, "content not found", err)
	case resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.Code != minio.NoSuchBucket:
		// Refused (credentials, policy): the operator's to fix, not a
		// passing outage.
		return fmt.Errorf("blob: s3: %s: %w", what, err)
	}
	return fault.Wrap(fault.Unavailable, errUnavailable, fmt.Errorf("blob: s3: %s: %w", what, err))
}

// partSize is the size of each part of a multipart upload: what one
// upload holds in memory.
const partSize = 16 << 20

// Put spools r to a temporary file while hashing it, then stores it under
// its SHA-256. Content stored already is written again, so its write time
// restarts as Store's does.
func (s *S3) Put(ctx context.Context, r io.Reader) (string, int64, error) {
	tmp, err := os.CreateTemp(s.spool, "threadbox-blob-*")
	if err != nil {
		return "", 0, fmt.Errorf("blob: spool: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	sum, n, err := copyHashed(ctx, tmp, r)
	if err != nil {
		return "", 0, fmt.Errorf("blob: spool: %w", err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return "", 0, fmt.Errorf("blob: spool: %w", err)
	}
	_, err = s.c.PutObject(ctx, s.bucket, s.key(sum), tmp, n, minio.PutObjectOptions{
		ContentType: "application/octet-stream", PartSize: partSize, NumThreads: 1,
	})
	if err != nil {
		return "", 0, s.fail("put", err)
	}
	return sum, n, nil
}

// Open opens the blob with the given SHA-256; reads and seeks are ranged
// GETs, so a download streams from the store.
func (s *S3) Open(ctx context.Context, sum string) (io.ReadSeekCloser, error) {
	if !digest.MatchString(sum) {
		return nil, fault.New(fault.Invalid, "blob: not a sha256 digest")
	}
	sctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if _, err := s.c.StatObject(sctx, s.bucket, s.key(sum), minio.StatObjectOptions{}); err != nil {
		return nil, s.fail("open", err)
	}
	obj, err := s.c.GetObject(ctx, s.bucket, s.key(sum), minio.GetObjectOptions{})
	if err != nil {
		return nil, s.fail("open", err)
	}
	return obj, nil
}

// Walk calls fn with the SHA-256 and last write time of every stored
// blob, stopping at fn's first error.
func (s *S3) Walk(ctx context.Context, fn func(sum string, written time.Time) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the listing if fn stops it early
	for o := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix, Recursive: true}) {
		if o.Err != nil {
			return s.fail("list", o.Err)
		}
		rel := strings.TrimPrefix(o.Key, s.prefix)
		if len(rel) != 67 || rel[2] != '/' || !digest.MatchString(rel[3:]) || rel[:2] != rel[3:5] {
			continue
		}
		if err := fn(rel[3:], o.LastModified); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// Remove deletes the blob if it was last written before writtenBefore
// (zero: whatever its age) and reports whether it did. The check and the
// deletion are two requests: see the type's comment.
func (s *S3) Remove(ctx context.Context, sum string, writtenBefore time.Time) (bool, error) {
	if !digest.MatchString(sum) {
		return false, fault.New(fault.Invalid, "blob: not a sha256 digest")
	}
	ctx, cancel := context.WithTimeout(ctx, 2*s.timeout)
	defer cancel()
	info, err := s.c.StatObject(ctx, s.bucket, s.key(sum), minio.StatObjectOptions{})
	if err != nil {
		if fault.Is(s.fail("remove", err), fault.NotFound) {
			return false, nil
		}
		return false, s.fail("remove", err)
	}
	if !writtenBefore.IsZero() && !info.LastModified.Before(writtenBefore) {
		return false, nil
	}
	if err := s.c.RemoveObject(ctx, s.bucket, s.key(sum), minio.RemoveObjectOptions{}); err != nil {
		return false, s.fail("remove", err)
	}
	return true, nil
}

// Presign returns a URL that downloads the blob for expiry without
// credentials, answered with the given Content-Type and
// Content-Disposition.
func (s *S3) Presign(ctx context.Context, sum, contentType, disposition string, expiry time.Duration) (string, error) {
	if !digest.MatchString(sum) {
		return "", fault.New(fault.Invalid, "blob: not a sha256 digest")
	}
	q := url.Values{}
	if contentType != "" {
		q.Set("response-content-type", contentType)
	}
	if disposition != "" {
		q.Set("response-content-disposition", disposition)
	}
	u, err := s.c.PresignedGetObject(ctx, s.bucket, s.key(sum), expiry, q)
	if err != nil {
		return "", s.fail("presign", err)
	}
	return u.String(), nil
}

// Ready reports whether the bucket answers.
func (s *S3) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	ok, err := s.c.BucketExists(ctx, s.bucket)
	if err != nil {
		return s.fail("ready", err)
	}
	if !ok {
		return fault.New(fault.Unavailable, "blob: s3: bucket "+s.bucket+" does not exist")
	}
	return nil
}

// WithPrefix returns the store of the keys under prefix (ending in "/")
// within this store's, sharing its client.
func (s *S3) WithPrefix(prefix string) *S3 {
	c := *s
	c.prefix = s.prefix + prefix
	return &c
}
