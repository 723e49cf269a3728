package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"

	"github.com/gofiber/fiber/v2"

	"threadbox/domain/fault"
	"threadbox/domain/jsonfield"
	"threadbox/domain/user"
)

// maxJSONBody caps JSON request bodies read whole.
const maxJSONBody = 32 << 20

// body reads the request body whole, up to limit bytes.
func body(c *fiber.Ctx, limit int64) ([]byte, error) {
	if c.Context().RequestBodyStream() != nil {
		b, err := io.ReadAll(io.LimitReader(bodyReader(c), limit+1))
		if err != nil {
			return nil, fault.Wrap(fault.Invalid, "could not read the request body", err)
		}
		if int64(len(b)) > limit {
			return nil, fault.Errorf(fault.TooLarge, "request body is larger than %d bytes", limit)
		}
		return b, nil
	}
	b := c.Body()
	if int64(len(b)) > limit {
		return nil, fault.Errorf(fault.TooLarge, "request body is larger than %d bytes", limit)
	}
	return b, nil
}

// errNotObject refuses a request body that is not a JSON object.
var errNotObject = fault.New(fault.Invalid, "the request body must be a JSON object")

// parseJSON decodes a JSON body into v; unknown fields are ignored.
func parseJSON(c *fiber.Ctx, v any) error {
	return parseJSONLimit(c, v, maxJSONBody)
}

// parseJSONLimit decodes a JSON body of at most limit bytes into v.
func parseJSONLimit(c *fiber.Ctx, v any, limit int64) error {
	b, err := body(c, limit)
	if err != nil {
		return err
	}
	if len(b) == 0 {
		return errNotObject
	}
	if err := jsonfield.Unmarshal(b, v); err != nil {
		return bodyError("invalid JSON body", err, jsonErr)
	}
	return nil
}

// parseOptionalJSON decodes a JSON body into v when there is one; an empty
// body (or only white space) leaves v as it is.
func parseOptionalJSON(c *fiber.Ctx, v any) error {
	raw, err := body(c, maxJSONBody)
	if err != nil {
		return err
	}
	if raw = bytes.TrimSpace(raw); len(raw) > 0 {
		if err := jsonfield.Unmarshal(raw, v); err != nil {
			return bodyError("invalid JSON body", err, jsonErr)
		}
	}
	return nil
}

// queryLimit reads the query parameter limit, a page's size from 1 to most;
// without one it is def.
func queryLimit(c *fiber.Ctx, def, most int) (int, error) {
	v := c.Query("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > most {
		return 0, fault.Errorf(fault.Invalid, "limit must be between 1 and %d", most)
	}
	return n, nil
}

// bodyError is the Invalid error of a JSON request body that decoding
// (jsonfield.Unmarshal) refused with err. A value of the wrong type is
// named by its path in the body as the client wrote it, and what it must
// be; a body that is not an object is told so; any other refusal follows
// prefix, in detail's words.
func bodyError(prefix string, err error, detail func(error) string) error {
	if te, ok := errors.AsType[*jsonfield.FieldError](err); ok {
		switch {
		case te.Path == "" && te.Want == "an object":
			return fault.Wrap(fault.Invalid, errNotObject.Error(), err)
		case te.Path == "":
			return fault.Wrap(fault.Invalid, "the request body must be "+te.Want, err)
		}
		return fault.Wrap(fault.Invalid, te.Error(), err)
	}
	return fault.Wrap(fault.Invalid, prefix+": "+detail(err), err)
}

// jsonErr tells why a JSON body is refused: a syntax error as
// encoding/json words it, anything else only as malformed.
func jsonErr(err error) string {
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return se.Error()
	}
	return "malformed"
}

type listResponse[T any] struct {
	Data    []T    `json:"data"`
	HasMore bool   `json:"has_more"`
	LastID  string `json:"last_id,omitempty"`
}

// idPage is a page of a listing in Anthropic's shape (the Files API, the
// Message Batches API, the Models API): the ids of its first and last items,
// null when it is empty, and whether more follow.
type idPage[V any] struct {
	Data    []V     `json:"data"`
	FirstID *string `json:"first_id"`
	LastID  *string `json:"last_id"`
	HasMore bool    `json:"has_more"`
}

// idPageOf is the idPage of data, whose items' ids are idOf's; more says
// that more follow.
func idPageOf[V any](data []V, more bool, idOf func(V) string) idPage[V] {
	page := idPage[V]{Data: data, HasMore: more}
	if n := len(data); n > 0 {
		first, last := idOf(data[0]), idOf(data[n-1])
		page.FirstID, page.LastID = &first, &last
	}
	return page
}

// pageSpan is one page of all, a list already in its order, as the
// Anthropic API pages its lists: at most limit items from the start, or
// after the item the query parameter after_id names, or before the one
// before_id names (not both); what is the kind of item an error names.
// more says whether items follow the page, or with before_id precede it.
func pageSpan[T any](c *fiber.Ctx, all []T, limit int, idOf func(T) string, what string) (page []T, more bool, err error) {
	after, before := c.Query("after_id"), c.Query("before_id")
	if after != "" && before != "" {
		return nil, false, fault.New(fault.Invalid, "after_id and before_id cannot be used together")
	}
	index := func(id, param string) (int, error) {
		for i, v := range all {
			if idOf(v) == id {
				return i, nil
			}
		}
		return 0, fault.Errorf(fault.Invalid, "%s %q does not name a listed %s", param, id, what)
	}
	switch {
	case after != "":
		i, err := index(after, "after_id")
		if err != nil {
			return nil, false, err
		}
		end := min(i+1+limit, len(all))
		return all[i+1 : end], end < len(all), nil
	case before != "":
		i, err := index(before, "before_id")
		if err != nil {
			return nil, false, err
		}
		start := max(0, i-limit)
		return all[start:i], start > 0, nil
	}
	end := min(limit, len(all))
	return all[:end], end < len(all), nil
}

// views shows each of items by view.
func views[T, V any](items []T, view func(T) V) []V {
	out := make([]V, len(items))
	for i, it := range items {
		out[i] = view(it)
	}
	return out
}

// pageOf is one page of a list: more says that another follows, after the
// last item, whose id is idOf's.
func pageOf[V any](data []V, more bool, idOf func(V) string) listResponse[V] {
	resp := listResponse[V]{Data: data, HasMore: more}
	if len(data) > 0 {
		resp.LastID = idOf(data[len(data)-1])
	}
	return resp
}

// answer is a handler's last step: the service call's error, for the error
// mapper, or its result shown by view as the JSON body.
func answer[T, V any](c *fiber.Ctx, v T, err error, view func(T) V) error {
	if err != nil {
		return err
	}
	return c.JSON(view(v))
}

// answerCreated is answer for a call that created v: 201 Created.
func answerCreated[T, V any](c *fiber.Ctx, v T, err error, view func(T) V) error {
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(view(v))
}

// withJSON is handler h given the request's JSON body decoded by parse
// (parseJSON or parseOptionalJSON) into a T: a body parse refuses is
// answered before h runs.
func withJSON[T any](parse func(*fiber.Ctx, any) error, h func(*fiber.Ctx, T) error) fiber.Handler {
	return func(c *fiber.Ctx) error {
		var req T
		if err := parse(c, &req); err != nil {
			return err
		}
		return h(c, req)
	}
}

// getByParam is the handler of GET of one resource of the caller named
// by the route parameter param: get's result shown by view.
func getByParam[T, V any](param string, get func(context.Context, user.Principal, string) (T, error), view func(T) V) fiber.Handler {
	return func(c *fiber.Ctx) error {
		v, err := get(c.UserContext(), principal(c), c.Params(param))
		return answer(c, v, err, view)
	}
}

// deleteByParam is the handler of DELETE of one resource of the caller
// named by the route parameter param: 204 No Content once del removed it.
func deleteByParam(param string, del func(context.Context, user.Principal, string) error) fiber.Handler {
	return func(c *fiber.Ctx) error {
		if err := del(c.UserContext(), principal(c), c.Params(param)); err != nil {
			return err
		}
		return c.SendStatus(fiber.StatusNoContent)
	}
}

// answerList is answer for a call that returned a whole list: each item
// shown by view, in a list object.
func answerList[T, V any](c *fiber.Ctx, items []T, err error, view func(T) V) error {
	if err != nil {
		return err
	}
	return c.JSON(listResponse[V]{Data: views(items, view)})
}
