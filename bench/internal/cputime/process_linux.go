//go:build linux

package cputime

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of /proc/<pid>/stat's times: USER_HZ, 100 on every
// Linux architecture Go supports.
const userHZ = 100

// Process returns the user and system time the process pid (every
// thread) has used so far, to 10 ms, from /proc/<pid>/stat.
func Process(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// the fields are counted after its closing one.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("cputime: /proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	// utime and stime are fields 14 and 15; f[0] is field 3.
	if len(f) < 13 {
		return 0, fmt.Errorf("cputime: /proc/%d/stat: %d fields", pid, len(f)+2)
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("cputime: /proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}
