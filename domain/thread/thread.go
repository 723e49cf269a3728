// Package thread holds chat threads and their messages. A thread owns one
// sandbox: its container id is the thread's own id.
package thread

import (
	"context"
	"regexp"
	"strings"
	"time"
	"unicode"

	"threadbox/domain/fault"
	"threadbox/domain/org"
)

// Thread is a chat conversation in a project, private to its owner.
type Thread struct {
	org.Owned // its id (also its container's), org, owner and creation
	projectID string
	title     string
	updatedAt time.Time
	forking   bool
}

// DefaultTitle is the title of a thread made without one.
const DefaultTitle = "New thread"

// New returns a valid thread. An empty title becomes DefaultTitle.
func New(id, orgID, projectID, ownerID, title string, now time.Time) (Thread, error) {
	if id == "" || orgID == "" || projectID == "" || ownerID == "" {
		return Thread{}, fault.New(fault.Invalid, "thread id, org, project and owner are required")
	}
	t := Thread{Owned: org.Own(id, orgID, ownerID, now.UTC()), projectID: projectID}
	if strings.TrimSpace(title) == "" {
		title = DefaultTitle
	}
	return t.Retitle(title, now)
}

// Restore rebuilds a thread from storage.
func Restore(id, orgID, projectID, ownerID, title string, createdAt, updatedAt time.Time) Thread {
	return Thread{Owned: org.Own(id, orgID, ownerID, createdAt), projectID: projectID, title: title, updatedAt: updatedAt}
}

// Forking reports whether the thread is a fork still being made: its
// messages and files are still being copied, and it is listed to nobody.
func (t Thread) Forking() bool { return t.forking }

// AsFork returns the thread marked as a fork still being made.
func (t Thread) AsFork() Thread {
	t.forking = true
	return t
}

// Forked returns the thread with its fork made.
func (t Thread) Forked() Thread {
	t.forking = false
	return t
}

// Retitle returns the thread with a new, validated title.
func (t Thread) Retitle(title string, now time.Time) (Thread, error) {
	title, err := fault.Text("thread title", title, 500)
	if err != nil {
		return Thread{}, err
	}
	t.title = title
	t.updatedAt = now.UTC()
	return t, nil
}

// maxProposedTitle bounds a title proposed from a message, in characters.
const maxProposedTitle = 60

// ProposeTitle returns the thread titled after text — its first line that
// holds anything, as plain text (plainTitle), cut at a word within
// maxProposedTitle characters — when the thread still has DefaultTitle; a
// title someone chose is kept.
func (t Thread) ProposeTitle(text string, now time.Time) Thread {
	if t.title != DefaultTitle {
		return t
	}
	line := titleOf(text)
	if line == "" {
		return t
	}
	t.title, t.updatedAt = line, now.UTC()
	return t
}

// WriteTitle returns the thread titled by written, a title written for
// it (by the model, after its first exchange) and cleaned as ProposeTitle
// cleans a message, quotes around it dropped, when its title is still
// proposed, the one ProposeTitle gave it: a title someone chose since is
// kept, and so is proposed when written holds nothing.
func (t Thread) WriteTitle(proposed, written string, now time.Time) Thread {
	if t.title != proposed {
		return t
	}
	line := strings.TrimRight(strings.Trim(titleOf(written), "\"'“”‘’`"), " .")
	if line == "" {
		return t
	}
	t.title, t.updatedAt = line, now.UTC()
	return t
}

// titleOf returns text's first line that holds anything, as plain text
// (plainTitle), cut at a word within maxProposedTitle characters. Bytes
// that are not UTF-8 and control characters other than white space are
// dropped: a title is shown as text and stored in any database
// (fault.Text).
func titleOf(text string) string {
	text = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) && !unicode.IsSpace(r) {
			return -1
		}
		return r
	}, strings.ToValidUTF8(text, ""))
	var line string
	for l := range strings.SplitSeq(text, "\n") {
		if l = strings.Join(strings.Fields(l), " "); l != "" && !strings.HasPrefix(l, "```") {
			if line = plainTitle(l); line != "" {
				break
			}
		}
	}
	if r := []rune(line); len(r) > maxProposedTitle {
		cut := string(r[:maxProposedTitle])
		if i := strings.LastIndex(cut, " "); i > maxProposedTitle/2 {
			cut = cut[:i]
		}
		line = strings.TrimRight(cut, " ,.;:") + "…"
	}
	return line
}

// Markdown a title drops: block markers at the start of a line (heading,
// quote, list item, task box), a heading's closing hashes, a line of rule
// or table dashes, and inline marks whose text is kept (image, link,
// strong, emphasis, strikethrough, code).
var (
	titleBlock    = regexp.MustCompile(`^(?:#{1,6}(?:\s+|$)|>\s*|[-*+]\s+|\d{1,9}[.)]\s+|\[[ xX]\]\s+)`)
	titleClosing  = regexp.MustCompile(`\s+#+$`)
	titleRule     = regexp.MustCompile(`^[-*_=|:\s]+$`)
	titleImage    = regexp.MustCompile(`!\[([^\]]*)\]\([^)]*\)`)
	titleLink     = regexp.MustCompile(`\[([^\]]+)\]\([^)]*\)`)
	titleStrong   = regexp.MustCompile(`(\*\*|__|~~)(\S(?:.*?\S)?)(\*\*|__|~~)`)
	titleEmphasis = regexp.MustCompile(`(^|[^\p{L}\p{N}*_])[*_](\S(?:[^*_]*?\S)?)[*_]($|[^\p{L}\p{N}*_])`)
	titleCode     = regexp.MustCompile("`+([^`]*)`+")
)

// plainTitle returns a line of Markdown as the plain text a reader sees:
// "## **Sales** check" is "Sales check".
func plainTitle(line string) string {
	for {
		next := titleBlock.ReplaceAllString(line, "")
		if next == line {
			break
		}
		line = next
	}
	if titleRule.MatchString(line) {
		return ""
	}
	line = titleClosing.ReplaceAllString(line, "")
	line = titleImage.ReplaceAllString(line, "$1")
	line = titleLink.ReplaceAllString(line, "$1")
	line = titleCode.ReplaceAllString(line, "$1")
	line = titleStrong.ReplaceAllString(line, "$2")
	line = titleEmphasis.ReplaceAllString(line, "$1$2$3")
	return strings.TrimSpace(line)
}

// Touch returns the thread marked as changed at now.
func (t Thread) Touch(now time.Time) Thread { t.updatedAt = now.UTC(); return t }

// ContainerID returns the id of the thread's container: the thread's id.
func (t Thread) ContainerID() string { return t.ID() }

// ProjectID returns the project the thread is in.
func (t Thread) ProjectID() string { return t.projectID }

// Title returns the thread's title.
func (t Thread) Title() string { return t.title }

// UpdatedAt returns when the thread last changed.
func (t Thread) UpdatedAt() time.Time { return t.updatedAt }

// Page asks for one page of a listing, newest first.
type Page struct {
	Limit  int
	Before string // a thread id: list threads older than it
	// Query, when set, keeps the threads whose title or a stored message
	// holds it, ignoring ASCII case: candidates, which the caller checks
	// against the messages' text (the messages are stored as JSON).
	Query string
}

// Repository stores threads. Lookups are scoped by org and owner: another
// user's thread is not found. A listing leaves out the forks being made.
type Repository interface {
	CreateThread(ctx context.Context, t Thread) error
	Thread(ctx context.Context, orgID, ownerID, id string) (Thread, error)
	Threads(ctx context.Context, orgID, ownerID, projectID string, p Page) ([]Thread, error)
	UpdateThread(ctx context.Context, t Thread) error
	DeleteThread(ctx context.Context, orgID, ownerID, id string) error
	// ProjectThreads returns every thread of a project of the org, whoever
	// owns it (for deleting the project).
	ProjectThreads(ctx context.Context, orgID, projectID string) ([]Thread, error)
	// FinishFork marks the owner's thread id, a fork being made, as made.
	FinishFork(ctx context.Context, orgID, ownerID, id string) error
	// UnfinishedForks returns every thread, in every org, still marked as
	// a fork being made.
	UnfinishedForks(ctx context.Context) ([]Thread, error)
}
