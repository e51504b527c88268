// Package hashslot computes Redis Cluster hash slots exactly as the Cluster
// specification defines them (CRC16-CCITT/XMODEM of the key, or of its hash
// tag, modulo 16384). The fuzz targets use it to prove that no accepted input
// yields a key outside its tenant's slot; go-redis keeps its own copy
// internal, so this is the test suite's independent implementation.
package hashslot

// Slots is the number of Cluster hash slots.
const Slots = 16384

// crc16 is CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, no
// reflection, no final XOR (the Cluster spec's reference implementation).
func crc16(b string) uint16 {
	var crc uint16
	for i := 0; i < len(b); i++ {
		crc ^= uint16(b[i]) << 8
		for bit := 0; bit < 8; bit++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// Tag returns the part of key that Cluster hashes: the bytes between the
// first '{' and the first '}' after it, when that is non-empty; otherwise
// the whole key.
func Tag(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] != '{' {
			continue
		}
		for j := i + 1; j < len(key); j++ {
			if key[j] == '}' {
				if j == i+1 {
					return key // "{}" : the whole key is hashed
				}
				return key[i+1 : j]
			}
		}
		return key // no '}' after the first '{'
	}
	return key
}

// Slot is the Cluster hash slot of key.
func Slot(key string) int { return int(crc16(Tag(key)) % Slots) }
