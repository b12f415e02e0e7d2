package redis

import (
	"encoding/binary"
	"errors"
	"strconv"
	"testing"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/domain"
)

// replyValue is one element of a script reply as a fuzz input describes
// it: a RESP type and a value.
type replyValue struct {
	typ byte // ':' integer, '$' bulk string, '+' simple string, '-' error, '_' null, ',' double, '#' boolean
	v   int64
}

// replyTypes are the RESP types a reply element may take; integers come
// first and most often, so that well-formed replies are common.
var replyTypes = []byte{':', ':', ':', ':', '$', '+', '-', '_', ',', '#'}

// parseReply reads a fuzz input as reply elements, nine bytes each: a
// type selector and a big-endian value.
func parseReply(data []byte) []replyValue {
	var out []replyValue
	for len(data) >= 9 && len(out) < replyHead+(replyAdmitted+replyRefused)*domain.MaxLimits+2 {
		out = append(out, replyValue{typ: replyTypes[int(data[0])%len(replyTypes)], v: int64(binary.BigEndian.Uint64(data[1:9]))})
		data = data[9:]
	}
	return out
}

// encodeReply builds the array as rueidis reads it back from its cache
// encoding (RedisMessage.CacheUnmarshalView): seven bytes of TTL, then per
// value a type byte, eight bytes of length or integer, and the payload.
func encodeReply(vals []replyValue) []byte {
	b := make([]byte, 7, 64)
	put := func(typ byte, n uint64, payload string) {
		b = append(b, typ)
		b = binary.BigEndian.AppendUint64(b, n)
		b = append(b, payload...)
	}
	put('*', uint64(len(vals)), "")
	for _, v := range vals {
		switch v.typ {
		case ':', '_':
			put(v.typ, uint64(v.v), "")
		case '#':
			put(v.typ, uint64(v.v&1), "")
		case ',':
			s := strconv.FormatFloat(float64(v.v)/7, 'g', -1, 64)
			put(v.typ, uint64(len(s)), s)
		default:
			s := strconv.FormatInt(v.v, 10)
			if v.typ == '-' {
				s = "ERR " + s
			}
			put(v.typ, uint64(len(s)), s)
		}
	}
	return b
}

func toReply(t *testing.T, vals []replyValue) []rueidis.RedisMessage {
	t.Helper()
	var m rueidis.RedisMessage
	if err := m.CacheUnmarshalView(encodeReply(vals)); err != nil {
		t.Fatalf("rueidis no longer reads its cache encoding as this test writes it: %v", err)
	}
	arr, err := m.ToArray()
	if err != nil {
		t.Fatalf("encoded reply is not an array: %v", err)
	}
	return arr
}

// fuzzLimits returns k limits of limit 10 (remaining counts above it are
// out of range).
func fuzzLimits(k int) []domain.Limit {
	limits := make([]domain.Limit, k)
	for i := range limits {
		limits[i] = domain.Limit{Key: "k" + strconv.Itoa(i), Window: domain.Window{Limit: 10}, Cost: 1}
	}
	return limits
}

// FuzzDecode feeds the script-reply decoder every shape of reply: the
// right length or not, integers or strings, errors, nulls, figures out of
// range. It never panics; a reply it cannot read is
// domain.ErrStoreUnavailable and a figure out of range a
// *domain.StoreValueError (the pipeline then degrades or refuses that
// request, it does not crash or misread); a reply it reads is aggregated
// as the script's own verdict says. Seeds: testdata/fuzz.
func FuzzDecode(f *testing.F) {
	ints := func(vs ...int64) []byte {
		var b []byte
		for _, v := range vs {
			b = append(b, 0)
			b = binary.BigEndian.AppendUint64(b, uint64(v))
		}
		return b
	}
	f.Add(uint8(1), true, ints(1, 4, 1_000_000))
	f.Add(uint8(2), true, ints(0, 3, 0, 0, 0, 250_000, 900_000))
	f.Add(uint8(1), true, ints(1, 0, 0))
	f.Add(uint8(16), true, ints(1, 0))
	f.Add(uint8(1), true, ints(0, 0, -9223372036854775808, 0))
	f.Add(uint8(1), true, ints(0, 0, 1<<62, 0))
	f.Add(uint8(1), true, ints(1, 11, 0))
	f.Add(uint8(1), false, append(ints(1, 0, 1), 4, 0, 0, 0, 0, 0, 0, 0, 7))
	f.Add(uint8(3), false, []byte{})
	f.Fuzz(func(t *testing.T, n uint8, padded bool, data []byte) {
		k := 1 + int(n)%domain.MaxLimits
		limits := fuzzLimits(k)
		vals := parseReply(data)
		if padded && len(vals) > 0 {
			// The length the decoder wants for the admitted count the
			// reply starts with (one request), so that the values are read.
			want := replyHead + replyRefused*k
			if vals[0].typ == ':' && vals[0].v == 1 {
				want = replyHead + replyAdmitted*k
			}
			for len(vals) < want {
				vals = append(vals, replyValue{typ: ':'})
			}
			vals = vals[:want]
		}
		var rep domain.Repeated
		err := decode(toReply(t, vals), limits, 1, true, &rep)
		if err != nil {
			var ve *domain.StoreValueError
			if !errors.Is(err, domain.ErrStoreUnavailable) && !errors.As(err, &ve) {
				t.Fatalf("decode error %v is neither ErrStoreUnavailable nor a StoreValueError", err)
			}
			return
		}
		res := rep.Refused
		if rep.Admitted == 1 {
			res = rep.Last
		}
		if want := replyHead + replyRefused*k; rep.Admitted == 1 {
			want = replyHead + replyAdmitted*k
			if len(vals) != want {
				t.Fatalf("decoded a reply of %d values for %d limits", len(vals), k)
			}
		} else if len(vals) != want {
			t.Fatalf("decoded a reply of %d values for %d limits", len(vals), k)
		}
		if got := len(res.Statuses()); got != k {
			t.Fatalf("%d statuses for %d limits", got, k)
		}
		if res.Limiting < 0 || res.Limiting >= k {
			t.Fatalf("limiting index %d outside 0..%d", res.Limiting, k-1)
		}
		allowed := true
		for i, st := range res.Statuses() {
			if st.Remaining < 0 || st.Remaining > limits[i].Window.Limit || st.RetryAfter < 0 || st.ResetAfter < 0 {
				t.Fatalf("status %d out of range: %+v", i, st)
			}
			if rep.Admitted == 0 {
				if want := vals[replyHead+replyRefused*i+1].v == 0; st.Allowed != want {
					t.Fatalf("status %d allowed=%t, the reply's retry-after says %t", i, st.Allowed, want)
				}
			}
			allowed = allowed && st.Allowed
		}
		if res.Allowed != allowed || res.Allowed != (vals[0].v == 1) {
			t.Fatalf("allowed=%t, statuses say %t, the script says %d", res.Allowed, allowed, vals[0].v)
		}
	})
}

// TestDecodeThroughCacheEncoding proves that FuzzDecode's replies reach
// the decoder as Redis' would: a well-formed reply decodes to the
// script's verdict, a short one is refused, and a figure out of range is
// a StoreValueError of its key, never a wait.
func TestDecodeThroughCacheEncoding(t *testing.T) {
	limits := fuzzLimits(2)
	reply := []replyValue{{':', 0}, {':', 3}, {':', 0}, {':', 0}, {':', 0}, {':', 250_000}, {':', 900_000}}
	var rep domain.Repeated
	if err := decode(toReply(t, reply), limits, 1, true, &rep); err != nil {
		t.Fatalf("decode: %v", err)
	}
	res := rep.Refused
	if rep.Admitted != 0 || res.Allowed || res.Limiting != 1 || res.Remaining != 0 || res.RetryAfter.Microseconds() != 250_000 {
		t.Fatalf("decoded %+v, want refused by limit 1, remaining 0, retry 250ms", rep)
	}
	if err := decode(toReply(t, reply[:6]), limits, 1, true, &rep); !errors.Is(err, domain.ErrStoreUnavailable) {
		t.Fatalf("short reply: err = %v, want ErrStoreUnavailable", err)
	}
	for _, bad := range []int64{-1 << 63, -1, maxFigureMicros + 1} {
		r := slicesClone(reply)
		r[5].v = bad
		var ve *domain.StoreValueError
		if err := decode(toReply(t, r), limits, 1, true, &rep); !errors.As(err, &ve) || ve.Index != 1 || ve.Key != "k1" {
			t.Fatalf("retry-after %d: err = %v, want the StoreValueError of limit 1", bad, err)
		}
	}
	r := slicesClone(reply)
	r[1].v = 11 // above the limit of 10
	var ve *domain.StoreValueError
	if err := decode(toReply(t, r), limits, 1, true, &rep); !errors.As(err, &ve) || ve.Index != 0 {
		t.Fatalf("remaining 11 of 10: err = %v, want the StoreValueError of limit 0", err)
	}
}

func slicesClone(v []replyValue) []replyValue { return append([]replyValue(nil), v...) }
