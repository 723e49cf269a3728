package store

import (
	"context"

	"gorm.io/gorm"
)

// row is a table's row that makes its domain value.
type row[T any] interface{ domain() T }

// take returns the domain value of the one row q finds; no row is
// fault.NotFound naming what.
func take[R row[T], T any](q *gorm.DB, what string) (T, error) {
	var r R
	if err := q.Take(&r).Error; err != nil {
		var zero T
		return zero, translate(err, what)
	}
	return r.domain(), nil
}

// find returns the domain values of the rows q finds, in its order.
func find[R row[T], T any](q *gorm.DB, what string) ([]T, error) {
	var rows []R
	if err := q.Find(&rows).Error; err != nil {
		return nil, translate(err, what)
	}
	out := make([]T, len(rows))
	for i, r := range rows {
		out[i] = r.domain()
	}
	return out, nil
}

// sumSizes selects the total of the rows' size_bytes, zero for none.
const sumSizes = "COALESCE(SUM(size_bytes), 0)"

// number returns the one number q selects (a count or a sum).
func number(q *gorm.DB, what string) (int64, error) {
	var n int64
	if err := q.Scan(&n).Error; err != nil {
		return 0, translate(err, what)
	}
	return n, nil
}

// exec runs one statement; what names it in the error.
func (h *handle) exec(ctx context.Context, what, query string, args ...any) error {
	if err := h.q(ctx).Exec(query, args...).Error; err != nil {
		return dbError(what, err)
	}
	return nil
}
