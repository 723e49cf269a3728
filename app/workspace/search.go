package workspace

import (
	"context"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"threadbox/app/messages/wire"
	"threadbox/domain/fault"
	"threadbox/domain/thread"
	"threadbox/domain/user"
)

// Found is a thread a search found, with where.
type Found struct {
	Thread thread.Thread
	// MessageID is the message whose text holds the query; "" when the
	// title does.
	MessageID string
	// Snippet is the text around the first match in that message.
	Snippet string
}

// searchCandidates bounds the threads a search reads the messages of.
const searchCandidates = 200

// maxQuery bounds a search query.
const maxQuery = 200

// SearchThreads finds the caller's threads whose title or a message's text
// holds query, ignoring case, newest first, at most limit of them; more
// tells that there were others. The database picks candidates (title, or
// a message's stored JSON); each is then checked against its messages'
// text, so JSON field names or escapes never count as a match.
func (s *Service) SearchThreads(ctx context.Context, p user.Principal, query string, limit int) (found []Found, more bool, err error) {
	query = strings.TrimSpace(query)
	if query == "" || utf8.RuneCountInString(query) > maxQuery {
		return nil, false, fault.Errorf(fault.Invalid, "q must be 1 to %d characters", maxQuery)
	}
	if limit <= 0 || limit > 100 {
		return nil, false, fault.New(fault.Invalid, "limit must be between 1 and 100")
	}
	cands, err := s.store.Threads(ctx, p.OrgID, p.UserID, "", thread.Page{Limit: searchCandidates, Query: query})
	if err != nil {
		return nil, false, err
	}
	needle := strings.ToLower(query)
	for _, th := range cands {
		if strings.Contains(strings.ToLower(th.Title()), needle) {
			found = append(found, Found{Thread: th})
		} else {
			msgs, err := s.store.Messages(ctx, th.ID())
			if err != nil {
				return nil, false, err
			}
			for _, m := range msgs {
				if snip, ok := snippet(messageText(m), needle); ok {
					found = append(found, Found{Thread: th, MessageID: m.ID(), Snippet: snip})
					break
				}
			}
		}
		if len(found) > limit {
			return found[:limit], true, nil
		}
	}
	return found, len(cands) == searchCandidates, nil
}

// messageText is the text a user reads in a message: its text blocks.
func messageText(m thread.Message) string {
	var blocks []wire.ContentBlock
	if json.Unmarshal(m.Content(), &blocks) != nil {
		return ""
	}
	return textOf(blocks)
}

// snippet returns up to about 60 characters either side of the first
// match of needle (lower case) in text, on one line.
func snippet(text, needle string) (string, bool) {
	lower := strings.ToLower(text)
	i := strings.Index(lower, needle)
	// Lowering may change a text's length (a few Unicode letters): then
	// the offsets are not the text's, and the match is shown from the start.
	if i < 0 {
		return "", false
	}
	if len(lower) != len(text) {
		i = 0
	}
	const around = 60
	start, end := max(0, i-around), min(len(text), i+len(needle)+around)
	for start > 0 && !utf8.RuneStart(text[start]) {
		start--
	}
	for end < len(text) && !utf8.RuneStart(text[end]) {
		end++
	}
	out := strings.Join(strings.Fields(text[start:end]), " ")
	if start > 0 {
		out = "…" + out
	}
	if end < len(text) {
		out += "…"
	}
	return out, true
}
