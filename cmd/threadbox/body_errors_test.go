package main

import (
	"strings"
	"testing"
)

// goWords are what a message about a request body must not say: the names
// of the server's Go types, fields and decoders.
var goWords = []string{"wire.", "web.", "plain", "struct", "int64", "float64", "[]", "Go value", "unmarshal", "json:"}

// TestBodyErrorsNameTheField: a JSON request body with a value of the
// wrong type, or a content block without its type, without its result or
// with a result of a kind its block does not hold, on the Messages API, its
// token count, its batches and the app API, is a 400 invalid_request_error
// whose message names the value by its path in the body as the client
// wrote it and says what is wrong, in words and without the server's Go
// type names; a body that is not a JSON object is told so.
func TestBodyErrorsNameTheField(t *testing.T) {
	s, _ := modelServer(t, "", "anthropic", nil)
	f := newWSFixture(t, s)
	const gpt = "/api/gpt/v1"
	turn := appAPI + "/thread/" + f.tid + "/messages"
	// history is a request whose second message holds a bash call and
	// the given block as its result.
	history := func(result string) string {
		return `{"model":"m","max_tokens":64,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"server_tool_use","id":"srvtoolu_1","name":"bash_code_execution","input":{"command":"ls"}},` +
			result + `]},{"role":"user","content":"go on"}]}`
	}
	cases := []struct {
		name, method, path, body, want string
	}{
		{"max_tokens", "POST", gpt + "/messages", `{"model":"m","max_tokens":"64","messages":[{"role":"user","content":"hi"}]}`, "max_tokens: must be an integer"},
		{"a content block's text", "POST", gpt + "/messages", `{"model":"m","max_tokens":64,"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":5}]}]}`, "messages.0.content.1.text: must be a string"},
		{"a message's content", "POST", gpt + "/messages", `{"model":"m","max_tokens":64,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":7}]}`, "messages.1.content: must be a string or an array"},
		{"the container", "POST", gpt + "/messages", `{"model":"m","max_tokens":64,"container":5,"messages":[{"role":"user","content":"hi"}]}`, "container: must be a string or an object"},
		{"stream", "POST", gpt + "/messages", `{"model":"m","max_tokens":64,"stream":"yes","messages":[{"role":"user","content":"hi"}]}`, "stream: must be true or false"},
		{"a tool's name", "POST", gpt + "/messages", `{"model":"m","max_tokens":64,"tools":[{"name":["f"]}],"messages":[{"role":"user","content":"hi"}]}`, "tools.0.name: must be a string"},
		{"a messages body that is an array", "POST", gpt + "/messages", `[]`, "the request body must be a JSON object"},
		{"a validated request", "POST", gpt + "/messages/validate", `{"model":"m","max_tokens":64,"temperature":"hot","messages":[{"role":"user","content":"hi"}]}`, "temperature: must be a number"},
		{"a counted message", "POST", gpt + "/messages/count_tokens", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":true}]}]}`, "messages.0.content.0.text: must be a string"},
		{"a counted body that is a string", "POST", gpt + "/messages/count_tokens", `"hi"`, "the request body must be a JSON object"},
		{"a batch's requests", "POST", gpt + "/messages/batches", `{"requests":{}}`, "requests: must be an array"},
		{"a batch request's custom_id", "POST", gpt + "/messages/batches", `{"requests":[{"custom_id":1,"params":{}}]}`, "requests.0.custom_id: must be a string"},
		{"a batch request's params", "POST", gpt + "/messages/batches", `{"requests":[{"custom_id":"a","params":{"model":"m","max_tokens":"1","messages":[]}}]}`, "requests.0.params.max_tokens: must be an integer"},
		{"a batch request's params that are no object", "POST", gpt + "/messages/batches", `{"requests":[{"custom_id":"a","params":[]}]}`, "requests.0.params: must be an object"},
		{"a project's name", "POST", appAPI + "/project", `{"name":5}`, "name: must be a string"},
		{"a project body that is an array", "POST", appAPI + "/project", `[]`, "the request body must be a JSON object"},
		{"a thread's title", "POST", appAPI + "/thread", `{"project_id":"` + f.pid + `","title":["Analysis"]}`, "title: must be a string"},
		{"a renamed thread's title", "PATCH", appAPI + "/thread/" + f.tid, `{"title":{}}`, "title: must be a string"},
		{"a chat turn's content block", "POST", turn, `{"content":[{"type":"text","text":1}]}`, "content.0.text: must be a string"},
		{"a chat turn's content", "POST", turn, `{"content":5}`, "content: must be a string or an array"},
		{"a chat turn's stream", "POST", turn, `{"content":"hi","stream":"yes"}`, "stream: must be true or false"},
		{"a chat turn's tool", "POST", turn, `{"content":"hi","pgpt":{"tools":[5]}}`, "pgpt.tools.0: must be a string or an object"},
		{"a policy's number", "PATCH", appAPI + "/org/features", `{"uploads":{"maxBytes":"big"}}`, "uploads.maxBytes: must be an integer"},
		{"a quota", "PATCH", appAPI + "/org/features", `{"quotas":{"containersPerUser":"3"}}`, "quotas.containersPerUser: must be an integer"},
		{"a token's name", "POST", appAPI + "/tokens", `{"name":5}`, "name: must be a string"},
		{"a content block without its type", "POST", gpt + "/messages", `{"model":"m","max_tokens":64,"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"text":"b"}]}]}`, "messages.0.content.1.type: required"},
		{"a counted block without its type", "POST", gpt + "/messages/count_tokens", `{"model":"m","messages":[{"role":"user","content":[{"text":"b"}]}]}`, "messages.0.content.0.type: required"},
		{"a batch request's block without its type", "POST", gpt + "/messages/batches", `{"requests":[{"custom_id":"a","params":{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{}]}]}}]}`, "requests.0.params.messages.0.content.0.type: required"},
		{"a result block without its result", "POST", gpt + "/messages", history(`{"type":"bash_code_execution_tool_result","tool_use_id":"srvtoolu_1"}`), "messages.1.content.1.content: required"},
		{"a result of an unknown kind", "POST", gpt + "/messages", history(`{"type":"bash_code_execution_tool_result","tool_use_id":"srvtoolu_1","content":{"type":"zzz"}}`), `messages.1.content.1.content.type: must be "bash_code_execution_result" or "bash_code_execution_tool_result_error"`},
		{"a result without its kind", "POST", gpt + "/messages", history(`{"type":"text_editor_code_execution_tool_result","tool_use_id":"srvtoolu_1","content":{}}`), `messages.1.content.1.content.type: must be "text_editor_code_execution_view_result", "text_editor_code_execution_create_result", "text_editor_code_execution_str_replace_result" or "text_editor_code_execution_tool_result_error"`},
		{"a web fetch result without its kind", "POST", gpt + "/messages", history(`{"type":"web_fetch_tool_result","tool_use_id":"srvtoolu_1","content":{}}`), `messages.1.content.1.content.type: must be "web_fetch_result" or "web_fetch_tool_result_error"`},
		{"a chat turn's block without its type", "POST", turn, `{"content":[{"text":"a"}]}`, "content.0.type: required"},
		{"a login's email", "POST", appAPI + "/auth/login", `{"email":5,"password":"x"}`, "email: must be a string"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := s.do(tc.method, tc.path, f.admin, tc.body)
			if r.status != 400 || r.errorType(t) != "invalid_request_error" {
				t.Fatalf("%s %s %s: %d %s, want 400 invalid_request_error", tc.method, tc.path, tc.body, r.status, r.body)
			}
			msg := errorMessage(t, r)
			if msg != tc.want {
				t.Errorf("%s %s %s: message %q, want %q", tc.method, tc.path, tc.body, msg, tc.want)
			}
			for _, w := range goWords {
				if strings.Contains(msg, w) {
					t.Errorf("%s %s %s: message %q names %q", tc.method, tc.path, tc.body, msg, w)
				}
			}
		})
	}
}
