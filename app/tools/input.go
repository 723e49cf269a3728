package tools

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"threadbox/app/messages/wire"
)

// toolError is a failure a tool's result shows as an error block: its
// error code and explanation.
type toolError struct {
	code string
	msg  string
}

func (e *toolError) Error() string { return e.msg }

// refuse returns a toolError with the code and a formatted explanation.
func refuse(code, format string, args ...any) error {
	return &toolError{code: code, msg: fmt.Sprintf(format, args...)}
}

// invalidInput returns an invalid_tool_input toolError.
func invalidInput(format string, args ...any) error {
	return refuse(wire.CodeInvalidToolInput, format, args...)
}

// decodeInput decodes a tool's input object strictly enough to name the
// field of a type mismatch; its errors are invalid_tool_input.
func decodeInput(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		raw = json.RawMessage(`{}`)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return invalidInput("Invalid input: '%s' must be of type %s.", te.Field, jsonType(te.Type.Kind().String()))
		}
		return invalidInput("Invalid input: %v.", err)
	}
	return nil
}

// jsonType names a Go kind as JSON's type.
func jsonType(kind string) string {
	switch kind {
	case "ptr", "string":
		return "string"
	case "bool":
		return "boolean"
	case "slice", "array":
		return "array"
	case "int", "int64", "float64":
		return "number"
	}
	return kind
}

// commandTimeout reads bash_code_execution's optional timeout: a positive
// number of seconds, at most maxTimeout; DefaultTimeout when absent.
func commandTimeout(secs *float64, maxTimeout time.Duration) (time.Duration, error) {
	if secs == nil {
		return DefaultTimeout, nil
	}
	if !(*secs > 0) {
		return 0, invalidInput("Invalid input: 'timeout' must be a positive number of seconds.")
	}
	// In seconds first: a huge value would overflow a Duration (and a tiny
	// one round to zero), and a timeout <= 0 means none at all.
	if *secs >= maxTimeout.Seconds() {
		return maxTimeout, nil
	}
	return max(time.Duration(*secs*float64(time.Second)), time.Millisecond), nil
}

// wholeTimeout reads a sandbox_v1 tool's optional timeout_seconds: a
// whole number of seconds from 1 to maxTimeout; DefaultTimeout when
// absent.
func wholeTimeout(secs *float64, maxTimeout time.Duration) (time.Duration, error) {
	if secs == nil {
		return DefaultTimeout, nil
	}
	t, most := *secs, math.Floor(maxTimeout.Seconds())
	if t < 1 || t > most || t != math.Trunc(t) {
		return 0, invalidInput("Invalid input: 'timeout_seconds' must be a whole number from 1 to %d.", int64(most))
	}
	return time.Duration(t) * time.Second, nil
}

// waitSeconds reads an optional wait in seconds, from 0 to MaxWait; d when
// absent.
func waitSeconds(name string, secs *float64, d time.Duration) (time.Duration, error) {
	if secs == nil {
		return d, nil
	}
	w := *secs
	if w < 0 || math.IsNaN(w) || w > MaxWait.Seconds() {
		return 0, invalidInput("Invalid input: '%s' must be from 0 to %d.", name, int(MaxWait.Seconds()))
	}
	return time.Duration(w * float64(time.Second)), nil
}

// seconds formats a duration as whole seconds when it is one, else with
// the needed decimals.
func seconds(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprint(int64(d / time.Second))
	}
	return fmt.Sprint(d.Seconds())
}
