// Package project holds projects: an org's folders of threads, owning artifacts.
package project

import (
	"context"
	"time"

	"threadbox/domain/fault"
)

// Project is an org's folder of threads.
type Project struct {
	id        string
	orgID     string
	ownerID   string
	name      string
	createdAt time.Time
	updatedAt time.Time
}

// New returns a valid project.
func New(id, orgID, ownerID, name string, now time.Time) (Project, error) {
	p := Project{id: id, orgID: orgID, ownerID: ownerID, createdAt: now.UTC(), updatedAt: now.UTC()}
	if id == "" || orgID == "" || ownerID == "" {
		return Project{}, fault.New(fault.Invalid, "project id, org and owner are required")
	}
	return p.Rename(name, now)
}

// Restore rebuilds a project from storage.
func Restore(id, orgID, ownerID, name string, createdAt, updatedAt time.Time) Project {
	return Project{id, orgID, ownerID, name, createdAt, updatedAt}
}

// Rename returns the project with a new, validated name.
func (p Project) Rename(name string, now time.Time) (Project, error) {
	name, err := fault.Text("project name", name, 200)
	if err != nil {
		return Project{}, err
	}
	p.name = name
	p.updatedAt = now.UTC()
	return p, nil
}

// ID returns the project's id.
func (p Project) ID() string { return p.id }

// OrgID returns the owning org.
func (p Project) OrgID() string { return p.orgID }

// OwnerID returns the creating user.
func (p Project) OwnerID() string { return p.ownerID }

// ManageableBy reports whether a user may rename or delete the project:
// its owner, or an admin of its org. Other members use it (make threads
// in it, see its artifacts) but do not manage it.
func (p Project) ManageableBy(userID string, isAdmin bool) bool {
	return isAdmin || (userID != "" && userID == p.ownerID)
}

// Name returns the project's name.
func (p Project) Name() string { return p.name }

// CreatedAt returns when the project was created.
func (p Project) CreatedAt() time.Time { return p.createdAt }

// UpdatedAt returns when the project last changed.
func (p Project) UpdatedAt() time.Time { return p.updatedAt }

// Repository stores projects. Lookups are scoped by org: a project of
// another org is not found.
type Repository interface {
	CreateProject(ctx context.Context, p Project) error
	Project(ctx context.Context, orgID, id string) (Project, error)
	ProjectsByOrg(ctx context.Context, orgID string) ([]Project, error)
	UpdateProject(ctx context.Context, p Project) error
	DeleteProject(ctx context.Context, orgID, id string) error
}
