package redis

import (
	"strings"

	"github.com/sluicehq/sluice/domain"
)

// Redis Cluster hashes a key to one of 16384 slots; a script may only touch
// keys of one slot. These helpers let the store refuse a key set that would
// span two slots before sending anything (domain.ErrCrossSlot).

// hashTag returns the part of key that Redis Cluster hashes: the content
// of the first {…} when it is non-empty, else the whole key.
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return key
	}
	return key[open+1 : open+1+end]
}

// slotCount is the number of Redis Cluster hash slots.
const slotCount = 16384

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag, modulo slotCount.
func Slot(key string) uint16 { return tagSlot(hashTag(key)) }

// tagSlot returns the slot of a hash tag (hashTag's result).
func tagSlot(tag string) uint16 {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^tag[i]]
	}
	return crc % slotCount
}

var crc16Table = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()

// sameSlot reports whether every limit's key hashes to one slot; when not,
// it returns the index of the first key that differs from the first. Keys
// with the first key's hash tag share its slot without a CRC: sluice's keys
// of one request share one tag (docs/adr/004), so a request costs one
// comparison per key, and a CRC only for a key of another tag (which may
// still land in the same slot).
func sameSlot(limits []domain.Limit) (ok bool, index int) {
	if len(limits) == 0 {
		return true, -1
	}
	tag := hashTag(limits[0].Key)
	slot := -1 // the first key's, once a key of another tag needs it
	for i := 1; i < len(limits); i++ {
		t := hashTag(limits[i].Key)
		if t == tag {
			continue
		}
		if slot < 0 {
			slot = int(tagSlot(tag))
		}
		if int(tagSlot(t)) != slot {
			return false, i
		}
	}
	return true, -1
}
