package client

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/streaming-hub/streaming-hub/sdk/go/client/api"
	"github.com/streaming-hub/streaming-hub/sdk/go/publish"
)

// TestLive runs the client against a live hub: the hub's test suite starts one and sets
// STREAMING_HUB_URL, STREAMING_HUB_API_KEY (a tenant key of STREAMING_HUB_TENANT),
// STREAMING_HUB_ADMIN_KEY and STREAMING_HUB_RECEIVER_URL (crates/streaming-hub/tests/it/clients.rs).
func TestLive(t *testing.T) {
	base := os.Getenv("STREAMING_HUB_URL")
	if base == "" {
		t.Skip("STREAMING_HUB_URL is not set: the hub's test suite runs this against a live hub")
	}
	tenant, receiver := os.Getenv("STREAMING_HUB_TENANT"), os.Getenv("STREAMING_HUB_RECEIVER_URL")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := New(Config{BaseURL: base, APIKey: os.Getenv("STREAMING_HUB_API_KEY")})
	must(t, err)

	pull, err := Check(c.SubscriptionsAPI.CreateSubscription(ctx).CreateSubscription(
		*api.NewCreateSubscription([]string{"loan.*"}, "go pull", api.PullSinkAsSink(api.NewPullSink("pull")))).Execute())
	must(t, err)

	// 100 events, half in each mode; the hub's rate limit answers some of them 429 on the way.
	var published []string
	for i := range 100 {
		e := publish.Event{Source: "lender", ResourceType: "loan", EventType: "approved", TenantID: tenant,
			SchemaVersion: "1.0.0", ID: publish.NewID(time.Now()), Data: []byte(fmt.Sprintf(`{"n":%d}`, i))}
		send := c.Publish
		if i%2 == 1 {
			send = c.PublishStructured
		}
		answer, err := send(ctx, e)
		must(t, err)
		if answer.Verdict != "accepted" {
			t.Fatalf("event %d: verdict %q", i, answer.Verdict)
		}
		published = append(published, e.ID)
	}
	again := publish.Event{Source: "lender", ResourceType: "loan", EventType: "approved", TenantID: tenant,
		SchemaVersion: "1.0.0", ID: published[0], Data: []byte(`{"n":0}`)}
	answer, err := c.Publish(ctx, again)
	must(t, err)
	if answer.Verdict != "duplicate" {
		t.Fatalf("a publish sent again was answered %q", answer.Verdict)
	}

	read := func() []string {
		var ids []string
		must(t, c.Drain(ctx, pull.Id, 30, func(item api.PullItem) error {
			ids = append(ids, item.CeId)
			return nil
		}))
		return ids
	}
	if got := read(); !slices.Equal(got, published) {
		t.Fatalf("pulled %d events, not the 100 published in order: %v", len(got), got)
	}

	// A replay of the whole inbox gives every event to the subscription again.
	request := api.NewReplayRequest()
	request.SetFromSeq(1)
	request.SetIncludeDelivered(true)
	replay, err := Check(c.SubscriptionsAPI.ReplaySubscription(ctx, pull.Id).ReplayRequest(*request).Execute())
	must(t, err)
	eventually(t, ctx, "the replay finishes", func() bool {
		view, err := Check(c.SubscriptionsAPI.GetReplay(ctx, pull.Id, replay.ReplayId).Execute())
		must(t, err)
		return view.State == "done"
	})
	replayed := read()
	slices.Sort(replayed)
	sorted := slices.Clone(published)
	slices.Sort(sorted)
	if !slices.Equal(replayed, sorted) {
		t.Fatalf("the replay gave %d events, not the 100 published", len(replayed))
	}

	// A webhook: verified by the hub, then a delivery.
	hook, err := Check(c.SubscriptionsAPI.CreateSubscription(ctx).CreateSubscription(
		*api.NewCreateSubscription([]string{"payment.*"}, "go hook",
			api.WebhookSinkAsSink(api.NewWebhookSink(receiver, "webhook")))).Execute())
	must(t, err)
	if !hook.SigningSecret.IsSet() || !strings.HasPrefix(*hook.SigningSecret.Get(), "whsec_") {
		t.Fatal("a new webhook's signing secret is shown once, at creation")
	}
	eventually(t, ctx, "the webhook is verified", func() bool {
		view, err := Check(c.SubscriptionsAPI.GetSubscription(ctx, hook.Id).Execute())
		must(t, err)
		return view.VerificationState == "active"
	})
	payment := publish.Event{Source: "ledger", ResourceType: "payment", EventType: "settled", TenantID: tenant,
		SchemaVersion: "1.0.0", ID: publish.NewID(time.Now()), Data: []byte(`{"amount":"10.00"}`)}
	_, err = c.Publish(ctx, payment)
	must(t, err)
	eventually(t, ctx, "the webhook's delivery", func() bool {
		page, err := Check(c.SubscriptionsAPI.ListDeliveries(ctx, hook.Id).Execute())
		must(t, err)
		return slices.ContainsFunc(page.Items, func(d api.DeliveryView) bool {
			return d.State == "succeeded" && d.CeId.Get() != nil && *d.CeId.Get() == payment.ID
		})
	})
	paused, err := c.Pause(ctx, hook.Id)
	must(t, err)
	resumed, err := c.Resume(ctx, hook.Id)
	must(t, err)
	if paused.Enabled || !resumed.Enabled {
		t.Fatalf("pause gave enabled=%v, resume enabled=%v", paused.Enabled, resumed.Enabled)
	}

	// A field the hub refuses: a typed 422 naming it.
	_, err = Check(c.SubscriptionsAPI.CreateSubscription(ctx).CreateSubscription(
		*api.NewCreateSubscription([]string{"loan.*"}, "bad",
			api.WebhookSinkAsSink(api.NewWebhookSink("ftp://receiver.example.com/hook", "webhook")))).Execute())
	var refused *Error
	if !errors.As(err, &refused) || refused.Status != 422 || refused.Title != "validation_failed" ||
		!strings.Contains(refused.Message, "url") {
		t.Fatalf("a bad sink url: %v", err)
	}

	// The admin routes, with an admin key.
	admin, err := New(Config{BaseURL: base, APIKey: os.Getenv("STREAMING_HUB_ADMIN_KEY")})
	must(t, err)
	tenants, err := Check(admin.AdminAPI.ListTenants(ctx).Execute())
	must(t, err)
	// 101 events published, and the hub's own operational events about the subscriptions.
	if !slices.ContainsFunc(tenants.Items, func(v api.TenantView) bool { return v.TenantId == tenant && v.Events >= 101 }) {
		t.Fatalf("the tenant list has no %s with its 101 events: %+v", tenant, tenants.Items)
	}
	create := api.NewCreateApiKey()
	create.SetTenantId(tenant)
	create.SetName("go client")
	key, err := Check(admin.AdminAPI.CreateApiKey(ctx).CreateApiKey(*create).Execute())
	must(t, err)
	must(t, CheckEmpty(admin.AdminAPI.RevokeApiKey(ctx, key.Id).Execute()))

	for _, id := range []string{pull.Id, hook.Id} {
		must(t, CheckEmpty(c.SubscriptionsAPI.DeleteSubscription(ctx, id).Execute()))
	}
	_, err = Check(c.SubscriptionsAPI.GetSubscription(ctx, hook.Id).Execute())
	if !errors.As(err, &refused) || refused.Status != 404 {
		t.Fatalf("a deleted subscription: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// eventually polls until done, with the context's deadline.
func eventually(t *testing.T, ctx context.Context, what string, done func() bool) {
	t.Helper()
	for !done() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within the deadline", what)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
