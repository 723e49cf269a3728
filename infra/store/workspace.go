package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"threadbox/domain/audit"
	"threadbox/domain/container"
	"threadbox/domain/fault"
	"threadbox/domain/project"
	"threadbox/domain/thread"
)

type projectRow struct {
	ID        string `gorm:"primaryKey"`
	OrgID     string
	OwnerID   string
	Name      string
	CreatedAt time.Time
	UpdatedAt time.Time
}

func (projectRow) TableName() string { return "projects" }

func (r projectRow) domain() project.Project {
	return project.Restore(r.ID, r.OrgID, r.OwnerID, r.Name, r.CreatedAt.UTC(), r.UpdatedAt.UTC())
}

// CreateProject stores a new project.
func (s Threads) CreateProject(ctx context.Context, p project.Project) error {
	r := projectRow{p.ID(), p.OrgID(), p.OwnerID(), p.Name(), p.CreatedAt(), p.UpdatedAt()}
	return translate(s.q(ctx).Create(&r).Error, "project")
}

// Project returns the org's project with id.
func (s Threads) Project(ctx context.Context, orgID, id string) (project.Project, error) {
	return take[projectRow](s.q(ctx).Where("id = ? AND org_id = ?", id, orgID), "project")
}

// ProjectsByOrg lists the org's projects by creation time.
func (s Threads) ProjectsByOrg(ctx context.Context, orgID string) ([]project.Project, error) {
	return find[projectRow](s.q(ctx).Where("org_id = ?", orgID).Order("created_at, id"), "projects")
}

// UpdateProject saves the project's name.
func (s Threads) UpdateProject(ctx context.Context, p project.Project) error {
	return one(s.q(ctx).Model(&projectRow{}).Where("id = ? AND org_id = ?", p.ID(), p.OrgID()).
		Updates(map[string]any{"name": p.Name(), "updated_at": p.UpdatedAt()}), "project")
}

// DeleteProject deletes the org's project; its threads and messages go with it.
func (s Threads) DeleteProject(ctx context.Context, orgID, id string) error {
	return one(s.q(ctx).Where("id = ? AND org_id = ?", id, orgID).Delete(&projectRow{}), "project")
}

// ProjectThreads returns every thread of a project of the org.
func (s Threads) ProjectThreads(ctx context.Context, orgID, projectID string) ([]thread.Thread, error) {
	return find[threadRow](s.q(ctx).Where("org_id = ? AND project_id = ?", orgID, projectID).Order("id"), "project threads")
}

type threadRow struct {
	ID        string `gorm:"primaryKey"`
	OrgID     string
	ProjectID string
	OwnerID   string
	Title     string
	CreatedAt time.Time
	UpdatedAt time.Time
	Forking   bool
}

func (threadRow) TableName() string { return "threads" }

func (r threadRow) domain() thread.Thread {
	t := thread.Restore(r.ID, r.OrgID, r.ProjectID, r.OwnerID, r.Title, r.CreatedAt.UTC(), r.UpdatedAt.UTC())
	if r.Forking {
		t = t.AsFork()
	}
	return t
}

// CreateThread stores a new thread (a fork still being made, too).
func (s Threads) CreateThread(ctx context.Context, t thread.Thread) error {
	r := threadRow{t.ID(), t.OrgID(), t.ProjectID(), t.OwnerID(), t.Title(), t.CreatedAt(), t.UpdatedAt(), t.Forking()}
	return translate(s.q(ctx).Create(&r).Error, "thread")
}

// FinishFork marks the owner's thread id, a fork, as made: it is listed
// from then on. Only this write clears the mark, so an update of the
// thread read while it was made cannot set it again.
func (s Threads) FinishFork(ctx context.Context, orgID, ownerID, id string) error {
	return one(s.q(ctx).Model(&threadRow{}).Where("id = ? AND org_id = ? AND owner_id = ?", id, orgID, ownerID).
		Update("forking", false), "thread")
}

// UnfinishedForks returns every thread still marked as a fork being made,
// in every org.
func (s Threads) UnfinishedForks(ctx context.Context) ([]thread.Thread, error) {
	return find[threadRow](s.q(ctx).Where("forking").Order("id"), "forks")
}

// Thread returns the owner's thread with id.
func (s Threads) Thread(ctx context.Context, orgID, ownerID, id string) (thread.Thread, error) {
	return take[threadRow](s.q(ctx).Where("id = ? AND org_id = ? AND owner_id = ?", id, orgID, ownerID), "thread")
}

// OrgThread returns the org's thread with id, whoever owns it (an admin
// watching its terminal).
func (s Threads) OrgThread(ctx context.Context, orgID, id string) (thread.Thread, error) {
	return take[threadRow](s.q(ctx).Where("id = ? AND org_id = ?", id, orgID), "thread")
}

// likeEscaper escapes LIKE's wildcards (and its escape character).
var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// Threads lists the owner's threads newest first, optionally in one
// project; a fork still being made is not listed.
func (s Threads) Threads(ctx context.Context, orgID, ownerID, projectID string, p thread.Page) ([]thread.Thread, error) {
	q := s.q(ctx).Where("org_id = ? AND owner_id = ? AND NOT forking", orgID, ownerID)
	if projectID != "" {
		q = q.Where("project_id = ?", projectID)
	}
	if p.Query != "" {
		// Messages are JSON: the query is looked for as JSON writes it.
		lower := strings.ToLower(p.Query)
		enc, _ := json.Marshal(lower)
		inTitle := "%" + likeEscaper.Replace(lower) + "%"
		inJSON := "%" + likeEscaper.Replace(string(enc[1:len(enc)-1])) + "%"
		q = q.Where(`(LOWER(title) LIKE ? ESCAPE '\' OR EXISTS (SELECT 1 FROM messages m WHERE m.thread_id = threads.id AND LOWER(m.content) LIKE ? ESCAPE '\'))`, inTitle, inJSON)
	}
	if p.Before != "" {
		var cur threadRow
		if err := s.q(ctx).Where("id = ? AND org_id = ? AND owner_id = ?", p.Before, orgID, ownerID).Take(&cur).Error; err != nil {
			return nil, translate(err, "thread")
		}
		q = q.Where("created_at < ? OR (created_at = ? AND id < ?)", cur.CreatedAt, cur.CreatedAt, cur.ID)
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 20
	}
	return find[threadRow](q.Order("created_at DESC, id DESC").Limit(limit), "threads")
}

// UpdateThread saves the thread's title and update time.
func (s Threads) UpdateThread(ctx context.Context, t thread.Thread) error {
	return one(s.q(ctx).Model(&threadRow{}).Where("id = ? AND org_id = ? AND owner_id = ?", t.ID(), t.OrgID(), t.OwnerID()).
		Updates(map[string]any{"title": t.Title(), "updated_at": t.UpdatedAt()}), "thread")
}

// DeleteThread deletes the owner's thread and its messages.
func (s Threads) DeleteThread(ctx context.Context, orgID, ownerID, id string) error {
	return one(s.q(ctx).Where("id = ? AND org_id = ? AND owner_id = ?", id, orgID, ownerID).Delete(&threadRow{}), "thread")
}

type messageRow struct {
	ID        string `gorm:"primaryKey"`
	ThreadID  string
	Seq       int64
	Role      string
	Content   string
	Usage     string
	Complete  bool
	CreatedAt time.Time
	EndReason string
	EndDetail string
	Replaced  bool
}

func (messageRow) TableName() string { return "messages" }

func (r messageRow) domain() thread.Message {
	var usage []byte
	if r.Usage != "" {
		usage = []byte(r.Usage)
	}
	return thread.RestoreMessage(r.ID, r.ThreadID, r.Seq, thread.Role(r.Role), []byte(r.Content), usage, r.Complete, r.CreatedAt.UTC(), thread.Ending{Reason: thread.EndReason(r.EndReason), Detail: r.EndDetail}).WithReplaced(r.Replaced)
}

// AppendMessage stores m as the thread's next message and returns it with its seq.
func (s Threads) AppendMessage(ctx context.Context, m thread.Message) (thread.Message, error) {
	var out thread.Message
	err := s.txq(ctx).Transaction(func(tx *gorm.DB) error {
		var max struct{ N int64 }
		if err := tx.Model(&messageRow{}).Select("COALESCE(MAX(seq), 0) AS n").Where("thread_id = ?", m.ThreadID()).Scan(&max).Error; err != nil {
			return err
		}
		r := messageRow{ID: m.ID(), ThreadID: m.ThreadID(), Seq: max.N + 1, Role: string(m.Role()), Content: string(m.Content()), Usage: string(m.Usage()), Complete: m.Complete(), CreatedAt: m.CreatedAt(), EndReason: string(m.Ended().Reason), EndDetail: m.Ended().Detail, Replaced: m.Replaced()}
		if err := tx.Create(&r).Error; err != nil {
			return err
		}
		out = r.domain()
		return nil
	})
	return out, translate(err, "message")
}

// UpdateMessage saves a message's content, usage, completeness and why
// its turn ended.
func (s Threads) UpdateMessage(ctx context.Context, m thread.Message) error {
	return one(s.q(ctx).Model(&messageRow{}).Where("id = ?", m.ID()).
		Updates(map[string]any{"content": string(m.Content()), "usage": string(m.Usage()), "complete": m.Complete(), "end_reason": string(m.Ended().Reason), "end_detail": m.Ended().Detail}), "message")
}

// ReplaceMessages marks messages of a thread replaced.
func (s Threads) ReplaceMessages(ctx context.Context, threadID string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	err := s.q(ctx).Model(&messageRow{}).Where("thread_id = ? AND id IN ?", threadID, ids).Update("replaced", true).Error
	return translate(err, "messages")
}

// Messages returns a thread's messages in order.
func (s Threads) Messages(ctx context.Context, threadID string) ([]thread.Message, error) {
	return find[messageRow](s.q(ctx).Where("thread_id = ?", threadID).Order("seq"), "messages")
}

type containerRow struct {
	ID           string `gorm:"primaryKey"`
	ClientID     string
	OrgID        string
	OwnerID      string
	ThreadID     string
	State        string
	Backend      string
	Holder       string
	CreatedAt    time.Time
	LastActiveAt time.Time
	SkillsLoaded bool
}

func (containerRow) TableName() string { return "containers" }

func (r containerRow) domain() container.Container {
	return container.Restore(r.ID, r.ClientID, r.OrgID, r.OwnerID, r.ThreadID, container.State(r.State), r.Backend, r.Holder, r.CreatedAt.UTC(), r.LastActiveAt.UTC()).WithSkills(r.SkillsLoaded)
}

// CreateContainer stores a new container.
func (s Containers) CreateContainer(ctx context.Context, c container.Container) error {
	r := containerRow{c.ID(), c.ClientID(), c.OrgID(), c.OwnerID(), c.ThreadID(), string(c.State()), c.Backend(), c.Holder(), c.CreatedAt(), c.LastActiveAt(), c.MayHoldSkills()}
	return translate(s.q(ctx).Create(&r).Error, "container")
}

// containerSQL reads one container (the Messages API resolves one per
// request); $1 binds on both dialects.
const containerSQL = `SELECT id, client_id, org_id, owner_id, thread_id, state, backend, holder, created_at, last_active_at, skills_loaded FROM containers WHERE id = $1`

// Container returns the container with id. Outside a transaction it is a
// prepared lookup on the read pool, kept on SQLite until the next commit
// (memo.go).
func (s Containers) Container(ctx context.Context, id string) (container.Container, error) {
	if s.bound {
		return take[containerRow](s.q(ctx).Where("id = ?", id), "container")
	}
	return lookup(ctx, s.reads.memo, "container\x00"+id, func() (container.Container, error) {
		var r containerRow
		row, err := s.reads.queryRow(ctx, containerSQL, id)
		if err != nil {
			return container.Container{}, err
		}
		err = row.Scan(&r.ID, &r.ClientID, &r.OrgID, &r.OwnerID, &r.ThreadID, &r.State, &r.Backend, &r.Holder, &r.CreatedAt, &r.LastActiveAt, &r.SkillsLoaded)
		if errors.Is(err, sql.ErrNoRows) {
			return container.Container{}, fault.New(fault.NotFound, "container not found")
		}
		if err != nil {
			return container.Container{}, translate(err, "container")
		}
		return r.domain(), nil
	})
}

// UpdateContainer saves the container's state and last use.
func (s Containers) UpdateContainer(ctx context.Context, c container.Container) error {
	return one(s.q(ctx).Model(&containerRow{}).Where("id = ?", c.ID()).
		Updates(map[string]any{"state": string(c.State()), "backend": c.Backend(), "holder": c.Holder(), "last_active_at": c.LastActiveAt()}), "container")
}

// MarkSkills records whether the container id's skills folder may hold
// skills.
func (s Containers) MarkSkills(ctx context.Context, id string, may bool) error {
	return one(s.q(ctx).Model(&containerRow{}).Where("id = ?", id).Update("skills_loaded", may), "container")
}

// DeleteContainer forgets a container.
func (s Containers) DeleteContainer(ctx context.Context, id string) error {
	return one(s.q(ctx).Where("id = ?", id).Delete(&containerRow{}), "container")
}

type tombstoneRow struct {
	ID        string `gorm:"primaryKey"`
	ClientID  string
	OrgID     string
	OwnerID   string
	CreatedAt time.Time
	ExpiredAt time.Time
}

func (tombstoneRow) TableName() string { return "container_tombstones" }

// ExpireContainer forgets the container t is of and keeps t, in one
// transaction, so that no reader finds the id neither a container nor a
// tombstone. A tombstone kept already stays as it was.
func (s Containers) ExpireContainer(ctx context.Context, t container.Tombstone) error {
	return s.inTx(ctx, func(tx *handle) error {
		r := tombstoneRow{t.ID, t.ClientID, t.OrgID, t.OwnerID, t.CreatedAt.UTC(), t.ExpiredAt.UTC()}
		if err := tx.q(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&r).Error; err != nil {
			return translate(err, "container tombstone")
		}
		return translate(tx.q(ctx).Where("id = ?", t.ID).Delete(&containerRow{}).Error, "container")
	})
}

// Tombstone returns the tombstone of the container id.
func (s Containers) Tombstone(ctx context.Context, id string) (container.Tombstone, error) {
	var r tombstoneRow
	if err := s.q(ctx).Where("id = ?", id).Take(&r).Error; err != nil {
		return container.Tombstone{}, translate(err, "container tombstone")
	}
	return container.Tombstone{ID: r.ID, ClientID: r.ClientID, OrgID: r.OrgID, OwnerID: r.OwnerID, CreatedAt: r.CreatedAt.UTC(), ExpiredAt: r.ExpiredAt.UTC()}, nil
}

// ContainersCreatedBefore lists the containers that are not a thread's
// created before t.
func (s Containers) ContainersCreatedBefore(ctx context.Context, t time.Time) ([]container.Container, error) {
	return s.containers(ctx, s.q(ctx).Where("thread_id = '' AND created_at < ?", t.UTC()))
}

// ContainersInState lists the containers recorded in state st.
func (s Containers) ContainersInState(ctx context.Context, st container.State) ([]container.Container, error) {
	return s.containers(ctx, s.q(ctx).Where("state = ?", string(st)))
}

func (s Containers) containers(ctx context.Context, q *gorm.DB) ([]container.Container, error) {
	return find[containerRow](q.Order("id"), "containers")
}

type auditRow struct {
	ID      string `gorm:"primaryKey"`
	OrgID   string
	ActorID string
	Action  string
	Target  string
	Before  string
	After   string
	At      time.Time
}

func (auditRow) TableName() string { return "audit_events" }

func (r auditRow) domain() audit.Event {
	return audit.Event{ID: r.ID, OrgID: r.OrgID, ActorID: r.ActorID, Action: r.Action, Target: r.Target, Before: []byte(r.Before), After: []byte(r.After), At: r.At.UTC()}
}

// AppendEvent records an audit event.
func (s Accounts) AppendEvent(ctx context.Context, e audit.Event) error {
	r := auditRow{e.ID, e.OrgID, e.ActorID, e.Action, e.Target, string(e.Before), string(e.After), e.At.UTC()}
	return translate(s.q(ctx).Create(&r).Error, "audit event")
}

// Events lists the org's audit events, newest first.
func (s Accounts) Events(ctx context.Context, orgID string, limit int) ([]audit.Event, error) {
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	return find[auditRow](s.q(ctx).Where("org_id = ?", orgID).Order("at DESC, id DESC").Limit(limit), "audit events")
}
