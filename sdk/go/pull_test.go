package receiver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// A server that answers like the hub's pull route: pages of `limit` from a cursor, a 429 with
// Retry-After first, and the error shape for an unknown subscription.
type pages struct {
	mu       sync.Mutex
	events   int64
	cursor   int64
	limited  int
	requests []string
}

func (p *pages) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests = append(p.requests, r.URL.RequestURI())
	w.Header().Set("Content-Type", "application/json")
	if r.Header.Get("Authorization") != "Bearer key-1" || r.URL.Path != "/v1/subscriptions/sub-1/events" {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"code":404,"title":"not_found","message":"no such subscription"}`)
		return
	}
	if p.limited > 0 {
		p.limited--
		w.Header().Set("Retry-After", "0.2")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"code":429,"title":"rate_limited","message":"slow down"}`)
		return
	}
	limit := int64(100)
	fmt.Sscan(r.URL.Query().Get("limit"), &limit)
	after := p.cursor
	if a := r.URL.Query().Get("after"); a != "" {
		fmt.Sscan(a, &after)
	}
	page := Page{Items: []Event{}}
	for seq := after + 1; seq <= p.events && int64(len(page.Items)) < limit; seq++ {
		page.Items = append(page.Items, Event{Seq: seq, CeID: fmt.Sprintf("id-%d", seq), Type: "a.b", Payload: json.RawMessage(`{}`)})
	}
	if n := len(page.Items); n > 0 {
		p.cursor = max(p.cursor, page.Items[n-1].Seq)
		if int64(n) == limit {
			next := page.Items[n-1].Seq
			page.NextCursor = &next
		}
	}
	json.NewEncoder(w).Encode(page)
}

func TestDrainPagesToTheEndAndWaitsOutRateLimits(t *testing.T) {
	server := &pages{events: 25, limited: 2}
	hub := httptest.NewServer(server)
	defer hub.Close()
	c := &Consumer{BaseURL: hub.URL + "/", APIKey: "key-1", SubscriptionID: "sub-1", Limit: 10}
	var seqs []int64
	started := time.Now()
	n, err := c.Drain(context.Background(), func(e Event) error { seqs = append(seqs, e.Seq); return nil })
	if err != nil || n != 25 {
		t.Fatalf("read %d, err %v", n, err)
	}
	for i, s := range seqs {
		if s != int64(i+1) {
			t.Fatalf("seq order: %v", seqs)
		}
	}
	if waited := time.Since(started); waited < 400*time.Millisecond {
		t.Fatalf("two Retry-After of 0.2 s were not waited out (%s)", waited)
	}
	want := []string{"/v1/subscriptions/sub-1/events?limit=10", "/v1/subscriptions/sub-1/events?limit=10",
		"/v1/subscriptions/sub-1/events?limit=10", "/v1/subscriptions/sub-1/events?after=10&limit=10",
		"/v1/subscriptions/sub-1/events?after=20&limit=10"}
	if fmt.Sprint(server.requests) != fmt.Sprint(want) {
		t.Fatalf("requests:\n%v\nwant\n%v", server.requests, want)
	}
}

func TestErrorsComeInTheHubsShape(t *testing.T) {
	hub := httptest.NewServer(&pages{})
	defer hub.Close()
	c := &Consumer{BaseURL: hub.URL, APIKey: "key-1", SubscriptionID: "other"}
	_, err := c.Next(context.Background())
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Code != 404 || apiErr.Title != "not_found" {
		t.Fatalf("%v", err)
	}
}

func TestAWaitEndsWithTheContext(t *testing.T) {
	hub := httptest.NewServer(&pages{limited: 1000})
	defer hub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	c := &Consumer{BaseURL: hub.URL, APIKey: "key-1", SubscriptionID: "sub-1"}
	if _, err := c.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v", err)
	}
}

func TestRetryAfterForms(t *testing.T) {
	if got := retryAfter("2", 0); got != 2*time.Second {
		t.Fatal(got)
	}
	if got := retryAfter("0", 0); got != 100*time.Millisecond {
		t.Fatal(got)
	}
	if got := retryAfter("3600", 5*time.Second); got != 5*time.Second {
		t.Fatal(got)
	}
	if got := retryAfter("nonsense", 0); got != time.Second {
		t.Fatal(got)
	}
	date := time.Now().Add(3 * time.Second).UTC().Format(http.TimeFormat)
	if got := retryAfter(date, 0); got < time.Second || got > 3*time.Second {
		t.Fatal(got)
	}
}

func TestAnItemTooDeepForGoNeverCostsItsPage(t *testing.T) {
	deep := strings.Repeat("[", 10001) + strings.Repeat("]", 10001)
	body := `{"items": [{"seq": 1, "ceId": "a", "payload": {"s": "[{\"x"}}, {"seq": 2, "ceId": "b", "payload": ` + deep +
		`}, {"seq": 3, "ceId": "c", "payload": [1, {"k": "]"}]}], "next_cursor": 3}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("after") != "" {
			io.WriteString(w, `{"items": [], "next_cursor": null}`)
			return
		}
		io.WriteString(w, body)
	}))
	defer srv.Close()
	var order []string
	c := &Consumer{BaseURL: srv.URL, APIKey: "k", SubscriptionID: "s",
		OnUnreadable: func(raw []byte, err error) { order = append(order, "bad:"+string(raw[:9])) }}
	n, err := c.Drain(context.Background(), func(e Event) error {
		order = append(order, e.CeID)
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("read %d, %v", n, err)
	}
	if got := strings.Join(order, ","); got != `a,bad:{"seq": 2,c` {
		t.Fatalf("order %s", got)
	}
}
