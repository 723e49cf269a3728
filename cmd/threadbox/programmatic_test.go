package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"threadbox/infra/llm/fakeupstream"
)

// weatherTool is a client tool that code may call (allowed_callers names
// code_execution_20260120); secretTool only the model may call.
func ptcTools(base []anthropic.ToolUnionParam) []anthropic.ToolUnionParam {
	schema := anthropic.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}, Required: []string{"city"}}
	return append(append([]anthropic.ToolUnionParam{}, base...),
		anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{Name: "get_weather", Description: anthropic.String("The temperature of a city."), InputSchema: schema, AllowedCallers: []string{"code_execution_20260120"}}},
		anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{Name: "read_secret", Description: anthropic.String("A secret."), InputSchema: schema}},
	)
}

// pendingCalls returns the tool_use blocks of a paused response, checking
// that each names the cell's call as its caller.
func pendingCalls(t *testing.T, msg *anthropic.Message) []anthropic.ToolUseBlock {
	t.Helper()
	if msg.StopReason != "tool_use" {
		t.Fatalf("stop_reason %q, want tool_use: %s", msg.StopReason, msg.RawJSON())
	}
	var cell string
	var out []anthropic.ToolUseBlock
	for _, b := range msg.Content {
		switch b.Type {
		case "server_tool_use":
			cell = b.AsServerToolUse().ID
		case "tool_use":
			u := b.AsToolUse()
			if u.Caller.Type != "code_execution_20260120" || !strings.HasPrefix(u.Caller.ToolID, "srvtoolu_") || (cell != "" && u.Caller.ToolID != cell) {
				t.Fatalf("tool_use without the cell as caller: %s", u.RawJSON())
			}
			out = append(out, u)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no tool_use in a paused response: %s", msg.RawJSON())
	}
	return out
}

// answer returns the user message answering calls with results.
func answer(calls []anthropic.ToolUseBlock, result func(anthropic.ToolUseBlock) (string, bool)) anthropic.MessageParam {
	var blocks []anthropic.ContentBlockParamUnion
	for _, c := range calls {
		text, isErr := result(c)
		blocks = append(blocks, anthropic.NewToolResultBlock(c.ID, text, isErr))
	}
	return anthropic.NewUserMessage(blocks...)
}

// cellEnd returns the result of a resumed cell, block i of a response
// (its server_tool_use came in the response that paused it).
func cellEnd(t *testing.T, content []anthropic.ContentBlockUnion, i int) anthropic.CodeExecutionResultBlock {
	t.Helper()
	if len(content) <= i || content[i].Type != "code_execution_tool_result" {
		t.Fatalf("block %d is not a cell's result: %v", i, blockTypes(content))
	}
	res := content[i].AsCodeExecutionToolResult()
	if res.Content.Type != "code_execution_result" || !strings.HasPrefix(res.ToolUseID, "srvtoolu_") {
		t.Fatalf("cell result %s", res.RawJSON())
	}
	return res.Content.AsResponseCodeExecutionResultBlock()
}

// temperature is the client's get_weather.
func temperature(c anthropic.ToolUseBlock) (string, bool) {
	var in struct{ City string }
	_ = json.Unmarshal(c.Input, &in)
	temps := map[string]int{"Paris": 21, "Rome": 27, "Oslo": 9}
	if v, ok := temps[in.City]; ok {
		return fmt.Sprintf(`{"city":%q,"celsius":%d}`, in.City, v), false
	}
	return "unknown city " + in.City, true
}

// echoFinal makes the fake model's answers, once the script is done, say
// what the last tool_result it got held: its final answer is built from
// the results the code printed.
func echoFinal(fake *fakeupstream.Server) {
	fake.SetFallback(func(_ fakeupstream.Format, body json.RawMessage) fakeupstream.Reply {
		var req struct {
			Messages []struct {
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		_ = json.Unmarshal(body, &req)
		text := "no result"
		if n := len(req.Messages); n > 0 {
			var blocks []struct {
				Type    string          `json:"type"`
				Content json.RawMessage `json:"content"`
			}
			if json.Unmarshal(req.Messages[n-1].Content, &blocks) == nil {
				for _, b := range blocks {
					if b.Type == "tool_result" {
						text = "From the code: " + string(b.Content)
					}
				}
			}
		}
		return textStep(text)
	})
}

// TestProgrammaticToolCalling runs programmatic tool calling through the
// official SDK in a real Docker sandbox, with a scripted model: the
// cell's Python calls the client's tool, each call pauses the cell and
// comes back to the client, whose results resume it.
func TestProgrammaticToolCalling(t *testing.T) {
	bin := needDocker(t)
	s, fake := modelServer(t, "", "anthropic", map[string]string{
		"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "PYTHON_TOOL_RESULT_TIMEOUT": "3s",
	})
	tok := s.bootstrap("acme", "admin@acme.test")
	cl := msgClient(s, tok)
	ctx := context.Background()
	echoFinal(fake)
	tools := ptcTools(codeExec2601)

	// run sends history and, while the cell pauses, answers its calls with
	// result; it returns the final message and the calls made.
	run := func(t *testing.T, container string, history []anthropic.MessageParam, stream bool, result func(anthropic.ToolUseBlock) (string, bool)) (*anthropic.Message, [][]anthropic.ToolUseBlock, []*anthropic.Message) {
		t.Helper()
		var rounds [][]anthropic.ToolUseBlock
		var all []*anthropic.Message
		for range 10 {
			var msg *anthropic.Message
			if stream {
				st := cl.Messages.NewStreaming(ctx, msgParams(container, history, tools...))
				var acc anthropic.Message
				for st.Next() {
					if err := acc.Accumulate(st.Current()); err != nil {
						t.Fatal(err)
					}
				}
				if err := st.Err(); err != nil {
					t.Fatal(err)
				}
				msg = &acc
			} else {
				var err error
				if msg, err = cl.Messages.New(ctx, msgParams(container, history, tools...)); err != nil {
					t.Fatal(err)
				}
			}
			all = append(all, msg)
			if msg.Container.ID != container {
				t.Fatalf("container %+v", msg.Container)
			}
			if msg.StopReason != "tool_use" {
				return msg, rounds, all
			}
			calls := pendingCalls(t, msg)
			rounds = append(rounds, calls)
			history = append(history, msg.ToParam(), answer(calls, result))
		}
		t.Fatal("the cell paused more than 10 times")
		return nil, nil, nil
	}

	t.Run("a loop of three calls, each answered by the client", func(t *testing.T) {
		fake.Push(fakeupstream.ToolLoop("get_weather", "city", "Paris", "Rome", "Oslo"))
		final, rounds, all := run(t, "ptc1", userText("weather in three cities"), false, temperature)
		if len(rounds) != 3 {
			t.Fatalf("%d pauses, want 3", len(rounds))
		}
		for i, city := range []string{"Paris", "Rome", "Oslo"} {
			if len(rounds[i]) != 1 || rounds[i][0].Name != "get_weather" || string(rounds[i][0].Input) != fmt.Sprintf(`{"city":%q}`, city) {
				t.Fatalf("pause %d: %+v", i, rounds[i])
			}
		}
		// The first response is the cell's call and its first tool call.
		if got := blockTypes(all[0].Content); strings.Join(got, ",") != "server_tool_use,tool_use" {
			t.Fatalf("first response %v", got)
		}
		r := cellEnd(t, final.Content, 0)
		want := `[{"city": "Paris", "celsius": 21}, {"city": "Rome", "celsius": 27}, {"city": "Oslo", "celsius": 9}]` + "\n"
		if r.ReturnCode != 0 || r.Stdout != want {
			t.Fatalf("cell result %+v", r)
		}
		text := final.Content[len(final.Content)-1]
		for _, v := range []string{"21", "27", "9"} {
			if text.Type != "text" || !strings.Contains(text.Text, v) {
				t.Fatalf("the final answer does not use result %s: %s", v, final.RawJSON())
			}
		}
		if final.StopReason != "end_turn" || codeExecRequests(t, final) != 0 || codeExecRequests(t, all[0]) != 1 {
			t.Fatalf("stop %s, usage %s / %s", final.StopReason, all[0].RawJSON(), final.RawJSON())
		}
		// The model got the code tool in the cell's description, not as its
		// own, and never saw the calls the code made.
		first := lastUpstream(t, fake, 2)
		if strings.Contains(first, `"name":"get_weather"`) || !strings.Contains(first, "- get_weather: The temperature of a city.") || strings.Contains(first, "allowed_callers") || !strings.Contains(first, `"name":"read_secret"`) {
			t.Fatalf("first upstream request: %s", first)
		}
		last := lastUpstream(t, fake, 1)
		if strings.Contains(last, `"caller"`) || strings.Contains(last, `"name":"get_weather"`) || strings.Count(last, "celsius") != 3 {
			t.Fatalf("last upstream request: %s", last)
		}
		if refused := fake.Refused(); len(refused) > 0 {
			t.Fatalf("the upstream refused: %v", refused)
		}

		// The conversation goes on: the earlier cell and its calls in the
		// history, the interpreter's state kept.
		fake.Push(fakeupstream.PythonCell("print(len(results))"))
		history := userText("weather in three cities")
		for i, m := range all {
			history = append(history, m.ToParam())
			if i < len(rounds) {
				history = append(history, answer(rounds[i], temperature))
			}
		}
		history = append(history, anthropic.NewUserMessage(anthropic.NewTextBlock("how many?")))
		next, _, _ := run(t, "ptc1", history, false, temperature)
		if r := pyResult(t, next.Content, 0); r.Stdout != "3\n" {
			t.Fatalf("next cell %+v", r)
		}
	})

	t.Run("a tool not allowed for code raises in the code", func(t *testing.T) {
		fake.Push(fakeupstream.PythonCell("try:\n    await read_secret(city='x')\nexcept PermissionError as e:\n    print('refused:', e)\nprint(await get_weather('Oslo'))"))
		final, rounds, _ := run(t, "ptc2", userText("secret"), false, temperature)
		if len(rounds) != 1 || rounds[0][0].Name != "get_weather" {
			t.Fatalf("calls %+v", rounds)
		}
		r := cellEnd(t, final.Content, 0)
		if !strings.Contains(r.Stdout, "refused: The tool 'read_secret' cannot be called from code: its allowed_callers does not list code_execution_20260120") || !strings.Contains(r.Stdout, "{'city': 'Oslo', 'celsius': 9}") {
			t.Fatalf("cell %+v", r)
		}
	})

	t.Run("calls inside functions, at once, and an error result", func(t *testing.T) {
		fake.Push(fakeupstream.PythonCell("import asyncio\n" +
			"async def both():\n    return await asyncio.gather(get_weather(city='Paris'), get_weather(city='Rome'))\n" +
			"a, b = await both()\n" +
			"try:\n    await get_weather(city='Atlantis')\nexcept ToolError as e:\n    print('failed:', e)\n" +
			"print(a['celsius'] + b['celsius'])"))
		final, rounds, _ := run(t, "ptc3", userText("two at once"), false, temperature)
		if len(rounds) != 2 || len(rounds[0]) != 2 || len(rounds[1]) != 1 {
			t.Fatalf("pauses %+v", rounds)
		}
		if r := cellEnd(t, final.Content, 0); r.Stdout != "failed: unknown city Atlantis\n48\n" || r.ReturnCode != 0 {
			t.Fatalf("cell %+v", r)
		}
	})

	t.Run("a client that never answers: the call times out, the interpreter stays", func(t *testing.T) {
		fake.Push(fakeupstream.PythonCell("kept = 'still here'\nv = await get_weather(city='Paris')\nprint('got', v)"))
		first, err := cl.Messages.New(ctx, msgParams("ptc4", userText("slow client"), tools...))
		if err != nil {
			t.Fatal(err)
		}
		calls := pendingCalls(t, first)
		time.Sleep(4 * time.Second) // past PYTHON_TOOL_RESULT_TIMEOUT
		// The late answer gets the cell's end: the call raised TimeoutError.
		late, err := cl.Messages.New(ctx, msgParams("ptc4", append(userText("slow client"), first.ToParam(), answer(calls, temperature)), tools...))
		if err != nil {
			t.Fatal(err)
		}
		if r := cellEnd(t, late.Content, 0); r.ReturnCode == 0 || !strings.Contains(r.Stderr, "TimeoutError: No result for the tool calls within 3s") || strings.Contains(r.Stdout, "got") {
			t.Fatalf("late cell %+v", r)
		}
		fake.Push(fakeupstream.PythonCell("print(kept)"))
		msg, err := cl.Messages.New(ctx, msgParams("ptc4", userText("still there?"), tools...))
		if err != nil {
			t.Fatal(err)
		}
		if r := pyResult(t, msg.Content, 0); r.Stdout != "still here\n" || r.Stderr != "" {
			t.Fatalf("next cell %+v", r)
		}
	})

	t.Run("a new cell abandons a paused one", func(t *testing.T) {
		fake.Push(fakeupstream.PythonCell("n = 1\nv = await get_weather(city='Paris')\nn = 2"))
		first, err := cl.Messages.New(ctx, msgParams("ptc5", userText("pause"), tools...))
		if err != nil {
			t.Fatal(err)
		}
		calls := pendingCalls(t, first)
		fake.Push(fakeupstream.PythonCell("print(n)"))
		msg, err := cl.Messages.New(ctx, msgParams("ptc5", userText("something else"), tools...))
		if err != nil {
			t.Fatal(err)
		}
		if r := pyResult(t, msg.Content, 0); r.Stdout != "1\n" {
			t.Fatalf("cell after the abandoned one %+v", r)
		}
		// Results for the abandoned cell come too late, and say so.
		late, err := cl.Messages.New(ctx, msgParams("ptc5", append(userText("pause"), first.ToParam(), answer(calls, temperature)), tools...))
		if err != nil {
			t.Fatal(err)
		}
		if late.Content[0].AsCodeExecutionToolResult().Content.ErrorCode != "unavailable" || !strings.Contains(lastUpstream(t, fake, 1), "a later cell in the container abandoned it") {
			t.Fatalf("results for an abandoned cell: %s", late.RawJSON())
		}
	})

	t.Run("results for a cell whose sandbox restarted", func(t *testing.T) {
		fake.Push(fakeupstream.PythonCell("v = await get_weather(city='Paris')"))
		first, err := cl.Messages.New(ctx, msgParams("ptc6", userText("pause"), tools...))
		if err != nil {
			t.Fatal(err)
		}
		calls := pendingCalls(t, first)
		fake.Push(steps(call("bash_code_execution", map[string]any{"restart": true})), textStep("restarted"))
		if _, err := cl.Messages.New(ctx, msgParams("ptc6", userText("restart"), tools...)); err != nil {
			t.Fatal(err)
		}
		msg, err := cl.Messages.New(ctx, msgParams("ptc6", append(userText("pause"), first.ToParam(), answer(calls, temperature)), tools...))
		if err != nil {
			t.Fatal(err)
		}
		res := msg.Content[0].AsCodeExecutionToolResult()
		if msg.Content[0].Type != "code_execution_tool_result" || res.Content.Type != "code_execution_tool_result_error" || res.Content.ErrorCode != "unavailable" {
			t.Fatalf("result for a gone cell: %s", msg.RawJSON())
		}
		if last := lastUpstream(t, fake, 1); !strings.Contains(last, "is no longer paused on this server, so the tool results cannot resume it: its sandbox stopped") {
			t.Fatalf("the model was not told why: %s", last)
		}
	})

	t.Run("requests breaking the documented rules", func(t *testing.T) {
		fake.Push(fakeupstream.PythonCell("v = await get_weather(city='Paris')"))
		first, err := cl.Messages.New(ctx, msgParams("ptc7", userText("pause"), tools...))
		if err != nil {
			t.Fatal(err)
		}
		calls := pendingCalls(t, first)
		withText := answer(calls, temperature)
		withText.OfUser.Content = append(withText.OfUser.Content, anthropic.NewTextBlock("and more"))
		_, err = cl.Messages.New(ctx, msgParams("ptc7", append(userText("pause"), first.ToParam(), withText), tools...))
		if status, body := apiStatus(t, err); status != 400 || !strings.Contains(body, "holds only tool_result blocks") {
			t.Fatalf("text beside the results: %d %s", status, body)
		}
		_, err = cl.Messages.New(ctx, msgParams("", append(userText("pause"), first.ToParam(), answer(calls, temperature)), tools...))
		if status, body := apiStatus(t, err); status != 400 || !strings.Contains(body, "container_id is required when there are pending tool uses generated by code execution with tools.") {
			t.Fatalf("no container: %d %s", status, body)
		}
		onlyCode := ptcTools(nil)
		_, err = cl.Messages.New(ctx, msgParams("ptc7", userText("hi"), onlyCode...))
		if status, body := apiStatus(t, err); status != 400 || !strings.Contains(body, "tools.0.allowed_callers") {
			t.Fatalf("code caller without code execution: %d %s", status, body)
		}
		r := s.do("POST", "/api/gpt/v1/messages/validate", tok, `{"model":"x","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"tools":[`+
			`{"type":"code_execution_20260521","name":"code_execution"},`+
			`{"name":"get_weather","input_schema":{"type":"object"},"allowed_callers":["code_execution_20260521"]},`+
			`{"name":"both","input_schema":{"type":"object"},"allowed_callers":["direct","code_execution_20260120"]}]}`)
		if r.status != 200 || !strings.Contains(string(r.body), `"programmatic_tools":["get_weather","both"]`) {
			t.Fatalf("validate: %d %s", r.status, r.body)
		}
		r = s.do("POST", "/api/gpt/v1/messages/validate", tok, `{"model":"x","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"tools":[`+
			`{"name":"get_weather","input_schema":{"type":"object"},"allowed_callers":["somebody"]}]}`)
		if r.status != 400 || !strings.Contains(string(r.body), "tools.0.allowed_callers.0") {
			t.Fatalf("validate of a bad caller: %d %s", r.status, r.body)
		}
	})

	t.Run("streaming and non-streaming give the same blocks", func(t *testing.T) {
		fake.Push(fakeupstream.ToolLoop("get_weather", "city", "Paris", "Rome", "Oslo"))
		_, _, plain := run(t, "ptc8", userText("weather"), false, temperature)
		fake.Push(fakeupstream.ToolLoop("get_weather", "city", "Paris", "Rome", "Oslo"))
		_, _, streamed := run(t, "ptc9", userText("weather"), true, temperature)
		if len(plain) != len(streamed) {
			t.Fatalf("%d responses, %d streamed", len(plain), len(streamed))
		}
		if in := string(streamed[0].Content[1].AsToolUse().Input); in != `{"city":"Paris"}` {
			t.Fatalf("streamed input %s", in)
		}
		callers := regexp.MustCompile(`"tool_id":"[^"]*"`)
		for i := range plain {
			a := callers.ReplaceAllString(normalBlocks(t, plain[i].Content), `"tool_id":"…"`)
			b := callers.ReplaceAllString(normalBlocks(t, streamed[i].Content), `"tool_id":"…"`)
			if a != b || plain[i].StopReason != streamed[i].StopReason {
				t.Fatalf("response %d differs:\nnon-streaming %s %s\nstreaming     %s %s", i, plain[i].StopReason, a, streamed[i].StopReason, b)
			}
		}
	})
}

// TestProgrammaticPauseKeepsSandbox: while a cell waits for the client's
// results, the idle sweeper leaves its sandbox be (the interpreter would
// end with it), however short SANDBOX_IDLE is.
func TestProgrammaticPauseKeepsSandbox(t *testing.T) {
	bin := needDocker(t)
	s, fake := modelServer(t, "", "anthropic", map[string]string{
		"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "SANDBOX_IDLE": "2s", "SWEEP_INTERVAL": "300ms",
		"PYTHON_TOOL_RESULT_TIMEOUT": "60s",
	})
	cl := msgClient(s, s.bootstrap("acme", "admin@acme.test"))
	ctx := context.Background()
	echoFinal(fake)
	tools := ptcTools(codeExec2605)
	fake.Push(fakeupstream.PythonCell("before = 'kept'\nv = await get_weather(city='Rome')\nprint(before, v['celsius'])"))
	first, err := cl.Messages.New(ctx, msgParams("idle-ptc", userText("slow client"), tools...))
	if err != nil {
		t.Fatal(err)
	}
	calls := pendingCalls(t, first)
	time.Sleep(5 * time.Second) // more than twice SANDBOX_IDLE
	msg, err := cl.Messages.New(ctx, msgParams("idle-ptc", append(userText("slow client"), first.ToParam(), answer(calls, temperature)), tools...))
	if err != nil {
		t.Fatal(err)
	}
	if r := cellEnd(t, msg.Content, 0); r.ReturnCode != 0 || r.Stdout != "kept 27\n" {
		t.Fatalf("cell resumed after the pause %+v", r)
	}
}

// TestContainerlessConversationsPauseIndependently: two conversations of
// one user that send no container, each with a 2026 code-execution tool,
// get a fresh container each (named in the response), so each paused cell
// is resumed by its own conversation and neither abandons the other's.
func TestContainerlessConversationsPauseIndependently(t *testing.T) {
	bin := needDocker(t)
	s, fake := modelServer(t, "", "anthropic", map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin})
	tok := s.bootstrap("acme", "admin@acme.test")
	cl := msgClient(s, tok)
	ctx := context.Background()
	echoFinal(fake)
	tools := ptcTools(codeExec2601)
	fake.Push(fakeupstream.ToolLoop("get_weather", "city", "Paris"), fakeupstream.ToolLoop("get_weather", "city", "Rome"))

	start := func(text string) (*anthropic.Message, []anthropic.MessageParam) {
		t.Helper()
		history := userText(text)
		msg, err := cl.Messages.New(ctx, msgParams("", history, tools...))
		if err != nil {
			t.Fatal(err)
		}
		if msg.StopReason != "tool_use" || msg.Container.ID == "" || msg.Container.ID == "default" {
			t.Fatalf("a container-less request: stop %s, container %+v", msg.StopReason, msg.Container)
		}
		return msg, history
	}
	a, ha := start("weather in Paris")
	b, hb := start("weather in Rome")
	if a.Container.ID == b.Container.ID {
		t.Fatalf("both conversations got container %q", a.Container.ID)
	}
	finish := func(msg *anthropic.Message, history []anthropic.MessageParam, want string) {
		t.Helper()
		history = append(history, msg.ToParam(), answer(pendingCalls(t, msg), temperature))
		final, err := cl.Messages.New(ctx, msgParams(msg.Container.ID, history, tools...))
		if err != nil {
			t.Fatal(err)
		}
		if r := cellEnd(t, final.Content, 0); r.ReturnCode != 0 || !strings.Contains(r.Stdout, want) {
			t.Fatalf("the resumed cell of %s: %+v", msg.Container.ID, r)
		}
	}
	finish(a, ha, `"celsius": 21`)
	finish(b, hb, `"celsius": 27`)
}
