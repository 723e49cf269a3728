package web

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/app/admin"
	"threadbox/domain/fault"
	"threadbox/domain/jsonfield"
	"threadbox/domain/org"
	"threadbox/domain/user"
)

// policyPatch is the JSON merge patch body of PATCH /org/features.
type policyPatch struct {
	CodeExecution *struct {
		Enabled *bool `json:"enabled"`
	} `json:"codeExecution"`
	Uploads *struct {
		Enabled  *bool  `json:"enabled"`
		MaxBytes *int64 `json:"maxBytes"`
	} `json:"uploads"`
	Downloads *struct {
		Generated *bool `json:"generated"`
		Uploaded  *bool `json:"uploaded"`
	} `json:"downloads"`
	ContentCredentials *struct {
		Enabled *bool `json:"enabled"`
	} `json:"contentCredentials"`
	Egress *struct {
		Enabled *bool     `json:"enabled"`
		Allow   *[]string `json:"allow"`
	} `json:"egress"`
	Quotas quotasPatch `json:"quotas"`
}

// quotasPatch is the "quotas" member of a policy merge patch: each quota
// named is set, null restoring its default (0, unlimited), and "quotas":
// null restores them all. A name that is no quota is refused by the policy.
type quotasPatch map[org.Quota]int64

// UnmarshalJSON decodes the member, null included.
func (q *quotasPatch) UnmarshalJSON(b []byte) error {
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		*q = quotasPatch{}
		for _, name := range org.AllQuotas {
			(*q)[name] = 0
		}
		return nil
	}
	var raw map[string]*int64
	if err := jsonfield.Unmarshal(b, &raw); err != nil {
		return err
	}
	*q = make(quotasPatch, len(raw))
	for name, v := range raw {
		(*q)[org.Quota(name)] = 0
		if v != nil {
			(*q)[org.Quota(name)] = *v
		}
	}
	return nil
}

func (pp policyPatch) domain() org.PolicyPatch {
	var out org.PolicyPatch
	if pp.CodeExecution != nil {
		out.CodeExecution = pp.CodeExecution.Enabled
	}
	if pp.Uploads != nil {
		out.Uploads, out.MaxUploadBytes = pp.Uploads.Enabled, pp.Uploads.MaxBytes
	}
	if pp.Downloads != nil {
		out.DownloadsGenerated, out.DownloadsUploaded = pp.Downloads.Generated, pp.Downloads.Uploaded
	}
	if pp.ContentCredentials != nil {
		out.ContentCredentials = pp.ContentCredentials.Enabled
	}
	if pp.Egress != nil {
		out.Egress, out.EgressAllow = pp.Egress.Enabled, pp.Egress.Allow
	}
	out.Quotas = pp.Quotas
	return out
}

func (s *Server) getFeatures(c *fiber.Ctx) error {
	p, err := s.svc.Admin.Policy(c.UserContext(), principal(c))
	return answer(c, p, err, admin.ViewOf)
}

// policyKeys lists the members of each object of a policy patch; quotas
// holds quota names, which the policy checks.
var policyKeys = map[string][]string{
	"codeExecution":      {"enabled"},
	"uploads":            {"enabled", "maxBytes"},
	"downloads":          {"generated", "uploaded"},
	"contentCredentials": {"enabled"},
	"egress":             {"enabled", "allow"},
	"quotas":             nil,
}

// parsePolicyPatch decodes a policy merge patch, refusing a key the
// policy does not have (a typo such as "enable" must not answer 200 and
// change nothing): the error names it by its path.
func parsePolicyPatch(b []byte) (policyPatch, error) {
	var pp policyPatch
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil || top == nil {
		return pp, errNotObject
	}
	for _, key := range slices.Sorted(maps.Keys(top)) {
		members, known := policyKeys[key]
		if !known {
			return pp, fault.Errorf(fault.Invalid, "unknown policy key %q: the policy has codeExecution, uploads, downloads, contentCredentials, egress and quotas", key)
		}
		if members == nil {
			continue
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(top[key], &obj); err != nil {
			return pp, fault.Errorf(fault.Invalid, "%s must be an object", key)
		}
		for _, m := range slices.Sorted(maps.Keys(obj)) {
			if !slices.Contains(members, m) {
				return pp, fault.Errorf(fault.Invalid, "unknown policy key %q: %s has %s", key+"."+m, key, strings.Join(members, " and "))
			}
		}
	}
	if err := jsonfield.Unmarshal(b, &pp); err != nil {
		return pp, bodyError("invalid JSON body", err, jsonErr)
	}
	return pp, nil
}

// patchFeatures is PATCH /org/features: a JSON merge patch of the policy,
// audited; a key the policy does not have is a 400 and changes nothing.
func (s *Server) patchFeatures(c *fiber.Ctx) error {
	b, err := body(c, maxJSONBody)
	if err != nil {
		return err
	}
	pp, err := parsePolicyPatch(b)
	if err != nil {
		return err
	}
	p, err := s.svc.Admin.PatchPolicy(c.UserContext(), principal(c), pp.domain())
	return answer(c, p, err, admin.ViewOf)
}

type auditView struct {
	ID      string `json:"id"`
	ActorID string `json:"actor_id"`
	// ActorEmail and TargetEmail name the org's users the entry's actor
	// and target ids are ("" for a target that is not a user, or a user
	// deleted since).
	ActorEmail  string    `json:"actor_email"`
	Action      string    `json:"action"`
	Target      string    `json:"target"`
	TargetEmail string    `json:"target_email"`
	Before      rawJSON   `json:"before"`
	After       rawJSON   `json:"after"`
	At          time.Time `json:"at"`
}

// rawJSON embeds stored JSON as is, or null when empty.
type rawJSON []byte

// MarshalJSON returns the stored JSON, or null.
func (r rawJSON) MarshalJSON() ([]byte, error) {
	if len(r) == 0 {
		return []byte("null"), nil
	}
	return r, nil
}

// auditPage is the audit log's page size without a limit, and auditMaxPage
// the largest a limit may ask for.
const (
	auditPage    = 100
	auditMaxPage = 1000
)

func (s *Server) listAudit(c *fiber.Ctx) error {
	limit, err := queryLimit(c, auditPage, auditMaxPage)
	if err != nil {
		return err
	}
	evs, err := s.svc.Admin.AuditEvents(c.UserContext(), principal(c), limit)
	if err != nil {
		return err
	}
	users, err := s.svc.Admin.Users(c.UserContext(), principal(c))
	if err != nil {
		return err
	}
	email := make(map[string]string, len(users))
	for _, u := range users {
		email[u.ID()] = u.Email()
	}
	out := make([]auditView, len(evs))
	for i, e := range evs {
		out[i] = auditView{e.ID, e.ActorID, email[e.ActorID], e.Action, e.Target, email[e.Target], rawJSON(e.Before), rawJSON(e.After), e.At}
	}
	return c.JSON(listResponse[auditView]{Data: out})
}

type userView struct {
	ID       string `json:"id"`
	Email    string `json:"email"`
	Role     string `json:"role"`
	Disabled bool   `json:"disabled"`
	// HasPassword is false for a user created without one: they cannot
	// sign in until an admin sets it.
	HasPassword bool      `json:"has_password"`
	CreatedAt   time.Time `json:"created_at"`
}

func viewUser(u user.User) userView {
	return userView{u.ID(), u.Email(), string(u.Role()), u.Disabled(), u.PasswordHash() != "", u.CreatedAt()}
}

func (s *Server) listUsers(c *fiber.Ctx) error {
	us, err := s.svc.Admin.Users(c.UserContext(), principal(c))
	return answerList(c, us, err, viewUser)
}

type userRequest struct {
	Email    string  `json:"email"`
	Role     *string `json:"role"`
	Password *string `json:"password"`
	Disabled *bool   `json:"disabled"`
}

func (s *Server) createUser(c *fiber.Ctx, req userRequest) error {
	nu := admin.NewUser{Email: req.Email}
	if req.Role != nil {
		nu.Role = user.Role(*req.Role)
	}
	if req.Password != nil {
		nu.Password = *req.Password
	}
	u, err := s.svc.Admin.CreateUser(c.UserContext(), principal(c), nu)
	return answerCreated(c, u, err, viewUser)
}

func (s *Server) patchUser(c *fiber.Ctx, req userRequest) error {
	ch := admin.UserChange{Disabled: req.Disabled, Password: req.Password}
	if req.Role != nil {
		r := user.Role(*req.Role)
		ch.Role = &r
	}
	u, err := s.svc.Admin.UpdateUser(c.UserContext(), principal(c), c.Params("id"), ch)
	return answer(c, u, err, viewUser)
}
