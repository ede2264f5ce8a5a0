package alert_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jobkit/job/alert"
	"github.com/jobkit/job/store/memdbstore"
)

// TestChatChannelPostsSlackText: a chat channel posts {"text": ...}, the
// incoming-webhook format of Slack and the tools compatible with it, and
// nothing else; a chat URL carries its token, which the error of a
// refused post does not repeat.
func TestChatChannelPostsSlackText(t *testing.T) {
	ctx := context.Background()
	var got []map[string]any
	refuse := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if refuse {
			http.Error(w, "invalid_token", http.StatusForbidden)
			return
		}
		b, _ := io.ReadAll(r.Body)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		got = append(got, m)
	}))
	defer srv.Close()
	st, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	svc, err := alert.New(alert.Config{Store: st, Node: "n1", Guard: loopbackGuard(t), ConsoleURL: "https://jobs.example.com/console"})
	if err != nil {
		t.Fatal(err)
	}
	url := srv.URL + "/services/T000/B000/SECRETTOKEN"
	if _, err := svc.PutChannel(ctx, &alert.Channel{Name: "chat", Type: alert.Chat, URL: url}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.TestChannel(ctx, "chat"); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0]) != 1 {
		t.Fatalf("posted %v; want one body with only text", got)
	}
	text, _ := got[0]["text"].(string)
	if !strings.HasPrefix(text, "TEST in default") || !strings.Contains(text, "https://jobs.example.com/console/alerts?ns=default") {
		t.Fatalf("text %q", text)
	}
	refuse = true
	_, err = svc.TestChannel(ctx, "chat")
	if err == nil || !strings.Contains(err.Error(), "403") || strings.Contains(err.Error(), "SECRETTOKEN") {
		t.Fatalf("refused post: %v; want the 403 without the url's token", err)
	}
	// A server that is gone: the transport's error does not carry the
	// url's token either.
	srv.Close()
	_, err = svc.TestChannel(ctx, "chat")
	if err == nil || strings.Contains(err.Error(), "SECRETTOKEN") {
		t.Fatalf("post to a closed server: %v; want an error without the url's token", err)
	}
	if st, _ := svc.ChannelStatus(ctx, "chat"); strings.Contains(st.LastError, "SECRETTOKEN") {
		t.Fatalf("channel status shows the token: %q", st.LastError)
	}
}
