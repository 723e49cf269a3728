package turns

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/domain/user"
)

// titlePrompt is the system prompt of a title request.
const titlePrompt = "You name chat threads. Answer with a title of at most six words for the conversation the user gives: plain text on one line, no quotes, no Markdown, no final period."

// titleMaxTokens bounds a title's answer.
const titleMaxTokens = 32

// Title asks model for a thread's title from its first exchange, in one
// small request without tools, prepared and metered as any Messages API
// request; the answer's text is returned as the model wrote it.
func (s *Service) Title(ctx context.Context, p user.Principal, model, exchange string) (string, error) {
	system, err := json.Marshal(titlePrompt)
	if err != nil {
		return "", fmt.Errorf("turns: title prompt: %w", err)
	}
	req := &wire.Request{
		Model: model, MaxTokens: titleMaxTokens, System: system,
		Messages: []wire.Message{{Role: wire.RoleUser, Content: []wire.ContentBlock{{Type: wire.BlockText, Text: exchange}}}},
	}
	t, err := s.Prepare(ctx, p, req, nil)
	if err != nil {
		return "", err
	}
	var col messages.Collector
	if err := t.Run(ctx, &col); err != nil {
		return "", err
	}
	var b strings.Builder
	for _, bl := range col.Response().Content {
		if bl.Type == wire.BlockText {
			b.WriteString(bl.Text)
		}
	}
	return b.String(), nil
}
