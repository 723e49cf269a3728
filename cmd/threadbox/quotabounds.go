package main

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"threadbox/domain/fault"
	"threadbox/domain/org"
)

// quotaVariable names the environment variable of a quota's default, such
// as QUOTA_RUNNING_SANDBOXES_PER_USER for runningSandboxesPerUser; its
// ceiling's is the same with _MAX.
func quotaVariable(q org.Quota) string {
	var b strings.Builder
	b.WriteString("QUOTA_")
	for i, r := range string(q) {
		if unicode.IsUpper(r) && i > 0 {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}

// loadQuotaBounds reads the operator's default and ceiling of every org
// quota (org.Bounds): QUOTA_<NAME> and QUOTA_<NAME>_MAX, whole numbers,
// 0 or unset for none.
func loadQuotaBounds(getenv func(string) string) (org.Bounds, error) {
	defaults, ceilings := map[org.Quota]int64{}, map[org.Quota]int64{}
	for _, q := range org.AllQuotas {
		for name, into := range map[string]map[org.Quota]int64{quotaVariable(q): defaults, quotaVariable(q) + "_MAX": ceilings} {
			v := strings.TrimSpace(getenv(name))
			if v == "" {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return org.Bounds{}, &configError{name, fmt.Sprintf("%q is not a whole number (0 for none)", v)}
			}
			into[q] = n
		}
	}
	// Every name is known and every number positive: these cannot fail.
	d, _ := org.NewQuotas(defaults)
	c, _ := org.NewQuotas(ceilings)
	b, err := org.NewBounds(d, c)
	if err != nil {
		return org.Bounds{}, &configError{"QUOTA_<NAME>", fault.MessageOf(err)}
	}
	return b, nil
}
