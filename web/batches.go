package web

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/app/batches"
	"threadbox/domain/fault"
	"threadbox/domain/jsonfield"
)

// batchesPrefix is where Message Batches live.
const batchesPrefix = "/api/gpt/v1/messages/batches"

type batchCounts struct {
	Processing int64 `json:"processing"`
	Succeeded  int64 `json:"succeeded"`
	Errored    int64 `json:"errored"`
	Canceled   int64 `json:"canceled"`
	Expired    int64 `json:"expired"`
}

// batchView is the Message Batch object.
type batchView struct {
	ID                string      `json:"id"`
	Type              string      `json:"type"`
	ProcessingStatus  string      `json:"processing_status"`
	RequestCounts     batchCounts `json:"request_counts"`
	CreatedAt         time.Time   `json:"created_at"`
	ExpiresAt         time.Time   `json:"expires_at"`
	EndedAt           *time.Time  `json:"ended_at"`
	CancelInitiatedAt *time.Time  `json:"cancel_initiated_at"`
	ArchivedAt        *time.Time  `json:"archived_at"`
	ResultsURL        *string     `json:"results_url"`
}

func timeOrNull(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// batchViewAt returns the view of a batch as the API shows it to a request
// that came to base (its scheme and host): a batch's results_url is
// absolute, as Anthropic's is, because the official TypeScript SDK fetches
// that URL as given.
func batchViewAt(base string) func(batches.Batch) batchView {
	return func(b batches.Batch) batchView {
		v := batchView{ID: b.ID, Type: "message_batch", ProcessingStatus: b.Status,
			RequestCounts: batchCounts{b.Counts.Processing, b.Counts.Succeeded, b.Counts.Errored, b.Counts.Canceled, b.Counts.Expired},
			CreatedAt:     b.CreatedAt, ExpiresAt: b.ExpiresAt, EndedAt: timeOrNull(b.EndedAt), CancelInitiatedAt: timeOrNull(b.CancelInitiatedAt)}
		if b.Status == batches.Ended {
			u := base + batchesPrefix + "/" + b.ID + "/results"
			v.ResultsURL = &u
		}
		return v
	}
}

// batchesOn lets a request through to the Message Batches handlers, which
// use s.svc.Batches, only when batches are configured: otherwise 503.
func (s *Server) batchesOn(c *fiber.Ctx) error {
	if s.svc.Batches == nil {
		return fault.New(fault.Unavailable, "Message Batches are not configured on this server")
	}
	return c.Next()
}

// createBatch is POST /messages/batches: {"requests": [{"custom_id", "params"}]}.
func (s *Server) createBatch(c *fiber.Ctx) error {
	b, err := body(c, maxJSONBody)
	if err != nil {
		return err
	}
	var in struct {
		Requests []struct {
			CustomID string          `json:"custom_id"`
			Params   json.RawMessage `json:"params"`
		} `json:"requests"`
	}
	if err := jsonfield.Unmarshal(b, &in); err != nil {
		return bodyError("invalid request body", err, jsonErr)
	}
	reqs := make([]batches.Request, len(in.Requests))
	for i, r := range in.Requests {
		reqs[i] = batches.Request{CustomID: r.CustomID, Params: r.Params}
	}
	batch, err := s.svc.Batches.Create(c.UserContext(), principal(c), reqs)
	return answer(c, batch, err, batchViewAt(baseURL(c)))
}

// listBatches is GET /messages/batches: the caller's batches, newest first,
// a page at a time (limit 1-1000, default 20; after_id or before_id).
func (s *Server) listBatches(c *fiber.Ctx) error {
	limit, err := queryLimit(c, 20, 1000)
	if err != nil {
		return err
	}
	all, err := s.svc.Batches.List(c.UserContext(), principal(c))
	if err != nil {
		return err
	}
	page, more, err := pageSpan(c, all, limit, func(b batches.Batch) string { return b.ID }, "batch")
	if err != nil {
		return err
	}
	return c.JSON(idPageOf(views(page, batchViewAt(baseURL(c))), more, func(v batchView) string { return v.ID }))
}

// getBatch is GET /messages/batches/{id}.
func (s *Server) getBatch(c *fiber.Ctx) error {
	b, err := s.svc.Batches.Get(c.UserContext(), principal(c), c.Params("message_batch_id"))
	return answer(c, b, err, batchViewAt(baseURL(c)))
}

// cancelBatch is POST /messages/batches/{id}/cancel.
func (s *Server) cancelBatch(c *fiber.Ctx) error {
	b, err := s.svc.Batches.Cancel(c.UserContext(), principal(c), c.Params("message_batch_id"))
	return answer(c, b, err, batchViewAt(baseURL(c)))
}

// deleteBatch is DELETE /messages/batches/{id}: an ended batch and its
// results.
func (s *Server) deleteBatch(c *fiber.Ctx) error {
	id := c.Params("message_batch_id")
	if err := s.svc.Batches.Delete(c.UserContext(), principal(c), id); err != nil {
		return err
	}
	return c.JSON(fiber.Map{"id": id, "type": "message_batch_deleted"})
}

// batchResultLine is one line of a batch's results.
type batchResultLine struct {
	CustomID string          `json:"custom_id"`
	Result   json.RawMessage `json:"result"`
}

// batchResults is GET /messages/batches/{id}/results: one JSON line per
// request, in the order of the requests. An errored request's error is
// the envelope a live request would have answered.
func (s *Server) batchResults(c *fiber.Ctx) error {
	results, err := s.svc.Batches.Results(c.UserContext(), principal(c), c.Params("message_batch_id"))
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, r := range results {
		var res any
		switch r.Status {
		case batches.Succeeded:
			res = struct {
				Type    string          `json:"type"`
				Message json.RawMessage `json:"message"`
			}{r.Status, r.Message}
		case batches.Errored:
			res = struct {
				Type  string   `json:"type"`
				Error envelope `json:"error"`
			}{r.Status, envelope{Type: "error", Error: envelopeBody{Type: typeOf(statusOf(r.ErrorKind)), Message: r.ErrorMessage}}}
		default:
			res = struct {
				Type string `json:"type"`
			}{r.Status}
		}
		raw, err := json.Marshal(res)
		if err != nil {
			return err
		}
		if err := enc.Encode(batchResultLine{CustomID: r.CustomID, Result: raw}); err != nil {
			return err
		}
	}
	c.Set(fiber.HeaderContentType, "application/x-jsonl")
	return c.Send(buf.Bytes())
}
