package alert

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"
)

// sign returns the SignatureHeader value of body sent at t.
func sign(secret []byte, t time.Time, body []byte) string {
	ts := fmt.Sprint(t.Unix())
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts + "."))
	m.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
}
