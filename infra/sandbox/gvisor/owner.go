package gvisor

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Every runsc container carries the backend that made it (annotationOwner):
// the process, by its pid and start time (a pid the kernel gave again to
// another process is not taken for it), and the backend in that process.
// A container goes through states runsc reports as not running — created,
// then stopped while its runsc process removes it — and only its maker
// knows whether it is still being made or taken down. So Reconcile leaves
// every container whose maker lives and removes those of makers that
// ended.

// annotationOwner names the backend that made a runsc container.
const annotationOwner = "threadbox.owner"

// owner is one backend of one process.
type owner struct {
	pid   int
	start string // the process's start time, in clock ticks since boot
	token string // the backend's, random
}

// newOwner returns this process's owner for a new backend.
func newOwner() owner {
	var b [8]byte
	_, _ = rand.Read(b[:])
	start, _ := processStart(os.Getpid())
	return owner{pid: os.Getpid(), start: start, token: hex.EncodeToString(b[:])}
}

// String is the annotation's value: pid/start/token.
func (o owner) String() string { return fmt.Sprintf("%d/%s/%s", o.pid, o.start, o.token) }

// parseOwner reads an annotation's value; false when it is not one.
func parseOwner(s string) (owner, bool) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 {
		return owner{}, false
	}
	pid, err := strconv.Atoi(parts[0])
	if err != nil || pid <= 0 || parts[1] == "" || parts[2] == "" {
		return owner{}, false
	}
	return owner{pid: pid, start: parts[1], token: parts[2]}, true
}

// alive reports whether the owner's process still runs (the same process:
// same pid and start time).
func (o owner) alive() bool {
	start, ok := processStart(o.pid)
	return ok && start == o.start
}

// processStart returns the start time of process pid (field 22 of
// /proc/<pid>/stat); false when there is no such process.
func processStart(pid int) (string, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", false
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return "", false
	}
	fields := strings.Fields(string(data[i+1:]))
	// fields[0] is field 3 (the state); the start time is field 22.
	if len(fields) < 20 {
		return "", false
	}
	return fields[19], true
}
