package web

import (
	"encoding/base64"
	"encoding/csv"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/app/admin"
	"threadbox/domain/egress"
	"threadbox/domain/fault"
)

// egressRecordView is one row of GET /org/egress: a connection the egress
// proxy allowed or refused.
type egressRecordView struct {
	ID          string    `json:"id"`
	At          time.Time `json:"at"`
	UserID      string    `json:"user_id"`
	ThreadID    string    `json:"thread_id"`
	ContainerID string    `json:"container_id"`
	Host        string    `json:"host"`
	Port        int       `json:"port"`
	Address     string    `json:"address"`
	Allowed     bool      `json:"allowed"`
	Rule        string    `json:"rule"`
	Reason      string    `json:"reason"`
	BytesUp     int64     `json:"bytes_up"`
	BytesDown   int64     `json:"bytes_down"`
	DurationMs  int64     `json:"duration_ms"`
}

func egressView(r egress.Record) egressRecordView {
	return egressRecordView{r.ID, r.At, r.UserID, r.ThreadID, r.ContainerID, r.Host, r.Port, r.Address, r.Allowed,
		r.Rule, r.Reason, r.BytesUp, r.BytesDown, r.Duration.Milliseconds()}
}

// egressDefaultPage is a ledger page's size when the request names none.
const egressDefaultPage = 100

// egressCursor encodes where the next page starts; parseEgressCursor reads
// it back.
func egressCursor(r egress.Record) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(r.At.UnixNano(), 10) + " " + r.ID))
}

func parseEgressCursor(s string) (egress.Cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	ns, id, ok := strings.Cut(string(b), " ")
	n, nerr := strconv.ParseInt(ns, 10, 64)
	if err != nil || !ok || nerr != nil || id == "" {
		return egress.Cursor{}, fault.New(fault.Invalid, "cursor is not one this API returned")
	}
	return egress.Cursor{At: time.Unix(0, n).UTC(), ID: id}, nil
}

// parseEgressFilter reads the ledger filter from the query string.
func parseEgressFilter(c *fiber.Ctx) (egress.LedgerFilter, error) {
	f := egress.LedgerFilter{UserID: c.Query("user_id"), ThreadID: c.Query("thread_id"),
		ContainerID: c.Query("container_id"), Host: strings.ToLower(c.Query("host"))}
	switch c.Query("allowed") {
	case "":
	case "true", "false":
		v := c.Query("allowed") == "true"
		f.Allowed = &v
	default:
		return f, fault.New(fault.Invalid, "allowed must be true or false")
	}
	for _, b := range []struct {
		key string
		to  *time.Time
	}{{"after", &f.After}, {"before", &f.Before}} {
		if v := c.Query(b.key); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return f, fault.Errorf(fault.Invalid, "%s must be an RFC 3339 time", b.key)
			}
			*b.to = t
		}
	}
	limit, err := queryLimit(c, egressDefaultPage, egress.MaxLedgerPage)
	if err != nil {
		return f, err
	}
	f.Limit = limit
	if v := c.Query("cursor"); v != "" {
		cur, err := parseEgressCursor(v)
		if err != nil {
			return f, err
		}
		f.Cursor = cur
	}
	return f, nil
}

// egressPage is a page of the ledger with the cursor of the next one.
type egressPage struct {
	Data       []egressRecordView `json:"data"`
	HasMore    bool               `json:"has_more"`
	NextCursor string             `json:"next_cursor,omitempty"`
}

// listEgress is GET /org/egress: the org's egress ledger, newest first,
// filtered by user_id, thread_id, container_id, host, allowed, after and
// before, paged by limit and cursor; format=csv answers the page as CSV.
// Admins only.
func (s *Server) listEgress(c *fiber.Ctx) error {
	f, err := parseEgressFilter(c)
	if err != nil {
		return err
	}
	want := f.Limit
	f.Limit++ // one more says whether another page follows
	recs, err := s.svc.Admin.EgressLedger(c.UserContext(), principal(c), f)
	if err != nil {
		return err
	}
	page := egressPage{Data: make([]egressRecordView, 0, min(len(recs), want))}
	if len(recs) > want {
		recs, page.HasMore = recs[:want], true
		page.NextCursor = egressCursor(recs[want-1])
	}
	for _, r := range recs {
		page.Data = append(page.Data, egressView(r))
	}
	switch c.Query("format", "json") {
	case "json":
		return c.JSON(page)
	case "csv":
		return writeEgressCSV(c, page)
	}
	return fault.New(fault.Invalid, "format must be json or csv")
}

// writeEgressCSV answers a ledger page as CSV, one connection a row; the
// next page's cursor, if any, is in the Egress-Next-Cursor header.
func writeEgressCSV(c *fiber.Ctx, page egressPage) error {
	c.Set(fiber.HeaderContentType, "text/csv; charset=utf-8")
	c.Set(fiber.HeaderContentDisposition, `attachment; filename="egress.csv"`)
	if page.NextCursor != "" {
		c.Set("Egress-Next-Cursor", page.NextCursor)
	}
	w := csv.NewWriter(c.Response().BodyWriter())
	_ = w.Write([]string{"id", "at", "user_id", "thread_id", "container_id", "host", "port", "address", "allowed", "rule", "reason", "bytes_up", "bytes_down", "duration_ms"})
	for _, r := range page.Data {
		_ = w.Write([]string{r.ID, r.At.Format(time.RFC3339Nano), r.UserID, r.ThreadID, r.ContainerID, csvSafe(r.Host), strconv.Itoa(r.Port),
			r.Address, strconv.FormatBool(r.Allowed), csvSafe(r.Rule), csvSafe(r.Reason),
			strconv.FormatInt(r.BytesUp, 10), strconv.FormatInt(r.BytesDown, 10), strconv.FormatInt(r.DurationMs, 10)})
	}
	w.Flush()
	return w.Error()
}

// csvSafe keeps a cell from being read as a formula by a spreadsheet.
func csvSafe(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}

// egressSecretView is an org secret as the API shows it: never its value.
type egressSecretView struct {
	Name      string    `json:"name"`
	Hosts     []string  `json:"hosts"`
	Header    string    `json:"header"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

func egressSecretViewOf(s egress.Secret) egressSecretView {
	return egressSecretView{Name: s.Name, Hosts: s.HostStrings(), Header: s.Header, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

// listEgressSecrets is GET /org/egress/secrets: the org's secrets by
// name, without values. Admins only.
func (s *Server) listEgressSecrets(c *fiber.Ctx) error {
	list, err := s.svc.Admin.EgressSecrets(c.UserContext(), principal(c))
	if err != nil {
		return err
	}
	out := struct {
		Data []egressSecretView `json:"data"`
	}{Data: make([]egressSecretView, 0, len(list))}
	for _, sec := range list {
		out.Data = append(out.Data, egressSecretViewOf(sec))
	}
	return c.JSON(out)
}

// egressSecretRequest is the body of PUT /org/egress/secrets/:name.
type egressSecretRequest struct {
	Hosts  []string `json:"hosts"`
	Header string   `json:"header"`
	Value  string   `json:"value"`
}

// putEgressSecret is PUT /org/egress/secrets/:name: creates (201) or
// replaces (200) the org's secret; the answer never holds the value.
// Admins only.
func (s *Server) putEgressSecret(c *fiber.Ctx, req egressSecretRequest) error {
	sec, created, err := s.svc.Admin.PutEgressSecret(c.UserContext(), principal(c), c.Params("name"),
		admin.NewSecret{Hosts: req.Hosts, Header: req.Header, Value: req.Value})
	if err != nil {
		return err
	}
	status := fiber.StatusOK
	if created {
		status = fiber.StatusCreated
	}
	return c.Status(status).JSON(egressSecretViewOf(sec))
}
