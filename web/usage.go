package web

import (
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/app/usage"
	"threadbox/domain/fault"
)

// usageDefaultDays is the span of a usage report that names no from.
const usageDefaultDays = 30

// usageView is one row of GET /org/usage: a day's sums (Day) or a user's
// (UserID, Email).
type usageView struct {
	Day          string  `json:"day,omitempty"`
	UserID       string  `json:"user_id,omitempty"`
	Email        string  `json:"email,omitempty"`
	Commands     int64   `json:"commands"`
	WallSeconds  float64 `json:"wall_seconds"`
	CPUSeconds   float64 `json:"cpu_seconds"`
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
}

// getUsage is GET /org/usage?from=YYYY-MM-DD&to=YYYY-MM-DD&group_by=user|day:
// the org's metered usage (commands, wall and CPU time, model tokens) over
// the UTC days from..to, both included; to defaults to today, from to 29
// days before to, group_by to day. Admins only.
func (s *Server) getUsage(c *fiber.Ctx) error {
	if s.svc.Usage == nil {
		return fault.New(fault.Unavailable, "usage metering is not configured on this server")
	}
	to := c.Query("to", time.Now().UTC().Format(usage.DayLayout))
	from := c.Query("from")
	if from == "" {
		t, err := time.Parse(usage.DayLayout, to)
		if err != nil {
			return fault.New(fault.Invalid, "to must be a date, YYYY-MM-DD")
		}
		from = t.AddDate(0, 0, -(usageDefaultDays - 1)).Format(usage.DayLayout)
	}
	rows, err := s.svc.Usage.Report(c.UserContext(), principal(c), from, to, usage.GroupBy(c.Query("group_by", string(usage.ByDay))))
	if err != nil {
		return err
	}
	out := make([]usageView, len(rows))
	for i, r := range rows {
		out[i] = usageView{
			Day: r.Day, UserID: r.UserID, Email: r.Email, Commands: r.Commands,
			WallSeconds: r.Wall.Seconds(), CPUSeconds: r.CPU.Seconds(),
			InputTokens: r.InputTokens, OutputTokens: r.OutputTokens,
		}
	}
	return c.JSON(listResponse[usageView]{Data: out})
}
