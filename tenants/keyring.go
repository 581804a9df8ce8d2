package tenants

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/sluice-dev/sluice/internal/names"
)

// Errors of sealing and opening secrets.
var (
	// ErrNoKey: no --secrets-key-file, or none of its keys sealed the
	// secret. The node refuses to store secrets and answers hooks of
	// such a source 503 source_unavailable (fail closed).
	ErrNoKey = errors.New("tenants: no secrets key")
	// ErrSealed: a sealed secret does not open (wrong key, tampered, or
	// moved to another source).
	ErrSealed = errors.New("tenants: sealed secret does not open")
)

// Sealed is a secret encrypted with AES-256-GCM under key KeyID, with the
// tenant, source and secret id as additional data (a sealed value copied to
// another source does not open).
type Sealed struct {
	KeyID string `json:"kid"`
	Nonce []byte `json:"nonce"`
	Data  []byte `json:"ct"`
}

// Keyring is the set of keys a node seals and opens secrets with: the
// first key seals, every key opens (so a key is rotated by putting a new
// one first, re-sealing, then dropping the old one). It is immutable.
type Keyring struct {
	current string
	aeads   map[string]cipher.AEAD
	fpKey   []byte
}

// MaxKeys bounds the keys of a keyring.
const MaxKeys = 16

// LoadKeyring reads a key file: one key per line, "<id> <base64 of 32
// bytes>", the first one current; blank lines and lines starting with '#'
// are ignored. The error names the line, never a key.
func LoadKeyring(path string) (*Keyring, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--secrets-key-file: %w", err)
	}
	k, err := ParseKeyring(data)
	if err != nil {
		return nil, fmt.Errorf("--secrets-key-file: %s: %w", path, err)
	}
	return k, nil
}

// ParseKeyring parses the content of a key file (see LoadKeyring).
func ParseKeyring(data []byte) (*Keyring, error) {
	k := &Keyring{aeads: map[string]cipher.AEAD{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		id, b64, ok := strings.Cut(text, " ")
		b64 = strings.TrimSpace(b64)
		if !ok || len(id) > 32 || !names.PlainToken(id) {
			return nil, fmt.Errorf("line %d: want \"<id> <base64 key>\" with an id of 1..32 bytes of [A-Za-z0-9_-]", line)
		}
		key, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(key) != 32 {
			return nil, fmt.Errorf("line %d: key %s: want the base64 of 32 random bytes (openssl rand -base64 32)", line, id)
		}
		if _, dup := k.aeads[id]; dup {
			return nil, fmt.Errorf("line %d: duplicate key id %s", line, id)
		}
		if len(k.aeads) == MaxKeys {
			return nil, fmt.Errorf("line %d: more than %d keys", line, MaxKeys)
		}
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if k.current == "" {
			k.current = id
			// The fingerprint key is derived from the current key, so a
			// reader of the bucket cannot test guesses of a secret.
			m := hmac.New(sha256.New, key)
			m.Write([]byte("sluice secret fingerprint"))
			k.fpKey = m.Sum(nil)
		}
		k.aeads[id] = aead
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if k.current == "" {
		return nil, errors.New("no key")
	}
	return k, nil
}

// Current is the id of the key that seals.
func (k *Keyring) Current() string {
	if k == nil {
		return ""
	}
	return k.current
}

// aad binds a sealed secret to its place.
func aad(tenant, source, id string) []byte {
	return []byte("sluice-secret\x00" + tenant + "\x00" + source + "\x00" + id)
}

// Seal encrypts secret for tenant's source under id with the current key.
func (k *Keyring) Seal(tenant, source, id, secret string) (*Sealed, error) {
	if k == nil {
		return nil, ErrNoKey
	}
	aead := k.aeads[k.current]
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return &Sealed{KeyID: k.current, Nonce: nonce, Data: aead.Seal(nil, nonce, []byte(secret), aad(tenant, source, id))}, nil
}

// Open decrypts a sealed secret of tenant's source.
func (k *Keyring) Open(tenant, source, id string, s *Sealed) (string, error) {
	if s == nil {
		return "", fmt.Errorf("%w: secret %s has no sealed value", ErrSealed, id)
	}
	if k == nil {
		return "", fmt.Errorf("%w: secret %s is sealed with key %q and this node has no --secrets-key-file", ErrNoKey, id, s.KeyID)
	}
	aead, ok := k.aeads[s.KeyID]
	if !ok {
		return "", fmt.Errorf("%w: secret %s is sealed with key %q, which --secrets-key-file lacks", ErrNoKey, id, s.KeyID)
	}
	if len(s.Nonce) != aead.NonceSize() {
		return "", fmt.Errorf("%w: secret %s: bad nonce", ErrSealed, id)
	}
	plain, err := aead.Open(nil, s.Nonce, s.Data, aad(tenant, source, id))
	if err != nil {
		return "", fmt.Errorf("%w: secret %s (key %s)", ErrSealed, id, s.KeyID)
	}
	return string(plain), nil
}

// Fingerprint identifies a secret without revealing it: "hmac-sha256:"
// and 16 hex digits of an HMAC under a key derived from the current key.
func (k *Keyring) Fingerprint(secret string) string {
	m := hmac.New(sha256.New, k.fpKey)
	m.Write([]byte(secret))
	return "hmac-sha256:" + hex.EncodeToString(m.Sum(nil)[:8])
}
