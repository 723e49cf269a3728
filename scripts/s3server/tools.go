//go:build tools

// Package tools pins the S3-compatible server the tests run against
// (Versity's S3 gateway over a POSIX folder); scripts/s3-start.sh builds
// it from this throwaway module, outside the threadbox module.
package tools

import _ "github.com/versity/versitygw/cmd/versitygw"
