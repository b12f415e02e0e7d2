package server

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// CPU returns the processor time the server has used since it started,
// user and system, all threads (INFO cpu).
func (s *Server) CPU(ctx context.Context) (time.Duration, error) {
	info, err := s.info(ctx, "cpu")
	if err != nil {
		return 0, err
	}
	var total time.Duration
	for _, k := range []string{"used_cpu_user", "used_cpu_sys"} {
		v, err := strconv.ParseFloat(info[k], 64)
		if err != nil {
			return 0, fmt.Errorf("redis INFO cpu: %s %q: %w", k, info[k], err)
		}
		total += time.Duration(v * float64(time.Second))
	}
	return total, nil
}
