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
	for len(data) >= 9 && len(out) < 2+replyPerKey*domain.MaxLimits+2 {
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

// FuzzDecode feeds the script-reply decoder every shape of reply: the
// right length or not, integers or strings, errors, nulls. It never
// panics; a reply it cannot read is domain.ErrStoreUnavailable (the
// pipeline then degrades, it does not crash or misread); a reply it reads
// is aggregated as the script's own verdict says. Seeds: testdata/fuzz.
func FuzzDecode(f *testing.F) {
	ints := func(vs ...int64) []byte {
		var b []byte
		for _, v := range vs {
			b = append(b, 0)
			b = binary.BigEndian.AppendUint64(b, uint64(v))
		}
		return b
	}
	f.Add(uint8(1), true, ints(1, 1_700_000_000_000_000, 1, 4, 0, 1_000_000))
	f.Add(uint8(2), true, ints(0, 1_700_000_000_000_000, 1, 3, 0, 0, 0, 0, 250_000, 900_000))
	f.Add(uint8(1), true, ints(1, 0, 0, 0, 0, 0))
	f.Add(uint8(16), true, ints(1, 0))
	f.Add(uint8(1), false, append(ints(1, 0, 1), 4, 0, 0, 0, 0, 0, 0, 0, 7))
	f.Add(uint8(3), false, []byte{})
	f.Fuzz(func(t *testing.T, n uint8, padded bool, data []byte) {
		limits := 1 + int(n)%domain.MaxLimits
		vals := parseReply(data)
		if padded {
			// The length the decoder wants, so that the values are read.
			want := replyHead + replyPerKey*limits
			for len(vals) < want {
				vals = append(vals, replyValue{typ: ':'})
			}
			vals = vals[:want]
		}
		var res domain.Result
		err := decode(toReply(t, vals), limits, &res)
		if err != nil {
			if !errors.Is(err, domain.ErrStoreUnavailable) {
				t.Fatalf("decode error %v does not wrap ErrStoreUnavailable", err)
			}
			return
		}
		if len(vals) != replyHead+replyPerKey*limits {
			t.Fatalf("decoded a reply of %d values for %d limits", len(vals), limits)
		}
		if got := len(res.Statuses()); got != limits {
			t.Fatalf("%d statuses for %d limits", got, limits)
		}
		if res.Limiting < 0 || res.Limiting >= limits {
			t.Fatalf("limiting index %d outside 0..%d", res.Limiting, limits-1)
		}
		allowed := true
		for i, st := range res.Statuses() {
			if want := vals[replyHead+replyPerKey*i].v == 1; st.Allowed != want {
				t.Fatalf("status %d allowed=%t, the reply says %t", i, st.Allowed, want)
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
// script's verdict, and a short one is refused.
func TestDecodeThroughCacheEncoding(t *testing.T) {
	reply := []replyValue{{':', 0}, {':', 1_700_000_000_000_000}, {':', 1}, {':', 3}, {':', 0}, {':', 0}, {':', 0}, {':', 0}, {':', 250_000}, {':', 900_000}}
	var res domain.Result
	if err := decode(toReply(t, reply), 2, &res); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if res.Allowed || res.Limiting != 1 || res.Remaining != 0 || res.RetryAfter.Microseconds() != 250_000 {
		t.Fatalf("decoded %+v, want refused by limit 1, remaining 0, retry 250ms", res)
	}
	if err := decode(toReply(t, reply[:9]), 2, &res); !errors.Is(err, domain.ErrStoreUnavailable) {
		t.Fatalf("short reply: err = %v, want ErrStoreUnavailable", err)
	}
}
