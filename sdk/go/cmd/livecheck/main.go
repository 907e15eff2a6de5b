// Command livecheck runs the package against a live hub's deliveries, for the hub's own test
// suite: it verifies and parses each captured delivery, refuses each tampered one, and drains a
// pull subscription. Input: a JSON file (see crates/streaming-hub/tests/it/sdk.rs); output: JSON.
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"time"

	receiver "github.com/streaming-hub/streaming-hub/sdk/go"
)

type delivery struct {
	Headers map[string][]string `json:"headers"`
	Body    string              `json:"body"`
}

type input struct {
	Secrets    []string   `json:"secrets"`
	Deliveries []delivery `json:"deliveries"`
	Tampered   []delivery `json:"tampered"`
	Pull       struct {
		BaseURL        string `json:"base_url"`
		APIKey         string `json:"api_key"`
		SubscriptionID string `json:"subscription_id"`
	} `json:"pull"`
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "livecheck: "+format+"\n", args...)
	os.Exit(1)
}

func open(d delivery) (http.Header, []byte) {
	h := http.Header{}
	for name, values := range d.Headers {
		for _, v := range values {
			h.Add(name, v)
		}
	}
	body, err := base64.StdEncoding.DecodeString(d.Body)
	if err != nil {
		fail("a body is not base64: %v", err)
	}
	return h, body
}

func main() {
	if len(os.Args) != 2 {
		fail("usage: livecheck INPUT.json")
	}
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		fail("%v", err)
	}
	var in input
	if err := json.Unmarshal(raw, &in); err != nil {
		fail("%v", err)
	}
	out := map[string][]string{"verified": {}, "rejected": {}, "pulled": {}}
	for _, d := range in.Deliveries {
		h, body := open(d)
		if err := receiver.Verify(in.Secrets, h, body, time.Now()); err != nil {
			fail("a live delivery does not verify: %v", err)
		}
		parsed, err := receiver.ParseHeaders(h)
		if err != nil {
			fail("a live delivery's headers: %v", err)
		}
		out["verified"] = append(out["verified"], parsed.EventID)
	}
	for _, d := range in.Tampered {
		h, body := open(d)
		err := receiver.Verify(in.Secrets, h, body, time.Now())
		if err == nil {
			fail("a tampered delivery verified")
		}
		out["rejected"] = append(out["rejected"], string(err.(*receiver.Error).Kind))
	}
	c := &receiver.Consumer{BaseURL: in.Pull.BaseURL, APIKey: in.Pull.APIKey, SubscriptionID: in.Pull.SubscriptionID, Limit: 7}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.Drain(ctx, func(e receiver.Event) error {
		out["pulled"] = append(out["pulled"], e.CeID)
		return nil
	}); err != nil {
		fail("pull: %v", err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail("%v", err)
	}
}
